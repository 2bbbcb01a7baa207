"""The implicit GEMM's tile for a problem on given operands: the rules the backend's
selection (``backends/cuda``) asks to make its :class:`~.kernel_config.KernelConfig`,
which :func:`.launch.implicit_gemm_program` then builds as it is.

:func:`implicit_gemm_tile` chooses among the channels-first tiles; on operands
:func:`channels_last_reason` accepts, :func:`channels_last_tile` takes a tile's
channels-last counterpart (its twin, or the multistage tile :func:`multistage_tile`);
:func:`operand_tile` puts the two together (``launch.gemm_tile_for``: for the operands given).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .._lru import cached
from . import evidence, registry
from .addressing import aligned
from .kernel_config import gemm_config

__all__ = ["implicit_gemm_tile", "channels_last_reason", "multistage_reason", "multistage_tile",
           "channels_last_tile", "operand_tile"]


def implicit_gemm_tile(problem, mma: bool = False, tf32: bool = False,
                       verified_on: Optional[str] = None) -> Tuple[int, int, int, int]:
    """The tile :func:`.launch.run_implicit_gemm_fprop` takes for ``problem``: the largest the
    problem fills (many rows, enough channels), tensor-core tiles first where allowed
    (:func:`registry.tensor_core_tile`), else the smallest (most CTAs), tap-aligned first.
    Never the channels-last variants 3, 4 (multistage), 9 and 10 (float64 DMMA): the
    launcher takes them for a chosen variant-2 (6, 7) tile when the operands allow
    (:func:`channels_last_tile`).  ``verified_on`` (an arch class of :mod:`.evidence`):
    only tiles verified on hardware of that class, where one can run the problem."""
    usable, smallest = _usable_tiles(problem.dtype, problem.in_channels // problem.groups,
                                     mma, tf32, verified_on)
    for t in usable:
        if problem.gemm_m >= 64 * t[0] and problem.gemm_n >= t[1] // 2:
            return t
    return smallest


@cached(maxsize=256)
def _usable_tiles(dtype, cpg, mma, tf32, verified_on):
    """``(tiles, smallest)``: the tiles :func:`implicit_gemm_tile` may take for ``cpg``
    input channels per group, tensor-core tiles first, and the one it takes when the
    problem fills none (the smallest, tap-aligned first)."""
    usable = [t for t in registry.gemm_tiles(dtype) if registry.gemm_tile_fits(t, cpg)
              and registry.tensor_core_tile(t, dtype, mma, tf32)
              and not registry.tile_variant(t).channels_last]
    if verified_on is not None:
        usable = [t for t in usable if evidence.is_verified(
            gemm_config(t, dtype, verified_on))] or usable
    usable.sort(key=lambda t: not registry.tile_variant(t).tensor_cores)   # tensor cores first
    return tuple(usable), min(usable, default=None, key=lambda t: (
        t[0] * t[1], -registry.tile_variant(t).number))


def channels_last_reason(problem, xs, ws, x, w) -> str:
    """Why the channels-last tensor-core variant (tile variant 3) cannot read ``x`` and
    ``w`` (``""`` when it can): its slices are 16-byte copies of consecutive channels, so
    both channel strides must be 1 and every other stride and both start addresses
    multiples of 16 bytes.  (``xs``/``ws``: :func:`operand_strides`.)"""
    chunk = 16 // np.dtype(problem.dtype).itemsize
    (x_lead, x_c, x_sp), (w_lead, w_c, w_sp) = xs[0], ws[0]
    if x_c != 1 or w_c != 1:
        return "the channels of x and w are not contiguous (channel strides must be 1)"
    if any(int(st) % chunk for st in (x_lead, w_lead) + tuple(x_sp) + tuple(w_sp)):
        return f"a stride of x or w is not a multiple of 16 bytes ({chunk} elements)"
    if not aligned((x, w), 16):
        return "x or w does not start on a 16-byte boundary"
    return ""


def multistage_reason(problem, tile, tf32: bool) -> str:
    """Why the multistage tile ``tile`` (variant :data:`registry.MULTISTAGE`) cannot run
    ``problem`` on operands :func:`channels_last_reason` accepts (``""`` when it can):
    whole K-tiles of ``BK`` channels per group, and for float32 operands rounded to TF32
    beforehand (``tf32``: its loop never rounds)."""
    return _multistage_reason(problem.dtype, problem.in_channels // problem.groups, tile, tf32)


def _multistage_reason(dtype, cpg, tile, tf32):
    if cpg % tile[2]:
        return f"in_channels/groups ({cpg}) is not a multiple of its K-tile ({tile[2]} channels)"
    if np.dtype(dtype) == np.float32 and not tf32:
        return "float32 needs operands rounded to TF32 beforehand (tf32=True)"
    return ""


def multistage_tile(problem, tf32: bool) -> Optional[Tuple[int, int, int, int]]:
    """The multistage tile the launcher takes in place of a tensor-core tile on operands
    :func:`channels_last_reason` accepts: the 128x128 one where the problem fills it (as
    :func:`implicit_gemm_tile` asks: at least 64 row tiles, half its width of columns),
    else the small one; ``None`` when none can run it."""
    usable, smallest = _multistage_tiles(problem.dtype, problem.in_channels // problem.groups,
                                         tf32)
    for t in usable:
        if problem.gemm_m >= 64 * t[0] and problem.gemm_n >= t[1] // 2:
            return t
    return smallest


@cached(maxsize=256)
def _multistage_tiles(dtype, cpg, tf32):
    """``(tiles, smallest)``: the multistage tiles that can run ``cpg`` input channels per
    group (whole K-tiles; float32 rounded to TF32) and the one :func:`multistage_tile`
    takes where the problem fills none (the last; ``None`` without one)."""
    usable = tuple(t for t in registry.gemm_tiles(dtype) if registry.is_multistage(t)
                   and not _multistage_reason(dtype, cpg, t, tf32))
    return usable, (usable[-1] if usable else None)


def channels_last_tile(problem, tile, tf32: bool) -> Optional[Tuple[int, int, int, int]]:
    """The tile run for ``tile`` on operands :func:`channels_last_reason` accepts (launcher
    and cost model): for variant 2 the :func:`multistage_tile`, else its twin 3; for the
    float64 DMMA 6, 7 their twins 9, 10 (``registry.channels_last_twin``); else ``None``."""
    variant = registry.tile_variant(tile)
    if variant.twin is None:
        return None
    twin = tuple(tile[:3]) + (variant.twin,)
    if variant.family == "implicit_gemm_fprop":          # 2: the multistage tile first
        compiled = twin in registry.gemm_tiles(problem.dtype)
        return (multistage_tile(problem, tf32) or twin) if compiled else None
    return twin


@cached(maxsize=1024, typed=True)
def operand_tile(problem, tile, tf32, readable):
    """``tile``, or where the operands are channels-last ``readable``
    (:func:`channels_last_reason`) its counterpart (:func:`channels_last_tile`)."""
    if readable:
        tile = registry.checked_tile(problem.dtype, channels_last_tile(problem, tile, tf32) or tile)
    return tile
