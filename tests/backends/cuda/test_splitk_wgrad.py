"""Issue 26 item 2: split-K for the weight gradient on the implicit GEMM (emulated; on a
GPU too, marked ``gpu``).

The weight gradient's images are split into ``S`` parts run as the groups of one forward
launch, the partials summed by ``splitk_reduce`` (``cuda_src/conv/splitk_reduce.cu``) in
part order.  ``S`` is the cost model's (``implicit_choice.weight_gradient_splits``); the tests force
it through that function (the backend asks it on every normal-path call) on small
shapes, whose own choice is 1.

Tolerances: the data are small integers, so every float32 (FMA and TF32: integers up to
2**11 are TF32 values) and float64 sum here is exact: results equal the float64
reference exactly, and the unsplit run bit for bit.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import launch, program
from cupyconv.api.compiled import CompiledCall, lookup
from cupyconv.api.gradients import conv_grad_weight
from cupyconv.backends.cuda import (CudaBackend, EmulatedRunner, cost, implicit_choice,
                                    implicit_grads, pricing)
from cupyconv.backends.cuda.runners import StandInRunner
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backends, dispatcher
from helpers import (called_twice, forget_launches, fresh_kernel_choices, normal_path,
                     small_ints)

#: ``(name, rank geometry, padding mode, layout, dtype, precision, S, batch)``: ranks 1-3,
#: groups, strides, dilations, every padding mode, both layouts, the FMA, DMMA and TF32
#: tiles (the last with 32 images per part: the re-laid multistage tile).
CASES = [
    ("rank1 dilated f64 constant", ((13,), (3,), (1,), (2,), ((2, 1),), 1),
     "constant", "channels_first", np.float64, "highest", 4, 4),
    ("rank2 groups f32 reflect", ((7, 6), (3, 2), (1, 1), (1, 2), ((1, 1), (2, 0)), 2),
     "reflect", "channels_last", np.float32, "highest", 2, 4),
    ("rank3 strided f32 wrap", ((5, 4, 6), (2, 3, 2), (2, 1, 1), (1, 1, 2),
                                ((1, 0), (1, 1), (0, 2)), 1),
     "wrap", "channels_first", np.float32, "highest", 3, 3),
    ("rank2 f64 symmetric", ((6, 5), (2, 2), (2, 1), (1, 1), ((1, 1), (0, 1)), 1),
     "symmetric", "channels_first", np.float64, "highest", 2, 2),
    ("rank1 tf32 edge groups re-laid", ((9,), (3,), (1,), (1,), ((1, 1),), 2),
     "edge", "channels_first", np.float32, "tf32", 2, 64),
]


@pytest.fixture
def forced(monkeypatch):
    """``forced(S)``: the backend's split-K is ``S`` from now on (and nothing is cached)."""
    def force(splits):
        forget_launches()
        monkeypatch.setattr(implicit_choice, "weight_gradient_splits", lambda *a, **k: splits)
        fresh_kernel_choices(monkeypatch)
    yield force
    forget_launches()


@pytest.fixture
def kernels(monkeypatch):
    """The kernel families launched."""
    seen = []
    real = launch.kernel_for

    def spy(module, family, dtype, rank, index64, tile=()):
        seen.append(family)
        return real(module, family, dtype, rank, index64, tile)
    monkeypatch.setattr(launch, "kernel_for", spy)
    return seen


class _NumPy:
    """The reference's "device": the NumPy backend (its column-buffer gradient, float64)."""

    @staticmethod
    def scope():
        return cupyconv.use_backend("numpy")

    to_dev = to_host = staticmethod(np.asarray)


def _operands(rng, geo, dtype, n, c=4, k=6, mode="constant"):
    s, ks, stride, dil, pad, g = geo
    x = small_ints(rng, (n, c) + s, dtype)
    w_shape = (k, c // g) + ks
    y = cupyconv.conv(x.astype(np.float64), np.zeros(w_shape), stride=stride, padding=pad,
                      dilation=dil, groups=g, padding_mode=mode)
    return x, small_ints(rng, y.shape, dtype), w_shape


def _grad(dev, geo, x, dy, w_shape, mode, layout, precision="highest", method="implicit_gemm"):
    s, ks, stride, dil, pad, g = geo
    if layout == "channels_last":
        x, dy = (np.ascontiguousarray(np.moveaxis(a, 1, -1)) for a in (x, dy))
        w_shape = (w_shape[0],) + w_shape[2:] + (w_shape[1],)
    with dev.scope():
        out = conv_grad_weight(dev.to_dev(x), dev.to_dev(dy), w_shape, stride=stride,
                               padding=pad, dilation=dil, groups=g, padding_mode=mode,
                               layout=layout, method=method, precision=precision)
    return dev.to_host(out)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_split_weight_gradient_is_exact_and_equals_the_unsplit_run(dev, forced, kernels, case,
                                                                  monkeypatch):
    """Every op variant through the split: the float64 reference exactly, the unsplit run
    bit for bit, and a second split run bit for bit (no atomics: deterministic)."""
    name, geo, mode, layout, dtype, precision, splits, n = case
    if precision == "tf32":      # the re-layout, which the model finds too dear this small
        monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *a, **k: True)
    rng = np.random.default_rng(len(name))
    x, dy, w_shape = _operands(rng, geo, dtype, n, mode=mode)
    ref = _grad(_NumPy, geo, x.astype(np.float64), dy.astype(np.float64), w_shape, mode,
                layout, method="gemm")                   # SciPy-checked NumPy backend
    forced(1)
    whole = _grad(dev, geo, x, dy, w_shape, mode, layout, precision)
    forced(splits)
    kernels.clear()
    got = [_grad(dev, geo, x, dy, w_shape, mode, layout, precision) for _ in range(2)]
    assert "splitk_reduce" in kernels, kernels
    if precision == "tf32":            # 32 images per part: the multistage tile, re-laid
        assert "relayout_channels_last" in kernels, kernels
    assert got[0].dtype == dtype
    np.testing.assert_array_equal(got[0], ref.astype(dtype))
    np.testing.assert_array_equal(got[0], whole)
    np.testing.assert_array_equal(got[1], got[0])


def test_a_repeated_split_call_replays_its_program(dev, forced):
    """A compiled split-K weight gradient: 0 synchronisations, 0 copies, exactly its
    program's launches (per group the forward launch and the reduction), its description
    names the split, and the normal path's result bit for bit."""
    rng = np.random.default_rng(5)
    x, dy = small_ints(rng, (4, 4, 7, 6), np.float32), small_ints(rng, (4, 6, 7, 6), np.float32)
    forced(2)
    kw = dict(padding=1, groups=2, method="implicit_gemm")
    with dev.scope():
        xd, dyd = dev.to_dev(x), dev.to_dev(dy)
        with normal_path():
            ref = dev.to_host(conv_grad_weight(xd, dyd, (6, 2, 3, 3), **kw)).copy()
        first = dev.to_host(called_twice(conv_grad_weight, xd, dyd, (6, 2, 3, 3), **kw)).copy()
        entry = lookup(conv_grad_weight, xd, dyd, (6, 2, 3, 3), **kw)
        with program.accounting() as again:
            y = dev.to_host(conv_grad_weight(xd, dyd, (6, 2, 3, 3), **kw))
    assert isinstance(entry, CompiledCall) and "split-K x2" in repr(entry), entry
    np.testing.assert_array_equal(first, ref)
    np.testing.assert_array_equal(y, ref)
    assert again["launches"] == entry.launches == 2 * 2, again
    assert not any(again[k] for k in ("syncs", "d2h", "h2d")), again


def _wgrad(n, spatial, channels=16, dtype="float32", precision="highest"):
    s = (spatial,) * 3
    return ConvProblem.create(x_shape=(n, channels) + s, w_shape=(channels, channels, 3, 3, 3),
                              padding=1, dtype=dtype, precision=precision, op="grad_weight")


def test_the_cost_model_splits_long_reductions_on_grids_that_do_not_fill():
    """S is 1 while the reduction is short (the call host-bound), more as N * prod(O)
    grows; 1 where the grid fills the device (SMs from the device's attributes), for
    float16 (its partials would round) and for a forward problem."""
    device = EmulatedRunner.NOMINAL
    splits = [implicit_choice.weight_gradient_splits(_wgrad(8, s), device) for s in (2, 32)]
    assert splits[0] == 1 and splits[1] > 1 and 8 % splits[1] == 0, splits
    one_sm = dataclasses.replace(device, sm_count=1)
    assert implicit_choice.weight_gradient_splits(_wgrad(8, 32), one_sm) == 1
    assert implicit_choice.weight_gradient_splits(_wgrad(8, 32, dtype="float16"), device) == 1
    fwd = ConvProblem.create(x_shape=(8, 16, 32, 32, 32), w_shape=(16, 16, 3, 3, 3), padding=1)
    assert implicit_choice.weight_gradient_splits(fwd, device) == 1
    split = pricing.predict_times(_wgrad(8, 32), device, ["implicit_gemm"])["implicit_gemm"]
    whole = implicit_choice.implicit_gemm_times(_wgrad(8, 32), device,
                                                cost.efficiencies(device.name), splits=1)[0]
    assert split < whole


@pytest.mark.parametrize("arch, precision, batch, spatial", [
    (80, "highest", 16, 32), (80, "tf32", 64, 16), (90, "tf32", 64, 16)])
def test_the_split_is_chosen_at_the_price_of_the_record_that_runs(arch, precision, batch,
                                                                   spatial):
    """The split-K decision prices its candidates as records: the chosen split's price is
    the price of the backend's record (its tile, re-layout and split: on sm_80 under TF32
    the re-laid multistage tile), the one the launcher builds, and it is below the
    unsplit record's."""
    device = dataclasses.replace(EmulatedRunner.NOMINAL, arch=arch)
    problem = _wgrad(batch, spatial, channels=32, precision=precision)
    eff = cost.efficiencies(device.name)
    chosen = implicit_choice.weight_gradient_splits(problem, device)
    cfg = pricing.kernel_config(problem, device)
    assert cfg.splits == chosen > 1, cfg.describe()
    priced = implicit_choice.record_time(problem, cfg, device, eff)
    assert priced == implicit_choice.implicit_gemm_times(problem, device, eff, splits=chosen)[0]
    assert implicit_choice.implicit_gemm_times(problem, device, eff, splits=1)[0] > priced


@pytest.mark.parametrize("splits,dtype", [(3, np.float32), (2, np.float16)],
                         ids=["not a divisor", "float16"])
def test_splits_the_program_cannot_take_are_refused(splits, dtype):
    problem = _wgrad(4, 4, channels=4, dtype=np.dtype(dtype).name)
    x, dy = np.zeros(problem.x_shape, dtype), np.zeros(problem.y_shape, dtype)
    runner = EmulatedRunner()
    with pytest.raises(ValueError, match="split-K takes"):
        implicit_grads.grad_weight_program(problem, x, dy, runner, dict(mma=False, tf32=False),
                                           splits=splits)


def _small_wgrad():
    """A float32 weight gradient of 4 images, small enough that the tests force its
    split-K."""
    return ConvProblem.create(x_shape=(4, 4, 7, 6), w_shape=(6, 4, 3, 3), padding=1,
                              dtype="float32", op="grad_weight")


def test_a_workspace_limit_below_the_splits_workspaces_runs_unsplit(dev, forced, kernels):
    """The split's copy of ``dy`` and its partials are workspaces: a ``workspace_limit``
    below them keeps the weight gradient unsplit (no reduction launched), same result."""
    rng = np.random.default_rng(6)
    x, dy = small_ints(rng, (4, 4, 7, 6), np.float32), small_ints(rng, (4, 6, 7, 6), np.float32)
    problem = _small_wgrad()
    need = implicit_grads.split_workspace_bytes(problem, 2)
    # dy in split order (2 * 6, 2, 7, 6) and the partials (4, 2 * 6, 3, 3): 7x6 "taps"
    assert need == 4 * (12 * 2 * 42 + 4 * 12 * 9) and implicit_grads.split_workspace_bytes(
        problem, 1) == 0
    forced(2)
    outs = []
    for limit in (need, need - 1):
        kernels.clear()
        with dev.scope():
            outs.append(dev.to_host(conv_grad_weight(dev.to_dev(x), dev.to_dev(dy), (6, 4, 3, 3),
                                                     padding=1, method="implicit_gemm",
                                                     workspace_limit=limit)))
        assert ("splitk_reduce" in kernels) == (limit == need), (limit, kernels)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_a_split_weight_gradient_reports_the_workspace_its_split_allocates(dev, forced):
    """The backend's workspace of a split-K weight gradient (the chooser's, a plan's) is
    the split's copy of ``dy`` and its partials: exactly what its run allocates beyond the
    unsplit run's under a limit one byte short of them, where the reported workspace is
    0 and the least workspace always is."""
    rng = np.random.default_rng(8)
    problem = _small_wgrad()
    x, dy = small_ints(rng, problem.x_shape, np.float32), small_ints(rng, problem.y_shape,
                                                                     np.float32)
    need = implicit_grads.split_workspace_bytes(problem, 2)
    forced(2)
    backend = backends.backend_for(dev.xp, dev.name)
    assert backend.workspace_bytes(problem, "implicit_gemm") == need
    assert backend.min_workspace_bytes(problem, "implicit_gemm") == 0
    allocated, outs = [], []
    for limit in (need, need - 1):
        assert backend.workspace_bytes(problem, "implicit_gemm", limit) == (
            need if limit == need else 0)
        assert backend.assess(problem, "implicit_gemm", limit)[1:3] == (
            0, need if limit == need else 0)
        forget_launches()
        with dev.scope(), program.accounting() as counts:
            outs.append(dev.to_host(conv_grad_weight(dev.to_dev(x), dev.to_dev(dy),
                                                     problem.w_shape, padding=1,
                                                     method="implicit_gemm",
                                                     workspace_limit=limit)))
        allocated.append(counts["allocated_bytes"])
    assert allocated[0] - allocated[1] == need, allocated
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("method", ["implicit_gemm", "auto"])
def test_free_memory_short_of_the_split_runs_the_unsplit_record(forced, kernels, method):
    """Free memory just above the result plus the unsplit run's workspace (none), short of
    the split's workspaces, under a workspace limit that has room for them: the workspace
    is judged under what the memory leaves (the limit or the free memory less the result,
    the smaller), so an explicit ``method`` and ``auto`` alike price and run the unsplit
    record (no reduction launched, no refusal), the float64 reference exactly."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    rng = np.random.default_rng(9)
    problem = _small_wgrad()
    x, dy = small_ints(rng, problem.x_shape, np.float32), small_ints(rng, problem.y_shape,
                                                                     np.float32)
    ref = conv_grad_weight(x.astype(np.float64), dy.astype(np.float64), problem.w_shape,
                           padding=1, method="gemm")        # the NumPy backend
    need = implicit_grads.split_workspace_bytes(problem, 2)
    result = dispatcher.result_bytes(problem)
    forced(2)
    backend = CudaBackend(EmulatedRunner(memory_limit=result + need - 1))
    assert backend.workspace_bytes(problem, "implicit_gemm", need) == need   # the limit's
    choice = dispatcher.choose(problem, backend, need)
    assert "implicit_gemm" in choice.ranked, choice.rejected
    assert backend.workspace_bytes(problem, "implicit_gemm", choice.limit) == 0
    if method == "auto":
        assert choice.algorithm == "implicit_gemm", choice
    stats = {}
    y, name = dispatcher.run(problem, Operands(activation=x, output=dy), backend,
                             method=method, workspace_limit=need, stats=stats)
    assert (name, stats["fallbacks"]) == ("implicit_gemm", []), stats
    assert "splitk_reduce" not in kernels and kernels, kernels
    np.testing.assert_array_equal(y, ref.astype(np.float32))


@pytest.mark.parametrize("arch, precision, batch, spatial", [
    (80, "highest", 16, 32), (80, "tf32", 64, 16)])
def test_a_limit_below_the_split_workspace_prices_the_unsplit_record(arch, precision, batch,
                                                                     spatial):
    """The chooser's price and workspace of the implicit GEMM on a weight gradient whose
    split-K the cost model picks are the record's that runs under the call's limit: the
    split record's with room for its workspaces, the unsplit record's (no workspace, its
    own, higher, price) under a limit one byte short of them."""
    backend = CudaBackend(StandInRunner(arch))
    device = backend.device
    problem = _wgrad(batch, spatial, channels=32, precision=precision)
    eff = cost.efficiencies(device.name)
    split = backend.kernel_config(problem, "implicit_gemm")
    need = implicit_grads.split_workspace_bytes(problem, split.splits)
    assert split.splits > 1 and need > 0, split.describe()
    _, least, roomy, fast = backend.assess(problem, "implicit_gemm", need)
    _, least_tight, tight, slow = backend.assess(problem, "implicit_gemm", need - 1)
    unsplit = backend.kernel_config(problem, "implicit_gemm", need - 1)
    assert unsplit.splits == 1 and (least, least_tight, roomy, tight) == (0, 0, need, 0)
    assert fast == implicit_choice.record_time(problem, split, device, eff)
    assert slow == implicit_choice.record_time(problem, unsplit, device, eff) > fast
    assert backend.predict_times(problem, ["implicit_gemm"])["implicit_gemm"] == fast
    assert [dispatcher.choose(problem, backend, limit).times["implicit_gemm"]
            for limit in (need, need - 1)] == [fast, slow]
