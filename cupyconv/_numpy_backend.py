"""The NumPy (CPU) backend: the ``direct``, ``gemm`` and ``fft`` algorithms.

Every function takes a :class:`~cupyconv._problem.ConvProblem` and the
logical channels-first views ``x`` ``(N, C, *S)`` and ``w`` ``(K, C/G, *KS)``
(any strides; layout transposes are views) in the compute dtype, and returns
``y`` ``(N, K, *O)`` in the compute dtype.  On the CPU the boundary is
materialised once with :func:`numpy.pad` (the GPU kernels resolve it in
their index math instead).
"""
from __future__ import annotations

import warnings

import numpy as np
from numpy.lib.stride_tricks import as_strided
from . import _fft
from ._args import array_module_of

__all__ = ["conv_direct", "conv_gemm", "conv_fft", "ALGORITHMS", "pad_input"]

#: Algorithms this backend implements.
ALGORITHMS = ("direct", "gemm", "fft")
#: ``implicit_gemm`` is a GPU kernel; on the CPU its closest equivalent (no
#: column buffer beyond one tap) is the tap loop of ``direct``.
ALIASES = {"implicit_gemm": "direct"}
#: Column-buffer chunk used when no ``workspace_limit`` is given: large
#: enough for BLAS efficiency, small enough never to exhaust host memory.
DEFAULT_CHUNK_BYTES = 64 * 2**20


def pad_input(problem, x):
    """Return ``x`` extended by the problem's padding and boundary mode."""
    pads = ((0, 0), (0, 0)) + tuple(problem.padding)
    if not any(b or a for b, a in problem.padding):
        return x
    if problem.padding_mode == "constant":
        cval = problem.cval
        if x.dtype.kind != "c":
            cval = np.real(cval)
        return array_module_of(x=x).pad(x, pads, mode="constant", constant_values=cval)
    return array_module_of(x=x).pad(x, pads, mode=problem.padding_mode)


def _windows(problem, xp):
    """Strided view ``(N, G, C/G, *O, *KS)`` of every (output, tap) pair."""
    g = problem.groups
    cg = problem.in_channels // g
    sn, sc = xp.strides[:2]
    sp = xp.strides[2:]
    shape = ((problem.batch, g, cg) + tuple(problem.out_shape)
             + tuple(problem.kernel_shape))
    strides = ((sn, cg * sc, sc)
               + tuple(st * s for st, s in zip(problem.stride, sp))
               + tuple(d * s for d, s in zip(problem.dilation, sp)))
    return as_strided(xp, shape=shape, strides=strides, writeable=False)


def _oriented_weights(problem, w):
    """``w`` with the taps reversed for true convolution (a view)."""
    if problem.flip:
        return w[(slice(None), slice(None)) + (slice(None, None, -1),) * problem.ndim]
    return w


def _grouped_weights(problem, w):
    g = problem.groups
    return w.reshape((g, problem.out_channels // g, problem.in_channels // g)
                     + tuple(problem.kernel_shape))


def _empty_result(problem, dtype, xp=np):
    return xp.zeros((problem.batch, problem.out_channels) + tuple(problem.out_shape),
                    dtype=dtype)


def _operands(problem, x, w, y):
    """Window view of the padded input, grouped oriented weights, grouped ``y``.

    Shapes ``(N, G, C/G, *O, *KS)``, ``(G, K/G, C/G, *KS)``, ``(N, G, K/G, *O)``.
    """
    view = _windows(problem, pad_input(problem, x))
    wg = _grouped_weights(problem, _oriented_weights(problem, w))
    yg = y.reshape((problem.batch, problem.groups, problem.gemm_n) + tuple(problem.out_shape))
    return view, wg, yg


def conv_direct(problem, x, w, **_):
    """Tap loop: ``y += w[:, :, t] . x[window t]`` for every kernel tap ``t``.

    No workspace beyond ``y``; each output accumulates its taps in a fixed
    order, so NaN/Inf stay local to the outputs that see them.
    """
    y = _empty_result(problem, x.dtype)
    if problem.is_empty:
        return y
    view, wg, yg = _operands(problem, x, w, y)
    g, kg, cg = wg.shape[:3]
    r = problem.ndim
    single = kg == 1 and cg == 1
    for tap in np.ndindex(*problem.kernel_shape):
        slab = view[(Ellipsis,) + tap]            # (N, G, Cg, *O)
        wt = wg[(Ellipsis,) + tap]                # (G, Kg, Cg)
        if single:
            yg += slab * wt.reshape((1, g, 1) + (1,) * r)
        else:
            yg += np.einsum("ngc...,gkc->ngk...", slab, wt)
    return y


def _chunks(problem, workspace_limit):
    """Yield index tuples over ``(N, *O)`` whose column buffer fits the limit.

    The leading axes of ``(N, O_0, O_1, ...)`` are fixed one index at a time
    and the first axis whose remaining block fits is split into runs, so the
    buffer stays under the limit down to a single output position.
    """
    limit = DEFAULT_CHUNK_BYTES if workspace_limit is None else int(workspace_limit)
    sizes = (problem.batch,) + tuple(problem.out_shape)
    per_position = problem.dtype.itemsize * problem.groups * problem.gemm_k
    for axis in range(len(sizes)):
        block = per_position * int(np.prod(sizes[axis + 1:], dtype=np.int64))
        if block <= limit or axis == len(sizes) - 1:
            break
    if block > limit and workspace_limit is not None:
        raise MemoryError(
            f"workspace_limit={workspace_limit} bytes cannot hold the columns of one "
            f"output position ({block} bytes); raise the limit or use method='direct'")
    run = max(1, limit // max(block, 1))
    for prefix in np.ndindex(*sizes[:axis]):
        for i0 in range(0, sizes[axis], run):
            yield tuple(slice(i, i + 1) for i in prefix) + (
                slice(i0, min(sizes[axis], i0 + run)),)


def conv_gemm(problem, x, w, *, workspace_limit=None, stats=None, **_):
    """vol2col (a strided view copied into a column buffer) + BLAS matmul.

    The column buffer holds ``G * (C/G * prod(KS)) * M_chunk`` elements and is
    chunked over images (then output rows) to stay under
    ``workspace_limit`` bytes.  ``stats`` (a dict) receives the peak column
    buffer size in ``"peak_workspace"``.
    """
    y = _empty_result(problem, x.dtype)
    if problem.is_empty:
        return y
    view, wg, yg = _operands(problem, x, w, y)
    g, kg, cg = wg.shape[:3]
    kdim = problem.gemm_k
    wmat = np.ascontiguousarray(wg.reshape(g, kg, kdim).transpose(0, 2, 1))  # (G, Kdim, Kg)
    r = problem.ndim
    peak = 0
    # (N, G, Cg, *O, *KS) -> (G, N, *O, Cg, *KS): columns are (M, Kdim) per group
    order = (1, 0) + tuple(range(3, 3 + r)) + (2,) + tuple(range(3 + r, 3 + 2 * r))
    for index in _chunks(problem, workspace_limit):
        part = view[index[:1] + (slice(None), slice(None)) + index[1:]]
        cols = np.ascontiguousarray(part.transpose(order))
        peak = max(peak, cols.nbytes)
        m = cols.size // (g * kdim)
        res = np.matmul(cols.reshape(g, m, kdim), wmat)               # (G, M, Kg)
        res = res.reshape((g,) + part.shape[:1] + part.shape[3:3 + r] + (kg,))
        res = res.transpose((1, 0, r + 2) + tuple(range(2, r + 2)))   # (nb, G, Kg, *O)
        yg[index[:1] + (slice(None), slice(None)) + index[1:]] = res
    if stats is not None:
        stats["peak_workspace"] = max(stats.get("peak_workspace", 0), peak)
    return y


def conv_fft(problem, x, w, *, known_finite=False, **_):
    """Convolution theorem with ``scipy.fft`` (``cupyx.scipy.fft`` for CuPy arrays).

    Zero ``constant`` padding is never materialised: the source is shifted
    inside a circular transform just long enough that the wanted outputs do
    not alias, and the transforms are pruned to the lines that hold data or
    are wanted (see :mod:`cupyconv._fft`).  Stride subsamples the stride-1
    result.  Integer and bool inputs run in float64 and are rounded back, as
    ``scipy.signal.fftconvolve`` does.  Non-finite data warn (they spread to
    every output) unless ``known_finite`` says the caller checked already.
    """
    xp = array_module_of(x=x)
    y_dtype = x.dtype
    if problem.is_empty:
        return _empty_result(problem, y_dtype, xp)
    exact = y_dtype.kind in "biu"
    work = np.dtype(np.float64) if exact else y_dtype
    if problem.padding_mode == "constant" and problem.cval == 0:
        src, shift = x, tuple(pb for pb, _ in problem.padding)
    else:
        src, shift = pad_input(problem, x), (0,) * problem.ndim
    src = src.astype(work, copy=False)
    if not (exact or known_finite) and not bool(xp.isfinite(src).all() and xp.isfinite(w).all()):
        warnings.warn(
            "Use of fft convolution on input with NAN or inf results in NAN or inf "
            "output. Consider using method='direct' instead.", RuntimeWarning,
            stacklevel=4)
    span = tuple(d * (k - 1) + 1 for d, k in zip(problem.dilation, problem.kernel_shape))
    cplx = work.kind == "c"
    lengths, index = _fft.fft_window(problem, src.shape[2:], shift, span)
    # Dilate the kernel by inserting zeros, oriented as a convolution kernel.
    wk = _oriented_weights(problem.with_(flip=not problem.flip), w).astype(work, copy=False)
    if any(d > 1 for d in problem.dilation):
        wd = xp.zeros(wk.shape[:2] + span, dtype=work)
        wd[(Ellipsis,) + tuple(slice(None, None, d) for d in problem.dilation)] = wk
        wk = wd
    if xp is np and _fft.overlap_add_applies(problem, src.shape[2:], span, index):
        res = _fft.overlap_add(src, wk[:, 0], index, xp)
        return xp.rint(res).astype(y_dtype) if exact else res
    fx = _fft.pruned_forward(src, lengths, cplx, xp)
    fw = _fft.pruned_forward(wk, lengths, cplx, xp)
    g = problem.groups
    cg, kg = problem.in_channels // g, problem.out_channels // g
    fx = fx.reshape((problem.batch, g, cg) + fx.shape[2:])
    fw = fw.reshape((g, kg, cg) + fw.shape[2:])
    if cg == 1 and kg == 1:
        fx *= fw[:, :, 0][None]              # Cg == 1 slot becomes Kg == 1
        fy = fx
    else:
        fy = xp.einsum("ngc...,gkc...->ngk...", fx, fw)
    fy = fy.reshape((problem.batch, problem.out_channels) + fy.shape[3:])
    res = _fft.pruned_inverse(fy, lengths, index, cplx, xp)
    if exact:
        return xp.rint(res).astype(y_dtype)
    return res


_IMPLS = {"direct": conv_direct, "gemm": conv_gemm, "fft": conv_fft}


def run(problem, x, w, algorithm, **kwargs):
    """Run ``algorithm`` (a name from :data:`ALGORITHMS` or an alias)."""
    algorithm = ALIASES.get(algorithm, algorithm)
    return _IMPLS[algorithm](problem, x, w, **kwargs)


def fft_exact_enough(problem, x, w):
    """scipy's guard: integer results must stay exactly representable."""
    if problem.dtype.kind not in "biu":
        return True
    xmax = float(np.abs(x).max()) if x.size else 0.0
    wmax = float(np.abs(w).max()) if w.size else 0.0
    bound = xmax * wmax * max(problem.gemm_k, 1)
    return bound < 2.0 ** (np.finfo(np.float64).nmant - 1)

