"""Emulated kernels compute what numpy computes."""
import time

import numpy as np
import pytest

i32 = np.int32


def test_sgemm_matches_numpy(basic_module):
    rng = np.random.default_rng(0)
    for m, n, k in [(128, 128, 128), (37, 50, 23)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.full((m, n), np.nan, dtype=np.float32)
        kern = basic_module.get_function("sgemm_tiled<16>")
        start = time.perf_counter()
        kern(((n + 15) // 16, (m + 15) // 16), (16, 16), (a, b, c, i32(m), i32(n), i32(k)))
        elapsed = time.perf_counter() - start
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
        print(f"\nemulated tiled SGEMM {m}x{n}x{k}: {elapsed * 1e3:.1f} ms "
              f"({basic_module.backend})")


def test_sgemm_reverse_schedule_agrees(basic_module, emu_module):
    rev = emu_module("basic.cu", "reverse")
    assert rev.library_path == basic_module.library_path  # one build serves both schedules
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 24), dtype=np.float32)
    b = rng.standard_normal((24, 33), dtype=np.float32)
    outs = []
    for mod in (basic_module, rev):
        c = np.zeros((40, 33), dtype=np.float32)
        mod.get_function("sgemm_tiled<16>")((3, 3), (16, 16), (a, b, c, i32(40), i32(33), i32(24)))
        outs.append(c)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_dynamic_shared_memory(basic_module):
    x = np.arange(1000, dtype=np.float64)
    y = np.zeros_like(x)
    block = 128
    basic_module.get_function("reverse_chunks<double>")(
        (1000 + block - 1) // block, block, (x, y, i32(1000)), shared_mem=block * 8)
    expected = np.concatenate([c[::-1] for c in np.split(np.arange(1024.0), 8)])[:1000]
    expected[expected >= 1000] = 0.0  # slots past the end hold the padding zero
    np.testing.assert_array_equal(y, expected)


def test_struct_by_value_and_negative_strides(basic_module):
    params_t = np.dtype([("n", np.int64), ("scale", np.float64), ("offset", np.int32)],
                        align=True)
    assert params_t.itemsize == 24
    base = np.arange(50, dtype=np.float32)
    x = base[::-2]  # negative stride: data pointer is the last element
    params = np.zeros((), dtype=params_t)
    params["n"], params["scale"], params["offset"] = x.size, 0.5, 7
    stride = np.int64(x.strides[0] // x.itemsize)
    for p in (params, params[()]):  # 0-d structured array and np.void scalar
        y = np.zeros(x.size, dtype=np.float64)
        basic_module.get_function("affine_strided")(2, 8, (x, stride, y, p))
        np.testing.assert_array_equal(y, x * 0.5 + 7)


def test_atomics_histogram(basic_module):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 1000, size=5000).astype(np.int32)
    nbins = 37
    hist = np.zeros(nbins, dtype=np.uint32)
    fsum, dsum = np.zeros(1, np.float32), np.zeros(1, np.float64)
    imax, count = np.full(1, -1, np.int32), np.zeros(1, np.uint64)
    basic_module.get_function("histogram")(
        7, 96, (x, i32(x.size), hist, i32(nbins), fsum, dsum, imax, count), shared_mem=nbins * 4)
    np.testing.assert_array_equal(hist, np.bincount(x % nbins, minlength=nbins))
    assert dsum[0] == x.sum() and imax[0] == x.max() and count[0] == x.size
    assert fsum[0] == pytest.approx(float(x.sum()), rel=1e-6)


def test_half_conversion_matches_numpy(basic_module):
    special = [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, np.inf, -np.inf,
               2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -26, 6.1e-5, 1.0009765625,
               1.00048828125, 1.00146484375, 2049.0, 2051.0, 3.14159]
    rng = np.random.default_rng(3)
    x = np.concatenate([np.array(special, np.float32),
                        rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-8, 6, 2000)])
    x = x.astype(np.float32)
    bits = np.zeros(x.size, np.uint16)
    back = np.zeros(x.size, np.float32)
    basic_module.get_function("half_roundtrip")((x.size + 255) // 256, 256, (x, bits, back, i32(x.size)))
    with np.errstate(over="ignore"):
        reference = x.astype(np.float16)
    np.testing.assert_array_equal(bits, reference.view(np.uint16))
    np.testing.assert_array_equal(back, reference.astype(np.float32))


def test_block_votes_and_intrinsics(basic_module):
    x = np.arange(-3, 61, dtype=np.int32)
    out = np.zeros(8, np.int32)
    basic_module.get_function("block_votes")(1, 64, (x, out))
    assert out.tolist() == [60, 0, 0, 15, 2, 18, 3, 39]
