"""CPU cost model: predicted seconds per algorithm from counted work.

Counts multiply-adds, column-buffer elements and FFT points from the
problem; gradients are costed as the GEMM they are (the same multiply-adds
as the forward) or as the transposed forward problem their FFT runs.
The constants were fitted on the development machine (2-core x86-64 VM,
OpenBLAS); docs/algorithms.md records how, and how well the model agrees
with measurement.
"""
from __future__ import annotations

import math

import numpy as np

from ..._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from ..._lru import memoized
from ...core.transpose import transpose
from .. import fft, fft_conv, winograd_conv
from . import blas, gemm, gemm_fold, gemm_grid, gemm_stride, separable, winograd_axis
from .direct import (CHUNK, DEPTHWISE_THREADED, PLANE_CHUNK, compiled_applies, line_axis,
                     scipy_line_applies, scipy_line_faster, scipy_nd_applies, single_signal)
from .threads import workers

__all__ = ["predict", "predict_times", "CPU", "gemm_terms", "gemm_serial", "depthwise_terms",
           "column_run", "GEMM_KEYS", "winograd_axis_pays", "winograd_axis_price"]

#: CPU constants (seconds).
CPU = dict(
    tap_overhead=6e-6,      # Python + einsum dispatch per kernel tap (direct, several
                            # channels per group; measured 2026-12-01 on (n, 4, 7, 8) *
                            # (6, 2, 3, 3) groups 2: direct 87-127 us against gemm's 78-92
                            # for n = 1-8, where 4e-6 ranked direct first from n = 2)
    elem=0.6e-9,            # one multiply-add streamed through NumPy (direct)
    compiled_call=1e-6,     # numpy.convolve fixed cost (1-D compiled direct)
    compiled_mac=0.45e-9,   # numpy.convolve per multiply-add, kernels < 128 taps
    compiled_mac_long=0.15e-9,  # ... kernels >= 128 taps (measured 0.13-0.17 ns)
    copy=3.0e-9,            # one element gathered by a copy of a strided view (padding)
    blas=1.0 / 8e9,         # one GEMM multiply-add in BLAS (float64), Winograd's products
    # gemm's blocks and the depthwise tap loop (fitted 2026-12-01 with
    # benchmarks/fit_cpu_cost.py on the shared 2-core VM at load 5-8, then scaled by 0.6;
    # all are per core, work spread over min(cores, blocks)).  Refitted 2026-12-02 on
    # ratios: `OPENBLAS_NUM_THREADS=1 taskset -c 0 python -m benchmarks.fit_cpu_cost
    # --rounds 5 --cpu-time` (process CPU time on one core, which the load of 4-4.6 on
    # the 2 cores does not inflate as it does the wall clock) measured the gemm layers at
    # 0.56x the constants' prediction (geometric mean of 26 layers, oneMKL, one pool
    # task per lane) and the depthwise loop at 0.71x: column, block_mac, narrow_mac,
    # narrow_cols and depthwise_mac were scaled by those factors
    column=4.5e-10,         # one element of gemm's column block (float64; float32 half):
                            # the strided copy along output rows, backends/numpy/gemm.columns
    column_run=6e-9,        # ... plus this per contiguous run of that copy (NumPy's inner
                            # loop: a kernel row of C channels, or an output row; fitted
                            # 2026-12-07 on single-channel convolve, runs of 3-31
                            # elements: one core, process CPU time, load 6-7, 5-13 ns per
                            # run beyond the element terms: `taskset -c 0 python -m
                            # benchmarks.fit_cpu_cost --cpu-time`)
    block_mac=1.0 / 21e9,   # one multiply-add of a block's GEMM, BLAS on one core (float64;
                            # float32 half)
    narrow_mac=2.25e-10,    # ... plus this over K/G: BLAS on a GEMM a few output channels
                            # wide, positions as rows (gemm.positions_as_rows).  Was 1e-9
                            # with (taps*C, positions) columns; positions as rows took the
                            # narrow layers' time to 0.68x (K/G = 16, 4-D) and 0.87x (32,
                            # 3-D) (one core, interleaved, load 3.6): (1 + n/(K/G)) /
                            # (1 + 12/(K/G)) fits these at n = 3-6, ~5
    narrow_cols=5.6e-10,    # ... the same where the columns stay (taps*C/G, positions):
                            # grouped or wider than gemm.ROWS_MAX_CHANNELS (depthwise as
                            # gemm, measured 15.8 ms against 46.5 for the 64-wide layer of
                            # 64x the multiply-adds)
    mkl_mac=0.85,           # block_mac and the narrow terms' factor where the blocks' GEMMs
                            # run on oneMKL (backends/numpy/blas.py): whole layers by gemm on
                            # oneMKL against numpy.matmul, interleaved, load 11, lower
                            # quartile of 18: 2-D 0.90x, 1-D 0.82-0.88x, 3-D 0.80x
    mkl_narrow=3.0,         # ... instead, where oneMKL's product has 2 to MKL_NARROW - 1
                            # columns (positions as rows, that few output channels): its
                            # (positions, taps*C) @ (taps*C, K) runs at 5-9 GMAC/s float32
                            # for K = 2-15 against 30-37 for K = 16-32 (one core, process
                            # CPU time, load 2-5, 2026-12-07, blocks of 2304 x 216 as the
                            # 3-D 8->8 24^3 layer's: 2.6-4.5x the block_mac + narrow_mac
                            # rate; the layer's GEMMs measured 4.96 ms against 1.54 priced)
    matmul_work=0.77,       # the work terms' factor (column, block_mac, the narrow terms,
                            # column_run) where the blocks' GEMMs run numpy.matmul (OpenBLAS;
                            # oneMKL off: blas.mkl()), the constants above being fitted on
                            # oneMKL: `taskset -c 1 python -m benchmarks.fit_cpu_cost
                            # --rounds 3 --cpu-time` on the AMD EPYC VM, 2026-12-07 07:32,
                            # load 2.1: the 26 channelled layers measured 0.77x the
                            # prediction (geometric mean; 3-D and 4-D 0.6-0.75x, 2-D 0.8-1.2x)
    # gemm's forward and float32 weight gradient on the extended grid (grid_columns,
    # backends/numpy/gemm_grid.py): the columns one contiguous slice per (channel, tap) and
    # lead row, the product W . cols (cols . dy^T); in place of column, block_mac and
    # narrow_cols there.  Fitted 2026-12-07 08:09 on the 15 such cases of `taskset -c 1
    # python -m benchmarks.fit_cpu_cost --rounds 3 --cpu-time` (AMD EPYC VM, numpy.matmul,
    # load 0.5-0.7): NNLS on their time less the other terms, relative to the measured;
    # 0.87-1.14x but the float64 depthwise layer as gemm (64 groups), 0.57x.  The old
    # terms priced these 1.6-2.9x the measured time (4-D 4->8 10^4 float32 5.9 ms for 3.6,
    # single-channel 3-D 64^3 3^3 4.3 for 1.5)
    grid_column=2.05e-10,   # one element of the copy, float64 (float32 half)
    grid_mac=8.0e-11,       # one multiply-add of W . cols, float64 (float32 half)
    grid_narrow=6.3e-11,    # ... plus this over K/G
    # the same with kernel taps folded into the GEMM's rows (backends/numpy/gemm_fold.py):
    # factors on the grid_mac and grid_narrow counts (the latter over its rows K/G * |A|).
    # One core, float32, numpy.matmul, process CPU time (`stats["phases"]`, load 1-2,
    # 2026-12-07): the folded GEMM ran 2.1-2.4e-11 s per multiply-add at 24-72 rows (4-D
    # 10^4 and 12^4, 5-D 7^5 layers) and 4.9e-11 at 7 (single-channel 3-D 48^3 7^3),
    # 1.8e-11 + 2.2e-10 / rows, against the unfolded terms' 3.1e-11 + 2.4e-11 / rows
    fold_mac=0.58,
    fold_narrow=8.9,
    block=5e-6,             # Python + dispatch per gemm block (views, matmul, write back:
                            # three NumPy calls; the first block's buffer is in gemm_call)
    depthwise_mac=3.0e-10,  # one tap of the depthwise tap loop per output (float32; float64
                            # twice: the bytes), backends/numpy/direct.conv_depthwise (its
                            # stride-1 runs over flattened planes: 8 x 64 x 56^2 3x3 on one
                            # core at load 8, 14 ms against fft's 42; scaled as above).
                            # Was 4.2e-10: 2026-12-07 the single-channel convolve and
                            # ndimage cases it also runs (one filter per channel), 256^2 to
                            # 64^3, and a 32-channel depthwise layer measured 0.55-0.91x
                            # that, geometric mean 0.72 (one core, process CPU time, load
                            # 6-7, `python -m benchmarks.fit_cpu_cost --cpu-time`)
    col2im=1.0e-9,          # one column element added back into the padded input (serial)
    nonblas=1.0e-9,         # one integer matmul multiply-add (no BLAS)
    fft=0.2e-9,             # per point * log2(line length) of one real FFT pass
    fft_line=14000,         # line length at which a pass costs twice per point
    fft_short=25.0,         # per line of a batched transform's pass, in units of `fft` (a
                            # point * log2): pocketfft's cost per line, which lines of 7-12
                            # points (4-D, 5-D layers) feel (fitted with fft_batched below)
    fft_elem=1.0e-9,        # per point per array: products, padding, gathers
    fft_einsum=2.0e-9,      # per complex multiply-add of the channel contraction (was 4e-9:
                            # 2026-12-07, one core, process CPU time, load 6-7, fft on the
                            # channelled layers of benchmarks/auto_vs_fastest.py ran 0.43-
                            # 0.6x that prediction where the contraction dominates, 1.0x
                            # where it does not)
    call=3e-6,              # fixed per-call overhead of the tap-loop/gemm/fft paths
    gemm_call=2.5e-5,       # extra fixed cost of gemm: buffer, transposes, matmul
    line_mac=0.3e-9,        # 1-D pass in NumPy (contiguous slabs, direct.line_chunks), float64
                            # per tap, float32 half; plus its padded copy (fitted 2026-12-01:
                            # 0.28-0.34 ns on 128^3 axis 1 and 1024^2 axis 0, 17-65 taps)
    scipy_line_mac=0.25e-9,  # 1-D pass in scipy.ndimage.correlate1d, per tap
    scipy_nd_mac=0.4e-9,    # N-D single channel in scipy.ndimage.correlate, per tap
    scipy_line_gather=8e-9,  # per element of a correlate1d pass along an axis whose stride
                            # is a page or more: SciPy copies each line into its buffer
                            # element by element (measured on 1024^2 float64: axis 0 10.3
                            # ms, axis 1 1.5 ms for 3 taps; 96^3 axis 0: 8.3 vs 2.2 ms)
    separable_mac=0.35e-9,  # one tap of a separable pass, float64, float32 half (fitted
                            # 2026-12-01 after the passes became contiguous slabs,
                            # direct.line_chunks: 512^2 5^2 to 40^4 7^4 within 0.9-1.3x;
                            # the padded copy, copy / 3, scales with the bytes too)
    chunk_tap=2e-6,         # Python + ufunc dispatch per chunk and tap of a chunked pass
    separable_call=2e-5,    # fixed cost of separable: the factor lookup (kernel bytes as the
                            # cache key), stacking the taps, one Python pass per axis
                            # (measured 82 vs 67 us for separable vs direct on 32^2 * 3^2)
    separable_pass=2.5e-5,  # ... plus this per NumPy pass: its padded copy (numpy.pad), the
                            # stacked taps, the result and temporary allocated
    separable_run=1.5e-8,   # ... and this per output row and tap of the last axis' pass (a
                            # multiply and an add per row: NumPy's inner loop per run).
                            # Both fitted 2026-12-07 on rank-1 float32 kernels, 128^2 to
                            # 64^3 and a 32-channel 56^2 depthwise layer (one core, process
                            # CPU time, load 5-6): without them those measured 1.06-3.4x
                            # the prediction, 20-40 us more per pass plus 7-22 ns per row
                            # and tap, so a 256^2 3x3 was priced below the tap loop it
                            # trails (0.24-0.27 ms against 0.21)
    fft_call=5.5e-5,        # extra fixed cost of fft: three transforms, windowing (measured
                            # 55-60 us for 8-point to 8^2-point problems)
    fft_batched=0.67,       # factor on the work of the batched transforms and contraction
                            # (backends/fft_conv).  With fft_short, fitted 2026-12-07 on the
                            # transform lengths fft_conv.transform_lengths runs (before: the
                            # full linear convolution's, 1.3-4.2x the points of a gradient)
                            # and its reused spectra: `taskset -c 0 python -m
                            # benchmarks.fit_cpu_cost --rounds 3 --cpu-time`, one core,
                            # process CPU time, load 1.5, 2-D to 5-D layers, every operation,
                            # both precisions: predicted 0.78-1.25x measured (fft_short 0,
                            # this refit: 0.71-1.42x, 5-D 0.7x, 2-D up to 1.4x); was 0.75
    fft_scipy_axis=0.3,     # a single signal's FFT (scipy.signal.fftconvolve,
                            # direct.single_signal) costs this much more per axis past two
                            # (the same runs: 2-D 0.96-1.17x the prediction, 3-D 0.66-0.79x,
                            # 4-D 0.55-0.63x, both precisions)
    winograd_piece=6e-5,    # fixed cost of one Winograd piece: views, transposes, matmul
    winograd_elem=8e-9,     # per element per axis of a tile transform (tensordot + copy);
                            # set high on purpose: on this 2-core VM the NumPy transforms ran
                            # 0.6-1.0x gemm's time (issue 15), so auto keeps gemm on the CPU
                            # unless Winograd is clearly ahead (benchmarks/winograd_cpu.py)
    # the last-axis path (backends/numpy/winograd_axis.py), besides its grouped problem's
    # gemm price; one core, wall clock, least of 5, 2026-12-07, 10 layers 2-D to 5-D of
    # 4-64 channels in both precisions:
    winograd_axis_tile=2.2e-9,     # per element of the transformed input V: the padded
                                   # copy, the tiles' gather, B^T's GEMM (float32 1.8-2.6
                                   # ns, float64 1.9-3.4)
    winograd_axis_product=0.7e-9,  # per element of the products M: A^T's GEMM and the
                                   # crop (float32 0.2-0.9 ns, float64 0.3-2.1)
)


#: The FFT's per-point costs in single precision (float32, complex64; float16 computes in
#: float32), relative to the float64 ones the constants were fitted on: SciPy's
#: single-precision transforms (measured 2026-12-01, same-size Gaussians from 512^2 * 5^2
#: to 40^4 * 7^4 and 1-D kernels of 129 taps along 1024^2: 0.3-0.87x the float64-fitted
#: prediction, median 0.7).  Float64 is left as fitted: its error grows with the
#: transform's size (0.8x to 1.9x), which a constant factor would not follow.
FFT_SINGLE = 0.7
#: oneMKL's products with fewer columns than this (and more than one) run at a fraction
#: of its rate (``mkl_narrow``).
MKL_NARROW = 16
#: Bytes of a memory page: a line whose elements lie a page or more apart is gathered
#: element by element (``scipy_line_gather``).
PAGE_BYTES = 4096


def _real_bytes(problem):
    """Bytes of one real component of the problem's elements."""
    return problem.dtype.itemsize // (2 if problem.is_complex else 1)


def _macs(problem):
    return problem.groups * problem.gemm_m * problem.gemm_n * problem.gemm_k


def _direct(problem, cplx):
    c = CPU
    macs = _macs(problem)
    if compiled_applies(problem) and problem.ndim == 1:
        per = c["compiled_mac"] if problem.kernel_shape[0] < 128 else c["compiled_mac_long"]
        return c["compiled_call"] + cplx * macs * per
    if scipy_line_applies(problem):
        return c["call"] + macs * c["scipy_line_mac"]
    if line_axis(problem) is not None:
        padded = problem.batch * problem.in_channels * math.prod(problem.padded_shape())
        return c["call"] + cplx * problem.dtype.itemsize / 8 * (
            macs * c["line_mac"] + padded * c["copy"] / 3)
    if scipy_nd_applies(problem):
        return c["call"] + macs * c["scipy_nd_mac"]
    if problem.out_channels == problem.groups == problem.in_channels:
        # one filter per channel: plane blocks on one thread per core (direct.conv_depthwise)
        counts = depthwise_terms(problem)
        return c["call"] + counts[0] * c["depthwise_mac"] + counts[1] * c["chunk_tap"]
    return c["call"] + problem.taps * c["tap_overhead"] + cplx * macs * c["elem"] * 0.5


def _blocks(problem):
    chunk = gemm.CHUNK_BYTES * (gemm.WEIGHT_BLOCKS if problem.op == GRAD_WEIGHT else 1)
    return max(1, -(-problem.column_bytes() // chunk))


def column_run(problem):
    """Elements per contiguous run of gemm's column copy (:func:`.gemm.columns`): where
    :func:`.gemm.positions_as_rows`, a kernel row's taps times the channels (the
    channels alone under a dilation), else an output row."""
    if gemm.positions_as_rows(problem):
        k, c = problem.kernel_shape[-1], problem.in_channels
        return k * c if problem.dilation[-1] == 1 or c == 1 else c
    return problem.out_shape[-1]


def grid_columns(problem):
    """``(waste, full, taps, run)`` where gemm builds the columns of the problem it runs
    (:func:`.gemm.as_run`) on an extended grid (:func:`.gemm_grid.grid_axes`): its
    positions over the output's, the elements of an extended lead row, the taps folded
    into the GEMM's rows (:func:`.gemm_fold.fold_axes`; 1 where none) and the elements of
    one contiguous slice of the copy (``full`` and the folded tail); else ``None``.  The
    forward and the float32 weight gradient take the padded input's grid, a strided input
    gradient the stride's phase grids, a strided last axis folded over whole padded rows
    (:func:`.gemm.stride_folds`) those rows; workspace limits are not priced."""
    limit = problem.column_bytes()
    if gemm.stride_folds(problem, limit):
        full = gemm_stride.row_length(problem)
        return gemm_stride.stride_fold_waste(problem), full, problem.kernel_shape[-1], full
    e = gemm_grid.grid_axes(problem, limit)
    if not e:
        return None
    r, out = problem.ndim, tuple(problem.out_shape)
    grid = (gemm_grid.phase_grid(problem) if problem.op == GRAD_INPUT
            else problem.padded_shape())
    full = gemm_grid.row_positions(problem, e, grid)
    waste = full / math.prod(out[r - e:])
    f = 0 if problem.op == GRAD_INPUT or problem.gemm_k < gemm_fold.FOLD_MIN_DEPTH else (
        gemm_fold.fold_axes(problem, e, limit))
    if not f:
        return waste, full, 1, full
    return (waste, full, math.prod(problem.kernel_shape[r - f:]),
            full + max(gemm_fold.fold_offsets(problem, f)))


def gemm_terms(problem):
    """gemm's parallel work per core, by constant (:data:`GEMM_KEYS`): ``[block (per
    block, and per group on oneMKL), column, block_mac, narrow_mac, narrow_cols,
    column_run, grid_column, grid_mac, grid_narrow]`` counts (column elements and
    multiply-adds in float64 units: float32 half; complex four multiply-adds; the
    narrow term grows as ``1 / (K/G)``, BLAS's efficiency on a GEMM a few output
    channels wide, one constant for each column orientation,
    :func:`.gemm.positions_as_rows`; the multiply-adds times ``mkl_mac`` where the GEMMs
    run on oneMKL, ``mkl_narrow`` where oneMKL's products are 2 to :data:`MKL_NARROW` - 1
    output channels wide; the copy's contiguous runs, :func:`column_run` or an extended
    lead row, whatever the dtype), over ``min(cores, blocks)``; every count but the
    blocks' times ``matmul_work`` where the GEMMs run ``numpy.matmul``.  On an extended
    grid (:func:`grid_columns`) its extra positions scale the elements and multiply-adds,
    and the forward and weight gradient count the ``grid_`` terms in place of
    ``column``, ``block_mac`` and ``narrow_cols``; with ``|A|`` taps folded into the
    GEMM's rows the columns are ``|A|`` times fewer (plus the folded tail), the shifted
    sums or copies of ``dy`` count as column elements, the narrow term is over ``K/G *
    |A|`` and both GEMM terms take the ``fold_`` factors."""
    problem = gemm.as_run(problem)
    cplx = 4.0 if problem.is_complex else 1.0
    scale = _real_bytes(problem) / 8 if problem.dtype.kind in "fc" else 1.0
    grid = grid_columns(problem)
    waste, full, taps, run = grid if grid else (1.0, 1, 1, column_run(problem))
    waste *= run / full if grid else 1.0         # the folded columns' tail
    cols = problem.groups * problem.gemm_k * problem.gemm_m * waste / taps
    nblocks = _blocks(problem)
    cores = min(workers(), nblocks)
    on_mkl = blas.mkl() is not None and problem.dtype in blas.MKL_DTYPES
    rows = gemm.positions_as_rows(problem)
    # oneMKL's narrow products by the output channels, folded or not (the folded product
    # on oneMKL is not measured)
    fast = 1.0 if not on_mkl else CPU["mkl_narrow"] if (
        (rows or grid) and 2 <= problem.gemm_n < MKL_NARROW) else CPU["mkl_mac"]
    # an input gradient with its strided last axis folded (gemm_stride): W^T . D on lead
    # rows, its columns added as contiguous slices per image, in parallel
    folded_input = grid is not None and problem.op == GRAD_INPUT and taps > 1
    # contiguous slices, W . cols
    flat = grid is not None and (problem.op != GRAD_INPUT or folded_input)
    if flat:
        # W . cols on the extended grid; its weight gradient cols . dy^T, K the narrow side
        rows = problem.op == GRAD_WEIGHT
    macs = cplx * _macs(problem) * scale * fast * waste
    narrow = macs / (problem.gemm_n * taps) / cores
    if taps > 1:
        macs, narrow = macs * CPU["fold_mac"], narrow * CPU["fold_narrow"]
    # oneMKL is called once per group and block from Python (blas.matmul_into): the
    # depthwise layer as gemm, 64 groups, measured 36 ms on one core against the 10.5
    # its work terms predict
    calls = nblocks * (problem.groups if on_mkl else 1)
    work = 1.0 if on_mkl else CPU["matmul_work"]
    # the input gradient over whole images copies no columns: each tap's product is added
    copied = 0.0 if _whole_images(problem) and not folded_input else (
        cplx * cols * scale * 2 / cores)
    if taps > 1:        # the shifted sums (forward) or shifted dy (weight gradient) as copies
        copied += cplx * problem.groups * problem.gemm_n * taps * problem.gemm_m * waste \
            * scale * 2 / cores
    return [calls / cores] + [work * n for n in (
        0.0 if flat else copied, 0.0 if flat else macs / cores, narrow if rows else 0.0,
        0.0 if rows or flat else narrow, cols / max(1, run) / cores,
        copied if flat else 0.0, macs / cores if flat else 0.0,
        narrow if flat and not rows else 0.0)]


def _whole_images(problem):
    return gemm_grid.whole_images(problem, problem.column_bytes())


def gemm_serial(problem):
    """gemm's serial seconds: a strided input gradient adds its columns back per block
    and tap (:func:`.gemm._grad_input`), or each tap's product as one contiguous slice
    per image block over whole images' phase grids (:func:`.gemm_grid.whole_images`:
    one block, and half the scattered adds' price per element); none where its last axis
    folds (:mod:`.gemm_stride`: the image blocks add in parallel)."""
    if problem.op != GRAD_INPUT or gemm.forward_applies(problem):
        return 0.0
    c = CPU
    grid = grid_columns(problem)
    if grid and grid[2] > 1:        # a folded strided last axis: added in gemm_terms
        return 0.0
    cols = problem.groups * problem.gemm_k * problem.gemm_m * (grid[0] if grid else 1.0)
    scale = _real_bytes(problem) / 8
    cplx = 4.0 if problem.is_complex else 1.0
    whole = _whole_images(problem)
    blocks = 1 if whole else _blocks(problem)
    return (cplx * cols * c["col2im"] * scale * (1 if whole else 2)
            + blocks * problem.taps * c["chunk_tap"])


#: The constants of :func:`gemm_terms`' counts, in order.
GEMM_KEYS = ("block", "column", "block_mac", "narrow_mac", "narrow_cols", "column_run",
             "grid_column", "grid_mac", "grid_narrow")


def _gemm(problem, cplx):
    """Blocks of columns (:mod:`.gemm`) on one thread per core: per block its column copy
    and its GEMM, the blocks spread over the cores (:func:`gemm_terms`); integers run
    NumPy's own matmul loops (``nonblas``); plus :func:`gemm_serial`."""
    c = CPU
    counts = gemm_terms(problem)
    if problem.dtype.kind in "biu":
        mac = GEMM_KEYS.index("grid_mac")
        counts[2], counts[mac] = (counts[2] + counts[mac]) * c["nonblas"] / c["block_mac"], 0.0
    work = 0.0
    for n, key in zip(counts, GEMM_KEYS):
        work += n * c[key]
    return c["call"] + c["gemm_call"] + work + gemm_serial(problem)


def depthwise_terms(problem):
    """The depthwise tap loop's work (:func:`.direct.conv_depthwise`): ``[depthwise_mac,
    chunk_tap]`` counts (multiply-adds in float32 units), per core over ``min(cores,
    blocks)`` when its blocks run on the pool (``DEPTHWISE_THREADED``), else all on one."""
    cplx = 4.0 if problem.is_complex else 1.0
    plane = math.prod(problem.out_shape)
    outputs = problem.batch * problem.out_channels * plane
    nblocks = max(1, -(-outputs // PLANE_CHUNK))
    first = min(outputs, max(PLANE_CHUNK, plane))       # a block: at least one plane
    cores = min(workers(), nblocks) if first >= DEPTHWISE_THREADED else 1
    return [cplx * _macs(problem) * _real_bytes(problem) / 4 / cores,
            nblocks * problem.taps / cores]


def _fft(problem, cplx):
    c = CPU
    extra = 0.0
    if problem.op != FORWARD:
        extra = problem.output_size * c["fft_elem"]       # transposes, upsampling, folding
        problem = fft_conv.transposed_forward(problem)
    elif problem.padding_mode != "constant" or problem.cval != 0:
        # a boundary other than zeros is materialised first (numpy.pad: a padded copy)
        extra = (problem.batch * problem.in_channels * math.prod(problem.padded_shape())
                 * c["copy"])
    if single_signal(problem):      # scipy.signal.fftconvolve: the full linear convolution
        lengths = [fft.fast_len(s + pb + pa)
                   for s, (pb, pa) in zip(problem.in_shape, problem.padding)]
    else:
        lengths = fft_conv.transform_lengths(problem)
    npts = math.prod(lengths)
    span = [d * (k - 1) + 1 for d, k in zip(problem.dilation, problem.kernel_shape)]
    if fft.overlap_add_applies(problem, problem.in_shape, span):
        lengths = [fft.fast_len(2 * span[0])]      # overlap-add: blocks of ~2 kernels
        npts = 2 * lengths[0] * -(-problem.in_shape[0] // lengths[0])
    # one pass per axis; long lines fall out of cache (fitted: a 65536-point
    # 1-D rfft costs ~5x more per point*log2 than the lines of a 60^3 one)
    per_point = 0.0
    short = 0.0 if single_signal(problem) else c["fft_short"]
    for n in lengths:
        per_point += math.log2(max(n, 2)) * (1 + n / c["fft_line"]) + short / n
    cg, kg = problem.in_channels // problem.groups, problem.gemm_n
    transforms = (problem.batch * problem.in_channels + problem.out_channels * cg
                  + problem.batch * problem.out_channels)
    products = problem.batch * problem.groups * kg * cg
    single = problem.gemm_n == 1 and problem.in_channels == problem.groups
    product = c["fft_elem"] if single else c["fft_einsum"]
    precision = FFT_SINGLE if _real_bytes(problem) <= 4 else 1.0
    if single_signal(problem):
        precision *= 1 + c["fft_scipy_axis"] * max(0, problem.ndim - 2)
    else:
        precision *= c["fft_batched"]
    return extra + c["call"] + c["fft_call"] + cplx * precision * npts * (
        transforms * per_point * c["fft"] + transforms * c["fft_elem"] + products * product)


def _separable(problem, cplx):
    """One 1-D pass per axis: each a padded copy and one multiply-add per tap over the
    intermediate result (the extents shrink axis by axis, as the passes run), in chunks
    of ``direct.CHUNK`` outputs with a Python overhead per chunk and tap."""
    c = CPU
    lead = problem.batch * problem.in_channels
    shape = list(problem.in_shape)
    total = c["separable_call"]
    real_bytes = _real_bytes(problem)
    for axis, k in enumerate(problem.kernel_shape):
        pads = problem.padding[axis]
        full = (problem.batch, problem.in_channels) + tuple(shape)
        scipy_dtype = problem.dtype.kind in "iu" or (
            problem.dtype == np.float64 and scipy_line_faster(full, 2 + axis, 8))
        if scipy_dtype and separable.scipy_pass_applies(pads, k, problem.stride[axis],
                                                        problem.dilation[axis]):
            # scipy.ndimage.correlate1d over the whole intermediate, no padded copy
            elems = lead * math.prod(shape)
            stride = problem.dtype.itemsize * math.prod(shape[axis + 1:])
            total += c["call"] + elems * (k * c["scipy_line_mac"] + (
                c["scipy_line_gather"] if stride >= PAGE_BYTES else 0.0))
            shape[axis] = problem.out_shape[axis]
            continue
        padded = shape[:axis] + [problem.padded_shape()[axis]] + shape[axis + 1:]
        shape[axis] = problem.out_shape[axis]
        outputs = lead * math.prod(shape)
        rows = outputs // shape[-1] if axis == len(shape) - 1 else 0
        total += (c["call"] + c["separable_pass"] + rows * k * c["separable_run"]
                  + lead * math.prod(padded) * c["copy"] / 3 * real_bytes / 8
                  + max(1, outputs // CHUNK) * k * c["chunk_tap"]
                  + cplx * outputs * k * c["separable_mac"] * problem.dtype.itemsize / 8)
    return c["call"] + total


def _winograd(problem, cplx):
    """The cheaper of the last-axis path (:func:`winograd_axis_price`) and the N-D tiles
    (:func:`_winograd_tiles`): the path :func:`winograd_axis_pays` runs."""
    return min(winograd_axis_price(problem), _winograd_tiles(problem, cplx))


def winograd_axis_pays(problem):
    """Whether ``winograd`` runs ``problem`` on the last-axis path
    (:mod:`.winograd_axis`): it applies and is priced at most the N-D tiles' time
    (memoised as :func:`winograd_axis_price`)."""
    return _axis_pays(problem, *_price_state(problem))


def winograd_axis_price(problem):
    """Predicted seconds of :mod:`.winograd_axis` on ``problem`` (``inf`` where it does
    not apply): its transforms by element of ``V`` and ``M`` and its grouped problem's
    :func:`_gemm` price (memoised with what the prices read besides the problem: the
    cores, whether the GEMMs run oneMKL, and the error gate, which picks the tiles)."""
    return _axis_price(problem, *_price_state(problem))


def _price_state(problem):
    return workers(), blas.mkl() is None, winograd_conv.growth_limit(problem.dtype)


@memoized()
def _axis_pays(problem, cores, matmul, limit):
    axis = _axis_price(problem, cores, matmul, limit)
    return axis < math.inf and axis <= _winograd_tiles(
        problem, 4.0 if problem.is_complex else 1.0)


@memoized()
def _axis_price(problem, cores, matmul, limit):
    fwd = winograd_axis.forward_problem(problem)
    if fwd is None:
        return math.inf
    c = CPU
    _, _, transformed, products = winograd_axis.stage_elements(fwd)
    return (c["call"] + c["winograd_piece"] + transformed * c["winograd_axis_tile"]
            + products * c["winograd_axis_product"]
            + _gemm(winograd_axis.inner_problem(fwd), 1.0))


def _winograd_tiles(problem, cplx):
    """Per N-D piece: the input transform (one pass per axis over the tiles), the batched
    GEMM over channels per transform position, the output transform; plus the padded
    copy.  An input gradient is costed as its forward problem
    (:func:`~cupyconv.core.transpose.transpose`); ``inf`` where the tiles do not apply
    (the table's ``applies`` has already asked ``can_implement``)."""
    c = CPU
    if problem.op == GRAD_INPUT:
        if not winograd_conv.grad_input_applies(problem)[0]:
            return math.inf
        problem = transpose(problem).forward
    plan = winograd_conv.plan_tiles(problem)
    if isinstance(plan, str):
        return math.inf
    mac = c["blas"] * (0.5 if problem.dtype in (np.float32, np.complex64) else 1.0)
    cg, kg = problem.in_channels // problem.groups, problem.gemm_n
    total = c["call"] + (problem.batch * problem.in_channels * math.prod(problem.padded_shape())
                         * c["copy"] / 3)
    for pieces, tile in plan:
        tiles = problem.batch * math.prod(-(-p.count // m) for p, m in zip(pieces, tile))
        alpha = math.prod(p.r + m - 1 for p, m in zip(pieces, tile))
        elems = tiles * alpha * (problem.in_channels + problem.out_channels)
        total += (c["winograd_piece"] + cplx * elems * problem.ndim * c["winograd_elem"]
                  + cplx * tiles * alpha * problem.groups * kg * cg * mac)
    return total


_MODELS = {"direct": _direct, "implicit_gemm": _direct, "gemm": _gemm, "fft": _fft,
           "separable": _separable, "winograd": _winograd}


def predict(problem, name):
    """Predicted seconds of ``name`` on the CPU backend."""
    return _MODELS[name](problem, 4.0 if problem.is_complex else 1.0)


def predict_times(problem, names):
    """``{name: predicted seconds}`` on the CPU backend."""
    times = {}
    for name in names:
        times[name] = predict(problem, name)
    return times
