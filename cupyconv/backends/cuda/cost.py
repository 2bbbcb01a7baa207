"""GPU cost model: predicted seconds per algorithm from counted work.

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
``separable`` is the sum of the ``direct`` predictions of its 1-D passes (each a
direct-kernel launch on a depthwise problem, :func:`.separable.pass_problems`), so
it shares ``direct``'s efficiency.

Measured efficiencies replace the defaults when a JSON file for the device
exists: ``benchmarks/reference_cases.py`` and ``benchmarks/tensor_cores.py`` (run by
``scripts/device_check.sh``) write ``{"device": name, "efficiency": {entry: fraction}}``
(each fitted with :func:`calibrate`) to
:func:`efficiency_path`; ``$CUPYCONV_EFFICIENCY`` names another file.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import warnings

from ..._kernels import evidence, launch, registry, wgmma_launch
from ..._kernels.kernel_config import KernelConfig, family_config, gemm_config
from ..._paths import cache_root
from ..._vocabulary import FORWARD, GRAD_WEIGHT
from ...core.transpose import column_forward, transpose
from .. import fft_conv
from . import algorithms, implicit_grads, relayout, separable, winograd
from ..._lru import cached

__all__ = ["predict_times", "EFFICIENCY", "HOST_S", "TENSOR_FLOPS_PER_SM_CLOCK",
           "tensor_peak_flops", "efficiency_path", "efficiencies", "efficiency_key", "calibrate",
           "relayout_pays", "weight_gradient_splits", "MAX_SPLITS", "kernel_config",
           "warn_if_unverified"]

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


def _stencil(problem, peak, bw, eff):
    """One tap-sum kernel launch: the larger of arithmetic and compulsory traffic."""
    return max(problem.flops / (peak * eff), problem.bytes_moved / bw) + LAUNCH_S


def _direct(problem, peak, bw, eff, device):
    """The direct kernel: a thread per output, so a small output leaves SMs idle (the
    H200 run's single-channel cases: a 162^2 output ran at a tenth of a 256^3 one's rate)."""
    outputs = problem.batch * max(problem.out_channels * math.prod(problem.out_shape),
                                  problem.in_channels * math.prod(problem.in_shape))
    return _stencil(problem, peak, bw, eff * _fill(outputs, device))


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
    keep = evidence.verified_only(device.hardware)
    times = {}
    for name in candidates:
        host = HOST_S.get(name, 0.0)
        if keep and name in _CONFIGS and not evidence.is_verified(
                kernel_config(problem, device, name)):
            times[name] = math.inf          # the ledger: auto keeps to verified kernels
            continue
        if name == "direct":
            t = _direct(problem, peak, bw, eff_of[name], device)
        elif name == "implicit_gemm":
            t = _implicit_gemm_times(problem, device, eff_of, peak, tc_peak)[0]
        elif name == "separable":
            # one direct launch per pass: its taps, its input read and its output written;
            # each pass after the first adds its launch's host time
            passes = [p for _, p in separable.pass_problems(problem)]
            t = sum(_direct(p, peak, bw, eff_of["direct"], device) for p in passes)
            host += PASS_HOST_S * (len(passes) - 1)
        elif name == "gemm":
            cols = problem.column_bytes()
            tiny = min(1.0, problem.gemm_n / 16)
            # cuBLAS: float64 on DMMA, float16 on HMMA by itself (sm_80+); TF32 as asked
            rate, eff = ((tc_peak, eff_of["gemm_tc_" + tensor_kind(problem)]) if tc_peak
                         else (peak, eff_of["gemm"]))
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
            mix_flops = 8 * fwd.batch * fwd.out_channels * cg * npts if _mixes(fwd) else 0
            t = (max(fft_flops / (peak * eff_of["fft"]), 3 * spectra / bw)
                 + mix_flops / (peak * eff_of["fft_mix"]) + 6 * LAUNCH_S)
        elif name == "winograd":
            w_flops, w_bytes, launches = winograd.work(problem)
            t = (w_flops / (peak * eff_of["winograd"]) + w_bytes / bw
                 + launches * LAUNCH_S)
        else:
            continue
        # the launches are asynchronous: the host's time overlaps the device's
        times[name] = max(t, host)
    return times


def _implicit_gemm_times(problem, device, eff_of, peak, tc_peak, weights=True, splits=None):
    """``(best, tile time, multistage time + re-layout or None)`` of the implicit GEMM on
    ``problem``: the launcher's tile on the operands as they are, and, where a multistage
    tile (the wgmma tile on compute capability 9.0; for float64 the DMMA tile's
    channels-last twin, :func:`_channels_last_tile`) would run on channels-last operands,
    that tile plus the re-layout of x and (unless
    ``weights`` is False: frozen weights) w (one pass each, ``backends.cuda.relayout``).
    The faster is what runs (:func:`relayout_pays`).  A weight gradient runs with
    ``splits`` (default :func:`weight_gradient_splits`), its split-K's copy and reduction
    added (:func:`_split_time`)."""
    bw = device.bandwidth
    if splits is None:
        splits = weight_gradient_splits(problem, device, eff_of)
    fwd, tile = _implicit_forward(problem, device, splits)
    rate, eff = peak, eff_of["implicit_gemm"]
    if tc_peak and registry.tensor_core_variant(tile[3]):
        rate, eff = tc_peak, eff_of[_tensor_tile_key(problem, tile)]
    base = _gemm_tile_time(problem, fwd, tile, rate, eff, device)
    relaid = None
    if tc_peak and _relaid_from(tile) and _multistage(problem, fwd, device):
        ms_tile, key = _channels_last_tile(problem, fwd, tile, device)
        ms_eff = eff_of[key]
        relay = (0.0 if problem.layout == "channels_last" else   # read as they are
                 relayout.relayout_bytes(fwd, weights=weights) / bw + (1 + weights) * LAUNCH_S)
        relaid = _gemm_tile_time(problem, fwd, ms_tile, tc_peak, ms_eff, device) + relay
    columns = (2 * problem.column_bytes() / bw + LAUNCH_S
               if implicit_grads.needs_columns(problem) else 0.0)
    if splits > 1:
        split = _split_time(problem, splits, device)
        base, relaid = base + split, None if relaid is None else relaid + split
    best = base if relaid is None else min(base, relaid)
    return best + columns, base, relaid


#: Most parts the weight gradient's split-K divides the images into.
MAX_SPLITS = 64


def weight_gradient_splits(problem, device, efficiency=None):
    """The split-K of the weight gradient ``problem`` on the implicit GEMM: into how many
    parts its images are split (``implicit_grads.grad_weight_program``).  1 for any other
    problem, for dtypes other than float32/float64 (the tiles' partials would round), and
    when the unsplit grid already fills ``device`` (two CTAs per SM, ``device.sm_count``);
    else the divisor of the batch (up to :data:`MAX_SPLITS`; one whose parts keep the
    tensor-core tile where the unsplit problem has it) with the least predicted time: more
    CTAs against the copy of ``dy`` and the partials' traffic; a call whose
    unsplit device time is under the host time per call (:data:`HOST_S`: short
    reductions, small ``N * prod(O)``) stays unsplit (``efficiency``: as
    :func:`relayout_pays`)."""
    if (problem.op != GRAD_WEIGHT or problem.dtype not in registry.SPLITK_DTYPES
            or implicit_grads.needs_columns(problem) or problem.batch < 2):
        return 1
    if evidence.verified_only(device.hardware) and not evidence.is_verified(family_config(
            "implicit_gemm", "splitk_reduce", problem.dtype, evidence.arch_class(device.arch))):
        return 1
    eff_of = efficiency or efficiencies(device.name)
    return _splits(problem, device, tuple(sorted(eff_of.items())))


@cached(maxsize=256)
def _splits(problem, device, efficiency):
    """:func:`weight_gradient_splits` (memoised: 0.3 ms of model per evaluation, asked on
    every normal-path call and prediction)."""
    fwd, tile = _implicit_forward(problem, device, 1)
    if _ctas(fwd, tile) >= 2 * device.sm_count:
        return 1
    eff_of = dict(efficiency)
    peak, tc_peak = device.peak_flops(problem.dtype), tensor_peak_flops(problem, device)

    def device_time(s):
        return _implicit_gemm_times(problem, device, eff_of, peak, tc_peak, splits=s)[0]
    if device_time(1) <= HOST_S["implicit_gemm"]:     # host-bound: more launches only cost
        return 1
    tensor_cores = registry.tensor_core_variant(tile[3])
    candidates = [s for s in range(1, min(problem.batch, MAX_SPLITS) + 1)
                  if problem.batch % s == 0 and registry.tensor_core_variant(
                      _implicit_forward(problem, device, s)[1][3]) == tensor_cores]
    return min(candidates, key=lambda s: (device_time(s), s))


def _split_time(problem, splits, device):
    """The split-K's own work per call: ``dy`` copied in split order (read and written
    once), the partials written and read, the result written, two launches per group."""
    fwd = transpose(problem).forward
    y = math.prod(fwd.y_shape) * problem.groups
    traffic = problem.dtype.itemsize * (2 * math.prod(problem.y_shape) + (2 * splits + 1) * y)
    return traffic / device.bandwidth + 2 * problem.groups * LAUNCH_S


def _relaid_from(tile):
    """Whether ``tile`` has a channels-last counterpart the re-layout may pay for: a
    variant-2 tensor-core tile (the multistage or wgmma tiles) or a float64 DMMA tile 6/7
    (its twin 9/10, ``registry.channels_last_twin``)."""
    return tile[3] == 2 or registry.channels_last_twin(tile) is not None


def _channels_last_tile(problem, fwd, tile, device):
    """``(tile, efficiency key)`` of what runs ``fwd`` on channels-last operands in place
    of the launcher's ``tile`` (:func:`_relaid_from`): the float64 DMMA tile's twin
    (``implicit_gemm_cl_float64``), else the multistage tile (``implicit_gemm_ms_<kind>``),
    the wgmma tile on compute capability 9.0 (``implicit_gemm_wg_<kind>``)."""
    tf32 = fwd.precision == "tf32"
    if registry.channels_last_twin(tile) is not None:
        return launch.channels_last_tile(fwd, tile, tf32), "implicit_gemm_cl_float64"
    wg = wgmma_launch.wgmma_tile(fwd, tf32, device.arch)
    if wg is not None:          # compute capability 9.0: the wgmma tile, if it loads
        return wg, "implicit_gemm_wg_" + tensor_kind(problem)
    return launch.channels_last_tile(fwd, tile, tf32), "implicit_gemm_ms_" + tensor_kind(problem)


def _ctas(fwd, tile):
    """CTAs of one implicit-GEMM launch of ``fwd`` (all its groups) on ``tile``."""
    return -(-fwd.gemm_m // tile[0]) * -(-fwd.gemm_n // tile[1]) * fwd.groups


def _tensor_tile_key(problem, tile):
    """The :data:`EFFICIENCY` entry of a tensor-core ``tile`` the launcher chose:
    ``implicit_gemm_ms_float64`` for the multistage DMMA tiles (family
    ``implicit_gemm_fma_dmma``), else ``implicit_gemm_tc_<kind>``."""
    if registry.gemm_family(tile) == "implicit_gemm_fma_dmma":
        return "implicit_gemm_ms_float64"
    return "implicit_gemm_tc_" + tensor_kind(problem)


def _gemm_tile_time(problem, fwd, tile, rate, eff, device):
    """One implicit-GEMM tile's time on ``problem`` (its forward problem ``fwd``)."""
    # Tiny channel counts leave the GEMM tiles mostly empty (the exponent: the H200 run's
    # 1- and 8-channel cases, 0.5 overpredicted them 3x), and few CTAs leave SMs idle
    # (the weight gradient's split-K multiplies them: its parts are groups of ``fwd``).
    eff *= min(1.0, fwd.gemm_n / 64) ** 0.85 * min(1.0, fwd.gemm_k / 32) ** 0.5
    eff *= min(1.0, max(_ctas(fwd, tile), 1) / (2 * device.sm_count))
    return _stencil(problem, rate, device.bandwidth, eff)


def relayout_pays(problem, device, weights=True, efficiency=None):
    """Whether the implicit GEMM should re-lay ``problem``'s channels-first operands for a
    multistage tile on ``device``: the tile's time plus the re-layout (of x, and of w unless
    ``weights`` is False) beats the tile that reads them as they are (``efficiency``: a
    mapping replacing :func:`efficiencies`)."""
    eff_of = efficiency or efficiencies(device.name)
    _, base, relaid = _implicit_gemm_times(
        problem, device, eff_of, device.peak_flops(problem.dtype),
        tensor_peak_flops(problem, device), weights)
    return relaid is not None and relaid < base


def _mixes(fwd):
    """Whether the FFT of the forward problem ``fwd`` mixes channels (more than one
    input channel per output channel: the ``fft_mix`` term)."""
    return (fwd.in_channels // fwd.groups) * fwd.out_channels > fwd.groups


def _implicit_forward(problem, device, splits=1):
    """The forward problem the implicit GEMM runs for ``problem`` and its tile: the
    gradients run as forward problems (.implicit_grads; the weight gradient's with its
    images in ``splits`` parts); an input gradient that is not a convolution of dy as the
    column GEMM (its columns' traffic costed apart)."""
    if problem.op == FORWARD:
        fwd = problem
    elif implicit_grads.needs_columns(problem):
        fwd = column_forward(problem, problem.batch)
    elif problem.op == GRAD_WEIGHT:
        fwd = transpose(problem, splits=splits).forward
    else:
        fwd = transpose(problem).forward
    return fwd, launch.implicit_gemm_tile(fwd, **algorithms.tensor_core_flags(fwd, device))


def _multistage(problem, fwd, device):
    """Whether a multistage tile can run ``problem`` (its forward problem ``fwd``) after a
    re-layout: the forward pass and the gradients that run as forward problems (not the
    input gradient's column GEMM, whose operands are the column buffer's)."""
    return not implicit_grads.needs_columns(problem) and relayout.multistage_applies(
        fwd, **algorithms.tensor_core_flags(fwd, device))


def efficiency_key(problem, device, name):
    """The :data:`EFFICIENCY` entry that sets ``name``'s prediction for ``problem``."""
    if name == "implicit_gemm" and tensor_peak_flops(problem, device):
        fwd, tile = _implicit_forward(problem, device)
        if _relaid_from(tile) and relayout_pays(problem, device):
            return _channels_last_tile(problem, fwd, tile, device)[1]
        return _tensor_tile_key(problem, tile) if registry.tensor_core_variant(tile[3]) else name
    if name == "gemm" and tensor_peak_flops(problem, device):
        return "gemm_tc_" + tensor_kind(problem)
    if name == "fft":
        fwd = fft_conv.transposed_forward(problem)
        return "fft_mix" if _mixes(fwd) else name
    return "direct" if name == "separable" else name


def calibrate(problem, device, name, seconds):
    """``(key, fraction)``: the efficiency of :func:`efficiency_key` for which the model
    predicts the measured ``seconds`` of ``name`` on ``problem`` (bisection; the model is
    monotone in it), clamped to [1e-4, 1]; ``None`` where the model predicts no finite
    time (an algorithm it considers unable to run).  What a benchmark writes to the
    device's file, so that every algorithm is calibrated in its own model's terms (the
    FFT's transforms and channel mixing, not the direct FLOP count)."""
    key = efficiency_key(problem, device, name)
    eff = dict(efficiencies(device.name))

    def predicted(fraction):
        eff[key] = fraction
        return predict_times(problem, device, [name], efficiency=eff)[name]
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


def kernel_config(problem, device, algorithm="implicit_gemm") -> KernelConfig:
    """The one kernel choice of ``algorithm`` on ``problem`` (channels-first operands as
    the cost model assumes them) on ``device``: the :class:`KernelConfig` it prices and
    the launcher builds (memoised per problem, device, algorithm and
    ``config.kernels``)."""
    return _kernel_config(problem, device, algorithm, evidence.verified_only(device.hardware))


def _library(device):
    """The GEMM library call of ``runner.matmul`` on ``device``."""
    blas = "cuBLAS strided-batched"
    return blas if evidence.library_runs(blas, device.hardware) else "cupy.matmul"


@cached(maxsize=512)
def _kernel_config(problem, device, algorithm, verified_only):
    """:func:`kernel_config`'s record; ``verified_only`` is not read here but keys the
    memo: the tile choice below reads the filter in force (``evidence.verified_only``)."""
    arch = evidence.arch_class(device.arch)
    index64 = launch.choose_index64(problem)
    dtype = problem.dtype
    if algorithm in ("direct", "separable"):
        found = launch.direct_tile(problem, device.smem_per_block)
        return family_config(algorithm, "direct_conv", dtype, arch, index64,
                             tile=found[0] if found else ())
    if algorithm == "gemm":
        family = "col2vol" if problem.op == "grad_input" else "vol2col"
        return family_config(algorithm, family, dtype, arch, index64, library=_library(device))
    if algorithm == "fft":
        return family_config(algorithm, "", dtype, arch, index64, math="", layout="",
                             library="cuFFT")
    if algorithm == "winograd":
        parts = tuple(family_config(algorithm, f, dtype, arch, index64)
                      for f in ("winograd_output", "winograd_weights"))
        return family_config(algorithm, "winograd_input", dtype, arch, index64,
                             companions=parts, library=_library(device))
    return _gemm_choice(problem, device, arch, index64)


def _gemm_choice(problem, device, arch, index64):
    """The implicit GEMM's :class:`KernelConfig`: :func:`_implicit_forward`'s tile, or the
    channels-last tile :func:`relayout_pays` takes in its place (the wgmma tile an sm_90a
    configuration), the weight gradient's split-K, the column pass of an input gradient
    that is not a convolution of ``dy``."""
    splits = weight_gradient_splits(problem, device)
    fwd, tile = _implicit_forward(problem, device, splits)
    relaid = (False, False)
    if (tensor_peak_flops(problem, device) and _relaid_from(tile)
            and _multistage(problem, fwd, device) and relayout_pays(problem, device)):
        tile = _channels_last_tile(problem, fwd, tile, device)[0]
        channels_first = problem.layout != "channels_last"
        relaid = (channels_first, channels_first)
    if tile[3] == registry.WGMMA:
        arch = evidence.arch_class(device.arch, arch_specific=True)
    cfg = gemm_config(tile, problem.dtype, arch, index64, relaid, splits)
    if implicit_grads.needs_columns(problem):
        cfg = dataclasses.replace(cfg, companions=cfg.companions + (family_config(
            "implicit_gemm", "col2vol", problem.dtype, arch, index64),))
    return cfg


#: The algorithms :func:`kernel_config` knows.
_CONFIGS = ("direct", "separable", "gemm", "fft", "winograd", "implicit_gemm")


def warn_if_unverified(problem, device, algorithm):
    """Warn once (``evidence.warn_unverified``) where ``algorithm``'s configuration on
    ``problem`` runs without hardware evidence on a GPU, or wherever ``config.kernels``
    is set."""
    if algorithm in _CONFIGS and evidence.warns(device.hardware):
        cfg = kernel_config(problem, device, algorithm)
        if not evidence.is_verified(cfg):
            evidence.warn_unverified(cfg, "an explicit method=, config.kernels = 'all', or no "
                                          "verified configuration runs this problem")
