"""Launch configuration and array-module-agnostic kernel runners.

Every runner takes a *module-like* object: anything with
``get_function(name_expression)`` returning a callable
``kernel(grid, block, args, shared_mem=0)`` -- a ``cupy.RawModule`` (or the
cached-cubin wrapper of :func:`cupyconv._compile.load_module`) for CuPy
arrays, an ``EmulatedModule`` for NumPy arrays (a kernel that launches with more than
48 KiB of dynamic shared memory, the multistage implicit GEMM, gets the opt-in through
its ``max_dynamic_shared_size_bytes`` where it has one).  Instead of a module you may
pass a *loader* ``loader(source, name_expressions) -> module``; the runner
then asks for exactly the kernel it launches.  Arrays are only inspected
through ``.shape``, ``.strides``, ``.itemsize`` and ``.dtype``.

Kernels index element ``[0, ..., 0]`` of each view with the view's element
strides, so slices, transposes, negative and zero strides need no copy.
What they cannot address is checked by :func:`addressable`: every runner
raises ``ValueError`` before launching on such an operand (a strided record
field, a complex view only 4/8-byte aligned), which would otherwise fault on
the device with a misaligned address; the caller copies it first.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from .._lru import cached, memoized
from . import direct_axes, registry
from .addressing import addressable, check_addressable, device_alignment, unaddressable
from .params import (contiguous_strides, conv_strides, input_strides, logical_strides,
                     operand_strides, pack_conv_params, y_strides)
from .program import Launch, Program, execute
from .tile_choice import (channels_last_reason, channels_last_tile, implicit_gemm_tile,
                          multistage_reason, multistage_tile, operand_tile)
from .tile_variants import least_tile_n

__all__ = [
    "MAX_GRID_X", "MAX_GRID_YZ", "SHARED_MEMORY_LIMIT", "addressable", "device_alignment",
    "choose_index64", "can_implement_vol2col", "can_implement_implicit_gemm", "can_implement_direct",
    "direct_smem_layout", "direct_tap_chunk", "direct_tile", "kernel_for", "run_vol2col", "run_col2vol",
    "implicit_gemm_tile", "multistage_reason", "multistage_tile", "channels_last_tile", "run_implicit_gemm_fprop", "run_direct", "direct_program",
    "direct_program_on", "contiguous_strides",
    "implicit_gemm_program", "gemm_tile_for", "gemm_tile_program", "clear_program_cache", "vol2col_step", "col2vol_step", "check_addressable",
    "check_dtype", "dtype_ok", "grid_stride_blocks", "operand_strides", "bias_args",
    "unaddressable", "logical_strides", "input_strides", "y_strides", "conv_strides",
]

#: CUDA grid limits.
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
#: Static/default dynamic shared memory available without an opt-in.
SHARED_MEMORY_LIMIT = 48 * 1024
#: Cap on blocks of the grid-stride families (they loop over the rest).
_GRID_STRIDE_BLOCKS = 65535 * 16
#: Headroom below 2**31 for per-thread offsets added to 32-bit indices.
_INT32_LIMIT = 2**31 - 1 - 2**20


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

def choose_index64(problem, *arrays_strides, extra: int = 0) -> bool:
    """True when any extent, offset or work count of a launch passes 32 bits.

    Parameters
    ----------
    problem : ConvProblem
    *arrays_strides : ((lead, chan, spatial) strides, (lead, chan, spatial) extents)
        Every array the kernel addresses.
    extra : int
        Largest family-specific count (column-buffer size, thread count, ...).

    Memoised per argument set (the launchers ask on every call).
    """
    return _choose_index64(problem, arrays_strides, int(extra))


@cached(maxsize=1024, typed=True)
def _choose_index64(problem, arrays_strides, extra):
    if getattr(problem, "needs_int64", False):
        return True
    worst = int(extra)
    # padded coordinates reach past the axis before the boundary remap; offsets
    # are formed from them (and discarded for constant padding), so bound them too
    reach = []
    for s, k, o, st, d, (pb, pa) in zip(problem.in_shape, problem.kernel_shape,
                                        problem.out_shape, problem.stride,
                                        problem.dilation, problem.padding):
        reach.append(max(o - 1, 0) * st + d * (k - 1) + pb + pa + 2 * s)
    worst = max([worst] + reach)
    for (lead, chan, spatial), (n, c, extents) in arrays_strides:
        # the array's span (its strides times its extents) plus its padded reach
        span = abs(lead) * max(n - 1, 0) + abs(chan) * max(c - 1, 0)
        for st, e, q in zip(spatial, extents, reach):
            span += abs(st) * (max(e - 1, 0) + q)
        worst = max(worst, span)
    c, k, n = problem.in_channels, problem.out_channels, problem.batch
    worst = max(worst, n * math.prod(problem.out_shape) * max(k, 1),
                n * c * math.prod(problem.in_shape), problem.gemm_k)
    return worst > _INT32_LIMIT


def dtype_ok(problem) -> Tuple[bool, str]:
    """``(ok, reason)``: whether the kernels are instantiated for ``problem.dtype``."""
    try:
        registry.dtype_spec(problem.dtype)
    except TypeError as exc:
        return False, str(exc)
    if not 1 <= problem.ndim <= registry.MAX_RANK:
        return False, f"spatial rank {problem.ndim} is outside [1, {registry.MAX_RANK}]"
    return True, ""


def can_implement_vol2col(problem) -> Tuple[bool, str]:
    """Whether vol2col/col2vol support ``problem`` (dtype and rank only)."""
    return dtype_ok(problem)


def can_implement_implicit_gemm(problem) -> Tuple[bool, str]:
    """Whether :func:`run_implicit_gemm_fprop` supports ``problem``."""
    ok, why = dtype_ok(problem)
    if not ok:
        return ok, why
    if -(-(problem.out_channels // problem.groups) // least_tile_n(problem.dtype)) > MAX_GRID_YZ:
        return False, f"out_channels/groups = {problem.out_channels // problem.groups} needs more than {MAX_GRID_YZ} column tiles"
    return True, ""


def direct_smem_layout(problem, tile, kch, kcw) -> Tuple[int, int]:
    """``(pitch, bytes)`` of the direct kernel's shared memory for one tap chunk.

    The input tile has ``(TILE_H-1)*sh + dh*(kch-1) + 1`` rows of
    ``(TILE_W-1)*sw + dw*(kcw-1) + 1`` elements, each row padded to ``pitch``:
    ``registry.DIRECT_TAP_BLOCK`` more elements (a register window may read that
    far past its row) rounded up to a 16-byte multiple (vector loads); then the
    ``kch * kcw`` weights.  The kernel reads ``pitch`` from ``params.aux[2]``.
    """
    r = problem.ndim
    th, tw = tile
    item = registry.dtype_spec(problem.dtype).accum_itemsize
    sw, dw = problem.stride[-1], problem.dilation[-1]
    sh, dh = (problem.stride[-2], problem.dilation[-2]) if r >= 2 else (1, 1)
    rows = (th - 1) * sh + dh * (kch - 1) + 1
    cols = (tw - 1) * sw + dw * (kcw - 1) + 1
    vec = max(16 // item, 1)
    pitch = -(-(cols + registry.DIRECT_TAP_BLOCK) // vec) * vec
    return pitch, (rows * pitch + kch * kcw) * item


def direct_tap_chunk(problem, smem_limit: int = SHARED_MEMORY_LIMIT, tile=None) -> Optional[Tuple[int, int]]:
    """Inner-tap chunk ``(kch, kcw)`` of the direct kernel that fits ``smem_limit``.

    ``tile`` defaults to the preferred tile of the rank.  Returns ``None`` when
    even a single tap's input tile does not fit.
    """
    r = problem.ndim
    tile = registry.direct_tiles(r)[0] if tile is None else tile
    kw = problem.kernel_shape[-1]
    kh = problem.kernel_shape[-2] if r >= 2 else 1

    kch, kcw = kh, kw
    nbytes = direct_smem_layout(problem, tile, kch, kcw)[1]
    while nbytes > smem_limit and kch > 1:
        kch = (kch + 1) // 2
        nbytes = direct_smem_layout(problem, tile, kch, kcw)[1]
    while nbytes > smem_limit and kcw > 1:
        kcw = (kcw + 1) // 2
        nbytes = direct_smem_layout(problem, tile, kch, kcw)[1]
    return (kch, kcw) if nbytes <= smem_limit else None


@cached(maxsize=1024, typed=True)
def direct_tile(problem, smem_limit: int = SHARED_MEMORY_LIMIT):
    """``(tile, (kch, kcw))``: the first compiled tile whose input tile fits, or None
    (memoised: the launcher and ``can_implement`` ask on every call)."""
    for tile in registry.direct_tiles(problem.ndim):
        chunk = direct_tap_chunk(problem, smem_limit, tile)
        if chunk is not None:
            return tile, chunk
    return None


def can_implement_direct(problem, smem_limit: int = SHARED_MEMORY_LIMIT) -> Tuple[bool, str]:
    """Whether :func:`run_direct` supports ``problem`` within ``smem_limit`` bytes."""
    ok, why = dtype_ok(problem)
    if not ok:
        return ok, why
    if direct_tile(problem, smem_limit) is None:
        return False, ("the direct kernel's input tile does not fit in shared memory "
                       f"({smem_limit} bytes) for stride {problem.stride[-2:]} and dilation "
                       f"{problem.dilation[-2:]}; use implicit_gemm")
    return True, ""


def _require(check) -> None:
    ok, why = check
    if not ok:
        raise ValueError(why)


# ---------------------------------------------------------------------------
# Launch plumbing
# ---------------------------------------------------------------------------

def kernel_for(module, family: str, dtype, rank: int, index64: bool, tile=()):
    """Fetch one kernel from a module-like object or a loader callable."""
    name = registry.name_expression(family, dtype, rank, index64, tile)
    if not hasattr(module, "get_function"):
        module = module(registry.FAMILIES[family].source, [name])
    return module.get_function(name)


def grid_stride_blocks(total: int) -> int:
    """Blocks of a grid-stride launch over ``total`` threads' work (capped)."""
    return max(1, min(-(-total // registry.THREADS), _GRID_STRIDE_BLOCKS))


def check_dtype(problem, **arrays) -> None:
    """Raise ``TypeError`` naming the first operand whose dtype is not the problem's."""
    for name, a in arrays.items():
        if a is not None and np.dtype(a.dtype) != np.dtype(problem.dtype):
            raise TypeError(f"{name} dtype {np.dtype(a.dtype).name} does not match the problem "
                            f"dtype {np.dtype(problem.dtype).name}")


def bias_args(bias):
    """``(bias element stride, has_bias)`` (a kernel without bias reads ``y``'s pointer)."""
    if bias is None:
        return 0, False
    if len(bias.shape) != 1:
        raise ValueError(f"bias must be 1-D; got shape {tuple(bias.shape)}")
    return int(bias.strides[0]) // int(bias.itemsize), True


# ---------------------------------------------------------------------------
# Runners
# ---------------------------------------------------------------------------

def _column_launch(problem, col, vol, n0, n_count, family):
    """Shared checks of vol2col/col2vol; returns ``(n_count, M, col_size)``."""
    _require(can_implement_vol2col(problem))
    operands = {"col": col, ("x" if family == "vol2col" else "dx"): vol}
    check_dtype(problem, **operands)
    check_addressable(**operands)
    n_count = problem.batch - n0 if n_count is None else int(n_count)
    m = n_count * math.prod(problem.out_shape)
    col_size = problem.in_channels * problem.taps * m
    if int(np.prod(col.shape)) < col_size:
        raise ValueError(f"col has {int(np.prod(col.shape))} elements; {family} needs {col_size}")
    return n_count, m, col_size


def run_vol2col(module, problem, x, col, n0: int = 0, n_count: Optional[int] = None,
                index64: Optional[bool] = None) -> None:
    """Fill ``col`` (contiguous, ``C * prod(KS) * n_count * prod(O)`` elements).

    Layout ``[G][(C/G)*prod(KS)][n_count*prod(O)]``; see cuda_src/conv/vol2col.cu.
    """
    n_count, m, col_size = _column_launch(problem, col, x, n0, n_count, "vol2col")
    step = vol2col_step(module, problem, operand_strides(problem, x, "x"), n0, n_count,
                        ("x", "col"), index64)
    if step is not None:
        execute(Program("vol2col", ("x", "col"), (), (step,), "col"), None, dict(x=x, col=col))


def vol2col_step(module, problem, xs, n0, n_count, slots, index64=None):
    """The vol2col :class:`~.program.Launch` of images ``n0:n0+n_count`` of an ``x`` with
    strides ``xs`` (:func:`operand_strides`) into the columns (``slots``: x, col), or
    ``None`` when there is nothing to gather (the caller checked the operands)."""
    m = n_count * math.prod(problem.out_shape)
    total = problem.in_channels * m
    if total == 0:
        return None
    if index64 is None:
        index64 = choose_index64(problem, xs, extra=problem.in_channels * problem.taps * m + total)
    p = pack_conv_params(problem, x_strides=xs[0], n0=n0, n_count=n_count, grid_divisors=(m, 1, 1))
    k = kernel_for(module, "vol2col", problem.dtype, problem.ndim, index64)
    return Launch(k, (grid_stride_blocks(total),), (registry.THREADS,), 0, p, tuple(slots))


def run_col2vol(module, problem, col, dx, n0: int = 0, n_count: Optional[int] = None,
                alpha=1, beta=0, index64: Optional[bool] = None) -> None:
    """``dx[n0:n0+n_count] = alpha * col2vol(col) + beta * dx`` (exact adjoint of vol2col)."""
    n_count, m, col_size = _column_launch(problem, col, dx, n0, n_count, "col2vol")
    step = col2vol_step(module, problem, operand_strides(problem, dx, "x"), n0, n_count,
                        ("col", "dx"), alpha, beta, index64)
    if step is not None:
        execute(Program("col2vol", ("col", "dx"), (), (step,), "dx"), None, dict(col=col, dx=dx))


def col2vol_step(module, problem, xs, n0, n_count, slots, alpha=1, beta=0, index64=None):
    """The col2vol :class:`~.program.Launch` of images ``n0:n0+n_count`` from the columns
    into a ``dx`` with strides ``xs`` (:func:`operand_strides`; ``slots``: col, dx), or
    ``None`` when there is nothing to scatter (the caller checked the operands)."""
    total = n_count * problem.in_channels * math.prod(problem.in_shape)
    if total == 0:
        return None
    if index64 is None:
        col_size = problem.in_channels * problem.taps * n_count * math.prod(problem.out_shape)
        index64 = choose_index64(problem, xs, extra=col_size + total)
    p = pack_conv_params(problem, x_strides=xs[0], n0=n0, n_count=n_count, alpha=alpha, beta=beta)
    k = kernel_for(module, "col2vol", problem.dtype, problem.ndim, index64)
    return Launch(k, (grid_stride_blocks(total),), (registry.THREADS,), 0, p, tuple(slots))


def run_implicit_gemm_fprop(module, problem, x, w, y, bias=None, alpha=1, beta=0,
                            tile: Optional[Tuple[int, int, int, int]] = None,
                            index64: Optional[bool] = None, mma: bool = False,
                            tf32: bool = False, verified_on: Optional[str] = None) -> None:
    """``y = alpha * conv(x, w) + beta * y + bias`` with the tiled implicit GEMM.

    ``mma``: the device has the tensor-core atoms (sm_80+), so the automatic tile choice
    takes a tensor-core tile (variant 2) first when one fits; for float32 only with
    ``tf32`` (``precision="tf32"``), which also says the operands are rounded to TF32
    already (the dispatcher rounds every algorithm's operands under that precision), so
    the TF32 tile skips its own rounding (``params.aux[0]``); without it a TF32 tile (an
    explicit ``tile``) rounds what it stages.  An explicit ``tile`` is taken as given.

    Zero workspace.  The batch is split into launches when ``gridDim.x``
    would pass its limit, the groups into launches of at most 65535.  Builds (memoised)
    and executes the :func:`implicit_gemm_program` with ``y`` bound.
    """
    prog = implicit_gemm_program(module, problem, x, w, y, bias, alpha, beta, tile, index64,
                                 mma, tf32, verified_on)
    execute(prog, None, dict(x=x, w=w, y=y, bias=bias))


def implicit_gemm_program(module, problem, x, w, y=None, bias=None, alpha=1, beta=0,
                          tile=None, index64=None, mma=False, tf32=False, verified_on=None,
                          config=None) -> Program:
    """The :class:`~.program.Program` of :func:`run_implicit_gemm_fprop` on these operands
    (checked here; memoised per problem, strides, operand alignment and options).  With
    ``y=None`` the program allocates a contiguous ``y``.  ``config``: the
    :class:`~.kernel_config.KernelConfig` the backend's selection made, whose tile (and
    64-bit indices, where it has them) is built as it is, checked once like an explicit
    ``tile``; without either, the tile of :func:`gemm_tile_for` (``mma``, ``tf32``,
    ``verified_on``: its switches)."""
    _require(can_implement_implicit_gemm(problem))
    check_dtype(problem, x=x, w=w, y=y, bias=bias)
    check_addressable(x=x, w=w, y=y, bias=bias)
    xs, ws, ys = conv_strides(problem, x, w, y)
    if config is not None:
        tile, index64 = config.gemm_tile, index64 or config.index64 or None
    explicit, reason = tile is not None, ""
    if explicit:
        tile = registry.checked_tile(problem.dtype, tile)
        reason = channels_last_reason(problem, xs, ws, x, w) if registry.asks_layout(tile) else ""
    else:
        tile = gemm_tile_for(problem, xs, ws, x, w, mma, tf32, verified_on)
    bias_stride, has_bias = bias_args(bias)
    return _implicit_gemm_build(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta,
                                tile, explicit, reason, index64, bool(tf32))


def gemm_tile_for(problem, xs, ws, x, w, mma=False, tf32=False, verified_on=None):
    """The tile the implicit GEMM runs ``problem`` with on operands ``x``, ``w`` (``xs``,
    ``ws``: :func:`operand_strides`): :func:`implicit_gemm_tile`, or its channels-last
    counterpart where :func:`channels_last_reason` accepts the operands
    (``tile_choice.operand_tile``; the backend's selection asks it, the builder takes
    what it gives)."""
    keep = {} if verified_on is None else {"verified_on": verified_on}
    tile = implicit_gemm_tile(problem, mma, tf32, **keep)
    readable = not (registry.asks_layout(tile) and channels_last_reason(problem, xs, ws, x, w))
    return operand_tile(problem, tile, tf32, readable)


@memoized()
def _implicit_gemm_build(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta,
                         tile, explicit, channels_last, index64, tf32):
    """The program of ``tile``; an ``explicit`` one (given, or a selection's record) is
    checked once against the problem and the operands (``channels_last``: why they are
    not channels-last readable)."""
    if explicit:
        _check_tile(problem, tile, channels_last, tf32)
    return gemm_tile_program(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta,
                             tile, index64, tf32)


def _check_tile(problem, tile, channels_last, tf32):
    """``ValueError`` where the explicit ``tile`` cannot run ``problem`` on its operands."""
    cpg = problem.in_channels // problem.groups
    if not registry.gemm_tile_fits(tile, cpg):
        raise ValueError(f"tile {tile} is a tap-aligned variant, which needs in_channels/groups "
                         f"({cpg}) to be a multiple of {tile[2]}")
    if registry.tile_variant(tile).channels_last and channels_last:
        raise ValueError(f"tile {tile} is a channels-last tensor-core variant: {channels_last}")
    reason = multistage_reason(problem, tile, tf32) if registry.is_multistage(tile) else ""
    if reason:
        raise ValueError(f"tile {tile} is the multistage tensor-core variant: {reason}")


def gemm_tile_program(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta, tile,
                      index64, tf32, name="implicit_gemm") -> Program:
    """The forward program of one implicit-GEMM ``tile`` of any family
    (:func:`registry.gemm_family`), already checked: the batch split where ``gridDim.x``
    would pass its limit, the groups in launches of at most 65535 (grid x: row tiles, y:
    column tiles, z: groups), the tile's dynamic shared memory opted in past 48 KiB."""
    launches = []
    if 0 not in problem.y_shape:
        bm, bn = tile[:2]
        if index64 is None:
            index64 = choose_index64(problem, xs, ws, ys, extra=problem.gemm_m + bm)
        if index64 and not registry.tile_index64(tile):
            raise ValueError(f"tile {tile} is compiled for 32-bit indices only; "
                             f"this problem needs 64-bit")
        family = registry.gemm_family(tile)
        kern = kernel_for(module, family, problem.dtype, problem.ndim, index64, tile)
        smem = registry.gemm_dynamic_smem(tile, problem.dtype)   # multistage: dynamic shared
        if smem > SHARED_MEMORY_LIMIT:
            kern.max_dynamic_shared_size_bytes = smem
        out_size = math.prod(problem.out_shape)
        n_per = max(1, min(problem.batch, (MAX_GRID_X * bm) // max(out_size, 1)))
        grid_y = -(-problem.gemm_n // bn)
        slots = ("x", "w", "y", "bias" if has_bias else "y")
        for n0 in range(0, problem.batch, n_per):
            n_count = min(n_per, problem.batch - n0)
            for g0 in range(0, problem.groups, MAX_GRID_YZ):
                gz = min(MAX_GRID_YZ, problem.groups - g0)
                p = pack_conv_params(problem, x_strides=xs[0], w_strides=ws[0], y_strides=ys[0],
                                     n0=n0, n_count=n_count, g0=g0, alpha=alpha, beta=beta,
                                     bias_stride=bias_stride, has_bias=has_bias,
                                     aux=(int(tf32), smem, 0, 0))
                grid = (-(-(n_count * out_size) // bm), grid_y, gz)
                launches.append(Launch(kern, grid, (registry.block_threads(family, tile),), smem, p,
                                       slots))
    return _program("implicit_gemm", problem, launches)


def _program(name, problem, launches):
    """A forward program on ``x``, ``w`` (and ``bias``) allocating a contiguous ``y``."""
    return Program(name, ("x", "w", "bias"), (("y", tuple(problem.y_shape), problem.dtype),),
                   tuple(launches), "y")


def run_direct(module, problem, x, w, y, bias=None, alpha=1, beta=0,
               smem_limit: int = SHARED_MEMORY_LIMIT, index64: Optional[bool] = None) -> None:
    """``y = alpha * conv(x, w) + beta * y + bias`` with the direct (stencil) kernel
    (builds, memoised, and executes the :func:`direct_program` with ``y`` bound)."""
    prog = direct_program(module, problem, x, w, y, bias, alpha, beta, smem_limit, index64)
    execute(prog, None, dict(x=x, w=w, y=y, bias=bias))


def direct_program(module, problem, x, w, y=None, bias=None, alpha=1, beta=0,
                   smem_limit: int = SHARED_MEMORY_LIMIT, index64=None) -> Program:
    """The :class:`~.program.Program` of :func:`run_direct` on these operands (checked
    here; memoised per problem, strides and options).  With ``y=None`` the program
    allocates a contiguous ``y``."""
    _require(can_implement_direct(problem, smem_limit))
    check_dtype(problem, x=x, w=w, y=y, bias=bias)
    check_addressable(x=x, w=w, y=y, bias=bias)
    xs, ws, ys = conv_strides(problem, x, w, y)
    bias_stride, has_bias = bias_args(bias)
    return _direct_build(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta,
                         smem_limit, index64)


def direct_program_on(module, problem, xs, ws, ys, beta=0,
                      smem_limit: int = SHARED_MEMORY_LIMIT) -> Program:
    """The :func:`direct_program` for operands of these :func:`operand_strides` (no bias,
    ``alpha = 1``): a step of a composed program (the ``separable`` passes), whose arrays
    do not exist when it is built."""
    _require(can_implement_direct(problem, smem_limit))
    return _direct_build(module, problem, xs, ws, ys, 0, False, 1, beta, smem_limit, None)


@memoized()
def _direct_build(module, problem, xs, ws, ys, bias_stride, has_bias, alpha, beta, smem_limit,
                  index64):
    if 0 in problem.y_shape:
        return _program("direct", problem, ())
    y_problem = problem
    better = direct_axes.reduced(problem, xs, ws, ys, registry.MAX_RANK)
    if better is not None and direct_tile(better[0], smem_limit) is not None:
        problem, xs, ws, ys = better              # one channel: fewer, better-shaped axes
    r = problem.ndim
    (th, tw), (kch, kcw) = direct_tile(problem, smem_limit)
    pitch, smem = direct_smem_layout(problem, (th, tw), kch, kcw)
    ow = problem.out_shape[-1]
    oh = problem.out_shape[-2] if r >= 2 else 1
    tiles_w, tiles_h = -(-ow // tw), -(-oh // th)
    outer = math.prod(problem.out_shape[:-2]) if r >= 2 else 1
    total_blocks = problem.batch * problem.out_channels * tiles_w * tiles_h * outer
    if index64 is None:
        index64 = choose_index64(problem, xs, ws, ys, extra=total_blocks)
    p = pack_conv_params(problem, x_strides=xs[0], w_strides=ws[0], y_strides=ys[0],
                         alpha=alpha, beta=beta, bias_stride=bias_stride, has_bias=has_bias,
                         grid_divisors=(tiles_w, tiles_h, outer), aux=(kch, kcw, pitch, 0))
    kern = kernel_for(module, "direct_conv", problem.dtype, r, index64, (th, tw))
    blocks = max(1, min(total_blocks, _GRID_STRIDE_BLOCKS))
    launch = Launch(kern, (blocks,), (registry.THREADS,), smem, p,
                    ("x", "w", "y", "bias" if has_bias else "y"))
    return _program("direct", y_problem, (launch,))


def clear_program_cache():
    """Forget the memoised programs (they hold loaded kernels' function handles)."""
    _direct_build.cache_clear()
    _implicit_gemm_build.cache_clear()
