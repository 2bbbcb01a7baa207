"""What the emulator catches in shared memory and arithmetic, each with a planted bug
(tests/emulation/kernels/memory.cu): static shared arrays poisoned per block, cp.async
copies that land only at the wait, and cc::fma rounding once as the GPU's FFMA/DFMA do."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from cupyconv._emulation import EmulationError

POISON32 = 0xCDCDCDCD
i32 = np.int32


@pytest.fixture(scope="module", params=["normal", "reverse"])
def memory_module(emu_module, request):
    return emu_module("memory.cu", request.param)


# --- (a) static shared memory is poisoned per block ------------------------------------------

def test_stale_static_shared_is_poisoned(memory_module):
    """Planted bug: blocks 1..3 read an array only block 0 wrote."""
    y = np.zeros(4 * 64, np.float32)
    memory_module.get_function("stale_static_shared")((4,), (64,), (y,))
    blocks = y.reshape(4, 64)
    np.testing.assert_array_equal(blocks[0], 1.0 + np.roll(np.arange(64), -1))
    # in either block order, never block 0's values
    np.testing.assert_array_equal(blocks[1:].view(np.uint32), POISON32)


def test_fresh_static_shared_passes(memory_module):
    y = np.zeros(3 * 64, np.float32)
    memory_module.get_function("fresh_static_shared")((3,), (64,), (y,))
    expected = np.array([[100 * b + (t + 1) % 64 for t in range(64)] for b in range(3)])
    np.testing.assert_array_equal(y.reshape(3, 64), expected)


def test_static_shared_poisoned_once_per_block(memory_module):
    """A declaration reached twice in one block keeps what the first call wrote."""
    y = np.zeros(2 * 32, np.float32)
    memory_module.get_function("static_shared_twice")((2,), (32,), (y,))
    np.testing.assert_array_equal(y.reshape(2, 32), np.tile(7.0 + np.arange(32), (2, 1)))


def test_implicit_gemm_declares_poisoned_static_shared():
    """The kernel in cuda_src/conv with static shared arrays uses the poisoning macro."""
    from cupyconv._paths import cuda_src_dir
    for path in sorted((cuda_src_dir() / "conv").glob("*.cu")):
        code = path.read_text()
        plain = [ln for ln in code.splitlines()
                 if "__shared__" in ln and not ln.lstrip().startswith("//")]
        assert plain == [], f"{path.name}: declare static shared arrays with CUPYCONV_STATIC_SHARED"


# --- (b) cp.async lands only at the wait ------------------------------------------------------

def test_cp_async_with_wait(memory_module):
    x = np.arange(2 * 32 * 4, dtype=np.float32)
    y = np.zeros_like(x)
    memory_module.get_function("cp_async_neighbour<true>")((2,), (32,), (x, y), shared_mem=32 * 16)
    expected = np.roll(x.reshape(2, 32, 4), -1, axis=1).ravel()
    np.testing.assert_array_equal(y, expected)


def test_cp_async_missing_wait_reads_poison(memory_module):
    """Planted bug: the barrier without cp.async.wait -- every read is 0xCD bytes."""
    x = np.arange(2 * 32 * 4, dtype=np.float32)
    y = np.zeros_like(x)
    memory_module.get_function("cp_async_neighbour<false>")((2,), (32,), (x, y), shared_mem=32 * 16)
    np.testing.assert_array_equal(y.view(np.uint32), POISON32)


def test_cp_async_wait_group_lands_oldest_groups(memory_module):
    x = np.arange(64, dtype=np.float32) + 1
    y = np.zeros(3 * 32, np.float32)
    memory_module.get_function("cp_async_two_groups")((1,), (32,), (x, y))
    y = y.reshape(32, 3)
    np.testing.assert_array_equal(y[:, 0], x[:32])                  # group 0 landed
    np.testing.assert_array_equal(y[:, 1].view(np.uint32), POISON32)  # group 1 in flight
    np.testing.assert_array_equal(y[:, 2], x[32:])                  # after wait_group<0>


def test_cp_async_zero_fill(memory_module):
    x = np.arange(64, dtype=np.float32) + 1
    y = np.full(64, -1, np.float32)
    memory_module.get_function("cp_async_zfill8")((1,), (32,), (x, y))
    expected = x.reshape(32, 2).copy()
    copied = np.arange(32) % 3                                      # floats copied per thread
    expected[copied < 2, 1] = 0
    expected[copied < 1, 0] = 0
    np.testing.assert_array_equal(y.reshape(32, 2), expected)


@pytest.mark.parametrize("kernel, message", [
    ("cp_async_to_global", "not shared memory"),
    ("cp_async_misaligned", "misaligned"),
])
def test_cp_async_misuse_is_an_error(memory_module, kernel, message):
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(EmulationError, match=message):
        memory_module.get_function(kernel)((1,), (32,), (x, y))


# --- (c) cc::fma rounds once, as FFMA / DFMA do -----------------------------------------------

def _run_fma(module, dtype, a, b, c):
    a, b, c = (np.ascontiguousarray(v, dtype=dtype) for v in (a, b, c))
    y = np.zeros_like(a)
    name = {np.float32: "fma_elementwise<float>", np.float64: "fma_elementwise<double>",
            np.complex128: "fma_elementwise<cc::complex<double>>"}[dtype]
    module.get_function(name)(((a.size + 63) // 64,), (64,), (a, b, c, y, i32(a.size)))
    return y


def _fma64(a, b, c) -> float:
    """Correctly rounded a * b + c in double (exact rational, one rounding)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def test_fma_float_rounds_once(memory_module):
    """Planted case: a = b = 1 + 2^-12, c = -(1 + 2^-11).  Unfused, a*b rounds to
    1 + 2^-11 (a tie to even) and the sum is 0; fused, it is exactly 2^-24."""
    a = np.float32(1 + 2.0 ** -12)
    c = np.float32(-(1 + 2.0 ** -11))
    assert np.float32(a * a) + c == 0                               # what a*b + c gives
    rng = np.random.default_rng(11)
    # a*b (48 bits) + c with exponents in [0, 3): exact in double, then one rounding
    ra = rng.uniform(1, 2, 500).astype(np.float32)
    rb = rng.uniform(1, 2, 500).astype(np.float32)
    rc = (rng.uniform(1, 4, 500) * rng.choice([-1, 1], 500)).astype(np.float32)
    A, B, C = np.append(a, ra), np.append(a, rb), np.append(c, rc)
    y = _run_fma(memory_module, np.float32, A, B, C)
    exact = (A.astype(np.float64) * B.astype(np.float64) + C.astype(np.float64)).astype(np.float32)
    assert y[0] == np.float32(2.0 ** -24)
    np.testing.assert_array_equal(y, exact)
    unfused = A * B + C
    assert np.count_nonzero(unfused != exact) > 0                   # the test can tell them apart


def test_fma_double_rounds_once(memory_module):
    a, c = 1 + 2.0 ** -27, -(1 + 2.0 ** -26)
    assert a * a + c == 0
    rng = np.random.default_rng(12)
    A = np.append(a, rng.standard_normal(300))
    B = np.append(a, rng.standard_normal(300))
    C = np.append(c, rng.standard_normal(300))
    y = _run_fma(memory_module, np.float64, A, B, C)
    exact = np.array([_fma64(*v) for v in zip(A.tolist(), B.tolist(), C.tolist())])
    assert y[0] == 2.0 ** -54
    np.testing.assert_array_equal(y, exact)
    if hasattr(math, "fma"):                                        # Python 3.13+
        np.testing.assert_array_equal(y, [math.fma(*v) for v in zip(A, B, C)])


def test_fma_complex_is_four_real_fmas(memory_module):
    """re = fma(-a.im, b.im, fma(a.re, b.re, c.re)), im = fma(a.im, b.re, fma(a.re, b.im, c.im))."""
    rng = np.random.default_rng(13)
    A, B, C = (rng.standard_normal(200) + 1j * rng.standard_normal(200) for _ in range(3))
    y = _run_fma(memory_module, np.complex128, A, B, C)
    re = [_fma64(-a.imag, b.imag, _fma64(a.real, b.real, c.real)) for a, b, c in zip(A, B, C)]
    im = [_fma64(a.imag, b.real, _fma64(a.real, b.imag, c.imag)) for a, b, c in zip(A, B, C)]
    np.testing.assert_array_equal(y.real, re)
    np.testing.assert_array_equal(y.imag, im)


# --- the same header under NVRTC ----------------------------------------------------------------

def _nvrtc():
    try:
        from cupyconv._compile import _nvrtc
        _nvrtc.nvrtc_version()
        return _nvrtc
    except Exception:  # noqa: BLE001 - any failure means "no NVRTC here"
        return None


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_memory_kernels_compile_with_nvrtc(arch, kernel_path, name_expressions, tmp_path):
    """cp_async.cuh is real PTX cp.async on sm_80+ (LDGSTS in SASS) and a plain copy on
    sm_75; cc::fma is one FFMA / DFMA."""
    nvrtc = _nvrtc()
    if nvrtc is None:
        pytest.skip("NVRTC unavailable")
    from cupyconv._compile import sass
    from cupyconv._compile.build import compile_options
    from cupyconv._paths import cuda_src_dir
    path = kernel_path("memory.cu")
    names = name_expressions["memory.cu"]
    binary, _, lowered = nvrtc.compile_program(path.read_text(), str(path),
                                               compile_options(arch) + (f"-I{cuda_src_dir()}",),
                                               names)
    assert set(lowered) == set(names)
    if sass.disassembler_reason() is not None:
        pytest.skip(f"compiled; SASS not checked: {sass.disassembler_reason()}")
    cubin = tmp_path / "memory.cubin"
    cubin.write_bytes(binary)
    funcs = sass.disassemble(cubin)
    opcodes = {name: {i.base for i in funcs[lowered[name]]} for name in names}
    has_ldgsts = "LDGSTS" in opcodes["cp_async_neighbour<true>"]
    assert has_ldgsts == (arch != "sm_75")
    assert "FFMA" in opcodes["fma_elementwise<float>"]
    assert not {"FMUL", "FADD"} & opcodes["fma_elementwise<float>"]
    assert "DFMA" in opcodes["fma_elementwise<double>"]
    assert not {"DMUL", "DADD"} & opcodes["fma_elementwise<double>"]


def test_memory_kernels_are_clean_under_asan(kernel_path, name_expressions):
    """Poisoning and cp.async stay inside their arrays: no ASan/UBSan report."""
    from cupyconv._emulation import build_module
    from emulation_support import require_asan, run_in_asan_subprocess
    require_asan()
    path, names = str(kernel_path("memory.cu")), name_expressions["memory.cu"]
    build_module(path=path, name_expressions=names, mode="asan")
    code = f"""
import numpy as np
from cupyconv._emulation import EmulatedModule
f = EmulatedModule(path={path!r}, name_expressions={names!r}, mode="asan").get_function
x = np.arange(256, dtype=np.float32)
y = np.zeros(256, np.float32)
f("stale_static_shared")((4,), (64,), (y,))
f("cp_async_neighbour<true>")((2,), (32,), (x, y), shared_mem=32 * 16)
f("cp_async_two_groups")((1,), (32,), (x, y))
f("cp_async_zfill8")((1,), (32,), (x, y))
a = np.full(64, 1.5)
f("fma_elementwise<double>")((1,), (64,), (a, a, a, np.zeros(64), np.int32(64)))
print("CHILD-OK", flush=True)
"""
    proc = run_in_asan_subprocess(code)
    assert proc.returncode == 0 and "CHILD-OK" in proc.stdout, proc.stderr[-3000:]
