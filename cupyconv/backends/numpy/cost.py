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

from ..._vocabulary import FORWARD, GRAD_INPUT
from .. import fft, fft_conv
from .direct import compiled_applies

__all__ = ["predict_times", "CPU"]

#: CPU constants (seconds).
CPU = dict(
    tap_overhead=4e-6,      # Python + NumPy dispatch per kernel tap (direct)
    elem=0.6e-9,            # one multiply-add streamed through NumPy (direct)
    compiled_call=1e-6,     # numpy.convolve fixed cost (1-D compiled direct)
    compiled_mac=0.45e-9,   # numpy.convolve per multiply-add, kernels < 128 taps
    compiled_mac_long=0.15e-9,  # ... kernels >= 128 taps (measured 0.13-0.17 ns)
    copy=3.0e-9,            # one element gathered into the column buffer
    blas=1.0 / 8e9,         # one GEMM multiply-add in BLAS (float64)
    nonblas=1.0e-9,         # one integer matmul multiply-add (no BLAS)
    fft=0.2e-9,             # per point * log2(line length) of one real FFT pass
    fft_line=14000,         # line length at which a pass costs twice per point
    fft_elem=1.0e-9,        # per point per array: products, padding, gathers
    fft_einsum=4.0e-9,      # per complex multiply-add of the channel contraction
    call=3e-6,              # fixed per-call overhead of the tap-loop/gemm/fft paths
    gemm_call=2.5e-5,       # extra fixed cost of gemm: buffer, transposes, matmul
    fft_call=4e-5,          # extra fixed cost of fft: three transforms, windowing
)


def _macs(problem):
    return problem.groups * problem.gemm_m * problem.gemm_n * problem.gemm_k


def _direct(problem, cplx):
    c = CPU
    macs = _macs(problem)
    if compiled_applies(problem) and problem.ndim == 1:
        per = c["compiled_mac"] if problem.kernel_shape[0] < 128 else c["compiled_mac_long"]
        return c["compiled_call"] + cplx * macs * per
    single = problem.gemm_n == 1 and problem.in_channels == problem.groups
    per_mac = c["elem"] if single else c["elem"] * 0.5
    return c["call"] + problem.taps * c["tap_overhead"] + cplx * macs * per_mac


def _gemm(problem, cplx):
    c = CPU
    mac = c["nonblas"] if problem.dtype.kind in "biu" else c["blas"]
    if problem.dtype in (np.float32, np.complex64):
        mac *= 0.5
    cols = problem.groups * problem.gemm_k * problem.gemm_m
    scatter = cols * c["copy"] + problem.taps * c["tap_overhead"] if problem.op == GRAD_INPUT else 0
    return c["call"] + c["gemm_call"] + cols * c["copy"] + cplx * _macs(problem) * mac + scatter


def _fft(problem, cplx):
    c = CPU
    extra = 0.0
    if problem.op != FORWARD:
        extra = problem.output_size * c["fft_elem"]       # transposes, upsampling, folding
        problem = fft_conv.transposed_forward(problem)
    lengths = [fft.fast_len(s + pb + pa) for s, (pb, pa) in zip(problem.in_shape, problem.padding)]
    npts = math.prod(lengths)
    span = [d * (k - 1) + 1 for d, k in zip(problem.dilation, problem.kernel_shape)]
    if fft.overlap_add_applies(problem, problem.in_shape, span):
        lengths = [fft.fast_len(2 * span[0])]      # overlap-add: blocks of ~2 kernels
        npts = 2 * lengths[0] * -(-problem.in_shape[0] // lengths[0])
    # one pass per axis; long lines fall out of cache (fitted: a 65536-point
    # 1-D rfft costs ~5x more per point*log2 than the lines of a 60^3 one)
    per_point = sum(math.log2(max(n, 2)) * (1 + n / c["fft_line"]) for n in lengths)
    cg, kg = problem.in_channels // problem.groups, problem.gemm_n
    transforms = (problem.batch * problem.in_channels + problem.out_channels * cg
                  + problem.batch * problem.out_channels)
    products = problem.batch * problem.groups * kg * cg
    single = problem.gemm_n == 1 and problem.in_channels == problem.groups
    product = c["fft_elem"] if single else c["fft_einsum"]
    return extra + c["call"] + c["fft_call"] + cplx * npts * (
        transforms * per_point * c["fft"] + transforms * c["fft_elem"] + products * product)


_MODELS = {"direct": _direct, "implicit_gemm": _direct, "gemm": _gemm, "fft": _fft}


def predict_times(problem, names):
    """``{name: predicted seconds}`` on the CPU backend."""
    cplx = 4.0 if problem.is_complex else 1.0
    return {name: _MODELS[name](problem, cplx) for name in names}
