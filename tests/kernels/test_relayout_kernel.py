"""The re-layout kernel (``cuda_src/conv/relayout.cu``, family ``relayout_channels_last``)
under the CPU emulation: a logical ``(L, C, *S)`` view of any strides into contiguous
``(L, *S, C)`` memory, with the TF32 rounding fused (issue 26 item 1).

One body, checked against NumPy (``np.moveaxis`` copy, ``backends.arrays.to_tf32``) bit
for bit: a copy is exact for every value (NaN payloads and Inf included), and the fused
rounding is ``cvt.rna.tf32.f32`` on every bit pattern.  The emulator poisons shared memory
per block, so a tile element read before it was written, or a missing barrier between the
read and the write phase, changes these results.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from cupyconv._dtypes import BFLOAT16
from cupyconv._emulation import emulation_available
from cupyconv._kernels import program, registry, relayout_launch
from cupyconv._kernels.params import logical_strides
from cupyconv.backends.arrays import to_tf32

from kernel_reference import emu_loader, hypothesis_settings

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
#: the re-layout dtypes: those of the multistage tiles (TF32, float16, bfloat16) and of the
#: float64 DMMA tiles' channels-last twins
DTYPES = [F32, F16, F64] + ([BFLOAT16] if BFLOAT16 is not None else [])
#: the unsigned integer of each element size (bit patterns)
_WORDS = {2: np.uint16, 4: np.uint32, 8: np.uint64}
emulated = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

#: Named edge cases: (name, lead, channels, spatial extents).  Sizes off the 32 x 32 tile
#: grid on both axes, one channel, one spatial position, more tiles than one block walks.
EDGE_CASES = [
    ("1d-odd", 2, 33, (37,)),
    ("2d-one-channel", 3, 1, (5, 7)),
    ("3d-one-position", 2, 40, (1, 1, 1)),
    ("4d-small", 1, 17, (2, 3, 2, 3)),
    ("2d-weights-3x3", 5, 64, (3, 3)),
]


def _bits(a):
    return np.ascontiguousarray(a).view(_WORDS[a.itemsize])


def _relay(a, round_tf32=False, index64=None):
    """The kernel's re-layout of the logical view ``a``, as its program runs it."""
    st_ = logical_strides(a, "channels_first", a.ndim - 2)
    prog = relayout_launch.relayout_program(emu_loader(), a.dtype, a.shape[0], a.shape[1],
                                            a.shape[2:], st_, round_tf32, index64)
    return program.execute(prog, np, {"a": a})["r"]


def _expected(a, round_tf32=False):
    ref = np.ascontiguousarray(np.moveaxis(a, 1, -1))
    return to_tf32(ref) if round_tf32 else ref


def _data(rng, shape, dtype):
    """Random bit patterns: every class of value, NaN payloads, Inf and subnormals."""
    words = rng.integers(0, 2 ** (8 * dtype.itemsize), size=shape, dtype=np.uint64)
    return words.astype(_WORDS[dtype.itemsize]).view(dtype)


@emulated
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,lead,channels,ext", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_relayout_edge_cases_bit_exact(name, lead, channels, ext, dtype):
    """Every rank 1-4 among the cases; a copy keeps every bit (NaN, Inf included)."""
    a = _data(np.random.default_rng(len(ext)), (lead, channels) + ext, dtype)
    np.testing.assert_array_equal(_bits(_relay(a)), _bits(_expected(a)))


@emulated
@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_fused_tf32_rounding_is_to_tf32_bit_for_bit(rank):
    """``round_tf32`` rounds in the same pass exactly as the dispatcher's rounded copy
    (``to_tf32``), on random bit patterns and the named specials."""
    rng = np.random.default_rng(rank)
    ext = (3, 5, 2, 3)[:rank]
    a = _data(rng, (2, 35) + ext, F32)
    specials = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, 3.4028235e38, 1e-45, 1.0009765625],
                        F32)
    a.reshape(-1)[:specials.size] = specials
    a.view(np.uint32).reshape(-1)[specials.size] = 0x7F800001      # NaN, payload in low bits
    np.testing.assert_array_equal(_bits(_relay(a, True)), _bits(_expected(a, True)))


@emulated
def test_views_with_negative_and_zero_strides():
    """A channels-last view read back to channels-first order, reversed axes, a step and
    a broadcast (zero-stride) channel axis: the kernel indexes the strides as they are."""
    rng = np.random.default_rng(3)
    base = _data(rng, (3, 6, 9, 40), F32)                       # (N, H, W, C) memory
    views = {
        "channels-last": np.moveaxis(base, -1, 1),
        "reversed-step": np.moveaxis(base, -1, 1)[::-1, ::2, ::-1, 1::2],
        "broadcast-c": np.broadcast_to(base[:, :1, :, :1].transpose(0, 3, 1, 2), (3, 33, 1, 9)),
    }
    for name, v in views.items():
        np.testing.assert_array_equal(_bits(_relay(v)), _bits(_expected(v)), err_msg=name)


@emulated
@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_64_bit_index_build_matches(dtype):
    """The ``long long`` instance (taken past 2**31 elements) on a small view."""
    a = _data(np.random.default_rng(5), (2, 34, 3, 11), dtype)[:, ::-1]
    np.testing.assert_array_equal(_bits(_relay(a, index64=True)), _bits(_expected(a)))


@emulated
@hypothesis_settings(12)
@given(rank=st.integers(1, 4), lead=st.integers(1, 3), channels=st.integers(1, 70),
       ext=st.lists(st.integers(1, 6), min_size=4, max_size=4), f16=st.booleans(),
       rounding=st.booleans())
def test_relayout_matches_numpy(rank, lead, channels, ext, f16, rounding):
    """Any small geometry, small integers (exact in both dtypes and under TF32)."""
    dtype = F16 if f16 else F32
    rng = np.random.default_rng(channels)
    a = rng.integers(-8, 9, size=(lead, channels) + tuple(ext[:rank])).astype(dtype)
    got = _relay(a, rounding and not f16)
    np.testing.assert_array_equal(got, np.moveaxis(a, 1, -1))


def test_relayout_program_refuses_what_it_has_no_instance_for():
    """int64 has no re-layout instance (no channels-last tile reads it); TF32 rounding is
    for float32 only (not float16, not float64); an empty operand launches nothing."""
    st_ = ((6, 3, (1,)), )[0]
    with pytest.raises(ValueError, match="re-layout kernel takes"):
        relayout_launch.relayout_program(emu_loader(), np.int64, 1, 2, (3,), st_, False)
    for dtype in (F16, F64):
        with pytest.raises(ValueError, match="float32"):
            relayout_launch.relayout_program(emu_loader(), dtype, 1, 2, (3,), st_, True)
    prog = relayout_launch.relayout_program(emu_loader(), F32, 0, 2, (3,), st_, False)
    assert prog.launches == () and prog.allocations[0][1] == (0, 3, 2)


def test_params_struct_matches_the_kernel_layout():
    """The host mirror of ``cc::RelayoutParams<R>`` has 8-byte fields in the kernel's order:
    9 + R words, then R + 2 divmod records of 4 words (the kernel's static_assert)."""
    for r in range(1, registry.MAX_RANK + 1):
        assert relayout_launch.relayout_params_dtype(r).itemsize == 8 * (9 + r + 4 * (r + 2))
