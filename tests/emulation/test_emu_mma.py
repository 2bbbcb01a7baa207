"""Warp-level MMA atoms and ldmatrix (cuda_src/common/mma_atoms.cuh) under the emulator
(cuda_src/emu/emu_mma.cuh), kernels in tests/emulation/kernels/mma.cu.

Each atom is checked against a NumPy product of the same matrices, loaded and stored
through the atom's own (lane, i) -> (row, col) maps; a planted bug (two fragment registers
swapped) must make that comparison fail.  The maps themselves are checked against the PTX
ISA formulas, cvt.rna.tf32.f32 against a NumPy reimplementation, and the accumulation model
against values and output hashes measured on an NVIDIA H200 (sm_90).  A warp that is not
complete at a warp matrix instruction is an EmulationError.
"""
from __future__ import annotations

import hashlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cupyconv._emulation import EmulatedModule, EmulationError
from emulation_support import cached_module

KERNELS = Path(__file__).parent / "kernels"
SOURCE = KERNELS / "mma.cu"
LDMATRIX = [f"ldmatrix_dump<{n}, {t}>" for n in (1, 2, 4) for t in ("false", "true")]
#: Name expressions of kernels/mma.cu (also compiled by tests/toolchain/test_mma_nvrtc.py).
NAMES = ["mma_f64", "mma_tf32", "mma_f16", "mma_f16_ldmatrix", *LDMATRIX, "to_tf32_bits",
         "fragment_maps", "mma_lane_exits", "mma_divergent", "mma_meets_syncwarp",
         "ldmatrix_from_global", "ldmatrix_misaligned"]

i32 = np.int32
def _module(mode: str = "normal") -> EmulatedModule:
    return cached_module(SOURCE, NAMES, mode)


@pytest.fixture(scope="module", params=["normal", "reverse"])
def mma_module(request):
    return _module(request.param)


@pytest.fixture(scope="module")
def mma_normal():
    return _module("normal")


def _marked_line(marker: str) -> str:
    for number, line in enumerate(SOURCE.read_text().splitlines(), start=1):
        if marker in line:
            return f"mma.cu:{number}"
    raise LookupError(marker)


# --- references ------------------------------------------------------------------------------

def _ptx_maps(lane: int) -> list:
    """(row, col) pairs of every fragment map, written from the PTX ISA (see fragment_maps)."""
    g, t = lane >> 2, lane % 4
    f64 = [(g, t), (t, g), (g, 2 * t), (g, 2 * t + 1)]
    tf32 = ([(g + 8 * (i & 1), t + 4 * (i >> 1)) for i in range(4)]
            + [(t + 4 * i, g) for i in range(2)]
            + [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)])
    f16 = ([(g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)) for i in range(8)]
           + [(2 * t + (i & 1) + 8 * (i >> 1), g) for i in range(4)]
           + [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)])
    ldsm = [(lane // 4, 2 * (lane % 4) + j) for j in range(2)] + \
           [(2 * (lane % 4) + j, lane // 4) for j in range(2)]
    return f64 + tf32 + f16 + ldsm


def tf32_rna(x) -> np.ndarray:
    """cvt.rna.tf32.f32 as uint32 bits, from the rounding rule (not the bit trick): a finite
    x goes to the nearest multiple of its tf32 spacing 2^(max(e, -126) - 10), ties away from
    zero, and to +-Inf from 2^128 up; Inf stays; a NaN keeps its top 10 mantissa bits (the
    GPU clears the low 13, so a NaN with payload only there becomes Inf -- measured on H200)."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    out = np.empty_like(bits)
    with np.errstate(invalid="ignore"):      # signalling NaNs quieten in the cast
        wide = x.astype(np.float64)
    for n, (v, u) in enumerate(zip(wide, bits)):
        if not np.isfinite(v):
            out[n] = u & 0xFFFFE000
            continue
        mag = Fraction(abs(float(v)))
        if mag == 0:
            out[n] = u
            continue
        e = max(int(np.floor(np.log2(float(mag)))), -126)
        while Fraction(2) ** e > mag:          # guard against log2 rounding
            e -= 1
        while Fraction(2) ** (e + 1) <= mag:
            e += 1
        e = max(e, -126)
        spacing = Fraction(2) ** (e - 10)
        q = mag / spacing
        r = int(q) + (1 if q - int(q) >= Fraction(1, 2) else 0)   # ties away from zero
        y = r * spacing
        if y >= Fraction(2) ** 128:
            y_bits = 0x7F800000
        else:
            y_bits = int(np.float32(float(y)).view(np.uint32))
        out[n] = y_bits | (u & 0x80000000)
    return out


def _bound(A, B, C, K):
    """Float32 accumulation error bound (K + 1) 2^-24 (|C| + |A| |B|), componentwise."""
    return (K + 1) * 2.0 ** -24 * (np.abs(C) + np.abs(A) @ np.abs(B))


def _exact(A, B, C):
    """A @ B + C elementwise in exact rational arithmetic, rounded once to float64."""
    W, M, K = A.shape
    N = B.shape[2]
    out = np.empty((W, M, N))
    for w in range(W):
        for m in range(M):
            for n in range(N):
                s = Fraction(float(C[w, m, n]))
                for k in range(K):
                    s += Fraction(float(A[w, m, k])) * Fraction(float(B[w, k, n]))
                out[w, m, n] = float(s)
    return out


def _matrices(rng, W, M, N, K, scale):
    A = rng.standard_normal((W, M, K)) * 2.0 ** scale
    B = rng.standard_normal((W, K, N))
    C = rng.standard_normal((W, M, N)) * 2.0 ** scale
    return A, B, C


def _launch(module, name, W, *args):
    """Run `name` with W warps: blocks of 4 warps (the batch entry is the global warp)."""
    block = 32 * min(W, 4)
    assert W % (block // 32) == 0
    module.get_function(name)((W // (block // 32),), (block,), args)


seeds = st.integers(min_value=0, max_value=2 ** 32 - 1)
scales = st.integers(min_value=-30, max_value=30)


# --- fragment maps, cvt.rna.tf32.f32, ldmatrix ------------------------------------------------

def test_fragment_maps_follow_the_ptx_isa(mma_normal):
    maps = np.zeros((32, 72), np.int32)
    mma_normal.get_function("fragment_maps")((1,), (32,), (maps,))
    for lane in range(32):
        pairs = [tuple(maps[lane, 2 * j:2 * j + 2]) for j in range(34)]
        assert pairs == _ptx_maps(lane), f"lane {lane}"
        assert list(maps[lane, 68:]) == [0, (lane // 8) % 2, lane // 8, lane % 8]
    # each operand's map covers its matrix exactly once
    spans = {"f64 A": (0, 1, (8, 4)), "f64 B": (1, 1, (4, 8)), "f64 C": (2, 2, (8, 8)),
             "tf32 A": (4, 4, (16, 8)), "tf32 B": (8, 2, (8, 8)), "tf32 C": (10, 4, (16, 8)),
             "f16 A": (14, 8, (16, 16)), "f16 B": (22, 4, (16, 8)), "f16 C": (26, 4, (16, 8)),
             "ldmatrix": (30, 2, (8, 8)), "ldmatrix.trans": (32, 2, (8, 8))}
    for name, (start, count, shape) in spans.items():
        cover = np.zeros(shape, int)
        for lane in range(32):
            for j in range(start, start + count):
                cover[maps[lane, 2 * j], maps[lane, 2 * j + 1]] += 1
        assert (cover == 1).all(), name


TF32_EDGES = {  # input bits -> cvt.rna.tf32.f32 bits (the tie and NaN rows measured on an H200)
    0x3F800000: 0x3F800000,   # 1.0
    0x3F801000: 0x3F802000,   # 1 + 2^-11: a tie, away from zero (ties-to-even would give 1.0)
    0xBF801000: 0xBF802000,   # the negative tie, away from zero
    0x3F803000: 0x3F804000,   # tie above an odd tf32
    0x3F800FFF: 0x3F800000,   # just below the tie
    0x3F801001: 0x3F802000,   # just above the tie
    0x7F7FFFFF: 0x7F800000,   # max finite float rounds to +Inf
    0xFF7FFFFF: 0xFF800000,
    0x7F7FEFFF: 0x7F7FE000,   # stays below the top tie
    0x7F7FF000: 0x7F800000,   # the top tie rounds to +Inf
    0x00000001: 0x00000000,   # smallest denormal
    0x00001000: 0x00002000,   # denormal tie, away
    0x00000FFF: 0x00000000,
    0x007FF000: 0x00800000,   # largest-denormal tie carries into the smallest normal
    0x80001000: 0x80002000,   # negative denormal tie
    0x80000000: 0x80000000,   # -0
    0x7F800000: 0x7F800000,   # +Inf
    0xFF800000: 0xFF800000,   # -Inf
    0x7FC00000: 0x7FC00000,   # quiet NaN
    0x7FFFFFFF: 0x7FFFE000,   # NaN: low 13 bits cleared
    0x7F800001: 0x7F800000,   # NaN with payload only in the low 13 bits: becomes +Inf
    0xFF801FFF: 0xFF800000,
}


def test_to_tf32_is_cvt_rna_bit_for_bit(mma_normal):
    edges = np.array(list(TF32_EDGES), np.uint32)
    expected = np.array(list(TF32_EDGES.values()), np.uint32)
    rng = np.random.default_rng(3)
    rand = rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([edges, rand])
    y = np.zeros_like(x)
    mma_normal.get_function("to_tf32_bits")((4,), (256,), (x.view(np.float32), y, i32(x.size)))
    np.testing.assert_array_equal(tf32_rna(edges.view(np.float32)), expected)   # the reference
    np.testing.assert_array_equal(y[:edges.size], expected)
    np.testing.assert_array_equal(y, tf32_rna(x.view(np.float32)))
    assert ((y[np.isfinite(x.view(np.float32))] & 0x1FFF) == 0).all()
    # round-to-nearest-even would differ on the ties: the test tells the modes apart
    assert int(tf32_rna(np.array([0x3F801000], np.uint32).view(np.float32))[0]) != 0x3F800000


@pytest.mark.parametrize("name", LDMATRIX)
def test_ldmatrix_layout(mma_module, name):
    num, trans = int(name[14]), "true" in name
    src = (np.arange(num * 64) * 7 + 0x1100).astype(np.uint16)      # src[m][row][col]
    out = np.zeros(32 * num, np.uint32)
    mma_module.get_function(name)((1,), (32,), (src, out))
    mats = src.reshape(num, 8, 8).astype(np.uint32)
    for lane in range(32):
        for m in range(num):
            r, c = lane // 4, 2 * (lane % 4)
            lo, hi = (mats[m, c, r], mats[m, c + 1, r]) if trans else (mats[m, r, c], mats[m, r, c + 1])
            assert out[lane * num + m] == lo | (hi << 16), (lane, m)


# --- the atoms against NumPy -------------------------------------------------------------------

def _run_f64(module, A, B, C, bug=0):
    D = np.zeros_like(C)
    _launch(module, "mma_f64", A.shape[0], A, B, C, D, i32(bug))
    return D


@given(seed=seeds, scale=scales)
def test_mma_f64_matches_numpy(seed, scale):
    module = _module("normal")
    rng = np.random.default_rng(seed)
    A, B, C = _matrices(rng, 4, 8, 8, 4, scale)
    D = _run_f64(module, A, B, C)
    exact = _exact(A, B, C)
    tol = 1e-15 * (np.abs(C) + np.abs(A) @ np.abs(B))
    assert (np.abs(D - exact) <= tol).all()
    np.testing.assert_allclose(D, A @ B + C, rtol=0, atol=float(tol.max()))
    D_bug = _run_f64(module, A, B, C, bug=1)              # planted bug: A and B registers swapped
    assert not (np.abs(D_bug - exact) <= tol).all()


def test_mma_f64_schedules_agree(mma_module):
    rng = np.random.default_rng(8)
    A, B, C = _matrices(rng, 8, 8, 8, 4, 0)
    D = _run_f64(mma_module, A, B, C)
    assert (np.abs(D - _exact(A, B, C)) <= 1e-15 * (np.abs(C) + np.abs(A) @ np.abs(B))).all()


def _run_tf32(module, A, B, C, mode=0):
    D = np.zeros_like(C)
    _launch(module, "mma_tf32", A.shape[0], A, B, C, D, i32(mode))
    return D


@given(seed=seeds, scale=scales)
def test_mma_tf32_matches_numpy(seed, scale):
    module = _module("normal")
    rng = np.random.default_rng(seed)
    A, B, C = (v.astype(np.float32) for v in _matrices(rng, 4, 16, 8, 8, scale))
    D = _run_tf32(module, A, B, C)
    At = tf32_rna(A.ravel()).view(np.float32).reshape(A.shape).astype(np.float64)
    Bt = tf32_rna(B.ravel()).view(np.float32).reshape(B.shape).astype(np.float64)
    exact = At @ Bt + C           # products of tf32 values are exact in float64
    tol = _bound(At, Bt, C, 8)
    assert (np.abs(D - exact) <= tol).all()
    # the operands' rounding matters at this tolerance: unrounded floats would not pass
    assert not (np.abs(A.astype(np.float64) @ B + C - exact) <= tol).all()
    D_bug = _run_tf32(module, A, B, C, mode=1)            # planted bug: A registers 0, 1 swapped
    assert not (np.abs(D_bug - exact) <= tol).all()


def test_mma_tf32_reads_19_bits_of_its_operands(mma_normal):
    """Without cvt.rna the tensor core ignores (truncates) the low 13 bits (as on an H200)."""
    rng = np.random.default_rng(9)
    A, B, C = (v.astype(np.float32) for v in _matrices(rng, 4, 16, 8, 8, 0))
    D = _run_tf32(mma_normal, A, B, C, mode=2)
    trunc = lambda v: (v.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    exact = trunc(A) @ trunc(B) + C
    assert (np.abs(D - exact) <= _bound(trunc(A), trunc(B), C, 8)).all()


def _run_f16(module, A, B, C, bug=0):
    D = np.zeros(C.shape, np.float32)
    _launch(module, "mma_f16", A.shape[0], A, B, C, D, i32(bug))
    return D


@given(seed=seeds, scale=st.integers(min_value=-6, max_value=6))
def test_mma_f16_matches_numpy(seed, scale):
    module = _module("normal")
    rng = np.random.default_rng(seed)
    A, B, C = _matrices(rng, 4, 16, 8, 16, scale)
    A, B, C = A.astype(np.float16), B.astype(np.float16), C.astype(np.float32)
    D = _run_f16(module, A, B, C)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    exact = A64 @ B64 + C         # f16 products are exact; the 17-term sums nearly so
    tol = _bound(A64, B64, C, 16)
    assert (np.abs(D - exact) <= tol).all()
    D_bug = _run_f16(module, A, B, C, bug=1)              # planted bug: A registers 0, 1 swapped
    assert not (np.abs(D_bug - exact) <= tol).all()


def test_mma_f16_accumulates_in_float32(mma_module):
    """K = 16 products summing past 2048 with fractional parts: 15 * 136.5 + 3.875 = 2051.375,
    exact in float32; a half accumulator (spacing 2 above 2048) cannot hold it."""
    A = np.zeros((4, 16, 16), np.float16)
    B = np.zeros((4, 16, 8), np.float16)
    C = np.zeros((4, 16, 8), np.float32)
    A[:, 0, :] = 1
    B[:, :15, 0] = 136.5
    B[:, 15, 0] = 3.875
    D = _run_f16(mma_module, A, B, C)
    assert (D[:, 0, 0] == 2051.375).all()
    acc = np.float16(0)
    for k in range(16):
        acc = np.float16(acc + A[0, 0, k] * B[0, k, 0])
    assert float(acc) != 2051.375 and float(np.float16(2051.375)) != 2051.375


def test_mma_f16_from_ldmatrix(mma_module):
    """A (16x16) by ldmatrix.x4 and B (16x8 row-major) by ldmatrix.x2.trans give the fragments
    the atom's maps give."""
    rng = np.random.default_rng(10)
    A, B, C = _matrices(rng, 3, 16, 8, 16, 0)
    A, B, C = A.astype(np.float16), B.astype(np.float16), C.astype(np.float32)
    D = np.zeros(C.shape, np.float32)
    mma_module.get_function("mma_f16_ldmatrix")((3,), (32,), (A, B, C, D))
    np.testing.assert_array_equal(D, _run_f16(mma_module, A, B, C))


# --- the accumulation model, as measured on an NVIDIA H200 ---------------------------------------

def test_accumulation_matches_h200_observations(mma_normal):
    """Values an H200 (sm_90) returned for hand-made cases (tests/emulation/kernels/mma.cu):
    f16/tf32 products enter one multi-term adder, aligned to the largest exponent and
    truncated to 25 fraction bits, rounded toward zero; f64 is a chain of FMAs in k order."""
    # f16: c = 1 plus eight products 2^-24 -> 1 + 2^-21 (a float32 chain would stay at 1.0)
    A = np.zeros((4, 16, 16), np.float16)
    B = np.zeros((4, 16, 8), np.float16)
    C = np.zeros((4, 16, 8), np.float32)
    A[:, 0, :8] = 2.0 ** -12
    B[:, :8, 0] = 2.0 ** -12
    C[:, 0, 0] = 1
    A[:, 1, 0] = np.inf                                # Inf * 1 -> +Inf
    B[:, 0, 1] = 1
    A[:, 2, 0] = np.inf                                # Inf * 0 -> the canonical NaN 0x7fffffff
    D = _run_f16(mma_normal, A, B, C)
    assert D[0, 0, 0] == np.float32(1 + 2.0 ** -21)
    assert D[0, 1, 1] == np.inf
    assert D[0, 2, 2].view(np.uint32) == 0x7FFFFFFF              # column 2 of B is 0
    # tf32: 1 + 2^-30 - 1 -> 0 (2^-30 lies below the adder's 25 bits); 1 + 4 * 2^-24 -> 1 + 2^-22
    A = np.zeros((4, 16, 8), np.float32)
    B = np.zeros((4, 8, 8), np.float32)
    C = np.zeros((4, 16, 8), np.float32)
    A[:, 0, :3] = [1, 2.0 ** -30, -1]
    B[:, :3, 0] = 1
    A[:, 1, :4] = 2.0 ** -12
    B[:, :4, 1] = 2.0 ** -12
    C[:, 1, 1] = 1
    A[:, 2, :] = 3e38                                  # a sum past the float range -> +Inf
    B[:, :, 2] = 2
    C[:, 2, 2] = 3e38
    D = _run_tf32(mma_normal, A, B, C)
    assert D[0, 0, 0] == 0 and D[0, 1, 1] == np.float32(1 + 2.0 ** -22)
    assert D[0, 2, 2] == np.inf
    # f64: FMA chain in k order from c: 1 + 2^-60 - 1 -> 0, and c = 1 plus two half-ulps -> 1
    A = np.zeros((4, 8, 4))
    B = np.zeros((4, 4, 8))
    C = np.zeros((4, 8, 8))
    A[:, 0] = [1, 2.0 ** -60, -1, 0]
    B[:, :, 0] = 1
    A[:, 1] = [2.0 ** -53, 2.0 ** -53, 0, 0]
    B[:, :, 1] = 1
    C[:, 1, 1] = 1
    D = _run_f64(mma_normal, A, B, C)
    assert D[0, 0, 0] == 0 and D[0, 1, 1] == 1


def _splitmix(n: int, seed: int) -> np.ndarray:
    """n pseudo-random uint64 (splitmix64 of seed + i): fixed forever, unlike NumPy's RNGs."""
    z = (np.arange(n, dtype=np.uint64) + np.uint64(seed)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _floats(shape, seed, dtype, exp_lo, exp_hi):
    """Floats of `dtype` with random sign and mantissa and biased exponent in [exp_lo, exp_hi]."""
    n = int(np.prod(shape))
    z = _splitmix(n, seed)
    nbits, mbits = {np.float16: (16, 10), np.float32: (32, 23), np.float64: (64, 52)}[dtype]
    utype = {16: np.uint16, 32: np.uint32, 64: np.uint64}[nbits]
    sign = (z >> np.uint64(63)) << np.uint64(nbits - 1)
    expo = np.uint64(exp_lo) + (z >> np.uint64(40)) % np.uint64(exp_hi - exp_lo + 1)
    mant = z & np.uint64((1 << mbits) - 1)
    bits = (sign | (expo << np.uint64(mbits)) | mant).astype(utype)
    return bits.view(dtype).reshape(shape)


def h200_inputs() -> dict:
    """The inputs of test_emulator_matches_h200_bit_for_bit (64 warps per atom; half of them
    with operands near 1, half over a wide exponent range, f16 subnormals included)."""
    W = 64
    half = (W // 2,)
    out = {}
    for name, dtype, (ma, na, ka), narrow, wide in (
            ("f64", np.float64, (8, 8, 4), (1013, 1033), (700, 1350)),
            ("tf32", np.float32, (16, 8, 8), (120, 134), (64, 190)),
            ("f16", np.float16, (16, 8, 16), (12, 18), (0, 30))):
        ops = []
        for k, shape in enumerate(((ma, ka), (ka, na))):
            ops.append(np.concatenate([_floats(half + shape, 100 * k + 1, dtype, *narrow),
                                       _floats(half + shape, 100 * k + 2, dtype, *wide)]))
        cdt = np.float64 if dtype == np.float64 else np.float32
        cn, cw = ((1013, 1033), (600, 1400)) if cdt == np.float64 else ((120, 134), (90, 160))
        C = np.concatenate([_floats(half + (ma, na), 301, cdt, *cn),
                            _floats(half + (ma, na), 302, cdt, *cw)])
        out[name] = (ops[0], ops[1], C)
    return out


#: SHA-256 of D (row-major bytes) that an NVIDIA H200 (driver 580.159, CUDA 13.2, CuPy's
#: NVRTC 13.0 for sm_90) computed for h200_inputs() with kernels/mma.cu (mma_f64; mma_tf32
#: mode 0; mma_f16), 4 warps per block.  To remeasure on a GPU: build the inputs here, then
#: cupy.RawModule(code=mma.cu, options=("-std=c++17", "-I<repo>/cuda_src",
#: "-DCUPYCONV_NO_FP16"), name_expressions=[...]) and hash cupy.asnumpy(D).tobytes().
H200_SHA256 = {
    "f64": "57e011e10b7b8d48e6f11e631ebf9d52b65a30d732daabb96e0ca7455114e7ab",
    "tf32": "34f083b240847474daf6eba170f188b89cf0124eee6ca11803d1ddf029516ecc",
    "f16": "bc8b0075e75887258b3029c57895f1b6a033b35a137df7217c56f6726c6daf84",
}


def test_emulator_matches_h200_bit_for_bit(mma_normal):
    inputs = h200_inputs()
    for name, kernel in (("f64", "mma_f64"), ("tf32", "mma_tf32"), ("f16", "mma_f16")):
        A, B, C = inputs[name]
        D = np.zeros(C.shape, C.dtype)
        _launch(mma_normal, kernel, A.shape[0], A, B, C, D, i32(0))
        assert hashlib.sha256(D.tobytes()).hexdigest() == H200_SHA256[name], name


# --- incomplete warps are errors ----------------------------------------------------------------

@pytest.mark.parametrize("kernel, block, message, marker", [
    ("mma_lane_exits", 32, "lane 31 .*has exited", "MARK_EXIT"),
    ("mma_f64", 16, "has only 16 threads", "MARK_MMA_F64"),
    ("mma_f64", 48, "has only 16 threads", "MARK_MMA_F64"),
    ("mma_meets_syncwarp", 32, "divergent warp", "MARK_SYNCWARP_MMA"),
])
def test_incomplete_warp_is_an_error(mma_module, kernel, block, message, marker):
    z = np.zeros(64 * 64)
    args = (z,) if kernel != "mma_f64" else (z, z, z, np.zeros(64 * 64), i32(0))
    with pytest.raises(EmulationError, match=message) as info:
        mma_module.get_function(kernel)((1,), (block,), args)
    assert _marked_line(marker) in str(info.value)


def test_divergent_mma_names_both_sites(mma_module):
    with pytest.raises(EmulationError, match="divergent warp") as info:
        mma_module.get_function("mma_divergent")((1,), (32,), (np.zeros(32),))
    msg = str(info.value)
    assert _marked_line("MARK_DIV_LOW") in msg and _marked_line("MARK_DIV_HIGH") in msg
    assert "mma.sync.aligned.m8n8k4.row.col.f64" in msg


@pytest.mark.parametrize("kernel, message", [
    ("ldmatrix_from_global", "not shared memory"),
    ("ldmatrix_misaligned", "2 bytes past a 16-byte boundary"),
])
def test_ldmatrix_misuse_is_an_error(mma_module, kernel, message):
    src = np.arange(64, dtype=np.uint16)
    with pytest.raises(EmulationError, match=message) as info:
        mma_module.get_function(kernel)((1,), (32,), (src, np.zeros(32, np.uint32)))
    marker = "MARK_LDSM_GLOBAL" if "global" in kernel else "MARK_LDSM_MISALIGNED"
    assert _marked_line(marker) in str(info.value)


def test_module_usable_after_error(mma_normal):
    with pytest.raises(EmulationError):
        mma_normal.get_function("mma_lane_exits")((1,), (32,), (np.zeros(32),))
    rng = np.random.default_rng(12)
    A, B, C = _matrices(rng, 4, 8, 8, 4, 0)
    D = _run_f64(mma_normal, A, B, C)
    assert (np.abs(D - _exact(A, B, C)) <= 1e-15 * (np.abs(C) + np.abs(A) @ np.abs(B))).all()


def test_mma_kernels_are_clean_under_asan():
    """The staging of fragments and ldmatrix rows stays in bounds: no ASan/UBSan report."""
    from cupyconv._emulation import build_module
    from emulation_support import require_asan, run_in_asan_subprocess
    require_asan()
    build_module(path=str(SOURCE), name_expressions=NAMES, mode="asan")
    code = f"""
import numpy as np
from cupyconv._emulation import EmulatedModule
f = EmulatedModule(path={str(SOURCE)!r}, name_expressions={NAMES!r}, mode="asan").get_function
rng = np.random.default_rng(0)
A, B, C = rng.standard_normal((8, 8, 4)), rng.standard_normal((8, 4, 8)), rng.standard_normal((8, 8, 8))
f("mma_f64")((2,), (128,), (A, B, C, np.zeros_like(C), np.int32(0)))
A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((4, 16, 8), (4, 8, 8), (4, 16, 8)))
f("mma_tf32")((1,), (128,), (A, B, C, np.zeros_like(C), np.int32(0)))
A, B = rng.standard_normal((4, 16, 16)).astype(np.float16), rng.standard_normal((4, 16, 8)).astype(np.float16)
C = rng.standard_normal((4, 16, 8)).astype(np.float32)
f("mma_f16")((1,), (128,), (A, B, C, np.zeros_like(C), np.int32(0)))
f("mma_f16_ldmatrix")((4,), (32,), (A, B, C, np.zeros_like(C)))
f("ldmatrix_dump<4, true>")((1,), (32,), (np.arange(256, dtype=np.uint16), np.zeros(128, np.uint32)))
print("CHILD-OK", flush=True)
"""
    proc = run_in_asan_subprocess(code)
    assert proc.returncode == 0 and "CHILD-OK" in proc.stdout, proc.stderr[-3000:]
