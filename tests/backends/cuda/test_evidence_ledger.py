"""The hardware-evidence ledger and its filter (docs/evidence.md), on CPU stand-ins of an
sm_80-class and an sm_90 device: under ``config.kernels = "verified"`` (what a GPU does
by default) ``auto`` chooses only configurations a GPU has shown right; ``"all"`` or an
explicit ``method=`` runs the others, with one warning per configuration; the record the
cost model prices is the one the launcher builds."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import cupyconv
from cupyconv import config
from cupyconv._dtypes import BFLOAT16
from cupyconv._kernels import evidence, registry
from cupyconv._kernels.kernel_config import gemm_config
from cupyconv.backends.cuda import CudaBackend, pricing
from cupyconv.backends.cuda.runners import StandInRunner
from cupyconv.core.problem import ConvProblem
from cupyconv.dispatch.dispatcher import choose
from cupyconv._emulation import emulation_available
from helpers import spy_kernels

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")


@pytest.fixture
def kernels():
    """Set ``config.kernels`` for one test (restored after it)."""
    before = config.kernels
    evidence.forget_warnings()
    yield lambda mode: setattr(config, "kernels", mode)
    config.kernels = before
    evidence.forget_warnings()


def _problem(x_shape, w_shape, dtype, op="forward", precision="highest", padding=1):
    rank = len(x_shape) - 2
    p = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, stride=(1,) * rank,
                           padding=((padding, padding),) * rank, dilation=(1,) * rank,
                           groups=1, padding_mode="constant", cval=0,
                           layout="channels_first", dtype=np.dtype(dtype), precision=precision)
    return p if op == "forward" else p.with_(op=op)


#: Layers whose automatic choice on the emulator's stand-ins is a tensor-core, multistage,
#: wgmma or split-K configuration (no hardware evidence), and small ones.
CASES = [
    ((32, 256, 56, 56), (256, 256, 3, 3), "float32", "forward", "highest"),
    ((32, 256, 56, 56), (256, 256, 3, 3), "float32", "forward", "tf32"),
    ((32, 256, 56, 56), (256, 256, 3, 3), "float64", "forward", "highest"),
    ((32, 256, 56, 56), (256, 256, 3, 3), "float16", "forward", "highest"),
    ((4, 256, 32, 32, 32), (256, 256, 3, 3, 3), "float16", "grad_input", "highest"),
    ((64, 64, 28, 28), (64, 64, 3, 3), "float32", "grad_weight", "highest"),
    ((2, 3, 20, 20), (4, 3, 3, 3), "float32", "forward", "highest"),
    ((1, 1, 300, 300), (1, 1, 5, 5), "bfloat16", "forward", "highest"),
]


def _ids(case):
    return f"{case[2]}-{case[3]}-{case[4]}-{len(case[0]) - 2}d-C{case[0][1]}"


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_auto_chooses_only_verified_configurations(kernels, arch, case):
    """Under ``"verified"`` the chosen algorithm's configuration has hardware evidence;
    under ``"all"`` the same layers reach the unverified configurations the cost model
    prefers (at least one of the layers, on each stand-in)."""
    if case[2] == "bfloat16" and BFLOAT16 is None:
        pytest.skip("no bfloat16 dtype")
    problem = _problem(*case[:2], BFLOAT16 if case[2] == "bfloat16" else case[2], *case[3:])
    backend = CudaBackend(StandInRunner(arch))
    kernels("verified")
    choice = choose(problem, backend)
    assert choice.algorithm is not None
    cfg = backend.kernel_config(problem, choice.algorithm)
    assert evidence.is_verified(cfg), cfg.describe()
    assert cfg.variant in (None, 0, 1) and cfg.splits == 1 and cfg.relayout == (False, False)
    if cfg.library:
        assert cfg.library in ("cuFFT", "cupy.matmul")


@pytest.mark.parametrize("arch", [80, 90])
def test_all_opts_in_to_unverified_configurations(kernels, arch):
    """``"all"`` lets the choice take what the cost model's priors prefer, none of it
    verified: the multistage or wgmma TF32 tile after a re-layout, the float64 DMMA tile,
    the split-K weight gradient."""
    backend = CudaBackend(StandInRunner(arch))
    kernels("all")
    picks = []
    for case in CASES[1:3] + CASES[5:6]:
        problem = _problem(*case)
        picks.append(backend.kernel_config(problem, "implicit_gemm"))
    assert not any(evidence.is_verified(c) for c in picks), [c.describe() for c in picks]
    assert picks[0].math in ("TF32", "wgmma") and picks[0].relayout == (True, True)
    assert picks[1].math == "DMMA"
    assert picks[2].splits > 1 and "splitk_reduce" in [c.family for c in picks[2].companions]
    if arch == 90:
        assert picks[0].arch == "sm_90a" and picks[0].family == "implicit_gemm_wgmma"


def test_priced_configuration_is_the_built_one(kernels, monkeypatch):
    """The tile of the record the cost model prices is the tile the launcher fetches,
    with the filter and without it (the automatic tile of a float32 layer: the verified
    FMA tile, or the multistage FMA tile the priors prefer)."""
    runner = StandInRunner(80)
    backend = CudaBackend(runner)
    problem = _problem((1, 16, 24, 24), (16, 16, 3, 3), "float32")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(problem.x_shape).astype(np.float32)
    w = rng.standard_normal(problem.w_shape).astype(np.float32)
    from cupyconv.backends.cuda import algorithms
    for mode in ("verified", "all"):
        kernels(mode)
        cfg = backend.kernel_config(problem, "implicit_gemm")
        taken = spy_kernels(monkeypatch)
        y = algorithms.run(problem, x, w, "implicit_gemm", runner)
        assert taken == [(cfg.family, cfg.gemm_tile)], (mode, taken, cfg.describe())
        with cupyconv.use_backend("numpy"):
            ref = cupyconv.conv(x, w, padding=1)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)   # float32 sums of 144 taps


def test_explicit_method_warns_once_per_unverified_configuration(kernels):
    """bfloat16 on the direct kernel has no hardware evidence: ``auto`` under
    ``"verified"`` never takes it, an explicit ``method="direct"`` runs it, warning once,
    and its result is the NumPy backend's."""
    if BFLOAT16 is None:
        pytest.skip("no bfloat16 dtype")
    kernels("verified")
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, (1, 2, 12, 12)).astype(BFLOAT16)   # small ints: exact sums
    w = rng.integers(-3, 4, (2, 2, 3, 3)).astype(BFLOAT16)
    with warnings.catch_warnings(record=True) as seen, cupyconv.use_backend("emulated"):
        warnings.simplefilter("always")
        ys = [cupyconv.conv(x, w, padding=1, method="direct") for _ in range(2)]
    ours = [w_ for w_ in seen if "no hardware evidence" in str(w_.message)]
    assert len(ours) == 1 and "direct_conv" in str(ours[0].message)
    with cupyconv.use_backend("numpy"):
        ref = cupyconv.conv(x.astype(np.float32), w.astype(np.float32), padding=1)
    for y in ys:
        np.testing.assert_array_equal(np.asarray(y, np.float32), ref)


def test_default_on_the_emulator_keeps_every_configuration(kernels):
    """``"auto"`` filters on a GPU only: the emulator's stand-in (not hardware) chooses as
    before, a GPU's device record (``hardware=True``) keeps to the ledger."""
    kernels("auto")
    problem = _problem(*CASES[1])
    device = StandInRunner(90).static
    assert not evidence.is_verified(pricing.kernel_config(problem, device))
    gpu = dataclasses.replace(device, hardware=True)
    assert evidence.is_verified(pricing.kernel_config(problem, gpu))
    assert pricing.kernel_config(problem, gpu, "gemm").library == "cupy.matmul"
    assert pricing.kernel_config(problem, device, "gemm").library == "cuBLAS strided-batched"


def test_ledger_holds_what_the_h200_runs_showed():
    """The verified rows are the families the 2026-11-30/12-01 runs showed right, each
    citing a committed result directory; nothing else is verified."""
    verified = {(c.family, c.variant, c.dtype, c.index64)
                for c in evidence.configurations() if evidence.is_verified(c)}
    families = {f for f, *_ in verified}
    assert families == {"vol2col", "col2vol", "direct_conv", "implicit_gemm_fprop",
                        "winograd_input", "winograd_output", "winograd_weights"}
    assert {v for f, v, *_ in verified if f == "implicit_gemm_fprop"} == {0, 1}
    assert not any(i64 for *_, i64 in verified)
    assert ("direct_conv", None, "bfloat16", False) not in verified
    root = Path(__file__).resolve().parents[3]
    for run in evidence.RUNS.values():
        assert (root / run.result).is_dir(), run.result
    assert not evidence.is_verified(gemm_config(registry.wgmma_tiles(np.float16)[0],
                                                np.float16, "sm_90a"))


def test_info_kernels_prints_one_line_per_configuration():
    out = subprocess.run([sys.executable, "-m", "cupyconv", "info", "--kernels"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    body = out[1:]
    expected = evidence.ledger_lines()
    assert [line.strip() for line in body] == expected
    assert len(body) == len(evidence.configurations()) + len(evidence.LAUNCH_PATHS) + len(
        evidence.LIBRARY_CALLS)
    assert any(line.endswith("emulator only") and "implicit_gemm_wgmma" in line for line in body)
    assert any("cupy.matmul: verified: NVIDIA H200" in line for line in body)


def test_plan_explain_names_the_configuration_and_its_evidence(kernels):
    kernels("verified")
    plan = cupyconv.plan_conv((1, 2, 10, 10), (2, 2, 3, 3), np.float32, padding=1,
                              method="implicit_gemm", backend="emulated")
    last = plan.explain().splitlines()[-1]
    assert last.startswith("kernel: implicit_gemm_fprop") and "verified: NVIDIA H200" in last


def test_explain_prices_channels_last_operands_as_read(kernels):
    """A channels-last plan's record re-lays nothing (its operands are read as they are),
    as the cost model priced it; a channels-first one of a layer the re-layout pays for
    re-lays both (``"all"`` on the emulator)."""
    kernels("all")
    shapes = dict(channels_first=((8, 64, 28, 28), (64, 64, 3, 3)),
                  channels_last=((8, 28, 28, 64), (64, 3, 3, 64)))
    lines = {}
    for layout, (xs, ws) in shapes.items():
        plan = cupyconv.plan_conv(xs, ws, np.float16, padding=1, layout=layout,
                                  method="implicit_gemm", backend="emulated")
        lines[layout] = plan.explain().splitlines()[-1]
    assert "re-lays" not in lines["channels_last"] and "channels_last" in lines["channels_last"]
    assert "re-lays x and w" in lines["channels_first"], lines
