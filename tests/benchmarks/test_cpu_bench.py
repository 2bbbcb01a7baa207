"""The CPU benchmark and fit scripts of issue 28 (benchmarks/cpu_vs_torch.py,
benchmarks/fit_cpu_cost.py): the fit's model is the cost model's, term by term, and the
benchmark's turns (cupyconv, the optional PyTorch peer, a baseline commit in a worker
process) produce the table it commits."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repo root

from benchmarks import cpu_vs_torch, fit_cpu_cost  # noqa: E402

from cupyconv.backends.numpy import cost, gemm  # noqa: E402
from limits import child_limit  # noqa: E402


@pytest.mark.parametrize("case", fit_cpu_cost.CASES, ids=[c[0] + " " + c[-1]
                                                          for c in fit_cpu_cost.CASES])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fit_terms_are_the_cost_model(case, dtype):
    """gemm's predicted time is its fixed cost, the fitted terms' counts times the
    constants, and the serial scatter: what fit_cpu_cost fits is what auto ranks by."""
    name, xs, ws, g, pad, stride, op = case
    p = fit_cpu_cost._problem(xs, ws, g, pad, stride, op, dtype)
    terms = cost.gemm_terms(p)
    want = (cost.CPU["call"] + cost.CPU["gemm_call"] + cost.gemm_serial(p)
            + sum(n * cost.CPU[k] for n, k in zip(terms, cost.GEMM_KEYS)))
    assert cost.predict_times(p, ["gemm"])["gemm"] == pytest.approx(want, rel=1e-12)
    assert terms[0] > 0 and len(terms) == len(cost.GEMM_KEYS)
    named = dict(zip(cost.GEMM_KEYS, terms))
    grid = cost.grid_columns(p) is not None and p.op != "grad_input"
    copy, mac = ("grid_column", "grid_mac") if grid else ("column", "block_mac")
    assert named[copy] > 0 and named[mac] > 0        # one copy and one GEMM rate per path
    assert sum(named[k] > 0 for k in ("column", "grid_column", "block_mac", "grid_mac")) == 2
    # one narrow constant per orientation
    assert sum(named[k] > 0 for k in ("narrow_mac", "narrow_cols", "grid_narrow")) == 1
    if not grid:
        assert named["narrow_mac" if gemm.positions_as_rows(p) else "narrow_cols"] > 0
    assert named["column_run"] > 0


@pytest.mark.parametrize("case", fit_cpu_cost.DEPTHWISE, ids=[c[0] for c in fit_cpu_cost.DEPTHWISE])
def test_depthwise_terms_are_the_cost_model(case):
    name, xs, ks = case
    c = xs[1]
    p = fit_cpu_cost._problem(xs, (c, 1) + ks, c, [k // 2 for k in ks], 1, "forward",
                              "float32")
    mac, taps = cost.depthwise_terms(p)
    assert cost.predict_times(p, ["direct"])["direct"] == pytest.approx(
        cost.CPU["call"] + mac * cost.CPU["depthwise_mac"] + taps * cost.CPU["chunk_tap"])


#: A small case in the benchmark's own format (name, op, x shape, w shape, groups, padding).
TINY = [("tiny 2-D", "forward", (2, 3, 9, 8), (4, 3, 3, 3), 1, 1),
        ("tiny 2-D", "grad_weight", (2, 3, 9, 8), (4, 3, 3, 3), 1, 1),
        ("tiny 4-D", "forward", (1, 2, 4, 4, 4, 4), (2, 2, 3, 3, 3, 3), 1, 1)]


def test_benchmark_table_with_a_baseline_worker(monkeypatch, tmp_path, capsys):
    """One round of each tiny case with a baseline of this checkout's HEAD: a row per
    case, the 4-D row without a peer, the baseline's column filled (its worker process
    starts and stops; its timings are stubbed here, the worker's own protocol is
    :func:`test_worker_answers_one_call_per_line`)."""
    if shutil.which("git") is None or subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("needs a git checkout (the baseline is a commit)")
    monkeypatch.setattr(cpu_vs_torch, "CASES", TINY)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(cpu_vs_torch.Baseline, "call", lambda self, i: 1e-3)
    out = tmp_path / "table.md"
    assert cpu_vs_torch.main(["--rounds", "1", "--baseline", "HEAD", "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| tiny")]
    assert len(rows) == 3
    assert rows[2].split("|")[4].strip() == "-"             # no 4-D peer
    assert all(r.split("|")[6].strip() == "1.0" for r in rows)
    assert "load (`uptime`)" in out.read_text()


def test_worker_answers_one_call_per_line():
    """The baseline worker (this checkout's cupyconv) times one call per request."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_vs_torch.py"),
                           "--worker"], input="2\n2\n", capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""},
                          timeout=child_limit(2, 30.0))
    assert proc.returncode == 0, proc.stderr
    times = [float(t) for t in proc.stdout.split()]
    assert len(times) == 2 and all(t > 0 for t in times)


def test_arrays_are_seeded_and_shaped():
    x, w, dy = cpu_vs_torch.arrays(cpu_vs_torch.CASES[0])
    x2, _, _ = cpu_vs_torch.arrays(cpu_vs_torch.CASES[0])
    np.testing.assert_array_equal(x, x2)
    assert x.dtype == w.dtype == dy.dtype == np.float32
    assert dy.shape == (8, 64, 56, 56)


def test_phases_table_adds_up(capsys):
    """``--phases`` on a tiny layer: one row, its four phases' shares sum to ~100%, the
    phases' sum (one block: one thread) and each thread's busy time are no more than the
    whole call (every phase is inside it)."""
    tiny = ("tiny phases", "forward", (2, 3, 9, 8), (4, 3, 3, 3), 1, 1)
    row = cpu_vs_torch.phases(tiny, 2)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:2] == ["tiny phases", "rows"]
    shares = [float(c.split("(")[1].rstrip("%)")) for c in cells[2:6]]
    assert abs(sum(shares) - 100) <= 2
    assert float(cells[6]) <= float(cells[7]) + 0.05       # ms, one decimal each
    busy = [float(t) for t in cells[8].split("/")]
    assert busy and all(0 < t <= float(cells[7]) + 0.05 for t in busy)
