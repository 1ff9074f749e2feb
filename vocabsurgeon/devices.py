"""Where and in what dtype torch runs: the one resolver of --device (auto, cpu, cuda, cuda:N) and of
--dtype (auto, checkpoint, float32, bfloat16, float16) for every command."""

from __future__ import annotations

import os

from .errors import InputError


def check_device(device: str) -> None:
    """Refuse, before any work, a --device that is none of auto, cpu, cuda[:N], or a CUDA device this machine
    does not have (torch is imported only where an NVIDIA driver is present)."""
    if device in ("auto", "cpu"):
        return
    if not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise InputError(f"--device {device!r} is not one of auto, cpu, cuda (or cuda:N)")
    _no_cuda = InputError(f"--device {device} was asked for but no CUDA device is available; use --device cpu or auto")
    if not _has_driver():
        raise _no_cuda
    import torch

    if not torch.cuda.is_available():
        raise _no_cuda
    if device.startswith("cuda:") and int(device[5:]) >= torch.cuda.device_count():
        raise InputError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s); pass "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def _has_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidiactl")


def resolve_device(device: str = "auto") -> str:
    """"auto" is CUDA when torch sees a GPU, else "cpu"; asking for "cuda" without one is an error.

    Returns "cpu", "cuda" or "cuda:N" (torch.device and `.to` take each). Without an NVIDIA driver
    "auto" is "cpu" without importing torch (over a second) just to learn that.

    Example:
        >>> resolve_device("cpu")
        'cpu'
    """
    check_device(device)
    if device == "cpu":
        return "cpu"
    if device == "auto" and not _has_driver():
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda" if device == "auto" else device
    if device == "auto":
        return "cpu"
    raise InputError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")


# --dtype: what a model is loaded in for the forward passes of validation and --init fitted.
#   auto        the checkpoint's own dtype on a GPU, float32 on the CPU (fast and exact there)
#   checkpoint  the checkpoint's own dtype wherever it runs: the GPU's choice, also on the CPU
#   float32, bfloat16, float16: that dtype wherever it runs
DTYPES = ("auto", "checkpoint", "float32", "bfloat16", "float16")
DTYPE_ENV = "VOCABSURGEON_DTYPE"  # the --dtype of every command when the flag is not given


def check_dtype(dtype: str) -> None:
    """Refuse a --dtype that is none of DTYPES, before any work (torch not imported)."""
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")


def load_dtype(dtype: str, device: str):
    """What `from_pretrained(dtype=...)` gets for --dtype `dtype` on the resolved `device`: "auto" (the
    checkpoint's own dtype, as config.json records it) or a torch dtype.

    Example:
        >>> load_dtype("auto", "cpu"), load_dtype("checkpoint", "cpu"), load_dtype("auto", "cuda")
        (torch.float32, 'auto', 'auto')
    """
    check_dtype(dtype)
    import torch

    if dtype == "checkpoint" or (dtype == "auto" and device.startswith("cuda")):
        return "auto"
    return torch.float32 if dtype == "auto" else getattr(torch, dtype)
