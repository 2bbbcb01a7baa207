"""Launchers of the Winograd transform kernels (cuda_src/conv/winograd_transform.cu).

One launch transforms one dense stride-1 *piece* of a Winograd convolution for one
batch chunk.  A piece is given per axis as :class:`PieceAxis` (plain integers: this
layer does not import :mod:`cupyconv.core`; the orchestration in
:mod:`cupyconv.backends.cuda.winograd` builds them from
:func:`cupyconv.core.winograd.axis_pieces` and the chosen tile).

- :func:`run_winograd_input`: ``x`` (any strides, any padding mode through the
  boundary remap) -> ``V[p][c][col]``, ``col = (n - n0) * T + t``;
- :func:`run_winograd_output`: ``M[p][k][col]`` -> ``y`` (``y = v`` or ``y += v``).

``mats`` is the ``(R, MAX_ALPHA, MAX_ALPHA)`` array of per-axis matrices in the real
type of the compute dtype (``B^T`` for the input, ``A^T`` for the output transform,
zero-filled past ``alpha`` / ``m``): :func:`matrix_stack`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence, Tuple

import numpy as np

from . import registry
from .launch import (SHARED_MEMORY_LIMIT, check_addressable, check_dtype, choose_index64,
                     dtype_ok, grid_stride_blocks, kernel_for, operand_strides)
from .._dtypes import is_half_float
from .._lru import cached, memoized
from .params import FAST_DIVMOD_DTYPE, fast_divmod_params, pack_conv_params
from .program import Launch

__all__ = ["PieceAxis", "piece_dtype", "piece_words", "compute_dtype", "real_dtype",
           "matrix_stack", "tiles_per_block", "can_implement_winograd", "run_winograd_input",
           "run_winograd_output", "launch_step", "TARGET_SHARED_BYTES", "weights_params_dtype",
           "weights_step"]

#: Dynamic shared memory a block aims for (several blocks per SM); a tile larger than
#: this still runs alone in its block up to the device's per-block limit.
TARGET_SHARED_BYTES = 16 * 1024

_I8 = np.dtype(np.int64)


@dataclasses.dataclass(frozen=True)
class PieceAxis:
    """One axis of a piece: F(m, r) tiles (``alpha = m + r - 1`` inputs), ``count``
    outputs at ``out_start + out_step * u`` read from the padded-input samples
    ``in_start + in_step * t`` (``t`` below ``padded``: the padded extent)."""

    m: int
    alpha: int
    count: int
    in_start: int
    in_step: int
    padded: int
    out_start: int
    out_step: int

    @property
    def tiles(self) -> int:
        """Tiles on this axis."""
        return -(-self.count // self.m)


def piece_words(rank: int) -> int:
    """8-byte words of ``WinogradPiece<rank>`` (``cc::winograd_piece_words``)."""
    return 9 * rank + 9 + 4 * (3 * rank + 5)


@cached(maxsize=None)
def piece_dtype(rank: int) -> np.dtype:
    """Structured dtype with the field order of ``cc::WinogradPiece<rank>``."""
    r, fd = int(rank), FAST_DIVMOD_DTYPE
    fields = [(name, _I8, (r,)) for name in ("m", "alpha", "tiles", "count", "in_start",
                                              "in_step", "padded", "out_start", "out_step")]
    fields += [(name, _I8) for name in ("tile_count", "vol", "out_vol", "channels", "cols",
                                         "items", "tiles_per_block", "pitch", "accumulate")]
    fields += [("div_alpha", fd, (r,)), ("div_m", fd, (r,)), ("div_tiles", fd, (r,))]
    fields += [(name, fd) for name in ("div_vol", "div_out_vol", "div_T", "div_channels",
                                        "div_tb")]
    dt = np.dtype(fields, align=True)
    if dt.itemsize != 8 * piece_words(r):
        raise RuntimeError(  # a programming error in this file, not user input
            f"WinogradPiece<{r}> host layout has {dt.itemsize} bytes, expected {8 * piece_words(r)}")
    return dt


@memoized()
def compute_dtype(dtype) -> np.dtype:
    """The kernels' compute type ``W`` (the registry's accumulator: float32 for float16)."""
    spec = registry.dtype_spec(dtype)
    return np.dtype(np.float32) if is_half_float(spec.dtype) else spec.dtype


@memoized()
def real_dtype(dtype) -> np.dtype:
    """The real type of the transform matrices for ``dtype``'s compute type."""
    return compute_dtype(dtype).type(0).real.dtype


def matrix_stack(mats: Sequence[np.ndarray], dtype) -> np.ndarray:
    """``(R, MAX_ALPHA, MAX_ALPHA)`` host array of the per-axis matrices (``None`` or a
    1 x 1 identity for an axis without transform), in :func:`real_dtype` (``dtype``)."""
    size = registry.WINOGRAD_MAX_ALPHA
    out = np.zeros((len(mats), size, size), dtype=real_dtype(dtype))
    for i, mat in enumerate(mats):
        if mat is None:
            out[i, 0, 0] = 1
            continue
        rows, cols = mat.shape
        if rows > size or cols > size:
            raise ValueError(f"axis {i}: a {rows} x {cols} transform exceeds MAX_ALPHA={size}")
        out[i, :rows, :cols] = mat
    return out


def _pitch(vol: int) -> int:
    return vol | 1


@memoized()
def tiles_per_block(axes: Sequence[PieceAxis], dtype, smem_limit: int = SHARED_MEMORY_LIMIT) -> int:
    """Tiles one block holds in shared memory (0 when not even one fits ``smem_limit``
    next to the staged matrices)."""
    item = compute_dtype(dtype).itemsize
    pitch = _pitch(math.prod(a.alpha for a in axes))
    static = len(axes) * registry.WINOGRAD_MAX_ALPHA ** 2 * real_dtype(dtype).itemsize
    room = smem_limit - static
    if pitch * item > room:
        return 0
    return max(1, min(room, TARGET_SHARED_BYTES) // (pitch * item))


def can_implement_winograd(problem, axes_list, smem_limit: int = SHARED_MEMORY_LIMIT
                           ) -> Tuple[bool, str]:
    """Whether the transform kernels can run every piece of ``axes_list`` (a list of
    per-piece :class:`PieceAxis` sequences) of ``problem`` (its dtype and rank).
    Memoised per argument set (each launch asks)."""
    return _can_implement(problem, tuple(tuple(axes) for axes in axes_list), smem_limit)


@memoized()
def _can_implement(problem, axes_list, smem_limit):
    ok, why = dtype_ok(problem)
    if not ok:
        return ok, why
    dtype = problem.dtype
    if not registry.winograd_tiles(dtype):
        return False, f"no Winograd transform kernel for {np.dtype(dtype).name}"
    for axes in axes_list:
        bad = [(a.m, a.alpha) for a in axes if not 1 <= a.m <= a.alpha]
        if bad:               # the kernel's require_piece would trap on it
            return False, f"a piece axis needs 1 <= m <= alpha; got m, alpha = {bad[0]}"
        big = [a.alpha for a in axes if a.alpha > registry.WINOGRAD_MAX_ALPHA]
        if big:
            return False, (f"the transform kernels take alpha = m + r - 1 <= "
                           f"{registry.WINOGRAD_MAX_ALPHA} per axis; got {big[0]}")
        if tiles_per_block(axes, dtype, smem_limit) < 1:
            vol = math.prod(a.alpha for a in axes)
            return False, (f"one Winograd tile of {vol} elements does not fit in shared memory "
                           f"({smem_limit} bytes per block)")
    return True, ""


@memoized()
def _pack_piece(axes, channels, n_count, tb, accumulate):
    r = len(axes)
    p = np.zeros((), dtype=piece_dtype(r))
    for name in ("m", "alpha", "tiles", "count", "in_start", "in_step", "padded", "out_start",
                 "out_step"):
        p[name] = [getattr(a, name) for a in axes]
    tcount = math.prod(a.tiles for a in axes)
    vol, out_vol = math.prod(a.alpha for a in axes), math.prod(a.m for a in axes)
    p["tile_count"], p["vol"], p["out_vol"] = tcount, vol, out_vol
    p["channels"], p["cols"], p["items"] = channels, n_count * tcount, n_count * channels * tcount
    p["tiles_per_block"], p["pitch"], p["accumulate"] = tb, _pitch(vol), int(bool(accumulate))
    for i, a in enumerate(axes):
        p["div_alpha"][i] = fast_divmod_params(a.alpha)
        p["div_m"][i] = fast_divmod_params(a.m)
        p["div_tiles"][i] = fast_divmod_params(max(a.tiles, 1))
    for name, d in (("div_vol", vol), ("div_out_vol", out_vol), ("div_T", tcount),
                    ("div_channels", channels), ("div_tb", tb)):
        p[name] = fast_divmod_params(max(d, 1))
    return p[()]


def _launch(module, family, problem, axes, arrays, conv_kw, channels, n0, n_count,
            accumulate, index64, smem_limit, work_elems):
    step = launch_step(module, family, problem, axes, ("a", "b", "c"), conv_kw, channels, n0,
                       n_count, accumulate, index64, smem_limit, work_elems)
    if step is not None:
        step.function(step.grid, step.block, (step.params,) + tuple(arrays),
                      shared_mem=step.shared_mem)


def launch_step(module, family, problem, axes, slots, conv_kw, channels, n0, n_count,
                accumulate, index64, smem_limit, work_elems):
    """The :class:`~.program.Launch` of one transform kernel (``family``
    ``winograd_input``/``winograd_output``) on the arrays in ``slots`` (data, matrices,
    result), or ``None`` when it has no work; ``conv_kw`` is ``("x"|"y", strides)``."""
    axes = tuple(axes)
    if len(axes) != problem.ndim:
        raise ValueError(f"a piece needs {problem.ndim} axes; got {len(axes)}")
    ok, why = can_implement_winograd(problem, [axes], smem_limit)
    if not ok:
        raise ValueError(why)
    n_count = problem.batch - n0 if n_count is None else int(n_count)
    tb = tiles_per_block(axes, problem.dtype, smem_limit)
    wp = _pack_piece(axes, int(channels), n_count, tb, bool(accumulate))
    items = int(wp["items"])
    if items == 0:
        return None
    which, spatial = conv_kw
    if index64 is None:
        index64 = choose_index64(problem, spatial, extra=max(work_elems, items * int(wp["vol"])))
    strides = dict(x_strides=None, y_strides=None)
    strides[f"{which}_strides"] = spatial[0]
    p = pack_conv_params(problem, n0=n0, n_count=n_count, **strides)
    kern = kernel_for(module, family, problem.dtype, problem.ndim, index64,
                      registry.winograd_tiles(problem.dtype)[0])
    smem = tb * int(wp["pitch"]) * compute_dtype(problem.dtype).itemsize
    grid = (grid_stride_blocks(-(-items // tb) * registry.THREADS),)
    return Launch(_WithPiece(kern, wp), grid, (registry.THREADS,), smem, p, tuple(slots))


class _WithPiece:
    """A transform kernel with its piece struct bound: called as ``(grid, block, (params,
    *pointers))`` like every program launch, it passes ``(params, piece, *pointers)``."""

    __slots__ = ("kernel", "piece")

    def __init__(self, kernel, piece):
        self.kernel, self.piece = kernel, piece

    @property
    def structs(self):
        """The structs the kernel takes after ``params`` (what a graph node's or driver
        launch's argument array packs, ``backends.cuda.graphs.kernel_arguments``)."""
        return (self.piece,)

    def __call__(self, grid, block, args, shared_mem=0):
        self.kernel(grid, block, (args[0], self.piece) + tuple(args[1:]), shared_mem=shared_mem)


def _piece_elements(axes, channels, n_count):
    """Elements of one piece's transform buffer: positions x channels x columns."""
    return (math.prod(a.alpha for a in axes) * channels * n_count
            * math.prod(a.tiles for a in axes))


def _check_work(name, array, dtype, need):
    if np.dtype(array.dtype) != compute_dtype(dtype):
        raise TypeError(f"{name} must be {compute_dtype(dtype).name}; got {np.dtype(array.dtype).name}")
    if int(np.prod(array.shape)) < need:
        raise ValueError(f"{name} has {int(np.prod(array.shape))} elements; the piece needs {need}")


def run_winograd_input(module, problem, axes: Sequence[PieceAxis], x, mats, v, n0: int = 0,
                       n_count=None, index64=None, smem_limit: int = SHARED_MEMORY_LIMIT) -> None:
    """``v[p][c][col]`` (contiguous, compute dtype) = ``B^T`` of every tile of ``x``'s piece."""
    n_count = problem.batch - n0 if n_count is None else int(n_count)
    check_dtype(problem, x=x)
    need = _piece_elements(axes, problem.in_channels, n_count)
    _check_work("v", v, problem.dtype, need)
    check_addressable(x=x, v=v, mats=mats)
    _launch(module, "winograd_input", problem, axes, (x, mats, v), ("x", operand_strides(problem, x, "x")),
            problem.in_channels, n0, n_count, False, index64, smem_limit, need)


def run_winograd_output(module, problem, axes: Sequence[PieceAxis], prod, mats, y, n0: int = 0,
                        n_count=None, accumulate: bool = False, index64=None,
                        smem_limit: int = SHARED_MEMORY_LIMIT) -> None:
    """``y`` (=, or += with ``accumulate``) ``A^T`` of the products ``prod[p][k][col]``;
    ``y`` is of the problem dtype, any strides."""
    n_count = problem.batch - n0 if n_count is None else int(n_count)
    check_dtype(problem, y=y)
    need = _piece_elements(axes, problem.out_channels, n_count)
    _check_work("prod", prod, problem.dtype, need)
    check_addressable(prod=prod, mats=mats, y=y)
    _launch(module, "winograd_output", problem, axes, (prod, mats, y),
            ("y", operand_strides(problem, y, "y")), problem.out_channels, n0, n_count, accumulate,
            index64, smem_limit, need)


@cached(maxsize=None)
def weights_params_dtype(rank: int) -> np.dtype:
    """Structured dtype with the field order of ``cc::WinogradWeights<rank>``."""
    r = int(rank)
    return np.dtype([(n, _I8) for n in ("K", "cg", "taps", "positions", "stride_k", "stride_c")]
                    + [("tap_ext", _I8, (r,)), ("tap_stride", _I8, (r,))], align=True)


def weights_step(module, dtype, shape, strides, positions, slots):
    """The :class:`~.program.Launch` of the weight transform of one piece
    (cuda_src/conv/winograd_weights.cu): ``u`` (``positions x K*Cg``, the compute dtype)
    from the weights' view of ``shape`` ``(K, Cg, *taps)`` and element ``strides`` and the
    N-D ``G`` (``positions x prod(taps)``, float64); ``slots``: ``(w, g, u)``."""
    k, cg, taps = int(shape[0]), int(shape[1]), tuple(int(t) for t in shape[2:])
    p = np.zeros((), weights_params_dtype(len(taps)))
    p["K"], p["cg"], p["taps"], p["positions"] = k, cg, math.prod(taps), int(positions)
    p["stride_k"], p["stride_c"] = int(strides[0]), int(strides[1])
    p["tap_ext"], p["tap_stride"] = taps, tuple(int(s) for s in strides[2:])
    total = int(positions) * k * cg
    reach = sum((n - 1) * abs(int(s)) for n, s in zip(shape, strides))
    index64 = max(total, reach, int(positions) * math.prod(taps)) > 2 ** 31 - 1
    kern = kernel_for(module, "winograd_weights", dtype, len(taps), index64)
    return Launch(kern, (grid_stride_blocks(total),), (registry.THREADS,), 0, p[()],
                  tuple(slots))
