"""scripts/device_check.sh, second edition (docs/evidence.md): its steps in the issue's
order under one 8-minute deadline, end to end on a machine without a GPU (every GPU step
recorded NO-GPU); the evidence step's plan on the CPU stand-ins; promotion of what passed
into ledger rows."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import evidence_check, promote_evidence
from cupyconv._kernels import evidence
from helpers import device_check_steps
from limits import child_limit

ROOT = Path(__file__).resolve().parents[2]
#: The issue's order: warm the cache, correctness, timings, the peers' quick suite.
ORDER = ["info", "warm-cache", "evidence", "gpu-tests", "reference", "tensor-cores", "bench"]


def test_steps_keep_the_issues_order_and_deadline():
    steps, script = device_check_steps()
    names = list(steps)
    assert names[:len(ORDER)] == ORDER
    budget = int(re.search(r"^BUDGET=\$\{BUDGET:-(\d+)\}$", script, flags=re.M).group(1))
    summary = int(re.search(r"^timeout (\d+) \"\$PY\"", script, flags=re.M).group(1))
    assert budget + summary <= 8 * 60
    assert "sm_90a" in steps["warm-cache"][1] or "sm_90,sm_90a" in script
    assert "-m benchmarks.evidence_check --out \"$OUT\"" in steps["evidence"][1]
    assert "GPU_TESTS" in steps["gpu-tests"][1]
    assert "tests/torch_adapter" in re.search(r"^GPU_TESTS=\((.*)\)$", script, re.M).group(1)


def test_torch_layers_step_times_the_adapter_on_cuda_after_the_peers_suite():
    """The PyTorch adapter's layers run on the GPU after ``bench``, with the optional GPL
    peers of the ignored ``.peers/`` folder on the path, and their table kept in $OUT."""
    steps, script = device_check_steps()
    names = list(steps)
    assert names.index("torch-layers") == names.index("bench") + 1
    i = script.index("step torch-layers")
    command = script[i:script.index("\n", script.index("PIPESTATUS", i))]
    assert ".peers" in command and "benchmarks/torch_layers.py --device cuda" in command
    assert '$OUT/torch_layers.md' in command
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/.peers/" in ignored


def _has_device():
    return evidence_check._device_reason() is None


@pytest.mark.skipif(_has_device(), reason="the CPU run: this machine has a CUDA device")
def test_runs_end_to_end_without_a_gpu(tmp_path):
    """With the real Python and the default budget: ``info`` runs, every GPU step is
    NO-GPU, the summary prints, all within a minute."""
    env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh")], env=env,
                          capture_output=True, text=True, cwd=ROOT,
                          timeout=child_limit(units=13, per_unit_s=5))   # 13 steps
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [r.split("\t") for r in (tmp_path / "steps.tsv").read_text().splitlines()]
    steps, _ = device_check_steps()
    assert [r[0] for r in rows] == list(steps)
    assert rows[0][:2] == ["info", "ok"]
    assert {r[1] for r in rows[1:]} == {"NO-GPU"}
    assert "===== summary" in done.stdout


@pytest.mark.parametrize("arch", [80, 90])
def test_evidence_plan_covers_every_configuration_of_the_device(arch):
    """Every ledger configuration of the device's classes (verified or not) gets problems:
    those the stand-in's ``auto`` picks it for, and a stress problem with several groups,
    channel tiles past two, and more CTAs than two per SM (not the 64-bit instances of
    the families without tiles, which the public calls cannot force)."""
    plan = evidence_check.plan(arch)
    assert [cfg for cfg, _ in plan] == evidence_check.ledger_for(arch)
    assert any(s == "auto" for _, problems in plan for s, _ in problems)
    for cfg, problems in plan:
        stress = [e for s, e in problems if s == "stress"]
        if cfg.variant is None and cfg.index64:
            assert not stress
            continue
        (x_shape, w_shape, groups, *_), = stress
        assert groups >= 2
        if cfg.variant is not None:
            bm, bn, bk = cfg.tile
            kpg, cpg = w_shape[0] // groups, w_shape[1]
            assert kpg > 2 * bn and (cpg % bk if cfg.variant == 0 else cpg % bk == 0)
            rows = x_shape[0] * x_shape[2] * x_shape[3]
            assert -(-rows // bm) * -(-kpg // bn) * groups >= 2 * 132


def test_promoted_rows_verify_what_passed(tmp_path, monkeypatch):
    """A passing configuration becomes a ``Row`` that makes the ledger call it verified;
    a failing one is listed with its largest error and stays emulator only."""
    good = evidence.configurations()[0]
    bad = evidence.configurations()[1]
    doc = dict(gpu="NVIDIA H100 80GB HBM3", arch=90, date="2026-12-08", commit="abc1234",
               results=[dict(config=c.describe(), key=list(evidence_check._key(c)),
                             source="stress", problem="p", max_error=e, tolerance=1e-5,
                             passed=e <= 1e-5) for c, e in ((good, 1e-7), (bad, 0.5))])
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(doc))
    assert promote_evidence.main([str(path)]) == 0
    out = subprocess.run([sys.executable, "-m", "benchmarks.promote_evidence", str(path)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    rows = [line for line in out.splitlines() if line.startswith("Row(")]
    assert len(rows) == 1 and "not promoted" in out and "0.5" in out
    run_line, = [line for line in out.splitlines() if line.startswith("RUNS[")]
    key = run_line.split('"')[1]
    monkeypatch.setitem(evidence.RUNS, key, eval(run_line.split("= ", 1)[1],
                                                 {"Run": evidence.Run}))
    monkeypatch.setattr(evidence, "VERIFIED", evidence.VERIFIED + (
        eval(rows[0].rstrip(","), {"Row": evidence.Row}),))
    assert evidence.is_verified(good) and not evidence.is_verified(bad)


def _config(family, variant, dtype, tile=None):
    """The ledger configuration of ``family`` (and tile ``variant``) in ``dtype`` on sm_90."""
    return next(c for c in evidence_check.ledger_for(90)
                if c.family == family and c.variant == variant and c.dtype == dtype
                and not c.index64 and (tile is None or tuple(c.tile) == tile))


@pytest.mark.parametrize("family, variant, dtype, tile, layout, source", [
    ("implicit_gemm_fprop", 1, "float32", (64, 64, 8), "channels_first", "stress"),
    ("implicit_gemm_multistage", 4, "float16", (64, 64, 64), "channels_last", "stress"),
    ("direct_conv", None, "float64", None, "channels_first", "stress"),
    ("implicit_gemm_fprop", 0, "float32", (64, 64, 8), "channels_first", "auto"),
])
def test_evidence_check_passes_on_the_emulator(family, variant, dtype, tile, layout, source):
    """The device step's check itself, run on the emulator (NumPy arrays standing in for
    CuPy's) on small problems of the same shape of case: the explicit tile or method, or
    the public call for ``auto``, against the float64 ``gemm`` reference, within the
    tolerance."""
    import numpy as np

    import cupyconv
    from cupyconv._emulation import emulation_available
    if not emulation_available():
        pytest.skip("CUDA emulation unavailable")
    cfg = _config(family, variant, dtype, tile)
    cpg = 2 * cfg.tile[2] if variant in (1, 4) else 5
    entry = ((1, 2 * cpg, 6, 5), (2 * 3, cpg, 3, 3), 2, dtype, "forward", "highest", layout)
    with cupyconv.use_backend("emulated"):
        row = evidence_check.check(np, cfg, source, entry, np.random.default_rng(0))
    assert row["passed"], row
    assert row["max_error"] <= evidence_check.TOLERANCE[dtype] and row["key"][0] == family
