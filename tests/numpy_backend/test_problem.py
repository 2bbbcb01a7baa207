"""The ConvProblem planning layer: output shapes, GEMM mapping, FLOPs,
workspace, 64-bit index detection (planning only: nothing is allocated),
repr and immutability.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from cupyconv import ConvProblem
from cupyconv._problem import INT32_MAX
from helpers import INT32_PROBLEMS, INT64_PROBLEMS, ref_conv

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


def test_workspace_bytes():
    p = ConvProblem.create(x_shape=(4, 6, 10, 10), w_shape=(8, 3, 3, 3), groups=2, padding=1,
                           dtype=np.float32)
    assert p.workspace_bytes("direct") == 0
    assert p.workspace_bytes("implicit_gemm") == 0
    # gemm: one image's columns by default, all groups: G * K_gemm * prod(O)
    assert p.workspace_bytes("gemm") == 4 * 2 * (3 * 9) * 100
    assert p.workspace_bytes("gemm", batch_chunk=4) == 4 * p.workspace_bytes("gemm")
    assert p.column_bytes() == p.workspace_bytes("gemm", batch_chunk=4)
    assert p.workspace_bytes("fft") > 0
    with pytest.raises(ValueError, match="unknown algorithm 'winograd'"):
        p.workspace_bytes("winograd")


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


def test_frozen_and_hashable():
    p = ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.batch = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.out_shape = (9,)
    q = ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2))
    assert p == q and hash(p) == hash(q)          # usable as a cache key
    assert p.with_(batch=3).batch == 3 and p.batch == 1


def test_is_empty():
    assert ConvProblem.create(x_shape=(0, 1, 5), w_shape=(1, 1, 2)).is_empty
    assert ConvProblem.create(x_shape=(1, 0, 5), w_shape=(1, 0, 2)).is_empty
    assert not ConvProblem.create(x_shape=(1, 1, 5), w_shape=(1, 1, 2)).is_empty
