"""GPU cost model: predicted seconds per algorithm from counted work.

Each algorithm is bounded below by its arithmetic (FLOPs over a fraction of
the device's peak) and its memory traffic (bytes over the device's DRAM
bandwidth); the larger of the two plus launch latency is the prediction.
The efficiency fractions are the model's only tuned numbers; device numbers
(SMs, clocks, bandwidth, FP64 ratio) come from :class:`DeviceInfo`.
``separable`` is the sum of the ``direct`` predictions of its 1-D passes (each a
direct-kernel launch on a depthwise problem, :func:`.separable.pass_problems`), so
it shares ``direct``'s efficiency.

Measured efficiencies replace the defaults when a JSON file for the device
exists: ``benchmarks/reference_cases.py`` (run by ``scripts/device_check.sh``)
writes ``{"device": name, "efficiency": {algorithm: fraction}}`` to
:func:`efficiency_path`; ``$CUPYCONV_EFFICIENCY`` names another file.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import warnings

from ..._kernels import launch
from ..._paths import cache_root
from ..._vocabulary import FORWARD
from .. import fft_conv
from . import algorithms, implicit_grads, separable, winograd

__all__ = ["predict_times", "EFFICIENCY", "HOST_S", "TENSOR_FLOPS_PER_SM_CLOCK",
           "tensor_peak_flops", "efficiency_path", "efficiencies", "efficiency_key", "calibrate"]

#: Fraction of FP32 peak each algorithm reaches on large problems when nothing was
#: measured on this device (CUDA cores, no tensor cores): the fractions
#: ``benchmarks.reference_cases`` measured on an H200 on 2026-11-30
#: (docs/benchmarks/gpu_h200_2026-11-30.md; 256-channel 3x3 layers for implicit_gemm,
#: gemm, fft, the single-channel 256^3 * 5^3 convolve for direct).
EFFICIENCY = dict(direct=0.04, implicit_gemm=0.45, gemm=0.58, fft=0.2, fft_mix=0.15,
                  winograd=0.5,
                  # Fractions of the TENSOR-CORE peak (:func:`tensor_peak_flops`) for the
                  # implicit GEMM's tensor-core tiles and cuBLAS's tensor-core GEMMs: estimates
                  # until ``benchmarks.tensor_cores`` (in scripts/device_check.sh) has measured
                  # them on the device.
                  implicit_gemm_tc=0.3, gemm_tc=0.5)
# ``winograd``: the fraction of peak its batched GEMMs reach, an UNCALIBRATED estimate
# (gemm's cuBLAS fraction rounded down for the smaller per-position GEMMs); its transforms
# are costed as memory traffic.  No device has measured it yet (docs/winograd.md).
# ``fft_mix``: the fraction of peak of the channel mixing of ``fft`` (a complex product
# per frequency over the input channels, ``einsum``): 2026-11-30's H200 run timed the 2-D
# 256-channel layer at 7.67 ms, against 1.68 ms predicted without this term.

#: Host time per call of each algorithm, seconds: the floor of its times over the small
#: cases of the quick bench on the H200 host (CuPy 14, docs/benchmarks/gpu_h200_2026-12-01:
#: direct 0.26 ms, implicit_gemm 0.29, gemm 0.44, fft 1.2, winograd 1.6 on problems of
#: microseconds of device work).  Ranks algorithms on small problems, where it is all.
HOST_S = dict(direct=2.5e-4, separable=2.5e-4, implicit_gemm=2.8e-4, gemm=4.2e-4, fft=1.1e-3,
              winograd=1.5e-3)

#: Dense tensor-core FLOPs (an FMA counts 2) per SM per clock of the ``mma.sync`` atoms
#: the kernels use, by compute capability (NVIDIA A100 / H100 architecture whitepapers:
#: A100 19.5 / 156 / 312 TFLOP/s float64 / TF32 / float16 at 108 SMs x 1.41 GHz; H100 SXM
#: 67 / 495 / 989 at 132 SMs x 1.83-1.98 GHz).  Other devices: no entry, the FMA peak.
TENSOR_FLOPS_PER_SM_CLOCK = {
    80: {"float64": 128, "tf32": 1024, "float16": 2048},
    90: {"float64": 256, "tf32": 2048, "float16": 4096},
}


def efficiency_path(device_name):
    """Where measured efficiencies of ``device_name`` live (``$CUPYCONV_EFFICIENCY`` wins)."""
    env = os.environ.get("CUPYCONV_EFFICIENCY")
    if env:
        return env
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device_name).strip("-").lower() or "device"
    return str(cache_root() / "efficiency" / f"{slug}.json")


@functools.lru_cache(maxsize=16)
def efficiencies(device_name):
    """The defaults, overridden by the measured fractions in (0, 1] of the device's file.

    A missing file means the defaults; an unreadable or malformed one warns
    once and means the defaults too (the model never runs on garbage).
    """
    path = efficiency_path(device_name)
    merged = dict(EFFICIENCY)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return merged
    except (OSError, ValueError) as exc:
        warnings.warn(f"ignoring the efficiency file {path}: {exc}", RuntimeWarning)
        return merged
    measured = data.get("efficiency") if isinstance(data, dict) else None
    if not isinstance(measured, dict):
        warnings.warn(f"ignoring the efficiency file {path}: no 'efficiency' mapping",
                      RuntimeWarning)
        return merged
    for name, value in measured.items():
        if name in merged and isinstance(value, (int, float)) and 0 < value <= 1:
            merged[name] = float(value)
    return merged
#: Kernel launch + Python dispatch per launch, seconds.
LAUNCH_S = 8e-6


def _stencil(problem, peak, bw, eff):
    """One tap-sum kernel launch: the larger of arithmetic and compulsory traffic."""
    return max(problem.flops / (peak * eff), problem.bytes_moved / bw) + LAUNCH_S


def tensor_peak_flops(problem, device):
    """Peak FLOP/s of the tensor-core atom ``problem``'s data would use on ``device``
    (float64 DMMA, float32 under ``precision="tf32"``, float16), or ``None``."""
    kind = problem.dtype.name
    if kind == "float32":
        kind = "tf32" if problem.precision == "tf32" else None
    rate = TENSOR_FLOPS_PER_SM_CLOCK.get(device.arch, {}).get(kind)
    return None if rate is None else rate * device.sm_count * device.clock_hz


def predict_times(problem, device, candidates, efficiency=None):
    """``{algorithm: seconds}`` for each candidate on ``device`` (``efficiency``: a full
    mapping replacing :func:`efficiencies`, as :func:`calibrate` varies one entry)."""
    peak = device.peak_flops(problem.dtype)
    tc_peak = tensor_peak_flops(problem, device)
    bw = device.bandwidth
    item = problem.dtype.itemsize
    flops = problem.flops
    base_bytes = problem.bytes_moved
    eff_of = efficiency or efficiencies(device.name)
    times = {}
    for name in candidates:
        if name == "direct":
            t = _stencil(problem, peak, bw, eff_of[name])
        elif name == "implicit_gemm":
            # the gradients run as forward problems (.implicit_grads); an input gradient
            # that is not a convolution of dy as the column GEMM, plus the columns' traffic
            columns = implicit_grads.needs_columns(problem)
            if problem.op == FORWARD:
                fwd = problem
            elif columns:
                fwd = implicit_grads.column_problem(problem, problem.batch)
            else:
                fwd = implicit_grads.forward_problem(problem)
            tile = launch.implicit_gemm_tile(fwd, **algorithms.tensor_core_flags(fwd, device))
            rate, eff = peak, eff_of[name]
            if tc_peak and tile[3] == 2:
                rate, eff = tc_peak, eff_of["implicit_gemm_tc"]
            # Tiny channel counts leave the GEMM tiles mostly empty.
            eff *= min(1.0, fwd.gemm_n / 64) ** 0.5 * min(1.0, fwd.gemm_k / 32) ** 0.5
            if problem.op != FORWARD:     # no split-K: few CTAs leave SMs idle
                ctas = -(-fwd.gemm_m // tile[0]) * -(-fwd.gemm_n // tile[1]) * fwd.groups
                eff *= min(1.0, ctas / (2 * device.sm_count))
            t = _stencil(problem, rate, bw, eff)
            if columns:
                t += 2 * problem.column_bytes() / bw + LAUNCH_S
        elif name == "separable":
            # one direct launch per pass: its taps, its input read and its output written
            t = sum(_stencil(p, peak, bw, eff_of["direct"])
                    for _, p in separable.pass_problems(problem))
        elif name == "gemm":
            cols = problem.column_bytes()
            tiny = min(1.0, problem.gemm_n / 16)
            # cuBLAS: float64 on DMMA, float16 on HMMA by itself (sm_80+); TF32 as asked
            rate, eff = (tc_peak, eff_of["gemm_tc"]) if tc_peak else (peak, eff_of["gemm"])
            t = (2 * cols / bw + flops / (rate * eff * max(tiny, 0.05))
                 + base_bytes / bw + 2 * LAUNCH_S)
        elif name == "fft":
            fwd = fft_conv.transposed_forward(problem)
            npts = math.prod(fwd.padded_shape())
            cg = fwd.in_channels // fwd.groups
            transforms = (fwd.batch * fwd.in_channels + fwd.out_channels * cg
                          + fwd.batch * fwd.out_channels)
            fft_flops = 2.5 * transforms * npts * math.log2(max(npts, 2))
            spectra = 2 * max(item, 4) * npts * transforms
            # channel mixing: a complex multiply-add per (n, k, c) and frequency
            mixing = cg * fwd.out_channels > fwd.groups
            mix_flops = 8 * fwd.batch * fwd.out_channels * cg * npts if mixing else 0
            t = (max(fft_flops / (peak * eff_of["fft"]), 3 * spectra / bw)
                 + mix_flops / (peak * eff_of["fft_mix"]) + 6 * LAUNCH_S)
        elif name == "winograd":
            w_flops, w_bytes, launches = winograd.work(problem)
            t = (w_flops / (peak * eff_of["winograd"]) + w_bytes / bw
                 + launches * LAUNCH_S)
        else:
            continue
        times[name] = t + HOST_S.get(name, 0.0)
    return times


def efficiency_key(problem, device, name):
    """The :data:`EFFICIENCY` entry that sets ``name``'s prediction for ``problem``."""
    if name == "implicit_gemm" and problem.op == FORWARD and tensor_peak_flops(problem, device):
        tile = launch.implicit_gemm_tile(problem, **algorithms.tensor_core_flags(problem, device))
        return "implicit_gemm_tc" if tile[3] == 2 else name
    if name == "gemm" and tensor_peak_flops(problem, device):
        return "gemm_tc"
    if name == "fft":
        fwd = fft_conv.transposed_forward(problem)
        return "fft_mix" if fwd.in_channels * fwd.out_channels > fwd.groups ** 2 else name
    return "direct" if name == "separable" else name


def calibrate(problem, device, name, seconds):
    """``(key, fraction)``: the efficiency of :func:`efficiency_key` for which the model
    predicts the measured ``seconds`` of ``name`` on ``problem`` (bisection; the model is
    monotone in it), clamped to [1e-4, 1]: what a benchmark writes to the device's file,
    so that every algorithm is calibrated in its own model's terms (the FFT's transforms
    and channel mixing, not the direct FLOP count)."""
    key = efficiency_key(problem, device, name)
    eff = dict(efficiencies(device.name))

    def predicted(fraction):
        eff[key] = fraction
        return predict_times(problem, device, [name], efficiency=eff)[name]
    lo, hi = 1e-4, 1.0
    if predicted(hi) >= seconds:
        return key, hi
    if predicted(lo) <= seconds:
        return key, lo
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if predicted(mid) > seconds else (lo, mid)
    return key, math.sqrt(lo * hi)
