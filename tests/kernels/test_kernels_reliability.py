"""Kernel-layer reliability: one block size, empty input axes.

* The block size lives in ONE place (``cuda_src/common/launch_config.cuh``):
  the kernels' ``__launch_bounds__`` and thread layouts and the host's
  ``registry.THREADS`` all come from it, and a kernel launched with any
  other block shape stops (``__trap()`` on the device, EmulationError here).
* A size-0 spatial axis extended by constant padding gives outputs that all
  read ``cval`` (every family, against an ``np.pad`` reference), and
  ``cupyconv.dask.conv`` agrees with ``cupyconv.conv`` on it.
* Operands the kernels cannot address: tests/kernels/test_kernels_addressing.py.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cupyconv._emulation import EmulationError, emulation_available
from cupyconv._kernels import launch, registry
from cupyconv._kernels.params import logical_strides, pack_conv_params
from cupyconv._paths import cuda_src_dir

from kernel_reference import (FORWARD_LAUNCHERS, emu_loader, make_problem, small_ints, to_logical,
                              to_physical)

needs_emulation = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

FAMILIES = ("vol2col", "col2vol", "implicit_gemm_fprop", "direct_conv")
#: The family records whose every tile runs blocks of ``CUPYCONV_BLOCK_THREADS`` (the
#: multistage, FMA/DMMA and wgmma implicit GEMMs size their blocks per tile).
COMMON_BLOCK_FAMILIES = sorted(
    f for f in registry.FAMILIES
    if all(registry.block_threads(f, t) == registry.THREADS
           for dt in registry.DTYPES for t in registry.tiles_for(f, dt, 2)))


# ---------------------------------------------------------------------------
# 1. One block size
# ---------------------------------------------------------------------------

def test_block_threads_come_from_the_launch_config_header():
    header = cuda_src_dir() / registry.LAUNCH_CONFIG_HEADER
    text = header.read_text()
    defines = re.findall(r"^\s*#\s*define\s+CUPYCONV_BLOCK_THREADS\s+(\d+)\s*$", text, re.M)
    assert defines == [str(registry.THREADS)]
    assert registry.read_block_threads() == registry.THREADS
    assert re.search(r"^#define CUPYCONV_LAUNCH_BOUNDS __launch_bounds__\(CUPYCONV_BLOCK_THREADS\b",
                     text, re.M)
    assert "constexpr int kBlockThreads = CUPYCONV_BLOCK_THREADS;" in text


@pytest.mark.parametrize("family", COMMON_BLOCK_FAMILIES)
def test_every_kernel_declares_launch_bounds_and_checks_its_block(family):
    src = (cuda_src_dir() / registry.FAMILIES[family].source).read_text()
    code = "\n".join(ln.split("//")[0] for ln in src.splitlines())  # comments dropped
    assert re.search(r"__global__\s+void\s+CUPYCONV_LAUNCH_BOUNDS(_MIN\([^\n]*\))?\s+" + family
                     + r"\s*\(", code), family
    assert "__launch_bounds__" not in code   # only through the header's macro
    assert "cc::require_block_shape();" in code
    assert not re.search(r"\b256\b", code), f"{family} hard-codes a block size"
    assert "kThreads = 256" not in code


@pytest.mark.parametrize("text, why", [
    (None, "cannot read"),
    ("// nothing here\n", "exactly one"),
    ("#define CUPYCONV_BLOCK_THREADS\n", "plain decimal"),
    ("#define CUPYCONV_BLOCK_THREADS (256)\n", "plain decimal"),
    ("#define CUPYCONV_BLOCK_THREADS 256\n#define CUPYCONV_BLOCK_THREADS 128\n", "exactly one"),
    ("#define CUPYCONV_BLOCK_THREADS 100\n", "multiple of 32"),
    ("#define CUPYCONV_BLOCK_THREADS 2048\n", "multiple of 32"),
])
def test_read_block_threads_rejects_missing_or_invalid_defines(tmp_path, text, why):
    header = tmp_path / "launch_config.cuh"
    if text is not None:
        header.write_text(text)
    with pytest.raises(RuntimeError, match=why) as info:
        registry.read_block_threads(header)
    assert str(header) in str(info.value)


def test_read_block_threads_accepts_a_trailing_comment(tmp_path):
    header = tmp_path / "launch_config.cuh"
    header.write_text("#pragma once\n  #  define CUPYCONV_BLOCK_THREADS 128  // threads\n")
    assert registry.read_block_threads(header) == 128


class _BlockOverride:
    """Loader whose kernels launch with ``block`` instead of the launcher's."""

    def __init__(self, block):
        self.block = block
        self.loader = emu_loader()

    def __call__(self, source, names):
        module = self.loader(source, names)
        block = self.block

        class _Module:
            @staticmethod
            def get_function(name):
                kern = module.get_function(name)
                return lambda grid, _block, args, shared_mem=0: kern(grid, block, args,
                                                                     shared_mem=shared_mem)
        return _Module()


def _run_family(family, loader, problem, rng):
    """Launch ``family`` once on small random data; returns the written output."""
    x = small_ints(rng, problem.x_shape, problem.dtype)
    w = small_ints(rng, problem.w_shape, problem.dtype)
    col = np.zeros((problem.in_channels * problem.taps, problem.gemm_m), problem.dtype)
    if family == "vol2col":
        launch.run_vol2col(loader, problem, x, col)
        return col
    if family == "col2vol":
        col[...] = small_ints(rng, col.shape, problem.dtype)
        dx = np.zeros(problem.x_shape, problem.dtype)
        launch.run_col2vol(loader, problem, col, dx)
        return dx
    y = np.zeros(problem.y_shape, problem.dtype)
    run = FORWARD_LAUNCHERS[family]
    run(loader, problem, x, w, y)
    return y


@needs_emulation
@pytest.mark.parametrize("block", [(registry.THREADS // 2,), (registry.THREADS * 2,),
                                   (registry.THREADS // 2, 2), (registry.THREADS, 1, 2)])
@pytest.mark.parametrize("family", FAMILIES)
def test_wrong_block_shape_is_an_error(family, block):
    problem = make_problem(n=1, c=2, k=2, g=1, s=(5, 6), ks=(3, 2), stride=(1, 1), dilation=(1, 1),
                           padding=1, dtype=np.float64)
    rng = np.random.default_rng(0)
    with pytest.raises(EmulationError, match=r"blockDim .*CUPYCONV_BLOCK_THREADS"):
        _run_family(family, _BlockOverride(block), problem, rng)
    # the module stays usable, and the right block shape works
    out = _run_family(family, _BlockOverride((registry.THREADS,)), problem, np.random.default_rng(0))
    np.testing.assert_array_equal(out, _run_family(family, emu_loader(), problem,
                                                   np.random.default_rng(0)))


# ---------------------------------------------------------------------------
# 2. Empty spatial axes with constant padding
# ---------------------------------------------------------------------------

def _np_pad_conv(problem, x_log, w_log, bias=None):
    """Channels-first y from ``np.pad``-ed data (taps sliced out of the padded array)."""
    pads = [(0, 0), (0, 0)] + [tuple(p) for p in problem.padding]
    xp = np.pad(x_log, pads, mode="constant", constant_values=problem.cval)
    g, o = problem.groups, problem.out_shape
    cg, kg = problem.in_channels // g, problem.out_channels // g
    y = np.zeros((problem.batch, problem.out_channels) + tuple(o), problem.dtype)
    cols = []
    for tap in np.ndindex(*problem.kernel_shape):
        sl = [slice(None), slice(None)]
        for i, kap in enumerate(tap):
            start = problem.dilation[i] * (problem.kernel_shape[i] - 1 - kap if problem.flip else kap)
            sl.append(slice(start, start + (o[i] - 1) * problem.stride[i] + 1, problem.stride[i]))
        patch = xp[tuple(sl)]                                   # (N, C, *O)
        cols.append(patch)
        for gi in range(g):
            wg = w_log[(slice(gi * kg, (gi + 1) * kg), slice(None)) + tap]      # (kg, cg)
            y[:, gi * kg:(gi + 1) * kg] += np.einsum("kc,nc...->nk...", wg,
                                                      patch[:, gi * cg:(gi + 1) * cg])
    if bias is not None:
        y += bias.reshape((1, -1) + (1,) * problem.ndim)
    # col[c * taps + tap, n * prod(O) + o]
    col = np.stack(cols, axis=2).reshape(problem.batch, problem.in_channels * problem.taps, -1)
    col = np.moveaxis(col, 0, 1).reshape(problem.in_channels * problem.taps, -1)
    return y, col


EMPTY_CASES = {
    # the brief's example: conv(np.ones((1,1,0)), np.ones((1,1,1)), padding=1, cval=2.)
    "1d": dict(n=1, c=1, k=1, g=1, s=(0,), ks=(1,), stride=(1,), dilation=(1,), padding=1, cval=2),
    "2d_last": dict(n=2, c=2, k=3, g=1, s=(0, 5), ks=(2, 3), stride=(1, 2), dilation=(2, 1),
                    padding=((2, 3), (1, 1)), cval=-1, layout="channels_last", flip=True),
    "3d_groups": dict(n=1, c=4, k=2, g=2, s=(3, 0, 2), ks=(2, 2, 1), stride=(1, 1, 1),
                      dilation=(1, 1, 1), padding=((0, 0), (2, 2), (1, 0)), cval=3),
    "2d_both_empty": dict(n=1, c=1, k=2, g=1, s=(0, 0), ks=(1, 2), stride=(2, 1), dilation=(1, 1),
                          padding=((2, 1), (1, 1)), cval=0.5, flip=True),
}


def _empty_problem(case, dtype=np.float64):
    return make_problem(mode="constant", dtype=dtype, **EMPTY_CASES[case])


@pytest.mark.parametrize("case", sorted(EMPTY_CASES))
def test_pack_params_accepts_empty_axes(case):
    problem = _empty_problem(case)
    x = np.zeros(problem.x_shape)
    p = pack_conv_params(problem, x_strides=logical_strides(x, problem.layout, problem.ndim))
    for i, s in enumerate(problem.in_shape):
        assert p["div_in"][i]["divisor"] == max(s, 1)
    assert p["div_in_size"]["divisor"] == 1 and p["in_size"] == 0
    assert p["gemm_m"] == problem.batch * math.prod(problem.out_shape) > 0


@needs_emulation
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("family", ["implicit_gemm_fprop", "direct_conv"])
@pytest.mark.parametrize("case", sorted(EMPTY_CASES))
def test_forward_on_empty_axis_reads_cval(case, family, dtype):
    problem = _empty_problem(case, dtype)
    rng = np.random.default_rng(1)
    x_log = np.zeros((problem.batch, problem.in_channels) + problem.in_shape, dtype)
    w_log = small_ints(rng, (problem.out_channels, problem.in_channels // problem.groups)
                       + problem.kernel_shape, dtype)
    bias = small_ints(rng, (problem.out_channels,), dtype)
    x, w = to_physical(x_log, problem.layout), np.array(to_physical(w_log, problem.layout))
    y = np.array(to_physical(np.full((problem.batch, problem.out_channels) + problem.out_shape,
                                     99, dtype), problem.layout))
    run = FORWARD_LAUNCHERS[family]
    run(emu_loader(), problem, x, w, y, bias=bias)
    ref, _ = _np_pad_conv(problem, x_log, w_log, bias)
    # every tap reads the padding: y[n, k] = cval * sum(w[k]) + bias[k]
    per_k = problem.cval * w_log.reshape(problem.out_channels, -1).sum(axis=1) + bias
    np.testing.assert_array_equal(ref, np.broadcast_to(per_k.reshape((1, -1) + (1,) * problem.ndim),
                                                       ref.shape).astype(dtype))
    np.testing.assert_array_equal(to_logical(y, problem.layout), ref)


@needs_emulation
@pytest.mark.parametrize("case", sorted(EMPTY_CASES))
def test_vol2col_on_empty_axis_is_all_cval(case):
    problem = _empty_problem(case)
    x_log = np.zeros((problem.batch, problem.in_channels) + problem.in_shape)
    x = to_physical(x_log, problem.layout)
    col = np.full((problem.in_channels * problem.taps, problem.gemm_m), 99.0)
    launch.run_vol2col(emu_loader(), problem, x, col)
    w_log = np.zeros((problem.out_channels, problem.in_channels // problem.groups)
                     + problem.kernel_shape)
    _, ref = _np_pad_conv(problem, x_log, w_log)
    np.testing.assert_array_equal(ref, np.full(ref.shape, problem.cval))
    np.testing.assert_array_equal(col, ref)


@needs_emulation
@pytest.mark.parametrize("case", sorted(EMPTY_CASES))
def test_col2vol_on_empty_axis_writes_nothing(case):
    problem = _empty_problem(case)
    col = small_ints(np.random.default_rng(2), (problem.in_channels * problem.taps, problem.gemm_m),
                     problem.dtype)
    dx = np.zeros(problem.x_shape)
    launch.run_col2vol(emu_loader(), problem, col, dx, beta=1)   # the launcher: no work
    assert dx.size == 0
    # the kernel itself, launched anyway on a sentinel buffer: no thread, no write
    p = pack_conv_params(problem, x_strides=logical_strides(dx, problem.layout, problem.ndim))
    kern = launch.kernel_for(emu_loader(), "col2vol", problem.dtype, problem.ndim, False)
    sentinel = np.full(16, 7.0)
    kern((2,), (registry.THREADS,), (p, col, sentinel))
    np.testing.assert_array_equal(sentinel, 7.0)


@needs_emulation
@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm"])
def test_emulated_backend_conv_on_empty_axis_matches_numpy(method):
    import cupyconv
    x, w = np.ones((1, 1, 0)), np.ones((1, 1, 1))
    ref = cupyconv.conv(x, w, padding=1, cval=2.0)
    np.testing.assert_array_equal(ref, [[[2.0, 2.0]]])
    with cupyconv.use_backend("emulated"):
        got = cupyconv.conv(x, w, padding=1, cval=2.0, method=method)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("x_shape, w_shape, padding, chunks", [
    ((1, 1, 0), (1, 1, 1), 1, -1),                                  # the brief's example
    ((2, 1, 0, 3), (3, 1, 2, 2), ((2, 1), (1, 0)), 1),
    ((1, 2, 0, 4), (3, 2, 2, 2), 2, (1, 1, 1, 2)),
    ((1, 2, 3, 0), (2, 2, 1, 3), ((1, 0), (3, 4)), (1, 2, 2, 1)),
])
def test_dask_conv_on_empty_axis_matches_in_memory(x_shape, w_shape, padding, chunks):
    da = pytest.importorskip("dask.array")
    import cupyconv
    import cupyconv.dask
    rng = np.random.default_rng(4)
    x = np.zeros(x_shape)
    w = rng.integers(-2, 3, w_shape).astype(np.float64)
    ref = cupyconv.conv(x, w, padding=padding, cval=2.0)
    got = cupyconv.dask.conv(da.from_array(x, chunks=chunks), w, padding=padding, cval=2.0)
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got.compute(), ref)
