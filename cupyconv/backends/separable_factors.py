"""Which kernels the ``separable`` algorithm runs, and their 1-D factors (every backend).

``separable`` runs a kernel that is an outer product of 1-D factors as one 1-D pass per
axis: a 7^4 Gaussian costs 2,401 multiply-adds per output as one N-D kernel and 28 as
four 1-D passes.  This module is the backend-agnostic half, shared by the NumPy passes
(:mod:`.numpy.separable`) and the CUDA path's (:mod:`.cuda.separable`), as
:mod:`.fft_conv` is: :func:`applies` (data-free) and :func:`factor` /
:func:`kernel_factors` (from the weights' values), which decide whether a kernel is
such an outer product:

- integer kernels exactly: every fibre through the first nonzero tap, divided by its
  gcd, is a factor, and the kernel must equal their outer product times one integer
  (checked in Python integers), so integer results stay exact;
- float and complex kernels by the rank-1 truncated HOSVD: each factor is the dominant
  singular vector of the kernel's unfolding along its axis, scaled by the core value,
  and the kernel is separable when the reconstruction error is within
  :data:`ROUNDOFF_UNITS` units of roundoff of the kernel's norm.

The factorisation runs on the host: the weights are a small NumPy array (the CUDA path
copies them from the device first).
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import reduce

import numpy as np

from .._lru import LRU
from .arrays import oriented_weights

__all__ = ["applies", "factor", "kernel_factors", "clear_cache", "ROUNDOFF_UNITS",
           "NotSeparable", "NOT_APPLICABLE"]

#: A float kernel is separable when ``||K - outer(factors)|| <= ROUNDOFF_UNITS * eps * ||K||``.
ROUNDOFF_UNITS = 8
#: Factorisations kept (keyed by the kernel's bytes); kernels above this many taps are
#: factored on every call.
_CACHE_TAPS = 1 << 16
_cache = LRU(64)
#: Why a problem is not one :func:`applies` accepts (``can_implement``'s reason).
NOT_APPLICABLE = ("separable needs one filter per input channel (single channel "
                  "or depthwise) and a kernel over two axes or more")


class NotSeparable(ValueError):
    """``method="separable"`` on a kernel that is not an outer product of 1-D factors."""


def applies(problem):
    """Data-free: a forward problem with one filter per group and input channel (single
    channel or depthwise) whose kernel extends over two axes or more."""
    g = problem.groups
    return (problem.op == "forward" and problem.in_channels == g and problem.out_channels == g
            and sum(k > 1 for k in problem.kernel_shape) >= 2)


def _integer_factors(kernel):
    """Integer factors whose outer product is exactly ``kernel``, or ``None``."""
    k = np.asarray(kernel, dtype=object)
    nonzero = np.argwhere(k != 0)
    if nonzero.size == 0:
        return [np.zeros(n, dtype=np.int64) for n in k.shape], 0.0
    p = tuple(nonzero[0])
    factors = []
    for axis in range(k.ndim):
        fibre = k[p[:axis] + (slice(None),) + p[axis + 1:]]
        g = reduce(math.gcd, (abs(int(v)) for v in fibre))
        factors.append([int(v) // g for v in fibre])
    scale = Fraction(int(k[p]), math.prod(f[i] for f, i in zip(factors, p)))
    if scale.denominator != 1:
        return None
    factors[0] = [v * int(scale) for v in factors[0]]
    outer = reduce(np.multiply.outer, [np.array(f, dtype=object) for f in factors])
    if not (outer == k).all():
        return None
    if max(abs(v) for f in factors for v in f) >= 2**62:
        return None
    return [np.array(f, dtype=np.int64) for f in factors], 0.0


def _float_factors(kernel, dtype):
    """Rank-1 HOSVD factors and the relative reconstruction error."""
    k = np.asarray(kernel, dtype=np.complex128 if dtype.kind == "c" else np.float64)
    norm = float(np.linalg.norm(k))
    if norm == 0.0:
        return [np.zeros(n, dtype=k.dtype) for n in k.shape], 0.0
    if not np.isfinite(norm):
        return None, math.inf
    vectors = []
    for axis in range(k.ndim):
        unfolding = np.moveaxis(k, axis, 0).reshape(k.shape[axis], -1)
        u = np.linalg.svd(unfolding, full_matrices=False)[0][:, 0]
        vectors.append(u)
    core = k
    for u in vectors:                     # contract every axis with conj(u): the core value
        core = np.tensordot(np.conj(u), core, axes=([0], [0]))
    factors = [vectors[0] * core] + vectors[1:]
    rebuilt = reduce(np.multiply.outer, factors)
    return factors, float(np.linalg.norm(k - rebuilt)) / norm


def factor(kernel, dtype):
    """``(factors, relative error)`` of one kernel; ``factors`` is ``None`` when it is not
    an outer product (integer ``dtype``: exactly; float: within :data:`ROUNDOFF_UNITS`
    units of roundoff of its norm).  The factors' outer product is the kernel.

    The returned arrays may be cached: treat them as read-only.
    """
    dtype = np.dtype(dtype)
    kernel = np.asarray(kernel)
    if kernel.size <= _CACHE_TAPS:
        key = (kernel.tobytes(), kernel.shape, kernel.dtype.str, dtype.str)
        return _cache.get_or_compute(key, lambda: _factor(kernel, dtype))
    return _factor(kernel, dtype)


def _factor(kernel, dtype):
    if dtype.kind in "biu":
        found = _integer_factors(kernel)
        return found if found is not None else (None, math.nan)
    factors, err = _float_factors(kernel, dtype)
    eps = float(np.finfo(dtype).eps)
    if factors is None or not err <= ROUNDOFF_UNITS * eps:
        return None, err
    return [f.astype(dtype) for f in factors], err


def kernel_factors(problem, w):
    """Per group, the 1-D factors (one per spatial axis) of ``w`` ``(G, 1, *KS)``.

    Parameters
    ----------
    problem : ConvProblem
        An :func:`applies` problem; its ``flip`` orients the factors (true convolution
        reverses the taps), so the passes correlate.
    w : numpy.ndarray
        The weights on the host (the CUDA path copies the small array off the device).

    Returns
    -------
    list of list of numpy.ndarray
        ``out[g][axis]``, the oriented factor of group ``g`` along ``axis``.

    Raises
    ------
    NotSeparable
        Naming the reconstruction error, when a kernel is not an outer product.
    """
    oriented = np.asarray(oriented_weights(problem, w))
    out = []
    for g in range(problem.groups):
        factors, err = factor(oriented[g, 0], problem.dtype)
        if factors is None:
            eps = float(np.finfo(problem.dtype).eps) if problem.dtype.kind in "fc" else 0.0
            what = ("its integer taps are not an exact outer product" if math.isnan(err)
                    else f"the best outer product of 1-D factors reconstructs it with a "
                         f"relative error of {err:.3g} (tolerance {ROUNDOFF_UNITS * eps:.3g}, "
                         f"{ROUNDOFF_UNITS} units of roundoff of its norm)")
            raise NotSeparable(
                f"method='separable' cannot run this kernel{f' (group {g})' if g else ''} "
                f"of shape {tuple(problem.kernel_shape)}: {what}; use method='auto'")
        out.append(factors)
    if problem.padding_mode == "constant" and problem.cval != 0 and problem.groups > 1:
        for axis in range(problem.ndim - 1):
            sums = {complex(np.sum(f[axis])) for f in out}
            if len(sums) > 1:
                raise NotSeparable(
                    "method='separable' cannot run these kernels: with a nonzero cval the "
                    "filtered padding needs one factor sum per axis, and the groups' differ; "
                    "use method='auto'")
    return out


def clear_cache():
    """Forget the cached factorisations."""
    _cache.clear()
