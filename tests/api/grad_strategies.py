"""Hypothesis geometry for the gradient tests (tiny sizes for the emulator)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from helpers import PADDING_MODES as MODES
from problem_lists import spatial_geometry


@st.composite
def geometries(draw, max_rank=5, max_elems=600):
    """A conv geometry with O >= 1 on every axis and at most ``max_elems`` input elements."""
    rank = draw(st.integers(1, max_rank))
    geo = draw(spatial_geometry(rank, {1: 9, 2: 6, 3: 4}.get(rank, 3), MODES))
    mode, s, ks, stride = geo["mode"], geo["s"], geo["ks"], geo["stride"]
    dil, pads = geo["dilation"], geo["padding"]
    g = draw(st.integers(1, 2))
    n = draw(st.integers(1, 2))
    c = g * draw(st.integers(1, 2))
    k = g * draw(st.integers(1, 2))
    while n * c * math.prod(s) > max_elems and max(s) > 1:
        i = int(np.argmax(s))
        s[i] -= 1
        short = dil[i] * (ks[i] - 1) + 1 - (s[i] + sum(pads[i]))
        if short > 0:
            pads[i] = (pads[i][0], pads[i][1] + short)
    return dict(n=n, c=c, k=k, groups=g, s=tuple(s), ks=tuple(ks),
                geometry=dict(stride=tuple(stride), dilation=tuple(dil), padding=tuple(pads),
                              groups=g, padding_mode=mode,
                              layout=draw(st.sampled_from(("channels_first",
                                                           "channels_last")))),
                cval=draw(st.integers(-2, 2)) if mode == "constant" else 0,
                dtype=draw(st.sampled_from((np.float64, np.complex128))))


def shapes(geo):
    """``(x_shape, w_shape)`` in the geometry's layout."""
    n, c, k, g = geo["n"], geo["c"], geo["k"], geo["groups"]
    if geo["geometry"]["layout"] == "channels_first":
        return (n, c) + geo["s"], (k, c // g) + geo["ks"]
    return (n,) + geo["s"] + (c,), (k,) + geo["ks"] + (c // g,)
