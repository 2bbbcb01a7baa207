"""The transposition rule (:mod:`cupyconv.core.transpose`), by adjoint identities.

For a drawn geometry (ranks 1-4, stride, dilation, asymmetric padding, every padding
mode, groups, both orientations, input extents that leave a tail unread by the stride:
what ``conv_transpose``'s ``output_padding`` makes), each form of the rule is applied
as written: its forward problem run by cupyconv's forward pass on the operands its map
gives, its output cut (or folded) as it says.  With ``<a, b> = vdot(a, b)`` and
``conv`` the tap-loop oracle (``helpers.ref_conv``):

    <conv(x, w), dy> == <x, grad_input(dy, w)>       (A^H: the linear part, cval 0)
    <conv(x, w), dy> == <w, grad_weight(x, dy)>      (linear in w, any cval)

relative to ``<conv(|x|, |w|), |dy|>`` (what both sums add up).  Tolerance 1e-12 in
float64: each side is a sum of at most a few thousand products, whose rounding is a few
hundred ulps of that scale at worst.  The forward pass runs on the NumPy backend (every
drawn case) and on the emulated CUDA path (a few).  ``conv_transpose`` (the public
entry of the rule, with ``output_padding``) is checked the same way against ``conv``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cupyconv
from cupyconv._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from cupyconv.backends.arrays import fold_padding
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.core.transpose import (column_forward, forward_operands, group_views,
                                     split_images, transpose, weights_window)
from cupyconv.dispatch import backend_for, run
from helpers import PADDING_MODES, random_array, ref_conv
from problem_lists import spatial_geometry

TOL = 1e-12
EMULATED = pytest.mark.skipif("emulated" not in cupyconv.available_backends(),
                              reason="the emulated CUDA path is not available here")


@st.composite
def geometries(draw, max_rank=4, max_elems=400):
    """A forward problem (float64; cval drawn for constant padding) and its splits."""
    rank = draw(st.integers(1, max_rank))
    geo = draw(spatial_geometry(rank, {1: 9, 2: 6, 3: 4}.get(rank, 3), PADDING_MODES))
    g = draw(st.integers(1, 2))
    n, splits = draw(st.sampled_from(((1, 1), (2, 1), (2, 2), (4, 2), (3, 3))))
    c, k = g * draw(st.integers(1, 2)), g * draw(st.integers(1, 2))
    s = geo["s"]
    while n * c * math.prod(s) > max_elems and max(s) > 1:
        i = int(np.argmax(s))
        s[i] -= 1
        span = geo["dilation"][i] * (geo["ks"][i] - 1) + 1
        pb, pa = geo["padding"][i]
        geo["padding"][i] = (pb, pa + max(span - (s[i] + pb + pa), 0))
    problem = ConvProblem.create(
        x_shape=(n, c) + tuple(s), w_shape=(k, c // g) + tuple(geo["ks"]),
        stride=geo["stride"], dilation=geo["dilation"], padding=tuple(geo["padding"]),
        padding_mode=geo["mode"], groups=g, flip=draw(st.booleans()),
        cval=draw(st.integers(-2, 2)) if geo["mode"] == "constant" else 0)
    return problem, splits


def _oracle(problem, x, w, cval=None):
    """``conv(x, w)`` of the forward ``problem`` by the tap loop (taps reversed if flip)."""
    if problem.flip:
        w = w[(slice(None), slice(None)) + (slice(None, None, -1),) * problem.ndim]
    return ref_conv(x, w, stride=problem.stride, padding=problem.padding,
                    dilation=problem.dilation, groups=problem.groups,
                    padding_mode=problem.padding_mode,
                    cval=problem.cval if cval is None else cval)


def _forward(backend, fwd, x, w):
    """``fwd``'s output on ``backend`` (cupyconv's forward pass, automatic choice)."""
    assert fwd.op == FORWARD
    out, _ = run(fwd, Operands(activation=x, filter=w), backend)
    return np.asarray(out)


def _grad_inputs(problem, backend, dy, w):
    """``dx`` by every form of the input gradient's rule that applies."""
    gp = problem.with_(op=GRAD_INPUT)
    forms = [True] + ([False] if problem.padding_mode == "constant" else [])
    for whole in forms:
        t = transpose(gp, whole=whole)
        y = _forward(backend, t.forward, *forward_operands(t, gp, Operands(output=dy, filter=w),
                                                            np))
        yield f"grad_input whole={whole}", fold_padding(gp, y) if t.fold else y


def _grad_weights(problem, backend, x, dy, splits):
    """``dw`` by the whole (grouped) form and the per-group form with ``splits``."""
    gp = problem.with_(op=GRAD_WEIGHT)
    t = transpose(gp, whole=True)
    y = _forward(backend, t.forward, *forward_operands(t, gp, Operands(activation=x,
                                                                       output=dy), np))
    yield "grad_weight whole", weights_window(t, y)
    t = transpose(gp, splits=splits)
    rows = []
    for x_g, dy_g in group_views(t, gp, x, dy):              # (Cg, N, *S'), (Kg, N, *O)
        w_g = np.reshape(split_images(t, dy_g), t.forward.w_shape)
        y = _forward(backend, t.forward, x_g, w_g)           # (Cg, splits * Kg, *O')
        y = y.reshape((y.shape[0], splits, -1) + y.shape[2:]).sum(axis=1)
        rows.append(weights_window(t, y))
    yield f"grad_weight per group, splits={splits}", np.concatenate(rows)


def _check(problem, splits, backend, seed=0):
    rng = np.random.default_rng(seed)
    x = random_array(rng, problem.x_shape, np.float64)
    w = random_array(rng, problem.w_shape, np.float64)
    dy = random_array(rng, problem.y_shape, np.float64)
    scale = np.vdot(_oracle(problem, np.abs(x), np.abs(w), abs(problem.cval)), np.abs(dy))
    scale = max(scale, np.finfo(np.float64).tiny)     # all-padding outputs: both sides 0
    lin, aff = np.vdot(_oracle(problem, x, w, 0), dy), np.vdot(_oracle(problem, x, w), dy)
    for what, dx in _grad_inputs(problem, backend, dy, w):
        assert dx.shape == problem.x_shape, what
        assert abs(lin - np.vdot(x, dx)) / scale <= TOL, (what, problem)
    for what, dw in _grad_weights(problem, backend, x, dy, splits):
        assert dw.shape == problem.w_shape, what
        assert abs(aff - np.vdot(w, dw)) / scale <= TOL, (what, problem)


def _unread_tail(mode, pads, splits=1):
    """A weight gradient whose stride leaves the input's tail unread (its per-group form
    cuts the input, unless the left padding of ``mode`` mirrors or wraps past the cut)."""
    return ConvProblem.create(x_shape=(2, 2, 9, 5), w_shape=(2, 1, 2, 1), stride=(5, 4),
                              padding=pads, padding_mode=mode, groups=2, flip=True), splits


@settings(max_examples=60)
@given(case=geometries())
@example(case=_unread_tail("reflect", ((3, 0), (3, 0))))
@example(case=_unread_tail("symmetric", ((4, 0), (3, 1)), splits=2))
@example(case=_unread_tail("wrap", ((1, 0), (2, 0))))
@example(case=_unread_tail("constant", ((2, 0), (0, 0)), splits=2))
def test_forward_problems_are_adjoint_numpy(case):
    _check(*case, backend_for(np, "numpy"))


def _validated(fwd):
    """``fwd`` rebuilt by :meth:`ConvProblem.create` from its own geometry (the oracle of
    the forward problems the rule builds without re-validating)."""
    return ConvProblem.create(
        x_shape=fwd.x_shape, w_shape=fwd.w_shape, stride=fwd.stride, dilation=fwd.dilation,
        padding=fwd.padding, groups=fwd.groups, padding_mode=fwd.padding_mode, cval=fwd.cval,
        dtype=fwd.dtype, flip=fwd.flip, precision=fwd.precision)


@settings(max_examples=60)
@given(case=geometries(), dtype=st.sampled_from(["float32", "float64", "complex64"]))
@example(case=_unread_tail("wrap", ((1, 0), (2, 0))), dtype="float64")
def test_forward_problems_are_valid_forward_problems(case, dtype):
    problem, splits = case
    problem = problem.with_(dtype=np.dtype(dtype))
    forms = [(GRAD_WEIGHT, dict(whole=True)), (GRAD_WEIGHT, dict(splits=splits)),
             (GRAD_INPUT, dict(whole=True))]
    if problem.padding_mode == "constant":
        forms.append((GRAD_INPUT, {}))
    for op, form in forms:
        fwd = transpose(problem.with_(op=op), **form).forward
        expected = _validated(fwd)
        assert fwd == expected and hash(fwd) == hash(expected), (op, form, problem)
        assert (fwd.out_shape, fwd.flops, fwd.needs_int64) == (
            expected.out_shape, expected.flops, expected.needs_int64), (op, form, problem)


@EMULATED
@settings(max_examples=6, suppress_health_check=[HealthCheck.too_slow])
@given(case=geometries(max_rank=3, max_elems=60))
def test_forward_problems_are_adjoint_emulated(case):
    _check(*case, backend_for(np, "emulated"))


@pytest.mark.parametrize("x_shape,w_shape,groups,count", [
    ((2, 4, 5), (6, 2, 3), 2, 2), ((1, 3, 4, 3), (2, 3, 2, 2), 1, 1)])
def test_column_forward_is_the_batched_product(x_shape, w_shape, groups, count):
    """``column_forward``'s output is ``W_g^T dy_g`` per group (the column buffer's GEMM)."""
    gp = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, groups=groups, op=GRAD_INPUT)
    fwd = column_forward(gp, count)
    rng = np.random.default_rng(1)
    wt = rng.standard_normal((groups, gp.gemm_k, gp.gemm_n))          # (G, C/G*taps, K/G)
    dym = rng.standard_normal((groups, gp.gemm_n, fwd.in_shape[0]))   # (G, K/G, cols)
    cols = _forward(backend_for(np, "numpy"), fwd, dym.reshape(fwd.x_shape),
                    wt.reshape(fwd.w_shape))
    # float64 sums of at most 12 products: a few ulps of the sum of their magnitudes
    bound = 1e-14 * (np.abs(wt) @ np.abs(dym))
    assert np.all(np.abs(cols.reshape(bound.shape) - wt @ dym) <= bound)


@st.composite
def transpose_calls(draw, max_rank=3):
    """``conv_transpose`` arguments: ``x`` shape, ``w`` shape and geometry, with an
    ``output_padding`` below ``max(stride, dilation)`` per axis."""
    rank = draw(st.integers(1, max_rank))
    g = draw(st.integers(1, 2))
    c_in, c_out = g * draw(st.integers(1, 2)), g * draw(st.integers(1, 2))
    s, ks, stride, dil, pads, out_pad = [], [], [], [], [], []
    for _ in range(rank):
        s.append(draw(st.integers(1, {1: 6, 2: 4}.get(rank, 3))))
        ks.append(draw(st.integers(1, 3)))
        stride.append(draw(st.integers(1, 3)))
        dil.append(draw(st.integers(1, 2)))
        out_pad.append(draw(st.integers(0, max(stride[-1], dil[-1]) - 1)))
        full = (s[-1] - 1) * stride[-1] + dil[-1] * (ks[-1] - 1) + out_pad[-1] + 1
        pb = draw(st.integers(0, min(2, full - 1)))
        pads.append((pb, draw(st.integers(0, min(2, full - 1 - pb)))))
    return (draw(st.integers(1, 2)), c_in) + tuple(s), (c_in, c_out // g) + tuple(ks), dict(
        stride=tuple(stride), dilation=tuple(dil), padding=tuple(pads),
        output_padding=tuple(out_pad), groups=g)


def _check_transpose(x_shape, w_shape, geo, backend_name, seed=0):
    """``<conv_transpose(x, w), y> == <x, conv(y, w)>`` (real data: no conjugation)."""
    rng = np.random.default_rng(seed)
    x = random_array(rng, x_shape, np.float64)
    w = random_array(rng, w_shape, np.float64)
    with cupyconv.use_backend(backend_name):
        out = cupyconv.conv_transpose(x, w, **geo)
    y = random_array(rng, out.shape, np.float64)
    kw = dict(stride=geo["stride"], dilation=geo["dilation"], padding=geo["padding"],
              groups=geo["groups"])
    # output_padding >= stride gives conv(y) outputs past x's extent: no x reads them
    cut = (slice(None), slice(None)) + tuple(slice(0, n) for n in x_shape[2:])
    back = ref_conv(y, w, **kw)[cut]
    scale = max(np.vdot(np.abs(x), ref_conv(np.abs(y), np.abs(w), **kw)[cut]),
                np.finfo(np.float64).tiny)
    assert back.shape == x.shape
    assert abs(np.vdot(out, y) - np.vdot(x, back)) / scale <= TOL, (x_shape, w_shape, geo)


@settings(max_examples=40)
@given(call=transpose_calls())
def test_conv_transpose_is_the_adjoint_of_conv_numpy(call):
    _check_transpose(*call, "numpy")


@EMULATED
@settings(max_examples=5, suppress_health_check=[HealthCheck.too_slow])
@given(call=transpose_calls(max_rank=2))
def test_conv_transpose_is_the_adjoint_of_conv_emulated(call):
    _check_transpose(*call, "emulated")
