"""The gradients on the channel-contiguous tiles (issue 27 part 3 "all ops", issue 26 item
1): the input gradient (through ``core.transpose.transpose``) and the weight gradient (per group)
re-lay their role-swapped operands inside their launch programs (the re-layout kernel's
launches are steps of the gradient program, into its workspaces, TF32 rounding fused), so
the multistage tile runs them, or on a device of compute capability 9.0 the sm_90a wgmma
tile (the emulated runner standing in for one, as ``test_wgmma_wiring.py`` does).

One body per behaviour, against the NumPy backend's float64 gradients on small integers
(exact: TF32, float16 and bfloat16 hold the operands exactly, float32 accumulates their
products exactly; the 16-bit types round once, as the reference cast), or, for the TF32 rounding, against the same call on operands
rounded beforehand (rounding twice is rounding once: bit for bit only if the fused
rounding is ``to_tf32``).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cupyconv
from cupyconv._compile.compat import ArchSpecificUnavailable
from cupyconv._dtypes import BFLOAT16
from cupyconv._emulation import emulation_available
from cupyconv._kernels import wgmma_launch
from cupyconv.backends import arrays as backend_arrays
from cupyconv.backends.cuda import CudaBackend, implicit_choice, implicit_grads
from cupyconv.core.problem import ConvProblem, Operands

from helpers import first_and_repeated, fresh_kernel_choices, small_ints, spy_kernels
from test_wgmma_wiring import StandIn       # the emulated runner as a device of a given arch

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
#: The K-tile (channels) of the multistage and wgmma tiles: TF32 32, float16 and bfloat16 64.
BK = {F32: 32, F16: 64, BFLOAT16: 64}
#: The tile family each stand-in device runs on re-laid operands.
TILE_OF_ARCH = {80: "implicit_gemm_multistage", 90: "implicit_gemm_wgmma"}


@pytest.fixture(autouse=True)
def relay_always(monkeypatch):
    """The re-layout taken whatever the cost model says: at these small sizes it does not
    pay (``implicit_choice.relayout_pays``, tested in test_cuda_cost.py); the mechanism is tested."""
    monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *args, **kwargs: True)
    fresh_kernel_choices(monkeypatch)


#: ``(name, op, rank, dtype, groups, padding_mode)``: ranks 1-4, the three tensor-core
#: dtypes with a multistage and a wgmma tile, groups (each group's forward channels a whole
#: K-tile), and the boundary modes: the weight gradient reads x through the forward's
#: padding (every mode); the input gradient is a forward problem only under constant
#: padding (the others run the column buffer: not re-laid).
CASES = [("dgrad rank 1", "grad_input", 1, F32, 1, "constant"),
         ("dgrad rank 2 float16", "grad_input", 2, F16, 1, "constant"),
         ("dgrad rank 3", "grad_input", 3, F32, 1, "constant"),
         ("dgrad groups 2", "grad_input", 2, F32, 2, "constant"),
         ("wgrad rank 1", "grad_weight", 1, F32, 1, "constant"),
         ("wgrad rank 2 float16", "grad_weight", 2, F16, 1, "constant"),
         ("wgrad rank 3", "grad_weight", 3, F32, 1, "constant"),
         ("wgrad rank 4", "grad_weight", 4, F32, 1, "constant"),
         ("wgrad groups 2", "grad_weight", 2, F32, 2, "constant"),
         ("wgrad reflect", "grad_weight", 2, F32, 1, "reflect"),
         ("wgrad wrap", "grad_weight", 1, F32, 1, "wrap"),
         ("wgrad edge", "grad_weight", 1, F32, 1, "edge")]
if BFLOAT16 is not None:
    CASES += [("dgrad rank 2 bfloat16", "grad_input", 2, BFLOAT16, 1, "constant"),
              ("wgrad rank 2 bfloat16", "grad_weight", 2, BFLOAT16, 1, "constant")]


def _problem(op, rank, dtype, groups, mode="constant"):
    """A small gradient problem whose forward problem has whole K-tiles per group: the
    input gradient's forward channels are K (= BK per group), the weight gradient's the
    batch (= BK)."""
    bk = BK[dtype]
    n, c, k = (1, 8 * groups, bk * groups) if op == "grad_input" else (bk, 2 * groups,
                                                                         16 * groups)
    spatial = (5, 4, 3)[:rank] if rank < 4 else (3, 3, 2, 2)     # rank 4: kept cheap
    return ConvProblem.create(x_shape=(n, c) + spatial,
                              w_shape=(k, 2 if op == "grad_weight" else 8) + (3,) * rank,
                              padding=1, groups=groups, padding_mode=mode, op=op,
                              dtype=dtype, precision="tf32" if dtype == F32 else "highest")


def _operands(problem, rng):
    x = small_ints(rng, problem.x_shape, problem.dtype, scale=3)
    w = small_ints(rng, problem.w_shape, problem.dtype, scale=2)
    dy = small_ints(rng, problem.y_shape, problem.dtype, scale=3)
    return x, w, dy


def _numpy_gradient(problem, x, w, dy):
    geo = dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation,
               groups=problem.groups, padding_mode=problem.padding_mode)
    with cupyconv.use_backend("numpy"):
        if problem.op == "grad_weight":
            return cupyconv.conv_grad_weight(x.astype(np.float64), dy.astype(np.float64),
                                             problem.w_shape, **geo)
        return cupyconv.conv_grad_input(dy.astype(np.float64), w.astype(np.float64),
                                        problem.x_shape, **geo)


def _backend_run(backend, problem, x, w, dy):
    """The gradient through the CUDA backend's ``run`` (its gradient branch: what the
    dispatcher calls), on channels-first operands left unrounded (``rounds_tf32``)."""
    ops = (Operands(activation=x, output=dy) if problem.op == "grad_weight"
           else Operands(filter=w, output=dy))
    problem, ops = backend.prepare(problem, ops)
    return backend.run(problem, "implicit_gemm", ops, 2**30)


@pytest.mark.parametrize("arch", sorted(TILE_OF_ARCH))
@pytest.mark.parametrize("name,op,rank,dtype,groups,mode", CASES, ids=[c[0] for c in CASES])
def test_gradients_run_on_the_channels_last_tiles(monkeypatch, arch, name, op, rank, dtype,
                                                  groups, mode):
    """The re-layout kernel, then the multistage tile (sm_80-class stand-in) or the wgmma
    tile (the 9.0 stand-in): exact against the NumPy backend."""
    problem = _problem(op, rank, dtype, groups, mode)
    backend = CudaBackend(StandIn(arch))
    assert backend.rounds_tf32(problem, "implicit_gemm") == (dtype == F32)
    x, w, dy = _operands(problem, np.random.default_rng(rank * 10 + groups))
    taken = spy_kernels(monkeypatch)
    got = _backend_run(backend, problem, x, w, dy)
    assert {f for f, _ in taken} == {"relayout_channels_last", TILE_OF_ARCH[arch]}, name
    np.testing.assert_array_equal(got, _numpy_gradient(problem, x, w, dy).astype(dtype),
                                  err_msg=name)


@pytest.mark.parametrize("arch", sorted(TILE_OF_ARCH))
@pytest.mark.parametrize("op", ["grad_input", "grad_weight"])
@pytest.mark.parametrize("pays", [True, False], ids=["relaid", "not-paying"])
def test_tf32_rounding_is_the_programs(monkeypatch, arch, op, pays):
    """``precision="tf32"`` on unrounded float32 operands: where the re-layout pays the
    program rounds them in the re-layout (no ``to_tf32`` copy), else they are rounded by
    host steps first and read as they are (not the channels-last tile); either way bit for
    bit the same call on operands rounded beforehand."""
    monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *a, **k: pays)
    fresh_kernel_choices(monkeypatch)
    problem = _problem(op, 2, F32, 2)
    rng = np.random.default_rng(7)
    x, w, dy = (rng.standard_normal(s).astype(F32)
                for s in (problem.x_shape, problem.w_shape, problem.y_shape))
    backend = CudaBackend(StandIn(arch))
    ref = _backend_run(backend, problem, *map(backend_arrays.to_tf32, (x, w, dy)))
    copies = []
    real = implicit_grads.to_tf32
    monkeypatch.setattr(implicit_grads, "to_tf32", lambda a: copies.append(a.shape) or real(a))
    taken = spy_kernels(monkeypatch)
    got = _backend_run(backend, problem, x, w, dy)
    np.testing.assert_array_equal(got, ref)
    families = {f for f, _ in taken}
    if pays:
        assert not copies and families == {"relayout_channels_last", TILE_OF_ARCH[arch]}
    else:
        assert len(copies) == 2 and families.isdisjoint({"relayout_channels_last",
                                                         *TILE_OF_ARCH.values()})


@pytest.mark.parametrize("op", ["grad_input", "grad_weight"])
def test_repeated_relaid_gradient_is_a_compiled_call(dev, rng, op):
    """A repeated TF32 gradient call whose program re-lays its operands: 0 synchronisations,
    0 copies, the program's launches (the re-layouts and the tile: 3 for the input
    gradient, 3 per group for the weight gradient) and the normal path's result bit for bit
    (also on new data)."""
    problem = _problem(op, 2, F32, 2)
    x, w, dy = (dev.to_dev(a) for a in _operands(problem, rng))
    x2, w2, dy2 = (dev.to_dev(a) for a in _operands(problem, rng))
    geo = dict(padding=1, groups=2, method="implicit_gemm", precision="tf32")

    def call(a=x, b=w, d=dy):
        if op == "grad_weight":
            return cupyconv.conv_grad_weight(a, d, problem.w_shape, **geo)
        return cupyconv.conv_grad_input(d, b, problem.x_shape, **geo)
    ref, _, again, y = first_and_repeated(dev, call)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(ref, _numpy_gradient(problem, *map(dev.to_host, (x, w, dy))))
    assert again["launches"] == (3 if op == "grad_input" else 6), again
    assert not any(again[k] for k in ("syncs", "d2h", "h2d")), again
    with dev.scope():
        new = dev.to_host(call(x2, w2, dy2))
    np.testing.assert_array_equal(new, _numpy_gradient(problem, *map(dev.to_host,
                                                                    (x2, w2, dy2))))


@pytest.mark.parametrize("op", ["grad_input", "grad_weight"])
def test_unavailable_wgmma_cubin_falls_back_to_the_multistage_tile(monkeypatch, op):
    """On the 9.0 stand-in whose sm_90a cubin the loader cannot give
    (``ArchSpecificUnavailable``, as ``relayout.wgmma_program`` catches it for the forward
    pass): the gradient's program takes the multistage tile on the same re-laid operands."""
    def unavailable(*args, **kwargs):
        raise ArchSpecificUnavailable("stand-in: no sm_90a cubin")
    problem = _problem(op, 2, F32, 1)
    x, w, dy = _operands(problem, np.random.default_rng(3))
    taken = spy_kernels(monkeypatch)
    monkeypatch.setattr(wgmma_launch, "wgmma_program", unavailable)
    got = _backend_run(CudaBackend(StandIn(90)), problem, x, w, dy)
    assert {f for f, _ in taken} == {"relayout_channels_last", "implicit_gemm_multistage"}
    np.testing.assert_array_equal(got, _numpy_gradient(problem, x, w, dy).astype(F32))


@st.composite
def _geometry(draw):
    """A small rank 1-2 TF32 gradient on the multistage tile: the weight gradient with any
    stride, dilation, padding 0-2 and boundary mode, 1-2 groups; the input gradient
    stride 1, constant padding up to the dilated kernel's extent (a forward problem)."""
    op = draw(st.sampled_from(["grad_input", "grad_weight"]))
    rank, groups = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ks = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    pad = tuple(draw(st.integers(0, d * (k - 1))) for k, d in zip(ks, dil))
    spatial = tuple(draw(st.integers(d * (k - 1) + 1, d * (k - 1) + 4))
                    for k, d in zip(ks, dil))
    if op == "grad_input":
        n, c, k, stride, mode = draw(st.integers(1, 2)), 4 * groups, BK[F32] * groups, 1, "constant"
    else:
        n, c, k = BK[F32], draw(st.integers(1, 2)) * groups, draw(st.integers(1, 2)) * 8 * groups
        stride = tuple(draw(st.integers(1, 2)) for _ in range(rank))
        mode = draw(st.sampled_from(["constant", "reflect", "wrap", "edge"]))
    return ConvProblem.create(x_shape=(n, c) + spatial, w_shape=(k, c // groups) + ks,
                              stride=stride, padding=pad, dilation=dil, groups=groups,
                              padding_mode=mode, op=op, dtype=F32, precision="tf32")


@settings(max_examples=10)
@given(problem=_geometry(), seed=st.integers(0, 2**16))
def test_any_small_geometry_matches_numpy(problem, seed):
    """Whatever the geometry, the re-laid gradient on the multistage tile is exact against
    the NumPy backend (small integers)."""
    x, w, dy = _operands(problem, np.random.default_rng(seed))
    got = _backend_run(CudaBackend(StandIn(80)), problem, x, w, dy)
    np.testing.assert_array_equal(got, _numpy_gradient(problem, x, w, dy).astype(F32),
                                  err_msg=str(problem))
