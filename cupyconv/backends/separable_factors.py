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
  :func:`term_tolerance` of the kernel's norm (:data:`ROUNDOFF_UNITS` units of
  roundoff times ``sqrt(taps)``: a flat ``8 u`` refused a rounded outer product of
  two random 2-vectors, whose SVD reconstructs it to ``9.5 u``).

A kernel that is not one outer product may still be a short sum of them (a difference
of Gaussians is two; a 2-D kernel of matrix rank r is r): :func:`low_rank` finds such a
sum, accepted within the same :func:`term_tolerance` (the typical rounding of a direct
sum over the taps).  With three axes or
more it first tries exactly as many terms as the rank of the first unfolding
(Jennrich's simultaneous diagonalisation: a difference of Gaussians in two terms in any
rank), kept when the terms' norms add up to at most :data:`CANCELLATION_LIMIT` times the
kernel's; else (and in 2-D, where it is minimal) sequential SVD: the SVD of the
unfolding along the first axis, then of each right singular vector along the next
axis, singular values below the tolerance dropped (``2**(N-1)`` terms for a difference
of Gaussians; mutually orthogonal, so none is larger than the kernel and the sum does
not cancel).
:func:`kernel_terms` returns the terms the passes run; a sum of ``r`` terms costs ``r``
times one outer product's passes, so it is used only where that still saves taps
(:func:`term_limit`) and, under ``auto``, where the cost model says ``r`` times the
passes still beats the next algorithm (the dispatcher's ``slack``).  Integer kernels are
exact outer products or nothing (a sum of SVD terms would not be exact).

The factorisation runs on the host: the weights are a small NumPy array (the CUDA path
copies them from the device first).  Its cost per call is bounded: the decision and the
factors are cached by a digest of the kernel's bytes (any size), and before any SVD a
rank bound (:func:`_rank_exceeds`: the first unfolding times a few orthonormal columns,
one small Gram matrix) rejects a kernel whose unfolding provably has too many singular
values above the tolerance, which a kernel that is not a short sum of outer products
(a random or learnt one) has.  The SVDs run with BLAS at one thread
(:func:`~cupyconv.backends.numpy.threads.single_blas`, :func:`set_blas_guard`).
"""
from __future__ import annotations

import contextlib
import hashlib
import math
from fractions import Fraction
from functools import reduce

import numpy as np

from .._lru import LRU
from .arrays import all_finite, oriented_weights

__all__ = ["applies", "factor", "factor_error", "set_blas_guard", "low_rank", "kernel_factors", "kernel_terms", "term_limit",
           "terms_take", "term_count", "INLINE_KEY_BYTES",
           "term_tolerance", "clear_cache", "ROUNDOFF_UNITS", "MAX_TERMS", "TERM_MARGIN",
           "CANCELLATION_LIMIT",
           "NotSeparable", "NOT_APPLICABLE"]

#: A float kernel is separable when ``||K - outer(factors)||`` is at most
#: ``ROUNDOFF_UNITS * eps * sqrt(taps) * ||K||`` (:func:`term_tolerance`).
ROUNDOFF_UNITS = 8
#: The most outer products a kernel is split into (each costs one set of 1-D passes).
MAX_TERMS = 8
#: Under ``auto`` a sum of ``r`` outer products must be predicted to beat the next
#: candidate with this margin (``r * TERM_MARGIN <= slack``): the CPU model's separable
#: passes are within 0.8-1.3x of their measured times (refitted 2026-12-01; at first,
#: with passes predicted 2x too cheap, a two-term float32 1024^2 DoG ran 1.3x slower than
#: the FFT it was predicted to beat, hence a margin at all).
TERM_MARGIN = 1.1
#: Outer products that are not orthogonal may cancel: their norms may add up to at most
#: this many times the kernel's (each term's passes round relative to its own size).
CANCELLATION_LIMIT = 4.0
#: Factorisations kept, keyed by a digest of the kernel's bytes (:func:`_cached`).
_cache = LRU(64)
#: ``auto``'s verdicts on whole weights (:func:`term_count`), keyed as the factorisations.
_verdicts = LRU(256)
#: Kernels of at most this many bytes are their own cache key (a copy of their bytes,
#: cheaper than a digest for the small kernels ``auto`` checks on every call); larger
#: ones are keyed by a digest of their bytes.
INLINE_KEY_BYTES = 4096
#: Why a problem is not one :func:`applies` accepts (``can_implement``'s reason).
NOT_APPLICABLE = ("separable needs one filter per input channel (single channel "
                  "or depthwise) and a kernel over two axes or more")


class NotSeparable(ValueError):
    """``method="separable"`` on a kernel that is not an outer product of 1-D factors."""


def applies(problem):
    """Data-free: a forward problem with one filter per group and input channel (single
    channel or depthwise) whose kernel extends over two axes or more."""
    g = problem.groups
    if not (problem.op == "forward" and problem.in_channels == g and problem.out_channels == g):
        return False
    wide = 0
    for k in problem.kernel_shape:
        wide += k > 1
    return wide >= 2


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


def _scaled(a, e):
    """``a * 2**e``, exactly (``ldexp`` per real part: no over- or underflow on the way)."""
    if a.dtype.kind != "c":
        return np.ldexp(a, e)
    out = np.empty_like(a)
    out.real, out.imag = np.ldexp(a.real, e), np.ldexp(a.imag, e)
    return out


def _normalised(kernel, dtype):
    """``(k, e)``: the kernel in float64 (complex128) as ``k * 2**e`` with its largest
    component magnitude in [0.5, 1), so that no norm, SVD or product of the factoring
    over- or underflows (an unscaled 1e-200 kernel has a squared norm of 0, a 1e200 one
    of inf); ``e = 0`` for a zero or non-finite kernel.  The scaling by a power of two is
    exact, so the factors of ``k`` rescaled (:func:`_rescaled`) are those of the kernel."""
    k = np.asarray(kernel, dtype=np.complex128 if dtype.kind == "c" else np.float64)
    big = max(float(np.abs(k.real).max(initial=0.0)), float(np.abs(k.imag).max(initial=0.0)))
    if big == 0.0 or not np.isfinite(big):
        return k, 0
    e = int(np.frexp(big)[1])
    return _scaled(k, -e), e


def _rescaled(factors, e):
    """Per-axis ``factors`` of ``k`` as those of ``k * 2**e``: the exponent spread over
    the axes (each pass scales by about ``2**(e / ndim)``, as the kernel's own factors
    would), exactly."""
    n = len(factors)
    return [_scaled(f, e // n + (i < e % n)) for i, f in enumerate(factors)]


def _float_factors(kernel, dtype, limit=None):
    """Rank-1 HOSVD factors and the relative reconstruction error (scale-free: of the
    :func:`_normalised` kernel, the factors rescaled); ``(None, None)`` where a relative
    error ``limit`` is given and :func:`_rank_exceeds` shows the error is above it."""
    k, e = _normalised(kernel, dtype)
    factors, err = _unit_factors(k, limit)
    return (factors if factors is None else _rescaled(factors, e)), err


#: The context manager the SVDs run under (:func:`set_blas_guard`).
_blas_guard = [contextlib.nullcontext]


def set_blas_guard(guard):
    """Run the factoring's SVDs under ``guard()``: the NumPy backend sets its pool's
    one-thread BLAS guard (:func:`~cupyconv.backends.numpy.threads.single_blas`) when it
    is imported, which every backend's host-side factoring then shares."""
    _blas_guard[0] = guard


def _single_blas():
    """BLAS at one thread (the guard :func:`set_blas_guard` installed)."""
    return _blas_guard[0]()


#: Seed of :func:`_rank_exceeds`' fixed random sketch (reproducible, like the cache).
_SKETCH_SEED = 0


def _rank_exceeds(k, rank, tol):
    """Whether the unfolding ``M`` of ``k`` along its first axis provably has more than
    ``rank`` singular values above ``tol`` (no SVD; ``O(taps * rank)``).

    ``Y = M @ Q`` with ``Q`` ``rank + 1`` orthonormal columns (a fixed random sketch)
    has ``sigma_i(Y) <= sigma_i(M)``, so ``sigma_{rank+1}(M) >= sqrt(lambda_min(Y^H Y))``;
    the eigenvalue is lowered by its rounding bound first.  A low-rank kernel passes (the
    bound is only ever below the truth), a full-rank one (random, learnt) is refused."""
    m = rank + 1
    rows = k.shape[0]
    unfolding = k.reshape(rows, -1)
    if rows < m or unfolding.shape[1] < m:
        return False
    rng = np.random.default_rng(_SKETCH_SEED)
    q = np.linalg.qr(rng.standard_normal((unfolding.shape[1], m)))[0]
    y = unfolding @ q.astype(unfolding.dtype)
    gram = y.conj().T @ y
    lowest = float(np.linalg.eigvalsh(gram)[0])
    rounding = 8 * m * float(np.finfo(np.float64).eps) * float(np.trace(gram).real)
    return lowest - rounding > tol * tol


def _unit_factors(k, limit=None):
    """:func:`_float_factors` of a float64 or complex128 kernel of moderate magnitude."""
    norm = float(np.linalg.norm(k))
    if norm == 0.0:
        return [np.zeros(n, dtype=k.dtype) for n in k.shape], 0.0
    if not np.isfinite(norm):
        return None, math.inf
    if limit is not None and _rank_exceeds(k, 1, limit * norm):
        return None, None
    with _single_blas():
        return _hosvd(k, norm)


def _hosvd(k, norm):
    """The rank-1 truncated HOSVD factors of ``k`` and the relative error."""
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
    an outer product (integer ``dtype``: exactly; float: within :func:`term_tolerance`
    of its norm).  The factors' outer product is the kernel.  The error
    is ``None`` where the rank bound refused the kernel before measuring it
    (:func:`factor_error` measures it).

    The returned arrays may be cached: treat them as read-only.
    """
    return _cached("factor", _factor, kernel, dtype)


def factor_error(kernel, dtype):
    """The relative error of the rank-1 HOSVD of a float or complex ``kernel``, the SVDs
    run whatever the rank bound says (for messages; cached as :func:`factor` is)."""
    return _cached("error", _factor_error, kernel, dtype)


def _factor_error(kernel, dtype):
    k = _normalised(kernel, dtype)[0]
    norm = float(np.linalg.norm(k))
    if norm == 0.0 or not np.isfinite(norm):
        return 0.0 if norm == 0.0 else math.inf
    with _single_blas():
        return _hosvd(k, norm)[1]


def _digest(kernel):
    """A key for the kernel's bytes, shape and dtype: the bytes themselves up to
    :data:`INLINE_KEY_BYTES`, else a digest of them (one pass over its bytes)."""
    if kernel.nbytes <= INLINE_KEY_BYTES:
        return kernel.tobytes(), kernel.shape, kernel.dtype.str
    h = hashlib.blake2b(digest_size=20)
    h.update(np.ascontiguousarray(kernel).view(np.uint8).data)
    return h.hexdigest(), kernel.shape, kernel.dtype.str


def _cached(kind, compute, kernel, dtype):
    """``compute(kernel, dtype)``, kept in the LRU, keyed by ``kind``, ``dtype`` and
    :func:`_digest` of the kernel (whatever its size: the key holds at most
    :data:`INLINE_KEY_BYTES` of it)."""
    dtype = np.dtype(dtype)
    kernel = np.asarray(kernel)
    key = (kind, dtype.str) + _digest(kernel)
    return _cache.get_or_compute(key, lambda: compute(kernel, dtype))


def _factor(kernel, dtype):
    if dtype.kind in "biu":
        found = _integer_factors(kernel)
        return found if found is not None else (None, math.nan)
    limit = term_tolerance(np.shape(kernel), dtype)
    factors, err = _float_factors(kernel, dtype, limit)
    if factors is None or not err <= limit:
        return None, err
    return [f.astype(dtype) for f in factors], err


#: Alternating least-squares sweeps that polish Jennrich's terms where they miss the
#: tolerance: its eigenvectors carry the conditioning of their eigenvalues' gaps (3% of
#: random 3-term 4x4x3 sums came out at 1-3 times the tolerance).
POLISH_SWEEPS = 3
#: The seeds of Jennrich's random contractions, tried in turn (another pair of
#: contractions has other eigenvalue gaps).
JENNRICH_SEEDS = (0, 1, 2)


def _polished(k, terms):
    """``terms`` after :data:`POLISH_SWEEPS` sweeps of alternating least squares: each
    axis's factors in turn, the least-squares fit of ``k`` with the others fixed."""
    factors = [np.stack([t[n] for t in terms], axis=1) for n in range(k.ndim)]
    for _ in range(POLISH_SWEEPS):
        for n in range(k.ndim):
            others = [factors[m] for m in range(k.ndim) if m != n]
            products = np.stack([reduce(np.multiply.outer, [f[:, r] for f in others]).ravel()
                                 for r in range(len(terms))], axis=1)
            unfolding = np.moveaxis(k, n, 0).reshape(k.shape[n], -1)
            factors[n] = np.linalg.lstsq(products, unfolding.T, rcond=None)[0].T
    return [[f[:, r] for f in factors] for r in range(len(terms))]


def _sequential_svd(k, tol, limit):
    """Rank-1 terms (lists of per-axis vectors) summing to ``k`` within about ``tol`` (in
    norm), or ``None`` past ``limit`` terms."""
    if k.ndim == 1:
        return [[k]]
    u, s, vh = np.linalg.svd(k.reshape(k.shape[0], -1), full_matrices=False)
    tail = np.sqrt(np.cumsum(s[::-1] ** 2))[::-1]          # tail[i]: norm of s[i:]
    rank = next((i for i in range(len(s)) if tail[i] <= tol), len(s))
    if rank > limit:
        return None
    terms = []
    for i in range(rank):
        sub = _sequential_svd((s[i] * vh[i]).reshape(k.shape[1:]), tol,
                              limit - len(terms) - (rank - 1 - i))
        if sub is None:
            return None
        terms += [[u[:, i]] + t for t in sub]
    return terms


def _jennrich(k, u0, seed=0):
    """Exactly ``rank`` outer products summing to ``k`` (three axes or more), or ``None``:
    Jennrich's simultaneous diagonalisation of ``k`` viewed as (axis 0, axis 1, the rest)
    -- two random contractions of the rest, projected onto the leading ``rank`` singular
    vectors of the first two unfoldings (``u0``: the first's, ``(k0, rank)``), share
    eigenvectors that give the axis-0 factors -- then least squares for each term's rest
    and its best outer product (the caller checks the whole sum)."""
    k0, k1 = k.shape[:2]
    rank = u0.shape[1]
    if rank > min(k0, k1):
        return None
    t3 = k.reshape(k0, k1, -1)
    u1 = np.linalg.svd(np.moveaxis(t3, 1, 0).reshape(k1, -1), full_matrices=False)[0][:, :rank]
    rng = np.random.default_rng(seed)                  # reproducible, like the cache
    mx, my = (u0.conj().T @ (t3 @ rng.standard_normal(t3.shape[2])) @ u1.conj()
              for _ in range(2))
    try:
        w = np.linalg.eig(mx @ np.linalg.inv(my))[1]
    except np.linalg.LinAlgError:
        return None
    if k.dtype.kind != "c":
        if np.abs(w.imag).max() > 1e-6:
            return None
        w = w.real
    a = u0 @ w
    rest = np.linalg.lstsq(a, k.reshape(k0, -1), rcond=None)[0]
    terms = []
    for r in range(rank):
        factors = _float_factors(rest[r].reshape(k.shape[1:]), np.dtype(k.dtype))[0]
        if factors is None:
            return None
        terms.append([a[:, r]] + list(factors))
    return terms


def term_tolerance(kernel_shape, dtype):
    """Relative error allowed to a sum of outer products: :data:`ROUNDOFF_UNITS` units of
    roundoff times ``sqrt(taps)``, the typical rounding error of a direct sum over the
    kernel's taps (a kernel such as a difference of Gaussians is itself a rounded
    difference, a few units of roundoff away from any exact short sum)."""
    return ROUNDOFF_UNITS * float(np.finfo(dtype).eps) * math.sqrt(math.prod(kernel_shape))


def low_rank(kernel, dtype):
    """``(terms, relative error)``: at most :data:`MAX_TERMS` outer products (each a list
    of per-axis factors in ``dtype``) whose sum is the float or complex ``kernel`` within
    :func:`term_tolerance` of its norm (Jennrich's decomposition from three axes up, else
    sequential SVD: the module docstring); ``terms`` is ``None`` when more are needed
    (or for integer dtypes).

    The returned arrays may be cached: treat them as read-only.
    """
    if np.dtype(dtype).kind not in "fc":
        return None, math.nan
    return _cached("terms", _low_rank, kernel, dtype)


def _low_rank(kernel, dtype):
    k, e = _normalised(kernel, dtype)       # scale-free: the terms of k, rescaled
    terms, err = _unit_terms(k, dtype)
    return (terms if terms is None else [_rescaled(t, e) for t in terms]), err


def _unit_terms(k, dtype):
    """:func:`low_rank` of a float64 or complex128 kernel of moderate magnitude (terms
    in float64 / complex128, their sum checked as ``dtype``'s)."""
    norm = float(np.linalg.norm(k))
    if not np.isfinite(norm) or norm == 0.0 or k.ndim < 2:
        return None, math.inf if not np.isfinite(norm) else math.nan
    limit = term_tolerance(k.shape, dtype)

    def checked(terms):
        """``(terms in dtype, error)``, ``terms`` None past the tolerance or cancelling."""
        terms = [[f.astype(dtype) for f in t] for t in terms]
        parts = [reduce(np.multiply.outer, [f.astype(k.dtype) for f in t]) for t in terms]
        err = float(np.linalg.norm(k - sum(parts))) / norm
        size = sum(float(np.linalg.norm(p)) for p in parts) / norm
        return (terms if err <= limit and size <= CANCELLATION_LIMIT else None), err

    if _rank_exceeds(k, MAX_TERMS, limit * norm):      # more terms than any sum may have
        return None, math.nan
    with _single_blas():
        return _svd_terms(k, norm, limit, checked)


def _svd_terms(k, norm, limit, checked):
    """:func:`_unit_terms`' search: Jennrich's terms, else sequential SVD."""
    err = math.nan
    if k.ndim >= 3:          # the fewest terms, where the first unfolding's rank is the sum's
        u, s, _ = np.linalg.svd(k.reshape(k.shape[0], -1), full_matrices=False)
        rank = int(np.count_nonzero(s > limit * norm))
        for seed in JENNRICH_SEEDS if 2 <= rank <= MAX_TERMS else ():
            found = _jennrich(k, u[:, :rank], seed)
            if found is None:
                continue
            terms, err = checked(found)
            if terms is None:
                terms, err = checked(_polished(k, found))
            if terms is not None:
                return terms, err
    # each SVD drops a tail up to the tolerance, then the sum is checked as a whole; if
    # the dropped tails add up past it, once more with every tail's share of it
    for tol in (limit * norm, limit * norm / math.sqrt((k.ndim - 1) * MAX_TERMS)):
        found = _sequential_svd(k, tol, MAX_TERMS)
        if found is None:
            return None, err
        terms, err = checked(found)
        if terms is not None:
            return terms, err
    return None, err


def term_limit(problem, slack=math.inf):
    """The most outer products worth running for ``problem``: fewer taps than the N-D
    kernel (``r * sum(K_i) < prod(K_i)``), at most :data:`MAX_TERMS`, and at most
    ``slack / TERM_MARGIN`` (``slack``: how many times one outer product's predicted
    time the caller accepts); at least 1."""
    ks = problem.kernel_shape
    useful = (math.prod(ks) - 1) // max(sum(ks), 1)
    bound = useful if math.isinf(slack) else min(useful, int(slack / TERM_MARGIN))
    return max(1, min(MAX_TERMS, bound))


def terms_take(count, activation):
    """``(ok, reason)``: whether a sum of ``count`` outer products may run under ``auto``
    on these data.  One outer product always: its passes keep the direct sum's NaN and
    signed-Inf outputs.  Several not on data with an infinity: it reaches an output
    through every term, with each term's sign, and where they differ it meets itself as
    NaN where the direct sum is infinite (a NaN spreads to the same outputs either way).
    The scan for an infinity (a temporary) runs only on data that are not all finite."""
    if count <= 1 or activation is None or all_finite(activation):
        return True, ""
    if not bool(np.isinf(activation).any()):
        return True, ""
    return False, (f"a sum of {count} outer products turns an infinite input into NaN "
                   "where the direct sum is infinite")


def kernel_factors(problem, w):
    """:func:`kernel_terms` with one term: ``out[g][axis]`` (raises
    :class:`NotSeparable` unless every group's kernel is one outer product)."""
    return kernel_terms(problem, w, 1)[0]


def kernel_terms(problem, w, max_terms=1, exact_error=True):
    """The 1-D factors (one per spatial axis) of ``w`` ``(G, 1, *KS)``, as one or a few
    outer products whose sum is each group's kernel.

    Parameters
    ----------
    problem : ConvProblem
        An :func:`applies` problem; its ``flip`` orients the factors (true convolution
        reverses the taps), so the passes correlate.
    w : numpy.ndarray
        The weights on the host (the CUDA path copies the small array off the device).
    max_terms : int
        The most outer products per kernel (:func:`term_limit`); groups with fewer get
        zero terms.
    exact_error : bool
        Whether the :class:`NotSeparable` message of a kernel the rank bound refused
        names its measured reconstruction error (three SVDs, cached) or only that it is
        above the tolerance (``auto``'s data check, which runs no SVD on such a kernel).

    Returns
    -------
    list of list of list of numpy.ndarray
        ``out[t][g][axis]``, the oriented factor of term ``t`` of group ``g`` along
        ``axis``.

    Raises
    ------
    NotSeparable
        Naming the reconstruction error, when a kernel is not a sum of ``max_terms``
        outer products.
    """
    oriented = np.asarray(oriented_weights(problem, w))
    per_group = []
    for g in range(problem.groups):
        factors, err = factor(oriented[g, 0], problem.dtype)
        terms = None if factors is None else [factors]
        if terms is None and max_terms > 1:
            found = low_rank(oriented[g, 0], problem.dtype)[0]
            terms = found if found is not None and len(found) <= max_terms else None
        if terms is None:
            if err is None and exact_error:
                err = factor_error(oriented[g, 0], problem.dtype)
            raise NotSeparable(_not_separable(problem, g, err, max_terms))
        per_group.append(terms)
    count = max(len(t) for t in per_group)
    zero = [np.zeros(k, dtype=problem.dtype) for k in problem.kernel_shape]
    out = [[t[i] if i < len(t) else zero for t in per_group] for i in range(count)]
    if problem.padding_mode == "constant" and problem.cval != 0 and problem.groups > 1:
        for term in out:
            for axis in range(problem.ndim - 1):
                sums = {complex(np.sum(f[axis])) for f in term}
                if len(sums) > 1:
                    raise NotSeparable(
                        "method='separable' cannot run these kernels: with a nonzero cval "
                        "the filtered padding needs one factor sum per axis, and the "
                        "groups' differ; use method='auto'")
    return out


def term_count(problem, w, max_terms=1):
    """``(count, reason)``: how many outer products :func:`kernel_terms` splits the
    weights ``w`` into (its check without the measured error, ``exact_error=False``), or
    ``(0, its NotSeparable message)`` past ``max_terms``.

    ``auto``'s data check: cached by ``problem``, ``max_terms`` and :func:`_digest` of
    ``w``, so a repeated call with the same kernel costs one key and one lookup (not one
    factorisation lookup per group, the orientation, the exception and its message)."""
    w = np.asarray(w)
    key = (problem, max_terms) + _digest(w)

    def decide():
        try:
            return len(kernel_terms(problem, w, max_terms, exact_error=False)), ""
        except NotSeparable as exc:
            return 0, str(exc)
    return _verdicts.get_or_compute(key, decide)


def _not_separable(problem, g, err, max_terms):
    limit = (term_tolerance(problem.kernel_shape, problem.dtype)
             if problem.dtype.kind in "fc" else 0.0)
    tolerance = f"{limit:.3g}, {ROUNDOFF_UNITS} * sqrt(taps) units of roundoff of its norm"
    if err is None:
        what = (f"a rank bound shows that no outer product of 1-D factors reconstructs it "
                f"within the tolerance ({tolerance})")
    elif math.isnan(err):
        what = "its integer taps are not an exact outer product"
    else:
        what = (f"the best outer product of 1-D factors reconstructs it with a "
                f"relative error of {err:.3g} (tolerance {tolerance})")
    if max_terms > 1 and problem.dtype.kind in "fc":
        what += (f", and no sum of up to {max_terms} outer products is within a relative "
                 f"error of {term_tolerance(problem.kernel_shape, problem.dtype):.3g}")
    return (f"method='separable' cannot run this kernel{f' (group {g})' if g else ''} "
            f"of shape {tuple(problem.kernel_shape)}: {what}; use method='auto'")


def clear_cache():
    """Forget the cached factorisations and verdicts."""
    _cache.clear()
    _verdicts.clear()
