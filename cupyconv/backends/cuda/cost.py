"""GPU cost model: predicted seconds per algorithm from counted work.

Each algorithm is bounded below by its arithmetic (FLOPs over a fraction of
the device's peak) and its memory traffic (bytes over the device's DRAM
bandwidth); the larger of the two plus launch latency is the prediction.
The efficiency fractions are the model's only tuned numbers; device numbers
(SMs, clocks, bandwidth, FP64 ratio) come from :class:`DeviceInfo`.
"""
from __future__ import annotations

import math

from .. import fft_conv

__all__ = ["predict_times", "EFFICIENCY"]

#: Fraction of peak each algorithm reaches on large problems (CUDA cores;
#: the kernels use no tensor cores).
EFFICIENCY = dict(direct=0.35, implicit_gemm=0.45, gemm=0.7, fft=0.08)
#: Kernel launch + Python dispatch per launch, seconds.
LAUNCH_S = 8e-6


def predict_times(problem, device, candidates):
    """``{algorithm: seconds}`` for each candidate on ``device``."""
    peak = device.peak_flops(problem.dtype)
    bw = device.bandwidth
    item = problem.dtype.itemsize
    flops = problem.flops
    base_bytes = problem.bytes_moved
    times = {}
    for name in candidates:
        if name in ("direct", "implicit_gemm"):
            eff = EFFICIENCY[name]
            # Tiny channel counts leave the GEMM tiles mostly empty.
            if name == "implicit_gemm":
                eff *= min(1.0, problem.gemm_n / 64) ** 0.5 * min(1.0, problem.gemm_k / 32) ** 0.5
            t = max(flops / (peak * eff), base_bytes / bw) + LAUNCH_S
        elif name == "gemm":
            cols = problem.column_bytes()
            tiny = min(1.0, problem.gemm_n / 16)
            t = (2 * cols / bw + flops / (peak * EFFICIENCY["gemm"] * max(tiny, 0.05))
                 + base_bytes / bw + 2 * LAUNCH_S)
        elif name == "fft":
            fwd = fft_conv.transposed_forward(problem)
            npts = math.prod(fwd.padded_shape())
            cg = fwd.in_channels // fwd.groups
            transforms = (fwd.batch * fwd.in_channels + fwd.out_channels * cg
                          + fwd.batch * fwd.out_channels)
            fft_flops = 2.5 * transforms * npts * math.log2(max(npts, 2))
            spectra = 2 * max(item, 4) * npts * transforms
            t = (max(fft_flops / (peak * EFFICIENCY["fft"]), 3 * spectra / bw)
                 + 6 * LAUNCH_S)
        else:
            continue
        times[name] = t
    return times
