"""Issue 26's emulator pieces (kernels in tests/emulation/kernels/mma_k16.cu): the bf16 and
f64 m16n8k16 atoms, ldmatrix of 32-bit (TF32) data, and a multistage cp.async -> swizzled
shared memory -> ldmatrix -> mma pipeline in dynamic shared memory past 48 KiB.

Each atom is checked against an exact product of the same matrices, loaded and stored through
the atom's own maps, and the maps against the PTX ISA formulas (written here independently);
one planted bug per piece must fail: a swapped fragment register (each atom and the
pipeline), a read without the swizzle, a K-loop without its cp.async wait.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cupyconv._emulation import EmulatedModule, EmulationError
from emulation_support import cached_module
from test_emu_mma import FRAGMENT_MAP_INTS, _bound, _exact, _launch, _matrices, _module, seeds, tf32_rna

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)

SOURCE = Path(__file__).parent / "kernels" / "mma_k16.cu"
PIPELINES = [f"swizzled_pipeline<{t}, 3>" for t in ("float", "cc::half", "cc::bfloat16")]
#: Name expressions of kernels/mma_k16.cu (sm_90 for mma_f64_k16 under NVRTC).
NAMES = ["mma_bf16", "mma_f64_k16", "bf16_round_trip", "ldmatrix32_trans",
         *[f"swizzle_map<{b}, {m}, {s}>" for b, m, s in ((3, 3, 3), (3, 2, 3), (3, 1, 3),
                                                          (2, 2, 2))],
         *PIPELINES]

i32 = np.int32


def module(mode: str = "normal") -> EmulatedModule:
    """The emulated module of kernels/mma_k16.cu (built once per schedule)."""
    return cached_module(SOURCE, NAMES, mode)


@pytest.fixture(scope="module", params=["normal", "reverse"])
def k16_module(request):
    return module(request.param)


def _ptx_maps_k16(lane: int) -> list:
    """(row, col) of bf16 A0..7 B0..3 C0..3 and f64 m16n8k16 A0..7 B0..3 C0..3 (PTX ISA:
    "Matrix fragments for mma.m16n8k16 with floating point type" and "... with .f64")."""
    g, t = lane >> 2, lane % 4
    c = [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)]
    bf16 = ([(g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)) for i in range(8)]
            + [(2 * t + (i & 1) + 8 * (i >> 1), g) for i in range(4)] + c)
    f64 = ([(g + 8 * (i & 1), t + 4 * (i >> 1)) for i in range(8)]
           + [(t + 4 * i, g) for i in range(4)] + c)
    return bf16 + f64


def test_k16_fragment_maps_follow_the_ptx_isa():
    """The maps (fragment_maps of kernels/mma.cu, ints 72 .. 135 per lane)."""
    out = np.zeros((32, FRAGMENT_MAP_INTS), np.int32)
    _module("normal").get_function("fragment_maps")((1,), (32,), (out,))
    maps = out[:, 72:]
    for lane in range(32):
        assert [tuple(maps[lane, 2 * j:2 * j + 2]) for j in range(32)] == _ptx_maps_k16(lane)
    for name, start, count, shape in (("bf16 A", 0, 8, (16, 16)), ("bf16 B", 8, 4, (16, 8)),
                                      ("f64 A", 16, 8, (16, 16)), ("f64 B", 24, 4, (16, 8)),
                                      ("f64 C", 28, 4, (16, 8))):
        cover = np.zeros(shape, int)
        for lane in range(32):
            for j in range(start, start + count):
                cover[maps[lane, 2 * j], maps[lane, 2 * j + 1]] += 1
        assert (cover == 1).all(), name


# --- bf16 ------------------------------------------------------------------------------------

BF16_EDGES = np.array([1.0, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20,
                       -(1 + 2.0 ** -8), 3.3895314e38, 3.4e38, -3.4e38, 2.0 ** -133, 2.0 ** -126,
                       1e-40, 0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 1 / 3], np.float32)


def test_bf16_conversions_are_ml_dtypes(k16_module):
    """cc::float_to_bfloat16 rounds as ml_dtypes (to nearest even, overflow to Inf, ties,
    subnormals, NaN stays NaN), and bfloat16_to_float is exact."""
    rng = np.random.default_rng(4)
    rand = rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([BF16_EDGES, rand])
    y = np.zeros(x.size, np.uint16)
    z = np.zeros_like(x)
    k16_module.get_function("bf16_round_trip")((2,), (128,), (x, y, z, i32(x.size)))
    with np.errstate(invalid="ignore"):
        ref = x.astype(BF16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(y[~nan], ref.view(np.uint16)[~nan])
    assert np.isnan(z[nan]).all() and (np.signbit(z[nan]) == np.signbit(x[nan])).all()
    np.testing.assert_array_equal(z[~nan], ref.astype(np.float32)[~nan])
    # the ties: round-to-nearest-even, not away (1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6)
    assert z[1] == 1.0 and z[2] == 1 + 2.0 ** -6 and z[3] == 1 + 2.0 ** -7
    assert z[6] == np.inf and z[7] == -np.inf


def _run(mod, kernel, A, B, C, bug=0):
    """D of one of the atom kernels (the dtype of C), planted bug `bug`."""
    D = np.zeros_like(C)
    _launch(mod, kernel, A.shape[0], A, B, C, D, i32(bug))
    return D


def _run_bf16(mod, A, B, C, bug=0):
    return _run(mod, "mma_bf16", A, B, C, bug)


@given(seed=seeds, scale=st.integers(min_value=-40, max_value=40))
def test_mma_bf16_matches_numpy(seed, scale):
    """bf16 products are exact in float64 (8-bit significands), so the reference is exact up
    to the float32 accumulation bound; bf16's exponent range reaches 2^+-40 scales."""
    mod = module()
    rng = np.random.default_rng(seed)
    A, B, C = _matrices(rng, 4, 16, 8, 16, scale)
    A, B, C = A.astype(BF16), B.astype(BF16), C.astype(np.float32)
    D = _run_bf16(mod, A, B, C)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    exact = A64 @ B64 + C
    tol = _bound(A64, B64, C, 16)
    assert (np.abs(D - exact) <= tol).all()
    D_bug = _run_bf16(mod, A, B, C, bug=1)                 # planted bug: A registers 0, 1 swapped
    assert not (np.abs(D_bug - exact) <= tol).all()


def test_mma_bf16_accumulates_in_float32(k16_module):
    """16 products 2^0 .. 2^10, 2^-1 .. 2^-4 and 1 sum to 2048.9375: 16 significant bits,
    exact in float32, out of reach of a bf16 accumulator (8 bits)."""
    A = np.zeros((4, 16, 16), BF16)
    B = np.zeros((4, 16, 8), BF16)
    C = np.zeros((4, 16, 8), np.float32)
    A[:, 0, :] = 1
    B[:, :, 0] = [2.0 ** k for k in range(11)] + [0.5, 0.25, 0.125, 0.0625, 1.0]  # 2048 - 1 + ...
    D = _run_bf16(k16_module, A, B, C)
    total = float(B[0, :, 0].astype(np.float64).sum())
    assert (D[:, 0, 0] == total).all() and float(np.float32(total).astype(BF16)) != total


# --- f64 m16n8k16 --------------------------------------------------------------------------

def _run_f64_k16(mod, A, B, C, bug=0):
    return _run(mod, "mma_f64_k16", A, B, C, bug)


@given(seed=seeds, scale=st.integers(min_value=-30, max_value=30))
def test_mma_f64_k16_matches_numpy(seed, scale):
    """A chain of 16 FMAs: within 16 ulp-units of the exact product-sum (bound 17 * 2^-53)."""
    mod = module()
    rng = np.random.default_rng(seed)
    A, B, C = _matrices(rng, 4, 16, 8, 16, scale)
    D = _run_f64_k16(mod, A, B, C)
    exact = _exact(A, B, C)
    tol = 17 * 2.0 ** -53 * (np.abs(C) + np.abs(A) @ np.abs(B))
    assert (np.abs(D - exact) <= tol).all()
    D_bug = _run_f64_k16(mod, A, B, C, bug=1)             # planted bug: A registers 0, 1 swapped
    assert not (np.abs(D_bug - exact) <= tol).all()


def test_mma_f64_k16_is_exact_on_small_integers(k16_module):
    rng = np.random.default_rng(5)
    A, B, C = (rng.integers(-8, 9, s).astype(np.float64) for s in ((8, 16, 16), (8, 16, 8),
                                                                    (8, 16, 8)))
    np.testing.assert_array_equal(_run_f64_k16(k16_module, A, B, C), A @ B + C)


def test_mma_f64_k16_is_a_chain_in_k_order(k16_module):
    """1 + 2^-60 - 1 -> 0 (each step rounds), as the m8n8k4 atom measured on an H200."""
    A = np.zeros((4, 16, 16))
    B = np.zeros((4, 16, 8))
    C = np.zeros((4, 16, 8))
    A[:, 0, :3] = [1, 2.0 ** -60, -1]
    B[:, :, 0] = 1
    assert (_run_f64_k16(k16_module, A, B, C)[:, 0, 0] == 0).all()


def test_incomplete_warp_at_a_k16_atom_is_an_error(k16_module):
    z = np.zeros(4 * 256)
    with pytest.raises(EmulationError, match="has only 16 threads") as info:
        k16_module.get_function("mma_f64_k16")((1,), (16,), (z, z, z, np.zeros_like(z), i32(0)))
    assert "m16n8k16.row.col.f64" in str(info.value)


# --- ldmatrix of 32-bit elements -------------------------------------------------------------

def test_ldmatrix_trans_moves_16_bit_halves_of_32_bit_data(k16_module):
    """.trans on an 8x4 float matrix returns the b16 transpose of its bytes (register of lane
    l: halves (2 (l % 4) + j, l / 4) of the 8x8 b16 view), byte for byte -- not the floats'
    transpose, which is why the TF32 tiles read fragments without .trans."""
    src = (np.arange(32, dtype=np.float32) + 1) * 1.25
    out = np.zeros(32, np.uint32)
    k16_module.get_function("ldmatrix32_trans")((1,), (32,), (src, out))
    halves = src.view(np.uint16).reshape(8, 8).astype(np.uint32)
    lane = np.arange(32)
    want = halves[2 * (lane % 4), lane // 4] | (halves[2 * (lane % 4) + 1, lane // 4] << 16)
    np.testing.assert_array_equal(out, want)
    assert not np.array_equal(out.view(np.float32), src.reshape(8, 4).T.ravel())


# --- the multistage pipeline ------------------------------------------------------------------

STAGE_BYTES = 72 * 1024          # stages 72 KiB apart: stage 2 starts at 144 KiB
PIPE_SHARED = 2 * STAGE_BYTES + 9 * 1024


def _pipeline(mod, name, A, B, mode=0, shared=PIPE_SHARED, limit=PIPE_SHARED):
    kern = mod.get_function(name)
    kern.max_dynamic_shared_size_bytes = limit
    D = np.zeros((64, 8), np.float32)
    kern((1,), (128,), (A, B, D, i32(A.shape[1]), i32(STAGE_BYTES), i32(mode)), shared_mem=shared)
    return D


def _pipeline_operands(name, rng, K):
    dtype = {"float": np.float32, "cc::half": np.float16, "cc::bfloat16": BF16}[name[18:-4]]
    A = rng.integers(-4, 5, (64, K)).astype(dtype)
    B = rng.integers(-4, 5, (8, K)).astype(dtype)           # stored [n][k]
    return A, B, A.astype(np.float64) @ B.astype(np.float64).T


@pytest.mark.parametrize("name", PIPELINES)
def test_swizzled_pipeline_past_48_kib(k16_module, name):
    """K = 5 K-tiles through 3 stages (153 KiB of dynamic shared memory): exact on small
    integers; each planted bug (no swizzle on the read side, no wait, swapped fragment) and
    a launch without the opt-in attribute fail."""
    rng = np.random.default_rng(6)
    elems = 128 // (4 if name.startswith("swizzled_pipeline<float") else 2)
    A, B, want = _pipeline_operands(name, rng, 5 * elems)
    np.testing.assert_array_equal(_pipeline(k16_module, name, A, B), want)
    for mode in (1, 2, 4):
        assert not np.array_equal(_pipeline(k16_module, name, A, B, mode), want), mode
    with pytest.raises(EmulationError, match="max_dynamic_shared_size_bytes=49152"):
        _pipeline(k16_module, name, A, B, limit=48 * 1024)


def test_dynamic_shared_limit_is_227_kib():
    kern = module().get_function(PIPELINES[0])
    kern.max_dynamic_shared_size_bytes = 227 * 1024                 # sm_90's opt-in limit
    with pytest.raises(ValueError, match="232448"):
        kern.max_dynamic_shared_size_bytes = 227 * 1024 + 1
    rng = np.random.default_rng(7)
    A, B, want = _pipeline_operands(PIPELINES[0], rng, 3 * 32)
    np.testing.assert_array_equal(_pipeline(module(), PIPELINES[0], A, B, shared=227 * 1024,
                                            limit=227 * 1024), want)
    with pytest.raises(EmulationError, match="exceeds"):
        _pipeline(module(), PIPELINES[0], A, B, shared=227 * 1024 + 16, limit=227 * 1024)


def test_tf32_pipeline_matches_the_register_path():
    """TF32 operands (tf32-rounded floats) through cp.async + ldmatrix of 32-bit data equal
    the float product within the accumulation bound of K = 5 * 32."""
    rng = np.random.default_rng(8)
    A = tf32_rna(rng.standard_normal(64 * 160).astype(np.float32)).view(np.float32).reshape(64, 160)
    B = tf32_rna(rng.standard_normal(8 * 160).astype(np.float32)).view(np.float32).reshape(8, 160)
    D = _pipeline(module(), PIPELINES[0], A, B)
    exact = A.astype(np.float64) @ B.astype(np.float64).T
    tol = 161 * 2.0 ** -24 * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)).T)
    assert (np.abs(D - exact) <= tol).all()
