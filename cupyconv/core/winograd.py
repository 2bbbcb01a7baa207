"""Winograd minimal filtering: exact Toom-Cook transforms for any tile, verified exactly.

F(m, r) computes ``m`` outputs of a 1-D correlation with an ``r``-tap kernel from
``alpha = m + r - 1`` inputs with ``alpha`` multiplications:

    y = A^T [ (G g) * (B^T d) ]        y_i = sum_k g_k d_{i+k},  i < m

Construction (Toom-Cook with the point at infinity, then Winograd's transposition
principle).  The linear convolution ``s = h * g`` of an ``m``-tap ``h`` and an
``r``-tap ``g`` is evaluated at ``alpha - 1`` finite points ``p_j`` and at infinity
(the leading coefficient), multiplied pointwise and interpolated back:
``s = C [(E_h h) * (E_g g)]`` with ``E_h[j, i] = p_j^i``, ``E_g[j, k] = p_j^k``
(infinity: the last coefficient only) and ``C`` the interpolation (column ``j`` the
coefficients of ``prod_{l != j}(x - p_l)``, the last column those of
``prod_l (x - p_l)``).  Written as ``s = T(g) h`` with ``T(g)`` Toeplitz, the
correlation is ``T(g)^T d``, so

    A^T = E_h^T,   G = diag(1 / f_j) E_g,   B^T = C^T,   f_j = prod_{l != j}(p_j - p_l)

(the Lagrange denominators moved into ``G``, the weights' transform, which runs once
per call in float64).  Every matrix is built in exact rational arithmetic
(:class:`fractions.Fraction`) and :func:`verify` checks the identity exactly on
every pair of unit inputs, which proves it for all inputs (the algorithm is bilinear).

Stride and dilation reduce to stride-1 problems (:func:`polyphase`): a stride-``s``
correlation is the sum over phases ``q < s`` of stride-1 correlations of the kernel's
taps ``q, q+s, ...`` with the input's samples ``q, q+s, ...``; a dilation ``d`` reads
every ``d``-th input sample.  N-D transforms are Kronecker products, applied axis by
axis.

Accuracy (:func:`error_growth`): an RMS model of a tile's rounding error relative to
direct summation's, computed from the transforms; it multiplies over the axes of an N-D
tile (the measured error grows like the 1-D ratio to the power N).  ``auto`` considers a
tile only while its N-D growth stays within :data:`MAX_ERROR_GROWTH` for the dtype.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from .._lru import cached

__all__ = ["Transforms", "transforms", "verify", "default_points", "error_growth",
           "polyphase", "verify_polyphase", "MAX_ERROR_GROWTH", "TILE_OUTPUTS", "MAX_TAPS",
           "best_tile", "axis_pieces", "piece_count", "MAX_PIECES"]

Matrix = Tuple[Tuple[Fraction, ...], ...]

#: Largest N-D error growth (relative to direct summation's bound) ``auto`` accepts,
#: per dtype kind and size: float32/float64/complex <= 10x, float16 <= 2x.
MAX_ERROR_GROWTH = {2: 2.0, 4: 10.0, 8: 10.0, 16: 10.0}
#: Output tile sizes ``m`` considered per axis.
TILE_OUTPUTS = (2, 4, 6)
#: Most kernel taps per axis a tile is built for (F(2, 7) already grows the error 5.7x).
MAX_TAPS = 7
#: Most dense stride-1 pieces (:func:`axis_pieces`, multiplied over the axes) a problem
#: may split into: each piece is one Winograd convolution with its own transforms and
#: launches, so a stride or dilation that leaves a piece a few outputs saves nothing.
MAX_PIECES = 4096

#: Finite interpolation points in order of preference (small magnitudes and their
#: reciprocals keep the transforms well conditioned; Barabasz et al. 2020).
_POINTS = (Fraction(0), Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2),
           Fraction(-1, 2), Fraction(2), Fraction(1, 4), Fraction(-4), Fraction(-1, 4),
           Fraction(4), Fraction(3, 4), Fraction(-4, 3))


def default_points(count: int) -> Tuple[Fraction, ...]:
    """The first ``count`` finite points of the preference order.

    Raises
    ------
    ValueError
        If more points are asked for than the table holds.
    """
    if count > len(_POINTS):
        raise ValueError(f"no point set of {count} finite points (at most {len(_POINTS)})")
    return _POINTS[:count]


@cached(maxsize=None)
def _rounded(v, dtype):
    """The fraction ``v`` rounded once to ``dtype``: ``float(v)`` for float64 and narrower,
    a quotient of exact integers for wider (long double) types."""
    if dtype.itemsize <= 8 or max(abs(v.numerator), v.denominator) >= 2**53:
        return float(v)
    return dtype.type(v.numerator) / dtype.type(v.denominator)


def _arrays(t, dtype):
    out = []
    for mat in (t.AT, t.G, t.BT):
        a = np.array([[_rounded(v, dtype) for v in row] for row in mat], dtype=dtype)
        a.flags.writeable = False
        out.append(a)
    return tuple(out)


def _poly_mul(a, b):
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def _poly_from_roots(roots, length):
    """Coefficients (low to high) of ``prod (x - root)``, zero-padded to ``length``."""
    poly = [Fraction(1)]
    for root in roots:
        poly = _poly_mul(poly, [-root, Fraction(1)])
    return poly + [Fraction(0)] * (length - len(poly))


@dataclasses.dataclass(frozen=True)
class Transforms:
    """The exact transforms of F(m, r): ``AT`` (m x alpha), ``G`` (alpha x r), ``BT``
    (alpha x alpha), and the finite points they were built from."""

    m: int
    r: int
    points: Tuple[Fraction, ...]
    AT: Matrix
    G: Matrix
    BT: Matrix

    def __hash__(self):
        # computed once from what determines the rest: hashing the matrices' Fractions
        # on every cache lookup (``arrays``) cost more than the lookups saved
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.m, self.r, self.points))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def alpha(self) -> int:
        """Inputs per tile, ``m + r - 1`` (also the multiplications)."""
        return self.m + self.r - 1

    def arrays(self, dtype=np.float64):
        """``(AT, G, BT)`` as NumPy arrays of ``dtype`` (read-only, cached per dtype)."""
        return _arrays(self, np.dtype(dtype))


@cached(maxsize=None)
def transforms(m: int, r: int, points: Optional[Tuple[Fraction, ...]] = None) -> Transforms:
    """Build F(m, r) exactly (see the module docstring).

    Parameters
    ----------
    m, r : int
        Outputs per tile and kernel taps, both >= 1.
    points : tuple of Fraction, optional
        ``m + r - 2`` distinct finite points (default :func:`default_points`).

    Raises
    ------
    ValueError
        For ``m`` or ``r`` < 1, a wrong number of points, or repeated points.
    """
    if m < 1 or r < 1:
        raise ValueError(f"F(m, r) needs m, r >= 1; got m={m}, r={r}")
    alpha = m + r - 1
    pts = default_points(alpha - 1) if points is None else tuple(Fraction(p) for p in points)
    if len(pts) != alpha - 1:
        raise ValueError(f"F({m}, {r}) needs {alpha - 1} finite points; got {len(pts)}")
    if len(set(pts)) != len(pts):
        raise ValueError(f"interpolation points must be distinct; got {pts}")
    one, zero = Fraction(1), Fraction(0)
    # evaluation at the finite points, then infinity (the leading coefficient)
    e_h = [[p ** i for i in range(m)] for p in pts] + [[one if i == m - 1 else zero for i in range(m)]]
    e_g = [[p ** k for k in range(r)] for p in pts] + [[one if k == r - 1 else zero for k in range(r)]]
    denom = [math.prod((p - q for q in pts if q != p), start=one) for p in pts] + [one]
    # interpolation: column j = coefficients of prod_{l != j} (x - p_l); last = prod_l (x - p_l)
    cols = [_poly_from_roots([q for q in pts if q != p], alpha) for p in pts]
    cols.append(_poly_from_roots(pts, alpha))
    at = tuple(tuple(e_h[j][i] for j in range(alpha)) for i in range(m))
    g = tuple(tuple(e_g[j][k] / denom[j] for k in range(r)) for j in range(alpha))
    bt = tuple(tuple(cols[j][t] for t in range(alpha)) for j in range(alpha))
    return Transforms(m, r, pts, at, g, bt)


def _apply(mat, vec):
    return [sum((a * v for a, v in zip(row, vec)), Fraction(0)) for row in mat]


def verify(t: Transforms) -> bool:
    """Exactly check ``A^T[(G g) * (B^T d)] == correlate(d, g)`` on every pair of unit
    vectors ``g = e_k``, ``d = e_u`` (the algorithm is bilinear, so this is a proof)."""
    alpha = t.alpha
    for k in range(t.r):
        gk = _apply(t.G, [Fraction(int(i == k)) for i in range(t.r)])
        for u in range(alpha):
            du = _apply(t.BT, [Fraction(int(i == u)) for i in range(alpha)])
            y = _apply(t.AT, [a * b for a, b in zip(gk, du)])
            if any(y[i] != (1 if u - i == k else 0) for i in range(t.m)):
                return False
    return True


#: Safety factor of :func:`error_growth` over its RMS model: the largest measured/model
#: ratio over the tested tiles was 1.09 (F(2,5)); tests/core/test_winograd_transforms.py checks it.
_MODEL_MARGIN = 1.15


@cached(maxsize=None)
def error_growth(t: Transforms) -> float:
    """1-D error growth of F(m, r) relative to direct summation, from an RMS model.

    With random zero-mean data the rounding error of transform position ``j`` grows
    with ``||G_j||^2 ||B^T_j||^2`` (the kernel's and the input's transformed energy
    there) and output ``i`` collects it through ``A^T_ij``; direct summation's grows
    with ``r``.  The estimate is ``1.15 * sqrt(max_i sum_j (A^T_ij)^2 ||G_j||^2
    ||B^T_j||^2 / r)``: 1.48 for F(2,3), 3.7 for F(4,3), 7.8 for F(6,3), against 1.33,
    2.64 and 4.89 measured (64 channels, float32, RMS error relative to direct's; the
    issue quotes 1.3, 2.9, 4.9).  Tests check that it bounds the measured ratio.
    """
    total = []
    gn = [sum(float(v) ** 2 for v in row) for row in t.G]
    bn = [sum(float(v) ** 2 for v in row) for row in t.BT]
    for row in t.AT:
        total.append(sum(float(a) ** 2 * g * b for a, g, b in zip(row, gn, bn)))
    return _MODEL_MARGIN * math.sqrt(max(total) / t.r)


@dataclasses.dataclass(frozen=True)
class Phase:
    """One stride-1 sub-problem of :func:`polyphase` on one axis: kernel taps
    ``q, q + s, ...`` (``r`` of them) against input samples ``q, q + s, ...``."""

    q: int
    r: int


def polyphase(r: int, stride: int) -> Tuple[Phase, ...]:
    """The phases of a stride-``stride`` correlation with an ``r``-tap kernel (phases
    without taps are dropped).

    ``y_i = sum_k g_k d_{s i + k} = sum_q sum_j g_{s j + q} d_{s (i + j) + q}``.
    """
    if r < 1 or stride < 1:
        raise ValueError(f"polyphase needs r, stride >= 1; got r={r}, stride={stride}")
    return tuple(Phase(q, len(range(q, r, stride))) for q in range(min(stride, r)))


def verify_polyphase(r: int, stride: int, n_out: int = 4) -> bool:
    """Exactly check the decomposition on unit inputs and unit kernels."""
    n_in = stride * (n_out - 1) + r
    for k in range(r):
        for u in range(n_in):
            direct = [int(u - stride * i == k) for i in range(n_out)]
            total = [0] * n_out
            for ph in polyphase(r, stride):
                gq = [int(stride * j + ph.q == k) for j in range(ph.r)]
                dq = [int(stride * v + ph.q == u) for v in range(len(range(ph.q, n_in, stride)))]
                for i in range(n_out):
                    total[i] += sum(gq[j] * dq[i + j] for j in range(ph.r) if i + j < len(dq))
            if total != direct:
                return False
    return True


def best_tile(r: Sequence[int], itemsize: int, limit: Optional[float] = None,
              max_alpha: Optional[int] = None) -> Optional[Tuple[int, ...]]:
    """See :func:`_best_tile` (memoised per kernel extents, item size, limit and
    ``max_alpha``)."""
    return _best_tile(tuple(int(v) for v in r), int(itemsize), limit,
                      None if max_alpha is None else int(max_alpha))


@cached(maxsize=1024)
def _best_tile(r: Tuple[int, ...], itemsize: int, limit: Optional[float] = None,
               max_alpha: Optional[int] = None) -> Optional[Tuple[int, ...]]:
    """Per axis the output tile ``m`` with the fewest multiplications per output whose
    N-D error growth stays within the limit (default :data:`MAX_ERROR_GROWTH` for the
    dtype size) and, when given, whose ``alpha = m + r - 1`` stays within ``max_alpha``
    on every axis (the GPU transform kernels' bound); ``None`` when even F(2, r) on every
    kernel axis exceeds them.  Axes with one tap get ``m = 1`` (no transform)."""
    limit = MAX_ERROR_GROWTH.get(itemsize, 10.0) if limit is None else limit
    choices: Dict[Tuple[int, ...], Tuple[float, float]] = {}
    if any(rk > MAX_TAPS for rk in r):
        return None
    axes = [(1,) if rk == 1 else tuple(m for m in TILE_OUTPUTS
                                       if max_alpha is None or m + rk - 1 <= max_alpha)
            for rk in r]
    for tile in itertools.product(*axes):
        growth = math.prod(error_growth(transforms(m, rk)) for m, rk in zip(tile, r) if rk > 1)
        if growth > limit:
            continue
        mults = math.prod((m + rk - 1) / m for m, rk in zip(tile, r))
        choices[tile] = (mults, growth)
    if not choices or all(rk == 1 for rk in r):
        return None
    return min(choices, key=lambda t: choices[t])


@dataclasses.dataclass(frozen=True)
class Piece:
    """One dense stride-1 sub-problem of an axis with stride ``s`` and dilation ``d``
    (:func:`axis_pieces`): kernel taps ``taps``, input samples ``in_start + in_step * t``
    of the padded input, outputs ``out_start + out_step * u`` (``count`` of them)."""

    taps: slice
    r: int
    in_start: int
    in_step: int
    out_start: int
    out_step: int
    count: int


def piece_count(r: int, stride: int, dilation: int, out_len: int) -> int:
    """``len(axis_pieces(r, stride, dilation, out_len))`` in constant time: the dilation's
    residues that have an output times the stride's phases that have a tap."""
    g = math.gcd(stride, dilation)
    return min(dilation // g, max(out_len, 0)) * min(stride // g, r)


def axis_pieces(r: int, stride: int, dilation: int, out_len: int) -> Tuple[Piece, ...]:
    """Stride and dilation of one axis as dense stride-1 correlations.

    ``y_i = sum_k w_k x_{s i + d k}``.  With ``g = gcd(s, d)``, ``p = s / g`` and
    ``e = d / g``, taps ``k = p j + q`` read ``x_{s (i + e j) + d q}`` (phase ``q``: a
    stride-1 correlation of the taps ``q, q + p, ...`` with dilation ``e`` over the
    samples ``x_{s t + d q}``), and outputs ``i = e u + rho`` make that dilation dense
    (residue ``rho``: input samples ``x_{s e t + s rho + d q}``).  Phases are summed;
    residues fill disjoint outputs.
    """
    g = math.gcd(stride, dilation)
    p, e = stride // g, dilation // g
    out = []
    for rho in range(min(e, max(out_len, 0))):        # the residues that have an output
        count = len(range(rho, out_len, e))
        if count == 0:
            continue
        for q in range(min(p, r)):
            taps = range(q, r, p)
            out.append(Piece(slice(q, None, p), len(taps), stride * rho + dilation * q,
                             stride * e, rho, e, count))
    return tuple(out)
