"""The GPU check's dry run: every step of bench/gpu_check.py runs on the CPU and writes its results (issue 38)."""

from __future__ import annotations

import json

import pytest

from bench import gpu_check


@pytest.mark.slow  # a covariance, a fit and a validation in child processes: ~20 s of CPU, more on a busy machine
def test_the_dry_run_runs_each_step_on_the_cpu_and_writes_its_figures(tmp_path):
    out = tmp_path / "out"
    code = gpu_check.main(["run", "--cpu", "--out", str(out), "--work", str(tmp_path / "work"),
                           "--steps", "tests", "covariance", "fitted", "--ways", "cpu:bfloat16",
                           "--tests=-n 0 tests/init/test_dtype.py::test_an_unknown_dtype_is_refused_in_one_line"])
    res = json.loads((out / "gpu_check.json").read_text())
    assert code == 0, res
    assert res["tests"]["exit"] == 0 and (out / "junit.xml").is_file()
    assert res["covariance"]["cpu_mean-noise_seconds"] > 0 and res["covariance"]["rows_after"] > res["covariance"]["rows_before"]
    (row,) = res["fitted"]
    assert row["passed"] is True and row["model_dtype"] == "bfloat16" and row["bpb_ratio"] > 0
    assert json.loads((out / "env.json").read_text())["device"].startswith("CPU")
    assert "| llama-tiny | 12 | cpu | bfloat16 | bfloat16 |" in (out / "gpu_check.md").read_text()


def test_a_failing_step_is_recorded_and_the_exit_status_says_so(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("add exited 2: no such option")

    monkeypatch.setattr(gpu_check, "covariance", broken)
    code = gpu_check.main(["run", "--cpu", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w"),
                           "--steps", "covariance"])
    res = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert code == 1 and res["covariance"] == {"error": "RuntimeError: add exited 2: no such option"}
    assert "add exited 2: no such option" in (tmp_path / "out" / "gpu_check.md").read_text()


def test_the_transformers_way_on_the_gpu_is_timed_only_where_there_is_one(tmp_path, monkeypatch):
    """add_bench times `transformers (cuda)` (the model loaded onto the GPU, as users with one do) beside the CPU
    way on a CUDA machine, and leaves it out elsewhere instead of failing."""
    from bench import add_bench

    monkeypatch.setattr(add_bench, "_cuda", lambda: True)
    cmds = add_bench.commands(tmp_path / "src", tmp_path / "out", tmp_path / "tokens.txt")
    assert cmds["transformers (cuda)"][-5:-3] == ["--device", "cuda"] and "--device" not in cmds["transformers"]
    monkeypatch.setattr(add_bench, "_cuda", lambda: False)
    assert "transformers (cuda)" not in add_bench.commands(tmp_path / "src", tmp_path / "out", tmp_path / "tokens.txt")


def test_the_check_leaves_the_callers_sigterm_handler_as_it_found_it(tmp_path, monkeypatch):
    """`run` kills its children's process groups on SIGTERM while it runs, and restores the caller's handler."""
    import signal

    monkeypatch.setattr(gpu_check, "covariance", lambda *args: {"cpu_mean-noise_seconds": 1.0})
    before = signal.getsignal(signal.SIGTERM)
    gpu_check.main(["run", "--cpu", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w"), "--steps", "covariance"])
    assert signal.getsignal(signal.SIGTERM) is before
