"""The re-layout kernel's launch: channels-first operands into channels-last memory.

``relayout_channels_last`` (``cuda_src/conv/relayout.cu``) copies a logical
``(L, C, *S)`` view with any strides into a contiguous ``(L, *S, C)`` array in one
bandwidth pass, rounding float32 to TF32 on the way when asked.  :func:`relayout_program`
is that launch as a :class:`~.program.Program` (memoised per geometry, strides and
rounding), so a call that re-lays an operand executes it like any other step of its
algorithm and a compiled call replays it.  :func:`relayout_params_dtype` mirrors
``cc::RelayoutParams<R>`` byte for byte.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from .._lru import cached, memoized
from . import registry
from . import launch
from .params import FAST_DIVMOD_DTYPE, fast_divmod_params
from .program import Launch, Program

__all__ = ["FAMILY", "TILE", "relayout_params_dtype", "pack_relayout_params",
           "relayout_program", "relaid_view", "clear_program_cache"]

#: The kernel family (``registry.FAMILIES``).
FAMILY = "relayout_channels_last"
#: Side of the kernel's square shared tile (channels x spatial positions).
TILE = 32
#: Most blocks of one launch (each walks tiles grid-stride past it).
MAX_BLOCKS = 65535 * 16
_I8 = np.dtype(np.int64)


@cached(maxsize=None)
def relayout_params_dtype(rank: int) -> np.dtype:
    """Structured dtype with the field order of ``cc::RelayoutParams<rank>``."""
    r = int(rank)
    return np.dtype([
        ("lead", _I8), ("channels", _I8), ("spatial", _I8), ("round_tf32", _I8),
        ("in_stride_lead", _I8), ("in_stride_c", _I8), ("in_stride", _I8, (r,)),
        ("c_tiles", _I8), ("s_tiles", _I8), ("tiles", _I8),
        ("div_ext", FAST_DIVMOD_DTYPE, (r,)), ("div_s_tiles", FAST_DIVMOD_DTYPE),
        ("div_c_tiles", FAST_DIVMOD_DTYPE),
    ], align=True)


@memoized()
def pack_relayout_params(lead: int, channels: int, ext: Tuple[int, ...],
                         strides: Tuple[int, int, Tuple[int, ...]], round_tf32: bool) -> np.void:
    """The parameter struct of one launch over a ``(lead, channels, *ext)`` view with
    element strides ``strides`` = ``(lead, channel, spatial)`` (memoised: never modify
    the scalar it returns)."""
    r = len(ext)
    p = np.zeros((), dtype=relayout_params_dtype(r))
    spatial = math.prod(ext)
    c_tiles, s_tiles = -(-channels // TILE), -(-spatial // TILE)
    p["lead"], p["channels"], p["spatial"] = lead, channels, spatial
    p["round_tf32"] = int(bool(round_tf32))
    p["in_stride_lead"], p["in_stride_c"] = strides[0], strides[1]
    p["in_stride"] = strides[2]
    p["c_tiles"], p["s_tiles"], p["tiles"] = c_tiles, s_tiles, lead * c_tiles * s_tiles
    for i, n in enumerate(ext):
        p["div_ext"][i] = fast_divmod_params(max(n, 1))
    p["div_s_tiles"] = fast_divmod_params(max(s_tiles, 1))
    p["div_c_tiles"] = fast_divmod_params(max(c_tiles, 1))
    return p[()]


def _needs_index64(lead, channels, ext, strides) -> bool:
    """Whether an element offset of the input or the output passes ``int``'s range."""
    span = abs(strides[0]) * max(lead - 1, 0) + abs(strides[1]) * max(channels - 1, 0) + sum(
        abs(s) * max(n - 1, 0) for s, n in zip(strides[2], ext))
    return max(span, lead * channels * math.prod(ext)) + TILE >= 2**31 - 1


def relayout_program(module, dtype, lead: int, channels: int, ext: Tuple[int, ...],
                     strides: Tuple[int, int, Tuple[int, ...]], round_tf32: bool,
                     index64: Optional[bool] = None) -> Program:
    """The one-launch :class:`~.program.Program` that re-lays operand ``a`` (a logical
    ``(lead, channels, *ext)`` view with element ``strides``) into the contiguous
    ``(lead, *ext, channels)`` array ``r`` it allocates; ``round_tf32`` (float32 only)
    rounds every element to TF32 in the same pass.  ``index64``: the kernel's 64-bit
    index build (default: only when an offset needs it).

    Raises
    ------
    ValueError
        If the kernel has no instance for ``dtype`` (:data:`registry.RELAYOUT_DTYPES`) or
        ``round_tf32`` is asked for another dtype than float32.
    """
    dt = np.dtype(dtype)
    if dt not in registry.RELAYOUT_DTYPES:
        raise ValueError(f"the re-layout kernel takes {sorted(d.name for d in registry.RELAYOUT_DTYPES)}; "
                         f"got {dt.name}")
    if round_tf32 and dt != np.float32:
        raise ValueError(f"TF32 rounding applies to float32 operands; got {dt.name}")
    strides = (int(strides[0]), int(strides[1]), tuple(int(s) for s in strides[2]))
    ext = tuple(int(n) for n in ext)
    wide = _needs_index64(lead, channels, ext, strides) if index64 is None else bool(index64)
    return _build(module, dt, int(lead), int(channels), ext, strides, bool(round_tf32), wide)


@memoized()
def _build(module, dtype, lead, channels, ext, strides, round_tf32, wide):
    steps = ()
    tiles = lead * -(-channels // TILE) * -(-math.prod(ext) // TILE)
    if tiles:
        kern = launch.kernel_for(module, FAMILY, dtype, len(ext), wide, ())
        p = pack_relayout_params(lead, channels, ext, strides, round_tf32)
        grid = (max(1, min(tiles, MAX_BLOCKS)),)
        steps = (Launch(kern, grid, (registry.THREADS,), 0, p, ("a", "r")),)
    return Program("relayout", ("a",), (("r", (lead,) + ext + (channels,), dtype),), steps, "r")


def relaid_view(xp, r):
    """The logical ``(lead, channels, *ext)`` view of a re-laid ``(lead, *ext, channels)``
    array (no copy: channel stride 1)."""
    return xp.moveaxis(r, -1, 1)


def clear_program_cache():
    """Forget the memoised re-layout programs (they hold loaded kernels' function handles)."""
    _build.cache_clear()
