"""The ``winograd`` algorithm on the CUDA path, written once against a runner.

The planning is :mod:`cupyconv.backends.winograd_conv`'s (pieces from
:func:`~cupyconv.core.winograd.axis_pieces`, tiles from
:func:`~cupyconv.core.winograd.best_tile` within the error gate, bounded here by the
transform kernels' ``alpha <= registry.WINOGRAD_MAX_ALPHA``).  Per piece and batch chunk:

1. ``winograd_input`` kernel: the boundary gather (every padding mode, no padded copy)
   and ``B^T`` along each axis, written as ``V`` ``(P, G, C/G, n*T)``;
2. ``runner.matmul`` (cuBLAS batched GEMM, FP32 compute for float32) of the transformed
   weights ``U`` ``(P, G, K/G, C/G)`` with ``V`` into ``M`` ``(P, G, K/G, n*T)``.  ``U``
   is one ``winograd_weights`` launch per piece (cuda_src/conv/winograd_weights.cu: the
   N-D ``G``, a float64 constant of the program, applied to the oriented taps in binary64
   and rounded once to the compute dtype) where the N-D ``G`` fits
   ``winograd_conv.KRON_BYTES``; else ``G`` along each axis in float64 on the array
   module (widening, GEMMs, rounding);
3. ``winograd_output`` kernel: ``A^T`` along each axis, tiles scattered into ``y``; the
   first piece of each dilation residue writes, further stride phases add.

float16 computes in float32; when stride phases add, they add in a float32 buffer that
is rounded to float16 once at the end.  The input gradient of a stride-1, constant-padded
problem is the forward problem of :func:`~cupyconv.core.transpose.transpose`.
Bias is added by the API layer.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..._dtypes import is_half_float
from ..._kernels import program, registry, winograd_launch as wl
from ..._kernels.addressing import data_pointer
from ..._kernels.launch import check_addressable, check_dtype, operand_strides
from ..._kernels.program import Call, Program, View
from ..._lru import cached, memoized
from ..._vocabulary import GRAD_INPUT
from ...core.winograd import transforms
from .. import winograd_conv
from ...core.transpose import transpose, transposed_weights, upsampled
from ..base import OutOfMemoryError

__all__ = ["can_implement", "workspace_bytes", "min_workspace_bytes", "work", "run",
           "winograd_program", "clear_program_cache", "grad_input"]

#: The largest ``alpha = m + r - 1`` per axis the transform kernels take.
MAX_ALPHA = registry.WINOGRAD_MAX_ALPHA


def _forward(problem):
    """The forward problem the algorithm computes for ``problem``."""
    return transpose(problem).forward if problem.op == GRAD_INPUT else problem


def _plan(problem):
    """``((pieces, tile, axes), ...)`` of a forward problem (``axes``: the kernels'
    :class:`~cupyconv._kernels.winograd_launch.PieceAxis` per axis), or a reason;
    memoised with :func:`~..winograd_conv.plan_tiles`'s error limit."""
    return _axes_plan(problem, winograd_conv.growth_limit(problem.dtype))


@cached(maxsize=1024)
def _axes_plan(problem, limit):
    plan = winograd_conv.plan_tiles(problem, MAX_ALPHA)
    if isinstance(plan, str):
        return plan
    padded = problem.padded_shape()
    return tuple((pieces, tile, tuple(
        wl.PieceAxis(m=m, alpha=p.r + m - 1, count=p.count, in_start=p.in_start,
                     in_step=p.in_step, padded=n, out_start=p.out_start, out_step=p.out_step)
        for p, m, n in zip(pieces, tile, padded))) for pieces, tile in plan)


def can_implement(problem, device):
    """``(ok, reason)``: the algorithm's checks (:func:`winograd_conv.can_implement`, the
    input gradient's stride and padding) and the transform kernels' (dtype, shared memory)."""
    ok, why = winograd_conv.can_implement(problem, MAX_ALPHA)
    if not ok:
        return ok, why
    fwd = _forward(problem) if all(n > 0 for n in problem.in_shape) else problem
    plan = _plan(fwd)
    if isinstance(plan, str):
        return False, plan
    return wl.can_implement_winograd(fwd, [axes for _, _, axes in plan], device.smem_per_block)


def _sums_in_buffer(problem, plan):
    """float16 with stride phases that add: they add in a float32 buffer."""
    keys = [tuple(p.out_start for p in pieces) for pieces, _, _ in plan]
    return is_half_float(problem.dtype) and len(set(keys)) < len(keys)


def _per_image(problem, plan):
    """Workspace elements per image of the largest piece: ``V`` and ``M``."""
    return max(math.prod(a.alpha for a in axes) * math.prod(a.tiles for a in axes)
               * (problem.in_channels + problem.out_channels) for _, _, axes in plan)


def _chunk(problem, plan, workspace_limit):
    """Images per chunk so ``V`` and ``M`` fit ``workspace_limit`` (0: not even one)."""
    if workspace_limit is None:
        return problem.batch
    item = wl.compute_dtype(problem.dtype).itemsize
    room = workspace_limit - _buffer_bytes(problem, plan)
    return int(min(problem.batch, max(room, 0) // max(item * _per_image(problem, plan), 1)))


def _buffer_bytes(problem, plan):
    """Bytes besides the chunked ``V`` and ``M``: each piece's ``U`` written by the
    weight-transform launch, and float16's float32 sum buffer."""
    item = wl.compute_dtype(problem.dtype).itemsize
    weights = sum(math.prod(a.alpha for a in axes) * problem.out_channels
                  * (problem.in_channels // problem.groups) * item
                  for pieces, tile, axes in plan
                  if winograd_conv.kron_applies(tile, tuple(p.r for p in pieces)))
    if not _sums_in_buffer(problem, plan):
        return weights
    return weights + 4 * problem.batch * problem.out_channels * math.prod(problem.out_shape)


def workspace_bytes(problem, workspace_limit=None):
    """Bytes of ``V`` and ``M`` for the images of one chunk (all of them without a limit),
    plus :func:`_buffer_bytes` (``U``, float16's float32 sum buffer)."""
    fwd = _forward(problem)
    plan = _plan(fwd)
    if isinstance(plan, str):
        return 0
    nb = max(_chunk(fwd, plan, workspace_limit), 1)
    item = wl.compute_dtype(fwd.dtype).itemsize
    return nb * item * _per_image(fwd, plan) + _buffer_bytes(fwd, plan)


def min_workspace_bytes(problem):
    """Workspace of a one-image chunk."""
    return workspace_bytes(problem, 0)


def work(problem):
    """``(gemm_flops, bytes, launches)`` of the algorithm for the cost model: the GEMMs
    over the transform positions; the input transform reads every tile's inputs once from
    global memory (overlaps through the cache) and writes ``V``, the GEMM reads ``V`` and
    writes ``M``, the output transform reads ``M`` and writes ``y`` (or adds to it)."""
    fwd = _forward(problem)
    plan = _plan(fwd)
    if isinstance(plan, str):
        return math.inf, math.inf, 0
    item = wl.compute_dtype(fwd.dtype).itemsize
    cplx = 4 if fwd.is_complex else 1
    cg = fwd.in_channels // fwd.groups
    flops = nbytes = 0
    for _, _, axes in plan:
        cols = fwd.batch * math.prod(a.tiles for a in axes)
        pos = math.prod(a.alpha for a in axes)
        outs = fwd.batch * fwd.out_channels * math.prod(a.count for a in axes)
        flops += 2 * cplx * pos * cols * fwd.out_channels * cg
        nbytes += item * (pos * cols * (2 * fwd.in_channels + 2 * fwd.out_channels) + 2 * outs)
    nbytes += fwd.dtype.itemsize * fwd.batch * fwd.in_channels * math.prod(fwd.in_shape)
    return flops, nbytes, 3 * len(plan)


def _matrices(pieces, tile, dtype, which, runner):
    """The device stack of ``B^T`` (``which`` 2) or ``A^T`` (0) per axis of a piece
    (copied to the device once: :meth:`~.runners.CupyRunner.constant`)."""
    return runner.constant(_host_matrices(tuple((m, p.r) for p, m in zip(pieces, tile)),
                                          np.dtype(dtype), which))


@cached(maxsize=256)
def _host_matrices(tiles, dtype, which):
    """The host stack of :func:`_matrices` for ``((m, r), ...)`` per axis (read-only)."""
    host = wl.matrix_stack([transforms(m, r).arrays(np.float64)[which] for m, r in tiles],
                           dtype)
    host.flags.writeable = False
    return host


def run(problem, x, w, runner, workspace_limit=None):
    """``y`` ``(N, K, *O)`` of a forward ``problem`` (channels-first views, any strides):
    builds (memoised) and executes its :func:`winograd_program`."""
    prog = winograd_program(problem, x, w, runner, workspace_limit)
    return program.execute(prog, runner.xp, dict(x=x, w=w),
                           workspace=runner.workspace)[prog.result]


def winograd_program(problem, x, w, runner, workspace_limit=None):
    """The :class:`~cupyconv._kernels.program.Program` of :func:`run` on operands with
    ``x``'s and ``w``'s strides (checked here; memoised per problem, strides, chunk and
    runner): the weights transformed per piece (a ``winograd_weights`` launch into ``U``,
    or library calls on the array module: :func:`_weight_views`),
    then per piece and batch chunk the input-transform launch, the batched GEMM
    (``runner.matmul``) and the output-transform launch; ``y``, the transform buffer and
    (float16 with adding phases) a float32 sum are its allocations."""
    plan = _plan(problem)
    if isinstance(plan, str):
        raise ValueError(f"method='winograd' cannot run this problem: {plan}")
    nb = _chunk(problem, plan, workspace_limit)
    if nb < 1:
        raise OutOfMemoryError(
            f"winograd needs {min_workspace_bytes(problem)} bytes of transformed tiles for "
            f"one image; workspace_limit is {workspace_limit}")
    check_dtype(problem, x=x)
    check_addressable(x=x)
    return _build(problem, operand_strides(problem, x, "x"), nb, runner,
                  _weight_views(problem, w, plan))


def _weight_views(problem, w, plan):
    """Per piece, ``(byte offset into w, shape, element strides)`` of its taps of the
    oriented weights where the weight-transform kernel takes them (the N-D ``G`` applies,
    the view starts inside ``w`` and has the problem's dtype), else ``None``: the piece's
    weights go through the array module (widening, GEMM, rounding)."""
    oriented = winograd_conv.oriented_weights(problem, w)
    if np.dtype(w.dtype) != problem.dtype or not wl.dtype_ok(problem)[0]:
        return (None,) * len(plan)
    views = []
    for pieces, tile, _ in plan:
        v = oriented[(slice(None), slice(None)) + tuple(p.taps for p in pieces)]
        offset = data_pointer(v) - data_pointer(w)
        item = np.dtype(v.dtype).itemsize
        if (offset < 0 or v.size == 0 or any(s % item for s in v.strides)
                or not winograd_conv.kron_applies(tile, tuple(p.r for p in pieces))):
            views.append(None)
            continue
        views.append((offset, tuple(v.shape), tuple(s // item for s in v.strides)))
    return tuple(views)


@memoized()
def _build(problem, xs, nb, runner, wviews=None):
    xp, plan = runner.xp, _plan(problem)
    cdtype = wl.compute_dtype(problem.dtype)
    item = cdtype.itemsize
    smem = runner.static.smem_per_block
    g, n = problem.groups, problem.batch
    kg, cg = problem.out_channels // g, problem.in_channels // g
    y_shape = (n, problem.out_channels) + tuple(problem.out_shape)
    allocations = [("y", y_shape, problem.dtype)]
    target, yproblem = "y", problem
    if _sums_in_buffer(problem, plan):
        allocations.append(("ysum", y_shape, np.dtype(np.float32)))
        target, yproblem = "ysum", problem.with_(dtype=np.dtype(np.float32))
    allocations.append(("work", (nb * _per_image(problem, plan),), cdtype))
    ys = operand_strides(yproblem, _Shaped(y_shape, yproblem.dtype), "y")
    wviews = (None,) * len(plan) if wviews is None else wviews
    steps = []
    if any(v is None for v in wviews):
        steps.append(Call(functools.partial(winograd_conv.wide_weights, problem, xp=xp), ("w",),
                          "wide"))
    constants, seen = [], set()
    for i, (pieces, tile, axes) in enumerate(plan):
        taps = (slice(None), slice(None)) + tuple(p.taps for p in pieces)
        weights = functools.partial(_piece_weights, taps, g, tile, cdtype, xp,
                                    _Kept(runner.constant), runner.matmul)
        rs = tuple(p.r for p in pieces)
        npos = math.prod(a.alpha for a in axes)
        if winograd_conv.kron_applies(tile, rs):  # the N-D G: on the device once, a constant
            constants.append((f"g{i}", runner.constant(winograd_conv.weight_transform(
                tuple(tile), rs, winograd_conv.wide_real(problem.dtype)))))
            if wviews[i] is not None:             # one launch: G on the oriented taps
                offset, shape, strides = wviews[i]
                allocations.append((f"u{i}", (npos, g, kg, cg), cdtype))
                steps.append(wl.weights_step(runner.loader, problem.dtype, shape, strides,
                                             npos, (View("w", offset), f"g{i}", f"u{i}")))
            else:
                steps.append(Call(weights, ("wide", f"g{i}"), f"u{i}"))
        else:
            steps.append(Call(weights, ("wide",), f"u{i}"))
        constants += [(f"bt{i}", _matrices(pieces, tile, problem.dtype, 2, runner)),
                      (f"at{i}", _matrices(pieces, tile, problem.dtype, 0, runner))]
        key = tuple(p.out_start for p in pieces)
        accumulate = key in seen
        seen.add(key)
        npos, ntiles = math.prod(a.alpha for a in axes), math.prod(a.tiles for a in axes)
        for n0 in range(0, n, nb):
            count = min(nb, n - n0)
            cols = count * ntiles
            m_at = npos * problem.in_channels * cols * item
            v = View("work", 0, (npos, g, cg, cols), _c_strides((npos, g, cg, cols), item), cdtype)
            m = View("work", m_at, (npos, g, kg, cols), _c_strides((npos, g, kg, cols), item),
                     cdtype)
            need_v = npos * problem.in_channels * cols
            need_m = npos * problem.out_channels * cols
            for step in (
                    wl.launch_step(runner.loader, "winograd_input", problem, axes,
                                   ("x", f"bt{i}", View("work", 0)), ("x", xs),
                                   problem.in_channels, n0, count, False, None, smem, need_v),
                    Call(functools.partial(_gemm, runner.matmul, problem.precision),
                         (f"u{i}", v, m)),
                    wl.launch_step(runner.loader, "winograd_output", yproblem, axes,
                                   (View("work", m_at), f"at{i}", target), ("y", ys),
                                   problem.out_channels, n0, count, accumulate, None, smem,
                                   need_m)):
                if step is not None:
                    steps.append(step)
    if target != "y":
        steps.append(Call(_round_into, ("y", "ysum")))
    return Program("winograd", ("x", "w"), tuple(allocations), tuple(steps), "y",
                   constants=tuple(constants))


class _Shaped:
    """Shape, dtype and C-contiguous byte strides of an array not allocated yet (what
    ``operand_strides`` reads)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.strides = _c_strides(self.shape, self.itemsize)


def _c_strides(shape, item):
    strides, step = [], item
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class _Kept:
    """``runner.constant`` remembered per host matrix object (the transform matrices are
    memoised host arrays), so a replayed weight transform does not hash its ``G`` again."""

    def __init__(self, constant):
        self._constant, self._kept = constant, {}

    def __call__(self, host):
        hit = self._kept.get(id(host))
        if hit is None or hit[0] is not host:
            hit = self._kept[id(host)] = (host, self._constant(host))
        return hit[1]


def clear_program_cache():
    """Forget the memoised programs (they hold the runners' kernels and constants)."""
    _build.cache_clear()


def _piece_weights(taps, groups, tile, cdtype, xp, constant, matmul, wide, kron=None):
    """``U`` of one piece: :func:`~..winograd_conv.transform_weights` of its taps (its
    GEMM on ``runner.matmul``: cuBLAS with the compute type stated, float64 here), with
    the program's N-D ``G`` constant ``kron`` where it applies."""
    return winograd_conv.transform_weights(wide[taps], groups, tile, cdtype, xp,
                                           constant=constant, matmul=matmul, kron=kron)


def _gemm(matmul, precision, u, v, out):
    """``out = u @ v`` (``runner.matmul``: cuBLAS batched, FP32 compute for float32)."""
    matmul(u, v, out=out, precision=precision)


def _round_into(y, ysum):
    """float16 ``y`` from the float32 sum of the stride phases (one rounding)."""
    y[...] = ysum


def grad_input(problem, dy, w, runner, workspace_limit=None):
    """``dx`` ``(N, C, *S)`` of a stride-1, constant-padded ``problem``: the forward
    Winograd convolution of ``dy`` with the flipped, channel-transposed kernel."""
    t, xp = transpose(problem), runner.xp
    return run(t.forward, upsampled(t, dy, xp), transposed_weights(t, problem, w, xp), runner,
               workspace_limit)
