"""Shared Winograd test cases: the bounded geometry strategy and the accuracy bound of
the NumPy and the CUDA-path (emulated) ``winograd`` tests."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from cupyconv.backends.winograd_conv import plan_tiles
from cupyconv.core import ConvProblem
from cupyconv.core import winograd as wg
from cupyconv.dispatch import choose

from helpers import PADDING_MODES, ref_conv

TORCH_MODE = {"constant": "zeros", "reflect": "reflect", "symmetric": "symmetric",
              "wrap": "circular", "edge": "replicate"}


@st.composite
def geometries(draw, rank):
    """Kernels of 2-7 taps (2-4 above rank 2), stride 1-3, dilation 1-2, groups, layouts,
    every padding mode; every axis has an output."""
    kmax = 7 if rank <= 2 else 4
    smax = {1: 20, 2: 10, 3: 6, 4: 5}[rank]
    mode = draw(st.sampled_from(PADDING_MODES))
    g = draw(st.integers(1, 2))
    geo = dict(mode=mode, groups=g, s=[], ks=[], stride=[], dilation=[], padding=[])
    for _ in range(rank):
        k = draw(st.integers(1 if rank > 1 else 2, kmax))
        d = draw(st.integers(1, 2))
        s = draw(st.integers(1, smax))
        pb = draw(st.integers(0, 2 if mode == "constant" else s - 1 if mode == "reflect" else s))
        pa = draw(st.integers(0, pb))
        pa += max(d * (k - 1) + 1 - (s + pb + pa), 0)
        if mode == "reflect" and pa > s - 1:
            s = max(s, pa + 1)
        geo["s"].append(s)
        geo["ks"].append(k)
        geo["stride"].append(draw(st.integers(1, 3)))
        geo["dilation"].append(d)
        geo["padding"].append((pb, pa))
    if all(k == 1 for k in geo["ks"]):       # two taps on axis 0, its input long enough
        geo["ks"][0] = 2
        pb, pa = geo["padding"][0]
        geo["s"][0] = max(geo["s"][0], geo["dilation"][0] + 1 - pb - pa)
    geo["layout"] = draw(st.sampled_from(("channels_first", "channels_last")))
    geo["n"] = draw(st.integers(1, 2))
    geo["c"] = g * draw(st.integers(1, 3))
    geo["k"] = g * draw(st.integers(1, 3))
    return geo


def arrays(geo, dtype, rng):
    x = rng.standard_normal((geo["n"], geo["c"]) + tuple(geo["s"]))
    w = rng.standard_normal((geo["k"], geo["c"] // geo["groups"]) + tuple(geo["ks"]))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(x.shape)
        w = w + 1j * rng.standard_normal(w.shape)
    if geo["layout"] == "channels_last":
        x, w = np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1)
    return x.astype(dtype), w.astype(dtype)


def kwargs(geo):
    return dict(stride=tuple(geo["stride"]), dilation=tuple(geo["dilation"]),
                padding=tuple(geo["padding"]), groups=geo["groups"], layout=geo["layout"],
                padding_mode=TORCH_MODE[geo["mode"]])


def bound(problem, dtype, plan=None, growth=None):
    """Relative-norm bound: direct summation's c * K * u times the N-D error growth of the
    tiles run (the product over axes of wg.error_growth; ``growth`` where the caller knows
    it: the NumPy backend's last-axis path's 1-D tile); c = 4 covers the complex
    multiply-add and the three transform stages' roundings."""
    u = {4: 2.0**-24, 8: 2.0**-53}[np.dtype(dtype).type(0).real.dtype.itemsize]
    if growth is None:
        plan = plan_tiles(problem) if plan is None else plan
        growth = max(math.prod(wg.error_growth(wg.transforms(m, p.r))
                               for p, m in zip(pieces, tile) if p.r > 1)
                     for pieces, tile in plan)
    return 4 * max(problem.gemm_k, 1) * u * max(growth, 1.0)


def error_over_magnitudes(y, x, w, geo):
    """``(err, ref)``: the float64 tap-loop reference ``ref`` of ``conv(x, w)`` in ``geo``
    and ``||y - ref||`` over ``sqrt(outputs) * max|x| * max_k sum|w[k]|``, the scale a
    Winograd tile rounds at: its transforms mix every tap with every input of the tile,
    so neither ``||ref||`` (one output of -0.04 from terms of 8.3 in absolute value) nor
    ``|| |x| conv |w| ||`` (a tap of 1.0 that meets only the zero padding, beside one
    of 0.004) bounds the roundoff."""
    ref = ref_conv(x, w, **dict(kwargs(geo), padding_mode=geo["mode"]))   # NumPy's names
    per_output = np.abs(w).reshape(w.shape[0], -1).sum(axis=1).max()
    scale = math.sqrt(ref.size) * float(np.abs(x).max()) * float(per_output)
    return np.linalg.norm(y.astype(ref.dtype) - ref) / max(scale, 1e-300), ref


def problem_of(geo, x, w):
    return ConvProblem.create(x_shape=x.shape, w_shape=w.shape, stride=tuple(geo["stride"]),
                              padding=tuple(geo["padding"]), dilation=tuple(geo["dilation"]),
                              groups=geo["groups"], padding_mode=geo["mode"],
                              layout=geo["layout"], dtype=x.dtype)


def check_gate_keeps_auto_away(backend):
    """The error gate on ``backend``: a 3x3x3 layer's tile passes and ``auto`` may rank
    ``winograd``; a 7x7 layer's tiles all fail the default limit (the reason says so) and
    ``auto`` never ranks it.  Returns ``(ok, lossy)`` for backend-specific checks."""
    ok = ConvProblem.create(x_shape=(2, 16, 24, 24, 24), w_shape=(16, 16, 3, 3, 3),
                            padding=1, dtype=np.float32)
    lossy = ConvProblem.create(x_shape=(2, 16, 24, 24), w_shape=(16, 16, 7, 7), padding=3,
                               dtype=np.float32)
    assert backend.can_implement(ok, "winograd")[0]
    refused, why = backend.can_implement(lossy, "winograd")
    assert not refused and "error growth" in why and "above the limit of 10" in why
    assert "winograd" not in choose(lossy, backend).ranked
    assert "winograd" in choose(ok, backend).ranked
    return ok, lossy
