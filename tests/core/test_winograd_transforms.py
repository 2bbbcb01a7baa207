"""Winograd transforms, polyphase pieces and the error model (cupyconv.core.winograd).

Each transform is verified exactly (rational arithmetic on every pair of unit inputs);
a corrupted transform must fail the same check, so the check can fail."""
from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from cupyconv.core import winograd as wg


@pytest.mark.parametrize("m", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("r", [1, 2, 3, 5, 7])
def test_every_transform_is_exact(m, r):
    t = wg.transforms(m, r)
    assert t.alpha == m + r - 1 and len(t.AT) == m and len(t.G) == t.alpha
    assert wg.verify(t)


def test_a_corrupted_transform_fails_verification():
    t = wg.transforms(4, 3)
    bt = [list(row) for row in t.BT]
    bt[2][1] = -bt[2][1] if bt[2][1] else Fraction(1)
    assert not wg.verify(dataclasses.replace(t, BT=tuple(tuple(row) for row in bt)))


def test_other_points_and_bad_points():
    pts = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2))
    assert wg.verify(wg.transforms(4, 3, pts))
    with pytest.raises(ValueError, match="distinct"):
        wg.transforms(2, 3, (Fraction(1), Fraction(1), Fraction(0)))
    with pytest.raises(ValueError, match="finite points"):
        wg.transforms(2, 3, (Fraction(1),))


def test_f23_is_the_textbook_algorithm():
    at, g, bt = wg.transforms(2, 3).arrays()
    d, k = np.array([1.0, 2.0, -3.0, 5.0]), np.array([0.5, -1.0, 2.0])
    assert np.allclose(at @ ((g @ k) * (bt @ d)), np.correlate(d, k, "valid"))


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("r", [1, 2, 3, 5, 7])
def test_polyphase_is_exact(r, stride):
    assert wg.verify_polyphase(r, stride)
    assert sum(p.r for p in wg.polyphase(r, stride)) == r


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("dilation", [1, 2, 3])
@pytest.mark.parametrize("r", [1, 2, 3, 5])
def test_axis_pieces_rebuild_the_strided_dilated_correlation(r, stride, dilation):
    rng = np.random.default_rng(r * 100 + stride * 10 + dilation)
    x, w = rng.integers(-9, 9, 23), rng.integers(-9, 9, r)
    out = (x.size - dilation * (r - 1) - 1) // stride + 1
    ref = np.array([sum(w[k] * x[stride * i + dilation * k] for k in range(r)) for i in range(out)])
    y = np.zeros(out, dtype=np.int64)
    for p in wg.axis_pieces(r, stride, dilation, out):
        v, taps = x[p.in_start::p.in_step], w[p.taps]
        y[p.out_start::p.out_step] += [int(np.dot(taps, v[u:u + p.r])) for u in range(p.count)]
    np.testing.assert_array_equal(y, ref)


def _measured_growth(m, r, channels=64, trials=3000):
    """RMS error of F(m, r) relative to direct summation's, float32 against float64."""
    at, g, bt = wg.transforms(m, r).arrays()
    rng = np.random.default_rng(m * 10 + r)
    d = rng.standard_normal((trials, channels, m + r - 1))
    k = rng.standard_normal((channels, r))
    win = np.lib.stride_tricks.sliding_window_view(d, r, axis=2)[:, :, :m, :]
    ref = np.einsum("tcmr,cr->tm", win, k)
    direct = np.einsum("tcmr,cr->tm", win.astype(np.float32), k.astype(np.float32))
    u = (g @ k.T).T.astype(np.float32)
    v = np.einsum("ab,tcb->tca", bt.astype(np.float32), d.astype(np.float32))
    y = (u[None] * v).sum(1) @ at.astype(np.float32).T
    return np.sqrt(((y - ref) ** 2).mean()) / np.sqrt(((direct - ref) ** 2).mean())


@pytest.mark.parametrize("m,r", [(2, 3), (4, 3), (6, 3), (2, 5), (4, 2)])
def test_error_model_bounds_the_measured_growth(m, r):
    estimate = wg.error_growth(wg.transforms(m, r))
    measured = _measured_growth(m, r)
    assert measured <= estimate, (measured, estimate)
    assert measured >= estimate / 4, (measured, estimate)    # and is not vacuous


def test_best_tile_respects_the_gate():
    assert wg.best_tile((3, 3, 3), 4) is not None
    tile = wg.best_tile((3, 3), 8)
    growth = np.prod([wg.error_growth(wg.transforms(m, 3)) for m in tile])
    assert growth <= wg.MAX_ERROR_GROWTH[8]
    assert wg.best_tile((3, 3, 3), 2) is None            # float16: 2x, not even F(2,3)^3
    assert wg.best_tile((7, 7), 4) is None               # F(2,7): 5.7^2 > 10
    assert wg.best_tile((3, 3), 4, limit=1e9) == (6, 6)  # fewest multiplications
