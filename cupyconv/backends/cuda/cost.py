"""GPU cost model: the roofline the CUDA algorithms price themselves with (each class of
``backends/cuda/table.py`` owns its price, its efficiency entry and its kernel choice;
the implicit GEMM's are :mod:`.implicit_choice`).

Each algorithm is bounded below by its arithmetic (FLOPs over a fraction of
the device's peak) and its memory traffic (bytes over the device's DRAM
bandwidth); the larger of the two plus launch latency is its device time, and
the prediction is the larger of that and the algorithm's host time per call
(:data:`HOST_S`: asynchronous launches overlap the two).  Launches too small to
fill the device are slowed by their fill fraction (the direct kernel's outputs,
the implicit GEMM's CTAs).  The efficiency fractions and host times are the
model's tuned numbers, fitted to measured runs (:func:`calibrate`,
``benchmarks/fit_cost_model.py``); device numbers (SMs, clocks, bandwidth, FP64
ratio) come from :class:`DeviceInfo`.

Measured efficiencies replace the defaults when a JSON file for the device
exists: ``benchmarks/reference_cases.py`` and ``benchmarks/tensor_cores.py`` (run by
``scripts/device_check.sh``) write ``{"device": name, "efficiency": {entry: fraction}}``
(each fitted with :func:`calibrate`) to
:func:`efficiency_path`; ``$CUPYCONV_EFFICIENCY`` names another file.
"""
from __future__ import annotations

import json
import math
import os
import re
import warnings

from ... import config
from ..._kernels import evidence, launch
from ..._kernels.kernel_config import KernelConfig, family_config
from ..._paths import cache_root
from ..._lru import cached

__all__ = ["EFFICIENCY", "HOST_S", "PASS_HOST_S", "LAUNCH_S", "TENSOR_FLOPS_PER_SM_CLOCK",
           "tensor_peak_flops", "tensor_kind", "efficiency_path", "efficiencies", "calibrate",
           "stencil_time", "direct_time", "kernel_config_memo", "direct_config",
           "gemm_library", "warn_if_unverified"]

#: Fraction of peak each algorithm reaches on large problems when nothing was measured on
#: this device: fitted to the H200 runs of 2026-11-30 and 2026-12-01
#: (``python -m benchmarks.fit_cost_model docs/benchmarks/gpu_h200_2026-12-01/first_run``
#: prints every fitted value; docs/benchmarks/gpu_h200_2026-12-01/README.md the table).
#: The FMA entries are fractions of the FP32/FP64 peak, the ``*_tc_*`` ones of the
#: tensor-core peak (:func:`tensor_peak_flops`).
EFFICIENCY = dict(
    # the 256-channel layers: implicit_gemm 0.51 / 0.46, gemm 0.64 / 0.71 (the column
    # traffic counted apart); direct 0.047 on the single-channel 256^3 * 5^3 convolve
    direct=0.04, implicit_gemm=0.45, gemm=0.6,
    # the FFT's transforms (single channel) and its channel mixing: 0.14 / 0.02 / 0.003 on
    # the 2-D, 3-D, 4-D channel layers; the median, so the FFT does not win those by error
    fft=0.2, fft_mix=0.02,
    # winograd: no large layer measured yet; the small cases of benchmarks.winograd_gpu ran
    # 4-5x slower than implicit_gemm, so a tenth of the first estimate (0.5) until the
    # reference step of the device check calibrates it
    winograd=0.05,
    # float64 DMMA tiles 0.30 / 0.27 / 0.21; cuBLAS DGEMM 0.88 / 0.95 / 0.57
    implicit_gemm_tc_float64=0.28, gemm_tc_float64=0.85,
    # the multistage float64 DMMA tiles (issue 26 item 3, variants 6/7: 128x64x16, 3 cp.async
    # stages, 2 CTAs per SM, 3.4 instructions per DMMA in the sm_90 SASS): an ESTIMATE,
    # never timed: above the 64x64x8 tile's measured 0.27-0.30 (8.75 per DMMA, shared
    # memory saturated), under cuBLAS DGEMM's 0.85, the channels-first weight gather (4x L2
    # over-fetch) still in its loop; until the device check's reference step measures it
    implicit_gemm_ms_float64=0.45,
    # their channels-last twins (variants 9/10: x (N, *S, C) and KRSC weights by 16-byte
    # cp.async, 1 L2 sector per sector used): an ESTIMATE, never timed on a GPU: the same
    # loop less the weights' 4x over-fetch, above 0.45, under cuBLAS DGEMM's 0.85, until
    # the device check's reference step measures it
    implicit_gemm_cl_float64=0.55,
    # TF32 and float16 mma.sync tiles: 0.079 / 0.070 and 0.075 / 0.068 (issue-bound on the
    # scalar gather, docs/kernels.md); cuBLAS TF32 / float16 through the stated compute type
    # (cublas_gemm.py) is not measured yet: the cuBLAS GEMM estimate
    implicit_gemm_tc_tf32=0.07, implicit_gemm_tc_float16=0.07,
    # the multistage TF32 / float16 tiles (issue 26, variant 4): not timed yet; a prior
    # from their SASS (3 instructions per HMMA, no over-fetch, 2 CTAs per sm_90 SM), under
    # cuDNN's measured 0.47-0.69 / 0.40-0.60, until the device check calibrates them
    # (bfloat16 reads every *_float16 entry, its tiles included: its m16n8k16 atom runs at
    # the f16 atom's rate and its multistage tiles are float16's loop, tensor_kind)
    implicit_gemm_ms_tf32=0.3, implicit_gemm_ms_float16=0.3,
    # the sm_90a warpgroup-MMA tiles (issue 27, variant 8; compute capability 9.0 only): an
    # ESTIMATE, never timed: cuDNN's measured 0.47-0.69 / 0.40-0.60 on the same layers, less
    # the gather's share, until the device check's reference step calibrates them
    implicit_gemm_wg_tf32=0.45, implicit_gemm_wg_float16=0.45,
    gemm_tc_tf32=0.5, gemm_tc_float16=0.5,
)
# ``fft_mix``: the fraction of peak of the channel mixing of ``fft`` (a complex product
# per frequency over the input channels, ``einsum``): the first H200 run timed the 2-D
# 256-channel layer at 7.67 ms, against 1.68 ms predicted without this term.

#: Host time per call of each algorithm, seconds: the floor of its times over the small
#: cases of the quick bench on the H200 host (CuPy 14, docs/benchmarks/gpu_h200_2026-12-01:
#: direct 0.26 ms, implicit_gemm 0.29, gemm 0.44, fft 1.2, winograd 1.6 on problems of
#: microseconds of device work).  Ranks algorithms on small problems, where it is all; on
#: large ones it overlaps the device's work (asynchronous launches), so a prediction is
#: the larger of the two.
#: ``PASS_HOST_S``: each further 1-D pass of ``separable`` (a launch and its Python), an
#: estimate.
PASS_HOST_S = 4e-5
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


@cached(maxsize=16)
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


#: Resident threads per SM the fill factor counts against (2048 on sm_80/sm_90).
THREADS_PER_SM = 2048


def _fill(threads, device):
    """The fraction of the device a launch of ``threads`` (one per output) keeps busy."""
    return min(1.0, max(threads, 1) / (device.sm_count * THREADS_PER_SM))


def stencil_time(problem, peak, bw, eff):
    """One tap-sum kernel launch: the larger of arithmetic and compulsory traffic."""
    return max(problem.flops / (peak * eff), problem.bytes_moved / bw) + LAUNCH_S


def direct_time(problem, peak, bw, eff, device):
    """The direct kernel: a thread per output, so a small output leaves SMs idle (the
    H200 run's single-channel cases: a 162^2 output ran at a tenth of a 256^3 one's rate)."""
    outputs = problem.batch * max(problem.out_channels * math.prod(problem.out_shape),
                                  problem.in_channels * math.prod(problem.in_shape))
    return stencil_time(problem, peak, bw, eff * _fill(outputs, device))


def tensor_kind(problem):
    """The tensor-core arithmetic ``problem``'s data would use: ``"float64"`` (DMMA),
    ``"tf32"`` (float32 under ``precision="tf32"``), ``"float16"``, or ``None``."""
    kind = problem.dtype.name
    if kind == "float32":
        return "tf32" if problem.precision == "tf32" else None
    if kind == "bfloat16":          # the bf16 atom runs at the f16 atom's rate
        return "float16"
    return kind if kind in ("float64", "float16") else None


def tensor_peak_flops(problem, device):
    """Peak FLOP/s of the tensor-core atom ``problem``'s data would use on ``device``
    (:func:`tensor_kind`), or ``None``."""
    rate = TENSOR_FLOPS_PER_SM_CLOCK.get(device.arch, {}).get(tensor_kind(problem))
    return None if rate is None else rate * device.sm_count * device.clock_hz


def calibrate(problem, device, algorithm, seconds):
    """``(key, fraction)``: the efficiency of ``algorithm.efficiency_key`` for which the
    model predicts the measured ``seconds`` of ``algorithm`` (an entry of the algorithm
    table, ``table.TABLE``) on ``problem`` (bisection; the model is
    monotone in it), clamped to [1e-4, 1]; ``None`` where the model predicts no finite
    time (an algorithm it considers unable to run).  What a benchmark writes to the
    device's file, so that every algorithm is calibrated in its own model's terms (the
    FFT's transforms and channel mixing, not the direct FLOP count)."""
    key = algorithm.efficiency_key(problem, device)
    eff = dict(efficiencies(device.name))

    def predicted(fraction):
        eff[key] = fraction
        return algorithm.predicted(problem, device, efficiency=eff)
    lo, hi = 1e-4, 1.0
    if not math.isfinite(predicted(hi)):      # the model has no prediction to fit
        return key, None
    if predicted(hi) >= seconds:
        return key, hi
    if predicted(lo) <= seconds:
        return key, lo
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if predicted(mid) > seconds else (lo, mid)
    return key, math.sqrt(lo * hi)


@cached(maxsize=512)
def kernel_config_memo(choose, problem, device, verified_only):
    """The one kernel choice ``choose(problem, device, arch class, index64)`` of an
    algorithm of the table on ``problem`` (channels-first operands as the cost model
    assumes them) on ``device``: the :class:`KernelConfig` it prices and the launcher
    builds, memoised (``table.CudaAlgorithm.kernel_config`` asks it); ``verified_only``
    is not read here but keys the memo: the tile choice reads the filter in force
    (``evidence.verified_only``)."""
    return choose(problem, device, evidence.arch_class(device.arch),
                  launch.choose_index64(problem))


def direct_config(algorithm, problem, device, arch, index64) -> KernelConfig:
    """The direct kernel's :class:`KernelConfig` (``direct``, and each pass of
    ``separable``): its first tile whose input tile fits the device's shared memory."""
    found = launch.direct_tile(problem, device.smem_per_block)
    return family_config(algorithm, "direct_conv", problem.dtype, arch, index64,
                         tile=found[0] if found else ())


def gemm_library(device):
    """The GEMM library call of ``runner.matmul`` on ``device``."""
    blas = "cuBLAS strided-batched"
    return blas if evidence.library_runs(blas, device.hardware) else "cupy.matmul"


def warn_if_unverified(algorithm, problem, device, workspace_limit=None):
    """Warn once (``evidence.warn_unverified``) where ``algorithm``'s configuration of
    ``problem`` under ``workspace_limit`` (its ``kernel_config``) runs without hardware
    evidence on a GPU, or wherever ``config.kernels`` is set."""
    if evidence.FILTER[config.kernels, device.hardware][1]:   # evidence.warns
        cfg = algorithm.kernel_config(problem, device, workspace_limit)
        if not evidence.is_verified(cfg):
            evidence.warn_unverified(cfg, "an explicit method=, config.kernels = 'all', or no "
                                          "verified configuration runs this problem")
