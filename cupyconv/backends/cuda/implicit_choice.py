"""The implicit GEMM's one kernel choice and its price (the ``implicit_gemm`` entry of
``backends/cuda/table.py`` owns them): the tile the launcher's rules give the problem's
forward problem (``launch.implicit_gemm_tile``; the gradients run as forward problems,
:mod:`.implicit_grads`), the channels-last tile that takes its place where re-laying the
operands pays (:func:`relayout_pays`; the wgmma tile on compute capability 9.0), the weight
gradient's split-K (:func:`weight_gradient_splits`), the column pass of an input gradient
that is not a convolution of ``dy``; each priced by the roofline of :mod:`.cost`.
"""
from __future__ import annotations

import dataclasses
import math

from ..._kernels import evidence, launch, registry, tile_choice, wgmma_launch
from ..._kernels.kernel_config import family_config, gemm_config
from ..._lru import cached
from ..._vocabulary import FORWARD, GRAD_WEIGHT
from ...core.transpose import column_forward, transpose
from . import algorithms, cost, implicit_grads, relayout

__all__ = ["predicted_time", "efficiency_key", "choose_kernel", "relayout_pays",
           "weight_gradient_splits", "MAX_SPLITS", "implicit_gemm_times"]


def predicted_time(problem, device, eff_of):
    """Device seconds of the implicit GEMM on ``problem`` (:func:`implicit_gemm_times`'
    best)."""
    return implicit_gemm_times(problem, device, eff_of, device.peak_flops(problem.dtype),
                               cost.tensor_peak_flops(problem, device))[0]


def efficiency_key(problem, device):
    """The :data:`cost.EFFICIENCY` entry that sets the implicit GEMM's prediction."""
    if cost.tensor_peak_flops(problem, device):
        fwd, tile = _implicit_forward(problem, device)
        if _relaid_from(tile) and relayout_pays(problem, device):
            return _channels_last_tile(problem, fwd, tile, device)[1]
        if registry.tile_variant(tile).tensor_cores:
            return _tensor_tile_key(problem, tile)
    return "implicit_gemm"


def implicit_gemm_times(problem, device, eff_of, peak, tc_peak, weights=True, splits=None):
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
    if tc_peak and registry.tile_variant(tile).tensor_cores:
        rate, eff = tc_peak, eff_of[_tensor_tile_key(problem, tile)]
    base = _gemm_tile_time(problem, fwd, tile, rate, eff, device)
    relaid = None
    if tc_peak and _relaid_from(tile) and _multistage(problem, fwd, device):
        ms_tile, key = _channels_last_tile(problem, fwd, tile, device)
        ms_eff = eff_of[key]
        relay = (0.0 if problem.layout == "channels_last" else   # read as they are
                 relayout.relayout_bytes(fwd, weights=weights) / bw + (1 + weights) * cost.LAUNCH_S)
        relaid = _gemm_tile_time(problem, fwd, ms_tile, tc_peak, ms_eff, device) + relay
    columns = (2 * problem.column_bytes() / bw + cost.LAUNCH_S
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
    unsplit device time is under the host time per call (:data:`cost.HOST_S`: short
    reductions, small ``N * prod(O)``) stays unsplit (``efficiency``: as
    :func:`relayout_pays`)."""
    if (problem.op != GRAD_WEIGHT or problem.dtype not in registry.SPLITK_DTYPES
            or implicit_grads.needs_columns(problem) or problem.batch < 2):
        return 1
    if evidence.verified_only(device.hardware) and not evidence.is_verified(family_config(
            "implicit_gemm", "splitk_reduce", problem.dtype, evidence.arch_class(device.arch))):
        return 1
    eff_of = efficiency or cost.efficiencies(device.name)
    return _splits(problem, device, tuple(sorted(eff_of.items())))


@cached(maxsize=256)
def _splits(problem, device, efficiency):
    """:func:`weight_gradient_splits` (memoised: 0.3 ms of model per evaluation, asked on
    every normal-path call and prediction)."""
    fwd, tile = _implicit_forward(problem, device, 1)
    if _ctas(fwd, tile) >= 2 * device.sm_count:
        return 1
    eff_of = dict(efficiency)
    peak, tc_peak = device.peak_flops(problem.dtype), cost.tensor_peak_flops(problem, device)

    def device_time(s):
        return implicit_gemm_times(problem, device, eff_of, peak, tc_peak, splits=s)[0]
    if device_time(1) <= cost.HOST_S["implicit_gemm"]:     # host-bound: more launches only cost
        return 1
    tensor_cores = registry.tile_variant(tile).tensor_cores
    candidates = [s for s in range(1, min(problem.batch, MAX_SPLITS) + 1)
                  if problem.batch % s == 0 and registry.tile_variant(
                      _implicit_forward(problem, device, s)[1]).tensor_cores == tensor_cores]
    return min(candidates, key=lambda s: (device_time(s), s))


def _split_time(problem, splits, device):
    """The split-K's own work per call: ``dy`` copied in split order (read and written
    once), the partials written and read, the result written, two launches per group."""
    fwd = transpose(problem).forward
    y = math.prod(fwd.y_shape) * problem.groups
    traffic = problem.dtype.itemsize * (2 * math.prod(problem.y_shape) + (2 * splits + 1) * y)
    return traffic / device.bandwidth + 2 * problem.groups * cost.LAUNCH_S


def _relaid_from(tile):
    """Whether ``tile`` has a channels-last counterpart the re-layout may pay for: a
    variant-2 tensor-core tile (the multistage or wgmma tiles) or a float64 DMMA tile 6/7
    (its twin 9/10, ``registry.channels_last_twin``)."""
    return registry.tile_variant(tile).twin is not None


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
        return wg, "implicit_gemm_wg_" + cost.tensor_kind(problem)
    return launch.channels_last_tile(fwd, tile, tf32), "implicit_gemm_ms_" + cost.tensor_kind(problem)


def _ctas(fwd, tile):
    """CTAs of one implicit-GEMM launch of ``fwd`` (all its groups) on ``tile``."""
    return -(-fwd.gemm_m // tile[0]) * -(-fwd.gemm_n // tile[1]) * fwd.groups


def _tensor_tile_key(problem, tile):
    """The :data:`EFFICIENCY` entry of a tensor-core ``tile`` the launcher chose:
    ``implicit_gemm_ms_float64`` for the multistage DMMA tiles (family
    ``implicit_gemm_fma_dmma``), else ``implicit_gemm_tc_<kind>``."""
    if registry.gemm_family(tile) == "implicit_gemm_fma_dmma":
        return "implicit_gemm_ms_float64"
    return "implicit_gemm_tc_" + cost.tensor_kind(problem)


def _gemm_tile_time(problem, fwd, tile, rate, eff, device):
    """One implicit-GEMM tile's time on ``problem`` (its forward problem ``fwd``)."""
    # Tiny channel counts leave the GEMM tiles mostly empty (the exponent: the H200 run's
    # 1- and 8-channel cases, 0.5 overpredicted them 3x), and few CTAs leave SMs idle
    # (the weight gradient's split-K multiplies them: its parts are groups of ``fwd``).
    eff *= min(1.0, fwd.gemm_n / 64) ** 0.85 * min(1.0, fwd.gemm_k / 32) ** 0.5
    eff *= min(1.0, max(_ctas(fwd, tile), 1) / (2 * device.sm_count))
    return cost.stencil_time(problem, rate, device.bandwidth, eff)


def relayout_pays(problem, device, weights=True, efficiency=None):
    """Whether the implicit GEMM should re-lay ``problem``'s channels-first operands for a
    multistage tile on ``device``: the tile's time plus the re-layout (of x, and of w unless
    ``weights`` is False) beats the tile that reads them as they are (``efficiency``: a
    mapping replacing :func:`cost.efficiencies`)."""
    eff_of = efficiency or cost.efficiencies(device.name)
    _, base, relaid = implicit_gemm_times(
        problem, device, eff_of, device.peak_flops(problem.dtype),
        cost.tensor_peak_flops(problem, device), weights)
    return relaid is not None and relaid < base


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


def choose_kernel(problem, device, arch, index64):
    """The implicit GEMM's :class:`KernelConfig` on C-contiguous operands in
    ``problem.layout``: :func:`_implicit_forward`'s tile, or the channels-last tile that
    takes its place (the wgmma tile an sm_90a configuration) where a forward problem's
    operands are channels-last readable as they are
    (``tile_choice.contiguous_reads_channels_last``) or :func:`relayout_pays`; the weight
    gradient's split-K, the column pass of an input gradient that is not a convolution of
    ``dy``.  On other operands the launch asks ``relayout.operand_config``."""
    splits = weight_gradient_splits(problem, device)
    fwd, tile = _implicit_forward(problem, device, splits)
    relaid = (False, False)
    if (problem.op == FORWARD and _relaid_from(tile)
            and tile_choice.contiguous_reads_channels_last(problem)):
        tile = _channels_last_tile(problem, fwd, tile, device)[0] or tile  # read as they are
    elif (cost.tensor_peak_flops(problem, device) and _relaid_from(tile)
            and _multistage(problem, fwd, device) and relayout_pays(problem, device)):
        tile = _channels_last_tile(problem, fwd, tile, device)[0]
        channels_first = problem.layout != "channels_last"
        relaid = (channels_first, channels_first)
    if registry.tile_variant(tile).math == "wgmma":
        arch = evidence.arch_class(device.arch, arch_specific=True)
    cfg = gemm_config(tile, problem.dtype, arch, index64, relaid, splits)
    if implicit_grads.needs_columns(problem):
        cfg = dataclasses.replace(cfg, companions=cfg.companions + (family_config(
            "implicit_gemm", "col2vol", problem.dtype, arch, index64),))
    return cfg
