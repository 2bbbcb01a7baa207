"""The split-K device step (issue 26 item 2): scripts/device_check.sh runs
benchmarks/splitk_gpu.py within its limit and writes its JSON under $OUT; without a GPU
the benchmark says why and succeeds."""
from __future__ import annotations

from benchmarks import splitk_gpu
from helpers import device_check_steps


def test_device_check_runs_the_splitk_step():
    steps, script = device_check_steps()
    limit, command = steps["splitk"]
    assert limit <= 30 and "-m benchmarks.splitk_gpu --out \"$OUT\"" in command
    assert "splitk_gpu.json" in script


def test_without_a_device_it_says_why(capsys, monkeypatch):
    monkeypatch.setattr(splitk_gpu, "_device_reason", lambda: "CuPy sees no CUDA device")
    assert splitk_gpu.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out
