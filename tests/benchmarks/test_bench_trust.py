"""Benchmark figures a user can trust (``python -m cupyconv bench``): ``auto``'s
median with its least and largest run and the load average, a row whose spread is
wider than its ratio says so, FFT rows count the FFT's own work, and the gradient rows
report what ``auto`` chose."""
from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cupyconv._bench import report, run, work  # noqa: E402
from cupyconv._bench.problems import Case  # noqa: E402
from cupyconv.core import ConvProblem  # noqa: E402

CEILINGS = dict(bandwidth=1e10, flops={"float32": 1e11, "float64": 5e10}, how="test")


def _ctx():
    return run.Context("numpy", repeat=3, ceilings=CEILINGS, peer_names=["scipy.signal"])


def test_a_row_reports_the_spread_of_auto():
    row = run.run_case(Case("t", "signal", (64, 64), (5, 5)), _ctx())
    assert row["auto_runs"] == 3
    assert row["auto_min_s"] <= row["auto_s"] <= row["auto_max_s"]
    line = report.progress_line(row)
    assert "(median [min, max])" in line and f"[{report._ms(row['auto_min_s'])}, " in line


@pytest.mark.parametrize("spread, ratio, said", [(1.5, 1.2, True), (1.5, 1 / 1.2, True),
                                                 (1.1, 1.3, False), (1.0, 1.0, False)])
def test_a_ratio_inside_the_spread_is_called_noise(spread, ratio, said):
    row = dict(auto_s=1e-3, auto_min_s=1e-3, auto_max_s=spread * 1e-3, auto_runs=5,
               auto_vs_fastest=None,
               peers={"scipy.signal": dict(status="ok", speedup=ratio),
                      "torch": dict(status="n/a")})
    note = run.spread_note(row)
    assert bool(note) == said
    if said:
        assert f"spread {spread:.2f}x" in note and f"vs scipy.signal {ratio:.2f}x" in note
        assert "within the noise" in note


def test_the_load_average_is_in_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(run.os, "getloadavg", lambda: (3.5, 2.25, 1.0), raising=False)
    monkeypatch.chdir(ROOT)
    assert run.main(["--suite", "scientific", "--quick", "--cases", "2-D 256x256",
                     "--repeat", "2", "--out", str(tmp_path), "--backend", "numpy",
                     "--no-plots", "--peers", "scipy.signal"]) == 0
    md = (tmp_path / "scientific_quick_numpy.md").read_text()
    assert "load average (1, 5, 15 min): 3.50, 2.25, 1.00 at the start; 3.50, 2.25, 1.00 " \
           "at the end" in md
    assert "| noise |" in md


def _reference_fft_flops(problem):
    """Per transform 2.5 n log2 n real (5 n log2 n complex) at the padded lengths, and
    8 flops per complex product of the contraction."""
    from cupyconv.backends.fft import fast_len
    lengths = [fast_len(s + b + a) for s, (b, a) in zip(problem.in_shape, problem.padding)]
    n = math.prod(lengths)
    half = math.prod(lengths[:-1]) * (lengths[-1] // 2 + 1)
    c, k, g, nb = problem.in_channels, problem.out_channels, problem.groups, problem.batch
    transforms = nb * c + k * (c // g) + nb * k
    return transforms * 2.5 * n * math.log2(n) + 8 * nb * g * (k // g) * (c // g) * half


def test_fft_rows_count_the_ffts_work_not_the_direct_products():
    """A 129^2 kernel on 256^2: direct counts 2.2 GFLOP, the FFT does ~0.1: an FFT row
    credited with the direct count would read over 100% of any roof."""
    problem = ConvProblem.create(x_shape=(1, 1, 256, 256), w_shape=(1, 1, 129, 129),
                                 padding=64, dtype=np.float32)
    flops, how = work.counted_flops(problem, "fft")
    assert how == "fft" and flops == pytest.approx(_reference_fft_flops(problem))
    assert flops < problem.flops / 10
    assert work.counted_flops(problem, "gemm") == (float(problem.flops), "direct")


def test_an_fft_row_reports_the_fft_work():
    row = run.run_case(Case("t", "signal", (128, 128), (31, 31)), _ctx())
    assert row["auto_choice"] == "fft" and row["flops_counted_as"] == "fft"
    problem = Case("t", "signal", (128, 128), (31, 31)).problem()
    assert row["flops"] == int(work.fft_flops(problem)) and row["flops"] < problem.flops
    assert "(fft work)" in report.progress_line(row)


@pytest.mark.parametrize("kind", ["grad_input", "grad_weight"])
def test_gradient_rows_report_what_auto_chose(kind):
    case = Case("t", kind, (8, 8, 8), (3, 3, 3), batch=2, cin=4, cout=4, padding=1)
    row = run.run_case(case, run.Context("numpy", repeat=1, ceilings=CEILINGS,
                                         peer_names=[]))
    assert "skipped" not in row
    problem = case.problem().with_(op=kind)
    from cupyconv.dispatch import backend_for, choose
    assert row["auto_choice"] == choose(problem, backend_for(np)).algorithm
    assert f"auto chose {row['auto_choice']}" in report.progress_line(row)
