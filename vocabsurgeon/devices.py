"""Where torch runs: the one resolver of --device (auto, cpu, cuda, cuda:N) for every command."""

from __future__ import annotations

import os

from .errors import InputError


def check_device(device: str) -> None:
    """Refuse a --device that is none of auto, cpu, cuda[:N], before any work (torch not imported)."""
    if device in ("auto", "cpu") or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        return
    raise InputError(f"--device {device!r} is not one of auto, cpu, cuda (or cuda:N)")


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
    if device == "auto" and not os.path.exists("/proc/driver/nvidia") and not os.path.exists("/dev/nvidiactl"):
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda" if device == "auto" else device
    if device == "auto":
        return "cpu"
    raise InputError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")
