"""convolve_vjp / correlate_vjp against central finite differences and the
adjoint identity, real and complex, every mode, axes with broadcasting.

Convention under test (cupyconv.grad docstring): for
``L = Re(sum(conj(g) * f(in1, in2)))`` the returned gradients are
``dL/dRe(in_k) + i dL/dIm(in_k)`` (the real part only for real inputs).
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.grad import convolve_vjp, correlate_vjp
from helpers import random_array

FUNCS = {"convolve": (cupyconv.convolve, convolve_vjp),
         "correlate": (cupyconv.correlate, correlate_vjp)}
#: (in1 shape, in2 shape, axes): every mode; in2 larger (valid swap); broadcast batch axes.
#: Every case is valid in every mode (one operand covers the other).
CASES = [
    ((7,), (3,), None),
    ((3,), (6,), None),                 # in2 larger: scipy swaps in valid mode
    ((4, 5), (2, 3), None),
    ((3, 4, 3), (2, 2, 3), None),
    ((2, 5, 4), (1, 3, 2), (1, 2)),     # axis 0 broadcasts (in2 has 1): g2 summed over it
    ((1, 5), (3, 2), 1),                # in1 broadcasts over axis 0: g1 summed
]
H = 1e-6


def _loss(f, a, b, g, mode, axes):
    return float(np.real(np.vdot(g, f(a, b, mode, axes=axes))))


def _finite_difference(f, a, b, g, mode, axes, wrt):
    """dL/dRe + i dL/dIm for every element of operand ``wrt`` (0 or 1)."""
    ops = [a.copy(), b.copy()]
    target = ops[wrt]
    grad = np.zeros(target.shape, dtype=target.dtype)
    parts = (1.0, 1j) if target.dtype.kind == "c" else (1.0,)
    for idx in np.ndindex(*target.shape):
        for unit in parts:
            keep = target[idx]
            target[idx] = keep + H * unit
            up = _loss(f, *ops, g, mode, axes)
            target[idx] = keep - H * unit
            down = _loss(f, *ops, g, mode, axes)
            target[idx] = keep
            grad[idx] += unit * (up - down) / (2 * H)
    return grad


@pytest.mark.parametrize("func", sorted(FUNCS))
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("case", CASES, ids=[str(c[:2]) for c in CASES])
@pytest.mark.parametrize("dtypes", [("float64", "float64"), ("complex128", "complex128"),
                                    ("float64", "complex128")])
def test_vjp_matches_finite_differences(rng, func, mode, case, dtypes):
    f, vjp = FUNCS[func]
    s1, s2, axes = case
    a = random_array(rng, s1, dtypes[0])
    b = random_array(rng, s2, dtypes[1])
    z = f(a, b, mode, axes=axes)
    g = random_array(rng, z.shape, np.result_type(*dtypes))
    g1, g2 = vjp(a, b, g, mode, axes=axes)
    assert g1.shape == a.shape and g2.shape == b.shape
    assert g1.dtype == a.dtype and g2.dtype == b.dtype
    scale = np.abs(g).sum() * max(np.abs(a).max(), np.abs(b).max())
    for wrt, got in ((0, g1), (1, g2)):
        fd = _finite_difference(f, a, b, g, mode, axes, wrt)
        # the loss is bilinear: central differences are exact up to rounding of the sums
        np.testing.assert_allclose(got, fd, rtol=0, atol=1e-8 * scale,
                                   err_msg=f"{func} {mode} wrt in{wrt + 1}")


@pytest.mark.parametrize("func", sorted(FUNCS))
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("case", CASES, ids=[str(c[:2]) for c in CASES])
def test_vjp_adjoint_identity(rng, func, mode, case):
    """Bilinear: <f(a, b), g> == <a, g1> and, for convolve, == <b, g2> (complex)."""
    f, vjp = FUNCS[func]
    s1, s2, axes = case
    a = random_array(rng, s1, np.complex128)
    b = random_array(rng, s2, np.complex128)
    z = f(a, b, mode, axes=axes)
    g = random_array(rng, z.shape, np.complex128)
    g1, g2 = vjp(a, b, g, mode, axes=axes)
    scale = np.vdot(np.abs(f(np.abs(a), np.abs(b), mode, axes=axes)), np.abs(g)).real
    lhs = np.vdot(z, g)
    assert abs(lhs - np.vdot(a, g1)) <= 1e-12 * scale
    if func == "convolve":
        assert abs(lhs - np.vdot(b, g2)) <= 1e-12 * scale
    else:            # correlate is anti-linear in in2: <z, g> == <g2, b>
        assert abs(lhs - np.vdot(g2, b)) <= 1e-12 * scale


def test_zero_rank(rng):
    a, b, g = np.array(2.0 + 1j), np.array(3.0 - 2j), np.array(0.5 + 0.25j)
    assert np.allclose(convolve_vjp(a, b, g), (g * np.conj(b), g * np.conj(a)))
    assert np.allclose(correlate_vjp(a, b, g), (g * b, np.conj(g) * a))


def test_integer_inputs_give_float_gradients(rng):
    a = np.arange(6).reshape(2, 3)
    b = np.array([[1, -1]])
    g1, g2 = convolve_vjp(a, b, np.ones((2, 4)), "full")
    assert g1.dtype == np.float64 and g2.dtype == np.float64


def test_vjp_on_the_cuda_path(dev, rng):
    a = random_array(rng, (5, 4), np.complex128)
    b = random_array(rng, (3, 2), np.complex128)
    g = random_array(rng, (5, 4), np.complex128)
    ref = convolve_vjp(a, b, g, "same")
    with dev.scope():
        got = convolve_vjp(dev.to_dev(a), dev.to_dev(b), dev.to_dev(g), "same", method="gemm")
    for r, o in zip(ref, got):
        np.testing.assert_allclose(dev.to_host(o), r, rtol=1e-13, atol=1e-13)


def test_g_shape_is_checked(rng):
    with pytest.raises(ValueError, match="g must have the shape"):
        convolve_vjp(np.ones(5), np.ones(3), np.ones(5), "full")
