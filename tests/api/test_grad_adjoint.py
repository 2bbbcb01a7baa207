"""Dot-product (adjoint) tests of conv_grad_input and conv_grad_weight.

For every drawn geometry (ranks 1-5, stride, dilation, asymmetric padding
wider than the axis, every padding mode, groups, both layouts, real and
complex):

    <conv(x, w), y> == <x, conv_grad_input(y, w)>      (A^H, exact adjoint)
    <conv(x, w), y> == <w, conv_grad_weight(x, y)>     (linear in w, any cval)

with ``<a, b> = vdot(a, b)``, relative to the rigorous scale
``<conv(|x|, |w|), |y|>`` (what the summations add up) at 1e-12 in float64.
Runs on the NumPy backend and through the emulated CUDA path (tiny sizes).
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import cupyconv
from grad_strategies import geometries, shapes
from helpers import random_array

TOL = 1e-12


def _check(geo, backend_scope=None, seed=0):
    rng = np.random.default_rng(seed)
    dtype = geo["dtype"]
    x_shape, w_shape = shapes(geo)
    kw = dict(geo["geometry"])
    x = random_array(rng, x_shape, dtype)
    w = random_array(rng, w_shape, dtype)
    y_fwd = cupyconv.conv(x, w, cval=geo["cval"], **kw)       # NumPy backend forward
    y_lin = cupyconv.conv(x, w, **kw)                         # the linear part in x
    dy = random_array(rng, y_fwd.shape, dtype)
    scale = np.vdot(cupyconv.conv(np.abs(x), np.abs(w), cval=abs(geo["cval"]), **kw),
                    np.abs(dy)).real
    # where every output meets the padding alone both sides are 0 exactly, but an FFT
    # gradient's roundoff scales with ||x|| ||w||_1 ||dy|| (6.6e-17 against a scale of 0)
    floor = 1e-3 * np.linalg.norm(x) * np.abs(w).sum() * np.linalg.norm(dy)
    scale = max(scale, floor, np.finfo(np.float64).tiny)
    with backend_scope or cupyconv.use_backend("numpy"):
        dx = cupyconv.conv_grad_input(dy, w, x_shape, **kw)
        dw = cupyconv.conv_grad_weight(x, dy, w_shape, cval=geo["cval"], **kw)
    assert dx.shape == x.shape and dw.shape == w.shape
    assert dx.dtype == dtype and dw.dtype == dtype
    err_x = abs(np.vdot(y_lin, dy) - np.vdot(x, dx)) / scale
    err_w = abs(np.vdot(y_fwd, dy) - np.vdot(w, dw)) / scale
    assert err_x <= TOL, (geo, err_x)
    assert err_w <= TOL, (geo, err_w)
    return err_x, err_w


@settings(max_examples=60)
@given(geo=geometries())
def test_adjoint_numpy(geo):
    _check(geo)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(geo=geometries(max_rank=4, max_elems=120))
def test_adjoint_cuda_path(dev, geo):
    _check(geo, dev.scope())
