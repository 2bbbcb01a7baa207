"""The implicit GEMM's one kernel choice and its price (the ``implicit_gemm`` entry of
``backends/cuda/table.py`` owns them): :func:`choose_kernel` returns the frozen record
(tile, re-layout, split-K, arch class) of a problem on given operands, the one the
launcher builds; :func:`record_time` prices a record on the roofline of :mod:`.cost`.
The decisions inside: the weight gradient's split-K (:func:`weight_gradient_splits`),
whether re-laying the operands channels-last for a multistage tile pays
(:func:`relayout_pays`; the wgmma tile on compute capability 9.0), the column pass of an
input gradient that is not a convolution of ``dy``.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._kernels import evidence, launch, registry, wgmma_launch
from ..._kernels.addressing import aligned
from ..._kernels.grad_launch import fresh_like, fresh_operands
from ..._kernels.kernel_config import family_config, gemm_config
from ..._lru import cached
from ..._vocabulary import FORWARD, GRAD_WEIGHT
from ... import config
from ...core.roles import Operands
from ...core.transpose import column_forward, transpose
from . import cost, implicit_grads, relayout

__all__ = ["record_time", "record_key", "choose_kernel", "as_priced", "under_limit",
           "relayout_pays",
           "weight_gradient_splits", "MAX_SPLITS", "implicit_gemm_times", "tensor_core_flags"]


def tensor_core_flags(problem, device):
    """The implicit GEMM's tile switches for ``problem`` on ``device``: the atoms exist
    (sm_80+), float32 asked for TF32, and, where the evidence ledger keeps the choice to
    verified tiles (``_kernels.evidence.verified_only``, its table read here: asked three
    times a call), ``verified_on``: the device's arch class."""
    flags = dict(mma=device.arch >= 80, tf32=problem.precision == "tf32")
    if evidence.FILTER[config.kernels, bool(getattr(device, "hardware", False))][0]:
        flags["verified_on"] = evidence.arch_class(device.arch)
    return flags


def record_time(problem, cfg, device, eff_of):
    """Device seconds of the implicit GEMM's record ``cfg`` (:func:`choose_kernel`) on
    ``problem``: its tile on its forward problem (the weight gradient's images in
    ``cfg.splits`` parts) at the rate and efficiency of the tile (:func:`record_key`),
    the re-layout of the operands it names, the split-K's copy and reduction, the column
    pass of an input gradient that is not a convolution of ``dy``."""
    fwd, tile = _forward(problem, cfg.splits), cfg.gemm_tile
    tc_peak = cost.tensor_peak_flops(problem, device)
    key = _tile_key(problem, tile, tc_peak) if tc_peak else "implicit_gemm"   # (no frame)
    rate = device.peak_flops(problem.dtype) if key == "implicit_gemm" else tc_peak
    t = _tile_time(problem, fwd, tile, cfg.relayout, cfg.splits, rate, eff_of[key], device)
    if implicit_grads.needs_columns(problem):
        t += 2 * problem.column_bytes() / device.bandwidth + cost.LAUNCH_S
    return t


def record_key(problem, cfg, device):
    """The :data:`cost.EFFICIENCY` entry that sets the price of the record ``cfg``."""
    return _tile_key(problem, cfg.gemm_tile, cost.tensor_peak_flops(problem, device))


def _tile_key(problem, tile, tc_peak):
    """The efficiency entry of ``tile``: ``implicit_gemm`` off the tensor cores, else by its
    variant: the wgmma tile ``implicit_gemm_wg_<kind>``, the float64 DMMA twins
    ``implicit_gemm_cl_float64``, the multistage tile ``implicit_gemm_ms_<kind>``, the
    multistage DMMA tiles ``implicit_gemm_ms_float64``, the others
    ``implicit_gemm_tc_<kind>`` (``tc_peak``: :func:`cost.tensor_peak_flops`)."""
    if not tc_peak:
        return "implicit_gemm"
    variant = registry.tile_variant(tile)
    if variant.math == "fma":
        return "implicit_gemm"
    if variant.math == "wgmma":
        return "implicit_gemm_wg_" + cost.tensor_kind(problem)
    if variant.family == "implicit_gemm_fma_dmma":
        return "implicit_gemm_cl_float64" if variant.channels_last else "implicit_gemm_ms_float64"
    if variant.family == "implicit_gemm_multistage":
        return "implicit_gemm_ms_" + cost.tensor_kind(problem)
    return "implicit_gemm_tc_" + cost.tensor_kind(problem)


def _tile_time(problem, fwd, tile, relay, splits, rate, eff, device):
    """One implicit-GEMM tile's time on ``problem`` (its forward problem ``fwd``), with the
    re-layout of the operands ``relay`` names and the split-K's own work."""
    # Tiny channel counts leave the GEMM tiles mostly empty (the exponent: the H200 run's
    # 1- and 8-channel cases, 0.5 overpredicted them 3x), and few CTAs leave SMs idle
    # (the weight gradient's split-K multiplies them: its parts are groups of ``fwd``).
    eff *= min(1.0, fwd.gemm_n / 64) ** 0.85 * min(1.0, fwd.gemm_k / 32) ** 0.5
    eff *= min(1.0, max(_ctas(fwd, tile), 1) / (2 * device.sm_count))
    t = cost.stencil_time(problem, rate, device.bandwidth, eff)
    if any(relay):
        t += (relayout.relayout_bytes(fwd, x=relay[0], weights=relay[1]) / device.bandwidth
              + sum(relay) * cost.LAUNCH_S)
    return t + (_split_time(problem, splits, device) if splits > 1 else 0.0)


def implicit_gemm_times(problem, device, eff_of, weights=True, splits=None, forward=None):
    """``(best, base time, re-laid time or None)`` of the implicit GEMM on ``problem``:
    :func:`record_time` of the record of the launcher's tile on channels-first operands,
    and, where a multistage tile (the wgmma tile on compute capability 9.0; for float64
    the DMMA tile's channels-last twin, :func:`_channels_last_tile`) would run on
    channels-last operands, of its record after the re-layout of x and (unless ``weights``
    is False: frozen weights) w (none where ``problem.layout`` is channels-last already).
    The faster is what runs (:func:`relayout_pays`).  A weight gradient runs with
    ``splits`` (default :func:`weight_gradient_splits`); ``forward``: its ``(fwd, tile)``
    (:func:`_implicit_forward`) where the caller has it.  The records are priced as
    built, 32-bit index (the price does not read it)."""
    if splits is None:
        splits = weight_gradient_splits(problem, device, eff_of)
    fwd, tile = forward or _implicit_forward(problem, device, splits)
    arch = evidence.arch_class(device.arch)
    t = record_time(problem, gemm_config(tile, problem.dtype, arch, False, (False, False),
                                         splits), device, eff_of)
    if not (registry.tile_variant(tile).twin is not None      # a channels-last counterpart
            and cost.tensor_peak_flops(problem, device) and _multistage(problem, fwd, device)):
        return t, t, None
    relay = (False, False) if problem.layout == "channels_last" else (True, bool(weights))
    relaid = gemm_config(_channels_last_tile(problem, fwd, tile, device), problem.dtype, arch,
                         False, relay, splits)
    t_relaid = record_time(problem, relaid, device, eff_of)
    return min(t, t_relaid), t, t_relaid


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
            or problem.batch < 2):
        return 1
    verified_only = evidence.FILTER[config.kernels, device.hardware][0]   # evidence.verified_only
    if verified_only and not evidence.is_verified(family_config(
            "implicit_gemm", "splitk_reduce", problem.dtype, evidence.arch_class(device.arch))):
        return 1
    eff_of = efficiency or cost.efficiencies(device.name)
    return _splits(problem, device, tuple(sorted(eff_of.items())), verified_only)


@cached(maxsize=256)
def _splits(problem, device, efficiency, verified_only):
    """:func:`weight_gradient_splits` (memoised: 0.3 ms of model per evaluation, asked on
    every normal-path call and prediction; ``verified_only`` is not read here but keys the
    memo: the tiles priced read the filter in force, ``evidence.verified_only``)."""
    unsplit = _implicit_forward(problem, device, 1)
    if _ctas(*unsplit) >= 2 * device.sm_count:
        return 1
    eff_of = dict(efficiency)

    unsplit_time = implicit_gemm_times(problem, device, eff_of, splits=1, forward=unsplit)[0]
    if unsplit_time <= cost.HOST_S["implicit_gemm"]:   # host-bound: more launches only cost
        return 1

    def device_time(s):
        return unsplit_time if s == 1 else implicit_gemm_times(problem, device, eff_of,
                                                               splits=s)[0]
    tensor_cores = registry.tile_variant(unsplit[1]).tensor_cores
    candidates = [s for s in range(1, min(problem.batch, MAX_SPLITS) + 1)
                  if problem.batch % s == 0 and registry.tile_variant(
                      _implicit_forward(problem, device, s)[1]).tensor_cores == tensor_cores]
    return min(candidates, key=lambda s: (device_time(s), s))


def _split_time(problem, splits, device):
    """The split-K's own work per call: ``dy`` copied in split order (read and written
    once), the partials written and read, the result written, two launches per group."""
    fwd = transpose(problem, splits=1).forward
    y = math.prod(fwd.y_shape) * problem.groups
    traffic = problem.dtype.itemsize * (2 * math.prod(problem.y_shape) + (2 * splits + 1) * y)
    return traffic / device.bandwidth + 2 * problem.groups * cost.LAUNCH_S


def _channels_last_tile(problem, fwd, tile, device):
    """The tile that runs ``fwd`` on channels-last operands in place of the launcher's
    ``tile`` (one with a twin, ``registry.tile_variant(tile).twin``): the float64 DMMA
    tile's twin, else the multistage tile, the wgmma tile on compute capability 9.0."""
    tf32 = fwd.precision == "tf32"
    if registry.channels_last_twin(tile) is None:
        wg = wgmma_launch.wgmma_tile(fwd, tf32, device.arch)
        if wg is not None:          # compute capability 9.0: the wgmma tile, if it loads
            return wg
    return launch.channels_last_tile(fwd, tile, tf32)


def _ctas(fwd, tile):
    """CTAs of one implicit-GEMM launch of ``fwd`` (all its groups) on ``tile``."""
    return -(-fwd.gemm_m // tile[0]) * -(-fwd.gemm_n // tile[1]) * fwd.groups


def relayout_pays(problem, device, weights=True, efficiency=None):
    """Whether the implicit GEMM should re-lay ``problem``'s channels-first operands for a
    multistage tile on ``device``: the tile's time plus the re-layout (of x, and of w unless
    ``weights`` is False) beats the tile that reads them as they are (``efficiency``: a
    mapping replacing :func:`cost.efficiencies`)."""
    eff_of = efficiency or cost.efficiencies(device.name)
    _, base, relaid = implicit_gemm_times(problem, device, eff_of, weights)
    return relaid is not None and relaid < base


def _implicit_forward(problem, device, splits=1):
    """``(fwd, tile)``: :func:`_forward` and the launcher's tile on its channels-first
    operands."""
    fwd = _forward(problem, splits)
    return fwd, launch.implicit_gemm_tile(fwd, **tensor_core_flags(fwd, device))


def _forward(problem, splits=1):
    """The forward problem the implicit GEMM runs for ``problem``: the gradients run as
    forward problems (.implicit_grads; the weight gradient's with its images in ``splits``
    parts); an input gradient that is not a convolution of dy as the column GEMM (its
    columns' traffic costed apart)."""
    if problem.op == FORWARD:
        return problem
    if problem.op == GRAD_WEIGHT:
        return transpose(problem, splits=splits).forward
    if implicit_grads.needs_columns(problem):
        return column_forward(problem, problem.batch)
    return transpose(problem, splits=1).forward


def _multistage(problem, fwd, device):
    """Whether a multistage tile can run ``problem`` (its forward problem ``fwd``) after a
    re-layout: the forward pass and the gradients that run as forward problems (not the
    input gradient's column GEMM, whose operands are the column buffer's)."""
    return not implicit_grads.needs_columns(problem) and relayout.multistage_applies(
        fwd, **tensor_core_flags(fwd, device))


def choose_kernel(problem, device, arch, index64, operands=None, workspace_limit=None):
    """The implicit GEMM's one :class:`KernelConfig` of ``problem`` on ``device``: what the
    price reads (:func:`record_time`), ``plan.explain()`` prints and the launcher builds
    as it is.

    ``operands``: an ``Operands`` record of logical channels-first views, as the backend
    gets them (default: stand-ins C-contiguous in ``problem.layout``, what a plan
    assumes).  On them and the forward problem the implicit GEMM runs
    (``implicit_grads.forward_operands``) it decides, in order:

    - the weight gradient's split-K (:func:`weight_gradient_splits`; 1 where its
      workspaces would pass ``workspace_limit``);
    - the re-layout: the candidate of ``relayout.common_relay_choice`` (frozen weights
      taken as they are) where :func:`relayout_pays`;
    - the tile on the operands as they then are (re-laid, or under TF32 rounded copies,
      ``implicit_grads.as_read``): ``relayout.operand_config``, the wgmma tile where it
      runs, else the portable tile, a channels-last one where they are channels-last
      readable; one tile for all launches (the channels-first one where the weight
      gradient's groups differ).

    The input gradient that is not a convolution of ``dy`` runs its column pass (its tile
    on contiguous columns, ``arch`` its arch class; the others take the tile's).  The
    index width is the forward problem's (``index64`` is not read)."""
    splits = weight_gradient_splits(problem, device)
    if (splits > 1 and workspace_limit is not None
            and implicit_grads.split_workspace_bytes(problem, splits) > workspace_limit):
        splits = 1
    if implicit_grads.needs_columns(problem):
        fwd, tile = _implicit_forward(problem, device, 1)
        cfg = gemm_config(tile, problem.dtype, arch, launch.choose_index64(fwd))
        return dataclasses.replace(cfg, companions=cfg.companions + (family_config(
            "implicit_gemm", "col2vol", problem.dtype, arch, cfg.index64),))
    flags = tensor_core_flags(problem, device)
    given = operands is not None
    if not given:
        operands = _contiguous_standins(problem)
    views = problem.with_(layout="channels_first")     # the operands: logical views
    frozen = problem.op == FORWARD and relayout.is_frozen(operands.filter,
                                                          relayout.rounds_here(problem))
    fwd, pairs = implicit_grads.forward_operands(views, operands, splits)
    relay = relayout.common_relay_choice(fwd, pairs, **flags, frozen_w=frozen)
    if relay is None or not relayout_pays(problem, device, relay[1]):
        relay = (False, False)
    if given and relayout.rounds_here(problem):     # (stand-ins: as their copies are)
        read = implicit_grads.as_read(views, operands, relay, frozen)
        fwd, pairs = implicit_grads.forward_operands(views, read, splits)
    tiles = set()
    for x, w in pairs:          # (a loop: a set comprehension is a frame of its own)
        tiles.add(relayout.operand_config(fwd, relayout.relaid_standin(x) if relay[0] else x,
                                          relayout.relaid_standin(w) if relay[1] else w,
                                          device, flags))
    tile = tiles.pop() if len(tiles) == 1 else min(
        tiles, key=lambda c: (c.layout == "channels_last", c.describe()))
    return gemm_config(tile.gemm_tile, problem.dtype, tile.arch, tile.index64, relay, splits)


def as_priced(problem, cfg, operands):
    """Whether :func:`choose_kernel` on ``operands`` gives the priced record ``cfg`` (made
    on :func:`_contiguous_standins`, under the call's workspace limit: :func:`under_limit`)
    without asking: each operand (a logical view) has its stand-in's strides and is
    16-byte aligned (all the choice reads of an operand), and the forward pass's weights
    are not frozen."""
    standins = _contiguous_standins(problem)
    for a, standin in ((operands.activation, standins.activation),
                       (operands.filter, standins.filter), (operands.output, standins.output)):
        if a is not None and a.strides != standin.strides:
            return False
    if not aligned((operands.activation, operands.filter, operands.output), 16):
        return False
    return not (problem.op == FORWARD and relayout.is_frozen(operands.filter,
                                                             relayout.rounds_here(problem)))


def under_limit(problem, cfg, device, workspace_limit):
    """The record the launcher builds under the limit ``workspace_limit`` (bytes) for
    operands as the priced split-K record ``cfg`` assumes them (:func:`as_priced`):
    ``cfg`` where its split-K's workspaces fit, else :func:`choose_kernel`'s record
    unsplit (memoised as ``cfg`` is, ``cost.kernel_config_memo``).  Its caller
    (``table.CudaAlgorithm.kernel_config``) asks only for a split record under a limit."""
    if implicit_grads.split_workspace_bytes(problem, cfg.splits) <= workspace_limit:
        return cfg
    return cost.kernel_config_memo(_unsplit_kernel, problem, device,
                                   evidence.FILTER[config.kernels, device.hardware][0])


def _unsplit_kernel(problem, device, arch, index64):
    """:func:`choose_kernel`'s record of ``problem`` under a workspace limit that leaves no
    room for a split-K's workspaces: unsplit."""
    return choose_kernel(problem, device, arch, index64, workspace_limit=0)


@cached(maxsize=256)
def _contiguous_standins(problem):
    """Stand-ins of ``problem``'s operands, C-contiguous in its layout, as the backend
    gets them: logical channels-first views (never read)."""
    if problem.layout == "channels_last":
        return Operands(*[np.moveaxis(fresh_like(shape, problem.dtype), -1, 1)
                          for shape in (problem.x_shape, problem.w_shape, problem.y_shape)])
    return Operands(*fresh_operands(problem))
