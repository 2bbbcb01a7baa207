"""The implicit GEMM's one kernel selection is what the launcher builds: the record
``plan.explain()`` prints for a plan's operands (C-contiguous in its layout) names the
tile that runs on them, and the builder builds a record's tile as it is."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import launch, registry
from cupyconv._kernels.kernel_config import gemm_config
from cupyconv.backends.cuda import CudaBackend
from cupyconv.backends.cuda.runners import StandInRunner
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backends
from helpers import forget_launches, fresh_kernel_choices, spy_kernels

pytestmark = pytest.mark.skipif("emulated" not in cupyconv.available_backends(),
                                reason="needs the emulated CUDA backend")

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def _gemm_kernel(taken):
    """``(family, tile)`` of the last implicit-GEMM kernel fetched."""
    return [t for t in taken if t[0].startswith("implicit_gemm")][-1]


def _shapes(layout, c, k):
    x, w = (2, c, 6, 5), (k, c, 3, 3)
    if layout == "channels_last":
        return (2, 6, 5, c), (k, 3, 3, c)
    return x, w


# (dtype, precision): float16 on HMMA, float32 under TF32, float64 on DMMA/FMA; channel
# counts that do (64) and do not (16) give the multistage tiles whole K-tiles.
CASES = [(F16, None), (F32, "tf32"), (F64, None)]


@pytest.mark.parametrize("dtype, precision", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
@pytest.mark.parametrize("channels", [16, 64])
def test_explained_kernel_is_the_one_launched(monkeypatch, dtype, precision, layout, channels):
    xs, ws = _shapes(layout, channels, channels)
    plan = cupyconv.plan_conv(xs, ws, dtype, padding=1, layout=layout, precision=precision,
                              method="implicit_gemm", backend="emulated")
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, xs).astype(dtype)
    w = rng.integers(-2, 3, ws).astype(dtype)
    taken = spy_kernels(monkeypatch)
    plan(x, w)
    family, tile = _gemm_kernel(taken)
    line = plan.explain().splitlines()[-1]
    shown = f"kernel: {family}, {'x'.join(map(str, tile[:3]))} variant {tile[3]},"
    assert line.startswith(shown), (line, family, tile)


@pytest.mark.parametrize("dtype, precision", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("channels", [16, 64])
def test_explained_kernel_is_the_one_launched_on_9_0(monkeypatch, dtype, precision, channels):
    """On a compute capability 9.0 stand-in, channels-last operands read as they are: the
    wgmma tile where it applies (whole 128-byte K-tiles), else the channels-last twin."""
    backend = CudaBackend(StandInRunner(90))
    monkeypatch.setattr(backends, "_emulated_backend", lambda: backend)
    test_explained_kernel_is_the_one_launched(monkeypatch, dtype, precision, "channels_last",
                                              channels)


class _Module:
    """A module-like stand-in: the builder only fetches kernels from it."""

    def get_function(self, name):
        return type("Kernel", (), {})()


@pytest.mark.parametrize("dtype", [F16, F64])
def test_builder_builds_the_record_it_is_given(monkeypatch, dtype):
    """A record's tile is built as it is (not re-derived: the automatic choice here is
    another tile), and a record whose tile the operands cannot run is refused, as an
    explicit tile is."""
    problem = ConvProblem.create(x_shape=(2, 32, 6, 5), w_shape=(32, 32, 3, 3),
                                 padding=((1, 1), (1, 1)), dtype=dtype)
    x, w = np.ones(problem.x_shape, dtype), np.ones(problem.w_shape, dtype)
    auto = launch.implicit_gemm_tile(problem)
    other = next(t for t in registry.gemm_tiles(dtype) if t != auto
                 and not registry.tile_variant(t).channels_last and registry.gemm_tile_fits(t, 32))
    taken = spy_kernels(monkeypatch)
    launch.implicit_gemm_program(_Module(), problem, x, w,
                                 config=gemm_config(other, dtype, "sm_80-89"))
    assert {tile for _, tile in taken} == {other}
    twin = next(t for t in registry.gemm_tiles(dtype) if registry.tile_variant(t).channels_last
                and not registry.is_multistage(t))
    with pytest.raises(ValueError, match="channels-last"):      # x is channels-first
        launch.implicit_gemm_program(_Module(), problem, x, w,
                                     config=gemm_config(twin, dtype, "sm_80-89"))


@pytest.mark.parametrize("dtype, precision", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("channels", [16, 64])
def test_explained_kernel_is_the_one_launched_on_9_0_verified_only(
        monkeypatch, restore_config, dtype, precision, channels):
    """Where the evidence ledger keeps the choice to verified kernels, the priced record
    and the launched one leave out the same unverified tiles (the wgmma tile on 9.0)."""
    restore_config.kernels = "verified"
    test_explained_kernel_is_the_one_launched_on_9_0(monkeypatch, dtype, precision, channels)


def _runs(monkeypatch, backend, problem, operands, limit=2**30):
    """``(kernels fetched, splits the reductions ran with, relayout launches)`` of one
    ``implicit_gemm`` run of ``problem`` on ``backend`` under ``limit`` bytes of workspace
    (programs built afresh)."""
    from cupyconv._kernels import relayout_launch, splitk_launch
    taken = spy_kernels(monkeypatch)
    reduced, relaid = [], []
    real_reduce, real_relay = splitk_launch.reduce_step, relayout_launch.relayout_program
    monkeypatch.setattr(splitk_launch, "reduce_step",
                        lambda *a, **k: reduced.append(a[3]) or real_reduce(*a, **k))
    monkeypatch.setattr(relayout_launch, "relayout_program",
                        lambda *a, **k: relaid.append(a[2:4]) or real_relay(*a, **k))
    problem, ops = backend.prepare(problem, operands)
    backend.run(problem, "implicit_gemm", ops, limit)
    return taken, reduced, relaid


def _forced(monkeypatch, splits=None, pays=None, tile=None):
    """The selection's split-K, re-layout verdict and (float64) tile forced (these shapes
    are too small for the model to choose them), its memo of records this test's own."""
    from cupyconv.backends.cuda import implicit_choice
    if splits is not None:
        monkeypatch.setattr(implicit_choice, "weight_gradient_splits", lambda *a, **k: splits)
    if pays is not None:
        monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *a, **k: pays)
    if tile is not None:
        real = launch.implicit_gemm_tile
        monkeypatch.setattr(launch, "implicit_gemm_tile", lambda problem, *a, **k:
                            tile if problem.dtype == F64 else real(problem, *a, **k))
    forget_launches()
    fresh_kernel_choices(monkeypatch)


# (dtype, precision, batch, splits, re-layout pays, arch): the split-K on the FMA and DMMA
# tiles read as they are, and on the TF32 multistage tile (sm_80) or the wgmma tile
# (sm_90) after the re-layout of both operands (32 images per part: whole K-tiles).
WGRAD_CASES = [(F32, None, 4, 2, False, 80), (F64, None, 6, 3, False, 80),
               (F32, "tf32", 64, 2, True, 80), (F32, "tf32", 64, 2, True, 90),
               (F32, "tf32", 64, 1, True, 80)]


@pytest.mark.parametrize("dtype, precision, batch, splits, pays, arch", WGRAD_CASES,
                         ids=lambda v: str(v))
def test_explained_split_and_relayout_of_a_weight_gradient_are_what_ran(
        monkeypatch, dtype, precision, batch, splits, pays, arch):
    """The weight gradient's record (what ``plan.explain()`` prints: the backend's
    ``kernel_config``) names the split-K, the re-layout and the tile that then run: the
    reduction with that many parts, one re-layout launch per group of x and per part of
    ``dy`` where it re-lays, the record's tile; none of them where it does not."""
    _forced(monkeypatch, splits=splits, pays=pays)
    backend = CudaBackend(StandInRunner(arch))
    problem = ConvProblem.create(x_shape=(batch, 4, 9), w_shape=(6, 2, 3), padding=1, groups=2,
                                 dtype=dtype, precision=precision, op="grad_weight")
    cfg = backend.kernel_config(problem, "implicit_gemm")
    assert (cfg.splits, cfg.relayout) == (splits, (pays, pays)), cfg.describe()
    rng = np.random.default_rng(7)
    x, dy = (rng.integers(-2, 3, s).astype(dtype) for s in (problem.x_shape, problem.y_shape))
    taken, reduced, relaid = _runs(monkeypatch, backend, problem, Operands(activation=x, output=dy))
    family, tile = _gemm_kernel(taken)
    assert (family, tile) == (cfg.family, cfg.gemm_tile), (taken, cfg.describe())
    assert reduced == [splits] * problem.groups * (splits > 1), reduced
    assert len(relaid) == pays * problem.groups * (1 + splits), relaid
    if pays:
        assert "re-lays x and w" in cfg.describe()
    if splits > 1:
        assert f"split-K {splits}" in cfg.describe()


@pytest.mark.parametrize("dtype, precision, batch, splits, pays, arch", WGRAD_CASES[:4],
                         ids=lambda v: str(v))
def test_explained_weight_gradient_under_a_tight_limit_is_unsplit_as_it_runs(
        monkeypatch, dtype, precision, batch, splits, pays, arch):
    """Under a workspace limit one byte short of the split-K's workspaces, the record the
    backend explains for that limit is unsplit, and it is the record that runs: no
    reduction, its tile and re-layout; with room for them, the split record, as before."""
    from cupyconv.backends.cuda import implicit_grads
    _forced(monkeypatch, splits=splits, pays=pays)
    backend = CudaBackend(StandInRunner(arch))
    problem = ConvProblem.create(x_shape=(batch, 4, 9), w_shape=(6, 2, 3), padding=1, groups=2,
                                 dtype=dtype, precision=precision, op="grad_weight")
    need = implicit_grads.split_workspace_bytes(problem, splits)
    assert backend.kernel_config(problem, "implicit_gemm", need).splits == splits
    cfg = backend.kernel_config(problem, "implicit_gemm", need - 1)
    assert (cfg.splits, cfg.relayout) == (1, (pays, pays)), cfg.describe()
    assert "split-K" not in cfg.describe()
    rng = np.random.default_rng(7)
    x, dy = (rng.integers(-2, 3, s).astype(dtype) for s in (problem.x_shape, problem.y_shape))
    ops = Operands(activation=x, output=dy)
    launched = backend.algorithm("implicit_gemm").launch_config(
        *backend.prepare(problem, ops), need - 1)
    assert launched == cfg, (launched.describe(), cfg.describe())
    taken, reduced, relaid = _runs(monkeypatch, backend, problem, ops, need - 1)
    assert _gemm_kernel(taken) == (cfg.family, cfg.gemm_tile), (taken, cfg.describe())
    assert reduced == [] and len(relaid) == 2 * pays * problem.groups, (reduced, relaid)


def test_plan_explains_the_record_under_its_workspace_limit(monkeypatch):
    """A plan's explained record is the backend's record under the limit the plan's calls
    run with (its choice's), and it is the kernel launched."""
    xs, ws = _shapes("channels_first", 16, 16)
    plan = cupyconv.plan_conv(xs, ws, F32, padding=1, precision="tf32", workspace_limit=64,
                              method="implicit_gemm", backend="emulated")
    backend = backends.backend_for(np, "emulated")
    cfg = backend.kernel_config(plan.problem, "implicit_gemm", plan.choice.limit)
    assert plan.choice.limit == 64
    line = plan.explain().splitlines()[-1]
    assert line.startswith(f"kernel: {cfg.describe()};"), (line, cfg.describe())
    taken = spy_kernels(monkeypatch)
    plan(np.ones(xs, F32), np.ones(ws, F32))
    assert _gemm_kernel(taken) == (cfg.family, cfg.gemm_tile), (taken, line)


# (dtype, precision, channels, arch, forced float64 tile): the float64 DMMA tile re-laid
# for its channels-last twin, float32 under TF32 re-laid for the multistage tile (sm_80)
# or the wgmma tile (sm_90).
RELAY_CASES = [(F64, None, 16, 80, (128, 64, 16, 6)), (F32, "tf32", 32, 80, None),
               (F32, "tf32", 32, 90, None)]


@pytest.mark.parametrize("pays", [True, False], ids=["pays", "does-not-pay"])
@pytest.mark.parametrize("dtype, precision, channels, arch, tile", RELAY_CASES,
                         ids=lambda v: str(v))
def test_explained_relayout_of_a_forward_plan_is_what_ran(monkeypatch, dtype, precision,
                                                          channels, arch, tile, pays):
    """On channels-first operands the plan's explained record says whether x and w are
    re-laid; the re-layout runs exactly where it says, then the record's tile."""
    _forced(monkeypatch, pays=pays, tile=tile)
    backend = CudaBackend(StandInRunner(arch))
    monkeypatch.setattr(backends, "_emulated_backend", lambda: backend)
    xs, ws = _shapes("channels_first", channels, 16)
    plan = cupyconv.plan_conv(xs, ws, dtype, padding=1, precision=precision,
                              method="implicit_gemm", backend="emulated")
    rng = np.random.default_rng(3)
    x, w = rng.integers(-3, 4, xs).astype(dtype), rng.integers(-2, 3, ws).astype(dtype)
    taken, _, relaid = _runs(monkeypatch, backend, plan.problem,
                             Operands(activation=x, filter=w))
    cfg = backend.kernel_config(plan.problem, "implicit_gemm")
    line = plan.explain().splitlines()[-1]
    assert line.startswith(f"kernel: {cfg.describe()};"), (line, cfg.describe())
    assert cfg.relayout == (pays, pays) and ("re-lays x and w" in line) == pays, line
    assert len(relaid) == 2 * pays, relaid
    assert _gemm_kernel(taken) == (cfg.family, cfg.gemm_tile), (taken, line)
    assert cfg.layout == ("channels_last" if pays else "channels_first"), line


@pytest.mark.parametrize("view", ["contiguous", "channels reversed", "misaligned"])
def test_record_on_other_operands_is_chosen_on_them(monkeypatch, view):
    """The priced record assumes C-contiguous, aligned operands; on others the backend's
    record is chosen on the operands themselves (channels-last float16 operands: the
    16-byte-copy tile, variant 3, only where their channels are contiguous and aligned),
    and that record is what runs."""
    backend = CudaBackend(StandInRunner(80))
    problem = ConvProblem.create(x_shape=(2, 6, 5, 16), w_shape=(16, 3, 3, 16), padding=1,
                                 layout="channels_last", dtype=F16)
    rng = np.random.default_rng(9)
    x, w = (rng.integers(-2, 3, s).astype(F16) for s in (problem.x_shape, problem.w_shape))
    if view == "channels reversed":
        x = np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    elif view == "misaligned":         # the same values 2 bytes past a 16-byte boundary
        x = _shifted(x)
    priced = backend.kernel_config(problem, "implicit_gemm")
    ops = Operands(activation=np.moveaxis(x, -1, 1), filter=np.moveaxis(w, -1, 1))  # logical
    launched = backend.algorithm("implicit_gemm").launch_config(*backend.prepare(problem, ops))
    taken, _, _ = _runs(monkeypatch, backend, problem, ops)
    assert _gemm_kernel(taken) == (launched.family, launched.gemm_tile), (taken, launched)
    assert (launched == priced) == (view == "contiguous"), (priced.describe(), launched.describe())
    assert launched.variant == (3 if view == "contiguous" else 2), launched.describe()


def _shifted(a):
    """A copy of ``a`` whose data start 2 bytes past a 16-byte boundary."""
    buf = np.empty(a.nbytes + 32, np.uint8)
    start = (-buf.ctypes.data) % 16 + 2
    out = np.frombuffer(buf[start:start + a.nbytes], a.dtype).reshape(a.shape)
    out[...] = a
    return out
