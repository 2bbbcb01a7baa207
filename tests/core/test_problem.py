"""The ConvProblem planning layer: output shapes, GEMM mapping per operation
(roles, ``gemm_mnk``), FLOPs, column bytes, 64-bit index detection (planning
only: nothing is allocated), validation, repr and immutability.

Workspace is a backend's answer (``backend.workspace_bytes``), tested in
tests/backends/.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from cupyconv import ConvProblem
from cupyconv._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT, OPS
from cupyconv.core.problem import INT32_MAX, ROLES, Operands
from helpers import ref_conv
from problem_lists import INT32_PROBLEMS, INT64_PROBLEMS

#: (x_shape, w_shape, stride, padding pairs, dilation): tile non-multiples
#: (7, 13, 17), stride > kernel, dilation, asymmetric padding, 3-D.
GEOMETRIES = [
    ((2, 3, 7), (4, 3, 3), (1,), ((0, 0),), (1,)),
    ((1, 13, 17, 13), (7, 13, 3, 5), (2, 3), ((1, 0), (2, 1)), (1, 2)),
    ((3, 4, 9, 8, 7), (6, 2, 2, 3, 2), (1, 2, 3), ((0, 1), (1, 1), (3, 0)), (2, 1, 1)),
    ((1, 1, 5), (1, 1, 1), (7,), ((0, 0),), (1,)),
    ((1, 2, 4), (3, 2, 3), (1,), ((5, 6),), (3,)),
]


def _expected_out(s, k, st, pads, d):
    return tuple((si + pb + pa - di * (ki - 1) - 1) // sti + 1
                 for si, ki, sti, (pb, pa), di in zip(s, k, st, pads, d))


@pytest.mark.parametrize("x_shape,w_shape,stride,pads,dil", GEOMETRIES)
def test_shapes_and_gemm_mapping(x_shape, w_shape, stride, pads, dil):
    groups = x_shape[1] // w_shape[1]
    p = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, stride=stride, padding=pads,
                           dilation=dil, groups=groups)
    o = _expected_out(x_shape[2:], w_shape[2:], stride, pads, dil)
    assert p.out_shape == o
    assert p.y_shape == (x_shape[0], w_shape[0]) + o
    assert p.x_shape == x_shape and p.w_shape == w_shape
    # CUTLASS implicit_gemm_problem_size(kFprop), per group
    assert p.gemm_m == x_shape[0] * math.prod(o)
    assert p.gemm_n == w_shape[0] // groups
    assert p.gemm_k == w_shape[1] * math.prod(w_shape[2:])
    assert p.flops == 2 * groups * p.gemm_m * p.gemm_n * p.gemm_k
    # the output shape is what the reference actually produces
    y = ref_conv(np.zeros(x_shape), np.zeros(w_shape), stride=stride, padding=pads,
                 dilation=dil, groups=groups)
    assert y.shape == p.y_shape


def test_channels_last_shapes():
    p = ConvProblem.create(x_shape=(2, 9, 8, 6), w_shape=(4, 3, 3, 3), padding=1,
                           layout="channels_last", groups=2)
    assert (p.in_channels, p.out_channels, p.groups) == (6, 4, 2)
    assert p.in_shape == (9, 8) and p.out_shape == (9, 8)
    assert p.x_shape == (2, 9, 8, 6) and p.y_shape == (2, 9, 8, 4)


def test_flops_complex_and_bytes():
    p = ConvProblem.create(x_shape=(2, 3, 10), w_shape=(5, 3, 4), dtype=np.complex64)
    assert p.flops == 8 * 2 * 7 * 5 * 12
    assert p.bytes_moved == 8 * (2 * 3 * 10 + 5 * 3 * 4 + 2 * 5 * 7)


def test_column_bytes():
    """vol2col buffer of all groups: G * K_gemm * prod(O) per image."""
    p = ConvProblem.create(x_shape=(4, 6, 10, 10), w_shape=(8, 3, 3, 3), groups=2, padding=1,
                           dtype=np.float32)
    assert p.column_bytes(1) == 4 * 2 * (3 * 9) * 100
    assert p.column_bytes(3) == 3 * p.column_bytes(1)
    assert p.column_bytes() == 4 * p.column_bytes(1)            # default: the whole batch


# ------------------------------------------------------------ operations

def _op_problems(**kw):
    base = dict(x_shape=(2, 6, 9, 8), w_shape=(4, 3, 3, 2), groups=2, stride=(2, 1),
                padding=((1, 0), (0, 1)), dilation=(1, 2))
    base.update(kw)
    return {op: ConvProblem.create(op=op, **base) for op in OPS}


def test_roles_follow_cutlass():
    """Fprop: A=activation, B=filter, C=output; Dgrad: A=dy, C=dx; Wgrad: B=x, C=dw."""
    assert (ROLES[FORWARD].a, ROLES[FORWARD].b, ROLES[FORWARD].c) == (
        "activation", "filter", "output")
    assert (ROLES[GRAD_INPUT].a, ROLES[GRAD_INPUT].b, ROLES[GRAD_INPUT].c) == (
        "output", "filter", "activation")
    assert (ROLES[GRAD_WEIGHT].a, ROLES[GRAD_WEIGHT].b, ROLES[GRAD_WEIGHT].c) == (
        "output", "activation", "filter")
    for roles in ROLES.values():          # each op reads two arrays and computes the third
        assert {roles.a, roles.b, roles.c} == {"activation", "filter", "output"}


def test_gemm_mnk_per_op():
    """``gemm_mnk`` is the op's implicit GEMM (per group); ``gemm_m/n/k`` stay the
    forward geometry (the kernels') whatever the op."""
    probs = _op_problems()
    fwd = probs[FORWARD]
    n, c, k, g = 2, 6, 4, 2
    o, s, taps = math.prod(fwd.out_shape), 9 * 8, 3 * 2
    assert fwd.gemm_mnk == (n * o, k // g, (c // g) * taps)
    assert probs[GRAD_INPUT].gemm_mnk == (n * s, c // g, (k // g) * taps)
    assert probs[GRAD_WEIGHT].gemm_mnk == (k // g, (c // g) * taps, n * o)
    for op, p in probs.items():
        assert (p.gemm_m, p.gemm_n, p.gemm_k) == (fwd.gemm_m, fwd.gemm_n, fwd.gemm_k), op
        m, nn, kk = p.gemm_mnk
        assert p.flops == 2 * g * m * nn * kk, op
        assert p.out_shape == fwd.out_shape and p.x_shape == fwd.x_shape, op


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_a_changed_copy_derives_its_quantities_again(layout):
    """The derived quantities are made with the problem: a copy with other fields
    (``with_``, ``dataclasses.replace``) has those of a problem created so."""
    shapes = (dict(x_shape=(2, 6, 9, 8), w_shape=(4, 3, 3, 2)) if layout == "channels_first"
              else dict(x_shape=(2, 9, 8, 6), w_shape=(4, 3, 2, 3)))
    made = {op: ConvProblem.create(op=op, groups=2, layout=layout, **shapes) for op in OPS}
    derived = ("taps", "gemm_m", "gemm_n", "gemm_k", "gemm_mnk", "output_size", "flops",
               "bytes_moved", "is_empty", "needs_int64", "logical_result_shape",
               "result_shape", "x_shape", "w_shape", "y_shape", "is_complex")
    for op in OPS:
        for copy in (made[FORWARD].with_(op=op), dataclasses.replace(made[FORWARD], op=op)):
            assert copy == made[op] and hash(copy) == hash(made[op])
            for name in derived:
                assert getattr(copy, name) == getattr(made[op], name), (op, name)
    wide = made[FORWARD].with_(dtype=np.dtype(np.complex128))
    assert wide.is_complex and wide.bytes_moved == 2 * made[FORWARD].bytes_moved
    assert wide.flops == 4 * made[FORWARD].flops


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_result_shape_per_op(layout):
    """The array each op computes: y, x or w (layout order and channels-first)."""
    if layout == "channels_first":
        probs = _op_problems()
    else:
        probs = _op_problems(x_shape=(2, 9, 8, 6), w_shape=(4, 3, 2, 3), layout=layout)
    fwd = probs[FORWARD]
    assert probs[FORWARD].result_shape == fwd.y_shape
    assert probs[GRAD_INPUT].result_shape == fwd.x_shape
    assert probs[GRAD_WEIGHT].result_shape == fwd.w_shape
    assert probs[FORWARD].logical_result_shape == (2, 4) + fwd.out_shape
    assert probs[GRAD_INPUT].logical_result_shape == (2, 6, 9, 8)
    assert probs[GRAD_WEIGHT].logical_result_shape == (4, 3, 3, 2)


def test_operands_by_role():
    x, w = np.zeros(3), np.ones(2)
    ops = Operands(activation=x, filter=w)
    assert ops.get("activation") is x and ops.get("filter") is w and ops.get("output") is None
    dy = np.zeros(4)
    moved = ops.replace(output=dy)
    assert moved.output is dy and moved.activation is x and ops.output is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ops.activation = w


def test_unknown_op_is_rejected():
    with pytest.raises(ValueError, match=r"op must be one of .*got 'backward'"):
        ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2), op="backward")


# ------------------------------------------------------------ validation

@pytest.mark.parametrize("kw, match", [
    (dict(x_shape=(1, 1, 5.0), w_shape=(1, 1, 2)), r"x_shape\[2\] must be an int, got 5.0"),
    (dict(x_shape=(1, 1, 5), w_shape=(1, "1", 2)), r"w_shape\[1\] must be an int, got '1'"),
    (dict(x_shape=(1, True, 5), w_shape=(1, 1, 2)), r"x_shape\[1\] must be an int, got True"),
    (dict(x_shape=5, w_shape=(1, 1, 2)), r"x_shape must be a sequence of ints"),
    (dict(x_shape="115", w_shape=(1, 1, 2)), r"x_shape must be a sequence of ints"),
])
def test_non_int_shapes_are_a_type_error(kw, match):
    with pytest.raises(TypeError, match=match):
        ConvProblem.create(**kw)


def test_numpy_integer_shapes_are_accepted():
    p = ConvProblem.create(x_shape=np.array([1, 2, 5]), w_shape=(np.int64(3), 2, np.int32(2)))
    q = ConvProblem.create(x_shape=(1, 2, 5), w_shape=(3, 2, 2))
    assert p == q and all(type(v) is int for v in p.x_shape + p.w_shape)


def test_negative_extent_is_a_value_error():
    with pytest.raises(ValueError, match=r"x_shape\[0\] must be >= 0, got x_shape\[0\]=-1"):
        ConvProblem.create(x_shape=(-1, 1, 5), w_shape=(1, 1, 2))


@pytest.mark.parametrize("mode", ["reflect", "symmetric", "wrap", "edge"])
def test_nonzero_cval_needs_constant_padding(mode):
    kw = dict(x_shape=(1, 1, 5), w_shape=(1, 1, 2), padding=1, padding_mode=mode)
    with pytest.raises(ValueError, match=rf"cval=2 is only used with padding_mode='constant'; "
                                         rf"got padding_mode='{mode}'"):
        ConvProblem.create(cval=2, **kw)
    assert ConvProblem.create(cval=0, **kw).padding_mode == mode      # zero: nothing ignored


@pytest.mark.parametrize("x_shape,w_shape", INT64_PROBLEMS)
def test_needs_int64_for_offsets_past_2_31(x_shape, w_shape):
    """Planning only: shapes far beyond memory are never allocated."""
    p = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=np.float32)
    assert p.needs_int64
    assert max(math.prod(x_shape), p.output_size,
               p.groups * p.gemm_k * p.gemm_m) > INT32_MAX


@pytest.mark.parametrize("x_shape,w_shape", INT32_PROBLEMS)
def test_int32_problems_stay_32_bit(x_shape, w_shape):
    assert not ConvProblem.create(x_shape=x_shape, w_shape=w_shape).needs_int64


def test_needs_int64_counts_padding():
    """The padded extent, not the input, can be the one past 2**31."""
    x_shape = (1, 1, 2**15, 2**15)              # 2**30 elements
    kw = dict(x_shape=x_shape, w_shape=(1, 1, 1, 1), stride=2)
    assert not ConvProblem.create(**kw).needs_int64
    padded = ConvProblem.create(padding=((0, 2**15), (0, 0)), **kw)   # 2**31 padded
    assert padded.output_size == 2**29 and padded.gemm_k * padded.gemm_m == 2**29
    assert padded.needs_int64


def test_repr_is_readable():
    p = ConvProblem.create(x_shape=(2, 4, 9, 9), w_shape=(8, 2, 3, 3), groups=2,
                           stride=2, padding=1, padding_mode="reflect", dtype=np.float32)
    assert repr(p) == (
        "ConvProblem(2-D, N=2, C=4, K=8, G=2, S=(9, 9), KS=(3, 3), O=(5, 5), "
        "stride=(2, 2), padding=((1, 1), (1, 1)), mode=reflect, float32, xcorr)")
    plain = ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2), flip=True)
    assert repr(plain) == ("ConvProblem(1-D, N=1, C=1, K=1, G=1, S=(5,), KS=(2,), O=(4,), "
                           "float64, conv)")


def test_repr_names_a_gradient_op():
    p = ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2), op=GRAD_WEIGHT)
    assert repr(p).endswith("float64, xcorr, op=grad_weight)")


def test_frozen_and_hashable():
    p = ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.batch = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.out_shape = (9,)
    q = ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2))
    assert p == q and hash(p) == hash(q)          # usable as a cache key
    assert p.with_(batch=3).batch == 3 and p.batch == 1
    grad = p.with_(op=GRAD_INPUT)
    assert grad != p and grad.with_(op=FORWARD) == p and hash(grad.with_(op=FORWARD)) == hash(p)


@pytest.mark.parametrize("op", OPS)
def test_is_empty(op):
    """Empty forward output or empty reduction: every op's result is zeros (or empty)."""
    assert ConvProblem.create(x_shape=(0, 1, 5), w_shape=(1, 1, 2), op=op).is_empty
    assert ConvProblem.create(x_shape=(1, 0, 5), w_shape=(1, 0, 2), op=op).is_empty
    assert ConvProblem.create(x_shape=(1, 1, 5), w_shape=(0, 1, 2), op=op).is_empty
    assert not ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2), op=op).is_empty
