"""The re-layout step on the CUDA path (issue 26 item 1): channels-first operands of the
implicit GEMM re-laid by the kernel for the multistage tile, TF32 rounding fused into it,
frozen weights in plans and ``ConvOperator`` re-laid once, and the gradients that run on
the implicit GEMM taking the same step.

One body per behaviour, run on the CUDA-path backends (``dev``: the emulator here, CuPy on
a GPU), against the NumPy backend (float64 on small integers: exact) or, for the TF32
rounding, against the same call on operands rounded beforehand (rounding twice is
rounding once, so the two agree bit for bit only if the fused rounding is ``to_tf32``).
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import program, registry
from cupyconv.backends import arrays as backend_arrays
from cupyconv.backends.cuda import implicit_choice, relayout
from cupyconv.dispatch import dispatcher

from helpers import fresh_kernel_choices, spy_kernels

F32 = np.dtype(np.float32)
BK = 32                           # the TF32 multistage tile's K-tile (channels)


@pytest.fixture(autouse=True)
def relay_always(monkeypatch):
    """The re-layout taken whatever the cost model says: at these small sizes it does not
    pay (``implicit_choice.relayout_pays``, tested in test_cuda_cost.py), and the mechanism is
    what is tested here."""
    monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *args, **kwargs: True)
    fresh_kernel_choices(monkeypatch)


def _ints(rng, shape, scope=3):
    return rng.integers(-scope, scope + 1, size=shape).astype(F32)


def _ref(x, w, **geo):
    return cupyconv.conv(x.astype(np.float64), w.astype(np.float64), **geo)


@pytest.mark.parametrize("pays", [True, False], ids=["relaid", "not-paying"])
def test_tf32_rounding_is_fused_into_the_relayout(dev, rng, monkeypatch, pays):
    """``precision="tf32"`` on channels-first float32 operands.  Where the re-layout pays,
    both are re-laid and rounded by the kernel: no ``to_tf32`` copy is made (neither by
    the dispatcher nor here) and the multistage tile runs.  Where the cost model says it
    does not pay, the call follows it: the operands are read as they are (a variant-2
    tile) after ``to_tf32`` copies.  Both are bit-equal to the same call on operands
    rounded beforehand (rounding twice is rounding once)."""
    x = rng.standard_normal((2, BK, 6, 5)).astype(F32)
    w = rng.standard_normal((16, BK, 3, 3)).astype(F32)
    geo = dict(padding=1, method="implicit_gemm", precision="tf32")
    with dev.scope():
        ref = dev.to_host(cupyconv.conv(dev.to_dev(backend_arrays.to_tf32(x)),
                                        dev.to_dev(backend_arrays.to_tf32(w)), **geo))
        rounded, asked = [], []
        monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *a, **k: asked.append(a) or pays)
        fresh_kernel_choices(monkeypatch)
        for module in (relayout, dispatcher):
            real = module.to_tf32
            monkeypatch.setattr(module, "to_tf32",
                                lambda a, real=real: rounded.append(a) or real(a))
        taken = spy_kernels(monkeypatch)
        y = dev.to_host(cupyconv.conv(dev.to_dev(x), dev.to_dev(w), **geo))
    families = [f for f, _ in taken]
    assert asked
    if pays:
        assert rounded == [] and families.count("relayout_channels_last") == 2
        assert taken[-1] == ("implicit_gemm_multistage", (64, 64, BK, registry.MULTISTAGE))
    else:
        assert len(rounded) == 2 and "relayout_channels_last" not in families
        assert taken[-1][0] == "implicit_gemm_fprop" and taken[-1][1][3] == 2
    np.testing.assert_array_equal(y, ref)
    assert not np.array_equal(y, dev.to_host(cupyconv.conv(dev.to_dev(x), dev.to_dev(w),
                                                           padding=1)))   # TF32 did round


def test_frozen_plan_relays_only_x(dev, rng):
    """``plan_conv(..., weights=w)``: ``plan(x)`` launches one re-layout (x) where
    ``plan(x, w)`` launches two; the plan keeps its own prepared copy (a later write to
    ``w`` is not seen by ``plan(x)``, and is by ``plan(x, w)``); exact on small integers,
    also on the repeated (compiled) call."""
    x = _ints(rng, (1, BK, 6, 5))
    w = _ints(rng, (16, BK, 3, 3), 2)
    with dev.scope():
        xd, wd = dev.to_dev(x), dev.to_dev(w.copy())     # (to_dev of NumPy: no copy)
        plan = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, precision="tf32",
                                  method="implicit_gemm", weights=wd)
        loose = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, precision="tf32",
                                   method="implicit_gemm")
        assert plan.frozen and not loose.frozen
        counts = []
        for call in (lambda: plan(xd), lambda: plan(xd), lambda: loose(xd, wd)):
            with program.accounting() as c:
                y = call()
            counts.append(c["launches"])
            np.testing.assert_array_equal(dev.to_host(y), _ref(x, w, padding=1))
        assert counts == [2, 2, 3]                    # re-layout of x (+ w) and the GEMM
        assert "repeated calls replay (" in plan.explain(), plan.explain()   # weights: a constant
        wd[...] = 0
        np.testing.assert_array_equal(dev.to_host(plan(xd)), _ref(x, w, padding=1))
        np.testing.assert_array_equal(dev.to_host(loose(xd, wd)), np.zeros((1, 16, 6, 5)))


def test_plan_without_weights_needs_w():
    plan = cupyconv.plan_conv((1, 2, 5), (3, 2, 3), np.float64, backend="numpy")
    with pytest.raises(TypeError, match="holds no weights"):
        plan(np.ones((1, 2, 5)))


def test_conv_operator_reads_its_weights_live(dev, rng):
    """``ConvOperator.from_conv`` on the implicit GEMM references ``w``: a ``matvec`` and
    an ``rmatvec`` after a write into ``w`` (first and repeated, replayed, calls) use the
    new values; the adjoint stays exact."""
    x = _ints(rng, (1, BK, 6, 5))
    w, w_new = _ints(rng, (16, BK, 3, 3), 2), _ints(rng, (16, BK, 3, 3), 2)
    with dev.scope():
        wd = dev.to_dev(w.copy())
        op = cupyconv.ConvOperator.from_conv(wd, x.shape, padding=1, precision="tf32",
                                             method="implicit_gemm")
        y = op.matvec(dev.to_dev(x.ravel()))
        np.testing.assert_array_equal(dev.to_host(y), _ref(x, w, padding=1).ravel())
        wd[...] = dev.to_dev(w_new)
        for _ in range(2):
            y = op.matvec(dev.to_dev(x.ravel()))
            np.testing.assert_array_equal(dev.to_host(y), _ref(x, w_new, padding=1).ravel())
        u = _ints(rng, (op.shape[0],))
        back = dev.to_host(op.rmatvec(dev.to_dev(u)))
        assert np.vdot(dev.to_host(y), u) == pytest.approx(np.vdot(x.ravel(), back), rel=1e-6)


@pytest.mark.parametrize("op", ["grad_weight", "grad_input"])
def test_gradients_on_the_implicit_gemm_take_the_relayout(dev, rng, monkeypatch, op):
    """The gradients that run as forward problems of the implicit GEMM re-lay their
    role-swapped operands for the multistage tile where it fits (the weight gradient's
    channels are the batch: N = 32; the input gradient's are K = 32), as steps of the
    gradient's launch program (no re-layout program of its own, no rounded copy: the
    program rounds); exact on small integers against the NumPy backend."""
    n, c, k = (BK, 2, 16) if op == "grad_weight" else (1, 16, BK)
    x, w = _ints(rng, (n, c, 5, 4)), _ints(rng, (k, c, 3, 3), 2)
    dy = _ints(rng, (n, k, 5, 4))
    geo = dict(padding=1, method="implicit_gemm", precision="tf32")
    with dev.scope():
        taken = spy_kernels(monkeypatch)
        with program.record() as rec:
            if op == "grad_weight":
                got = cupyconv.conv_grad_weight(dev.to_dev(x), dev.to_dev(dy), w.shape, **geo)
            else:
                got = cupyconv.conv_grad_input(dev.to_dev(dy), dev.to_dev(w), x.shape, **geo)
        if op == "grad_weight":
            ref = cupyconv.conv_grad_weight(x.astype(np.float64), dy.astype(np.float64),
                                            w.shape, padding=1)
        else:
            ref = cupyconv.conv_grad_input(dy.astype(np.float64), w.astype(np.float64),
                                           x.shape, padding=1)
    families = [f for f, _ in taken]
    assert "relayout_channels_last" in families and "implicit_gemm_multistage" in families
    (prog, *_), = rec.steps
    assert prog.name == f"{op} implicit_gemm" and len(prog.launches) == 3   # 2 re-layouts
    np.testing.assert_array_equal(dev.to_host(got), ref)


#: (name, groups, x's memory): grouped weights (each group's channels a whole K-tile), and
#: an x whose memory is channels-last already (a channels-first view of NHWC memory: read
#: as it is, only w is re-laid).
GROUPED_CASES = [("groups-2", 2, "NCHW"), ("channels-last-x", 1, "NHWC")]


@pytest.mark.parametrize("name,groups,memory", GROUPED_CASES, ids=[c[0] for c in GROUPED_CASES])
def test_grouped_and_channels_last_operands(dev, rng, monkeypatch, name, groups, memory):
    """Exact on small integers against the NumPy backend; the re-layout launches once per
    channels-first operand."""
    x = _ints(rng, (2, groups * BK, 5, 4))
    w = _ints(rng, (16, BK, 3, 3), 2)
    with dev.scope():
        xd = dev.to_dev(x)
        if memory == "NHWC":
            xd = dev.xp.moveaxis(dev.xp.ascontiguousarray(dev.xp.moveaxis(xd, 1, -1)), -1, 1)
        taken = spy_kernels(monkeypatch)
        y = cupyconv.conv(xd, dev.to_dev(w), padding=1, groups=groups,
                          method="implicit_gemm", precision="tf32")
    families = [f for f, _ in taken]
    assert families.count("relayout_channels_last") == (2 if memory == "NCHW" else 1)
    assert "implicit_gemm_multistage" in families
    np.testing.assert_array_equal(dev.to_host(y), _ref(x, w, padding=1, groups=groups))


def test_float64_is_relaid_for_the_dmma_twin(dev, rng, monkeypatch):
    """float64 on channels-first operands: where the DMMA tile 6 is the choice (forced:
    these are too small for the chooser), both operands are re-laid (no rounding) and its
    channels-last twin 9 runs; a frozen plan re-lays only x; exact on small integers
    against the NumPy backend, also on the repeated (compiled) call."""
    from cupyconv._kernels import launch
    tile = (128, 64, 16, 6)
    real = launch.implicit_gemm_tile
    monkeypatch.setattr(launch, "implicit_gemm_tile", lambda problem, mma=False, tf32=False:
                        tile if problem.dtype == np.float64 else real(problem, mma, tf32))
    fresh_kernel_choices(monkeypatch)
    x = _ints(rng, (1, 16, 6, 5)).astype(np.float64)
    w = _ints(rng, (8, 16, 3, 3), 2).astype(np.float64)
    ref = _ref(x, w, padding=1)
    with dev.scope():
        xd, wd = dev.to_dev(x), dev.to_dev(w)
        taken = spy_kernels(monkeypatch)
        y = cupyconv.conv(xd, wd, padding=1, method="implicit_gemm")
        families = [f for f, _ in taken]
        assert families.count("relayout_channels_last") == 2, taken
        assert taken[-1] == ("implicit_gemm_fma_dmma", registry.channels_last_twin(tile))
        np.testing.assert_array_equal(dev.to_host(y), ref)
        plan = cupyconv.plan_conv(x.shape, w.shape, np.float64, padding=1,
                                  method="implicit_gemm", weights=wd)
        counts = []
        for _ in range(2):
            with program.accounting() as c:
                y = plan(xd)
            counts.append(c["launches"])
            np.testing.assert_array_equal(dev.to_host(y), ref)
        assert counts == [2, 2]                       # re-layout of x and the GEMM
