"""The warpgroup-MMA implicit GEMM (family ``implicit_gemm_wgmma``, tile variant
:data:`registry.WGMMA`; ``cuda_src/conv/implicit_gemm_wgmma.cu``): when it can run, which
tile, and its program.

The family is arch-specific (``sm_90a``): its cubin loads only on compute capability 9.0
(H100, H200).  The launcher takes it only when told the device is one
(:func:`wgmma_tile` with ``device_arch=90``), on the multistage tiles' operands
(channels-last x, channel-contiguous w, 16-byte strides and addresses, whole K-tiles of
128 bytes per group, float32 rounded to TF32 beforehand) plus bfloat16.  Where the loader
cannot give the cubin (missing, refused by the driver, another device) it raises
``cupyconv._compile.compat.ArchSpecificUnavailable``; the CUDA backend then runs the
portable tiles (``backends/cuda/algorithms.py``), and the reason stays in
``cupyconv._compile.loader.arch_specific_refusals()`` (``info`` shows it).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .._lru import memoized
from .._vocabulary import FORWARD
from . import launch, registry
from .program import Program, execute

__all__ = ["WGMMA_ARCH", "wgmma_reason", "wgmma_tile", "wgmma_applies", "wgmma_program", "run_wgmma",
           "clear_program_cache"]

#: The compute capability (``XY``) whose devices run the sm_90a cubin.
WGMMA_ARCH = 90


def wgmma_reason(problem, tile, tf32: bool, xs=None, ws=None, x=None, w=None) -> str:
    """Why the wgmma ``tile`` cannot run the forward ``problem`` (``""`` when it can): a
    compiled tile of the dtype, whole K-tiles of ``BK`` channels per group, float32 only on
    operands rounded to TF32 beforehand (``tf32``: its loop never rounds), and, given the
    operands (``xs``/``ws``: :func:`launch.operand_strides`), what
    :func:`launch.channels_last_reason` asks of them."""
    if problem.op != FORWARD:
        return f"the wgmma tiles run the forward convolution only (got {problem.op})"
    tiles = registry.wgmma_tiles(problem.dtype)
    if tuple(tile) not in tiles:
        return f"tile {tuple(tile)} is not a wgmma tile of {np.dtype(problem.dtype).name} ({tiles})"
    cpg = problem.in_channels // problem.groups
    if cpg % tile[2]:
        return f"in_channels/groups ({cpg}) is not a multiple of its K-tile ({tile[2]} channels)"
    if np.dtype(problem.dtype) == np.float32 and not tf32:
        return "float32 needs operands rounded to TF32 beforehand (tf32=True)"
    if x is not None:
        return launch.channels_last_reason(problem, xs, ws, x, w)
    return ""


def wgmma_tile(problem, tf32: bool, device_arch: int) -> Optional[Tuple[int, int, int, int]]:
    """The wgmma tile for ``problem`` on a device of compute capability ``device_arch``
    (``XY``), ``None`` when none applies (another device, or :func:`wgmma_reason`): 128x128
    when there are more than 64 output channels per group, else 128x64."""
    if device_arch != WGMMA_ARCH:
        return None
    usable = [t for t in registry.wgmma_tiles(problem.dtype) if not wgmma_reason(problem, t, tf32)]
    if not usable:
        return None
    return usable[0] if problem.gemm_n > 64 else usable[-1]


def wgmma_applies(problem, x, w, tf32: bool, device_arch: int) -> Optional[Tuple[int, int, int, int]]:
    """The :func:`wgmma_tile` that runs ``problem`` on these operands (the strides and
    addresses :func:`launch.channels_last_reason` asks for) on a device of compute
    capability ``device_arch``, or ``None``."""
    tile = wgmma_tile(problem, tf32, device_arch)
    if tile is None:
        return None
    xs, ws = launch.input_strides(problem, x, w)
    return None if launch.channels_last_reason(problem, xs, ws, x, w) else tile


def wgmma_program(module, problem, x, w, y=None, bias=None, alpha=1, beta=0, tile=None,
                  index64=None, tf32=False) -> Program:
    """The :class:`~.program.Program` of the wgmma implicit GEMM on these operands (``tile``
    default: the :func:`wgmma_tile` of a compute capability 9.0 device; memoised as
    :func:`launch.implicit_gemm_program`).

    Parameters
    ----------
    module : module-like or loader
        As :func:`launch.kernel_for` takes it (``loader(source, names)`` or an object with
        ``get_function``).
    problem : ConvProblem
        The forward problem; ``x``, ``w``, ``y`` its views in ``problem.layout``
        (``y=None``: the program allocates a contiguous one).
    bias, alpha, beta :
        The epilogue's, as :func:`launch.run_implicit_gemm_fprop`.
    tile : tuple, optional
        One of :func:`registry.wgmma_tiles`.
    index64 : bool, optional
        64-bit indices (default: when the problem needs them).
    tf32 : bool
        float32 operands are rounded to TF32 already (required for float32).

    Returns
    -------
    Program

    Raises
    ------
    ValueError
        With :func:`wgmma_reason` when the tile cannot run the problem on these operands.
    cupyconv._compile.compat.ArchSpecificUnavailable
        From a CuPy loader, when the device does not run the sm_90a cubin (the caller
        falls back to the portable tiles).
    """
    launch.check_dtype(problem, x=x, w=w, y=y, bias=bias)
    launch.check_addressable(x=x, w=w, y=y, bias=bias)
    xs, ws, ys = launch.conv_strides(problem, x, w, y)
    tiles = registry.wgmma_tiles(problem.dtype)
    if tile is None:
        tile = wgmma_tile(problem, tf32, WGMMA_ARCH) or (tiles[0] if tiles else (0, 0, 0, registry.WGMMA))
    tile = tuple(tile)
    reason = wgmma_reason(problem, tile, tf32, xs, ws, x, w)
    if reason:
        raise ValueError(f"the wgmma tile {tile} cannot run this problem: {reason}")
    bias_stride, has_bias = launch.bias_args(bias)
    return _wgmma_build(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta, tile,
                        index64, bool(tf32))


@memoized()
def _wgmma_build(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta, tile, index64, tf32):
    return launch.gemm_tile_program(module, problem, xs, ws, ys, bias_stride, has_bias, alpha,
                                    beta, tile, index64, tf32)


def run_wgmma(module, problem, x, w, y, bias=None, alpha=1, beta=0, tile=None, index64=None,
              tf32=False) -> None:
    """``y = alpha * conv(x, w) + beta * y + bias`` on the wgmma tile (builds and executes
    :func:`wgmma_program` with ``y`` bound)."""
    prog = wgmma_program(module, problem, x, w, y, bias, alpha, beta, tile, index64, tf32)
    execute(prog, None, dict(x=x, w=w, y=y, bias=bias))


def clear_program_cache() -> None:
    """Forget the memoised wgmma programs (they hold the loaders' kernels)."""
    _wgmma_build.cache_clear()

