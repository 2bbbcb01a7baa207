"""Hypothesis draws shared by the ``scipy.ndimage`` tests (in memory and on Dask)."""
from __future__ import annotations

from hypothesis import strategies as st

from cupyconv._vocabulary import NDIMAGE_MODES

#: Every ``scipy.ndimage`` boundary mode.
MODES = tuple(NDIMAGE_MODES)


def draw_dims(draw, max_rank, max_extent, budget):
    """A shape of 1 to ``max_rank`` axes, each at most ``max_extent``, about ``budget``
    elements at most."""
    rank = draw(st.integers(1, max_rank))
    dims, left = [], budget
    for _ in range(rank):
        d = draw(st.integers(1, max(1, min(max_extent, left))))
        dims.append(d)
        left //= d
    return dims


def draw_mode(data, n):
    """One mode, or (half of the time) one per axis."""
    if n > 1 and data.draw(st.booleans()):
        return data.draw(st.lists(st.sampled_from(MODES), min_size=n, max_size=n))
    return data.draw(st.sampled_from(MODES))


def draw_axes(data, nd):
    """``None`` or a permutation of some axes (negative ones too)."""
    if nd == 1 or data.draw(st.booleans()):
        return None
    axes = data.draw(st.permutations(range(nd)).map(lambda p: p[:max(1, len(p) - 1)]))
    return tuple(a - nd if i % 2 else a for i, a in enumerate(axes))
