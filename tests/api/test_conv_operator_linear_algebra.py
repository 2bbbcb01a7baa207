"""``ConvOperator`` behaves as a SciPy ``LinearOperator`` (``@``, ``dot``, ``matmat``),
``from_conv`` takes the shapes ``conv`` takes, and both constructors reference their
kernel live.  Oracle: the same products through ``aslinearoperator()`` (SciPy's own
``LinearOperator``) and ``cupyconv.conv``/``convolve`` of the reshaped vector."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import cupyconv
from helpers import random_array


def _operators(rng):
    k = random_array(rng, (3, 2), np.float64)
    w = random_array(rng, (4, 2, 3, 3), np.float64)
    return {"convolve": cupyconv.ConvOperator(k, (6, 5)),
            "from_conv": cupyconv.ConvOperator.from_conv(w, (2, 2, 5, 4), padding=1),
            "from_conv unbatched": cupyconv.ConvOperator.from_conv(w, (2, 5, 4), padding=1)}


@pytest.mark.parametrize("name", ["convolve", "from_conv", "from_conv unbatched"])
def test_matmul_is_the_linear_operators(rng, name):
    op = _operators(rng)[name]
    lin = op.aslinearoperator()
    m, n = op.shape
    x, X, y = rng.standard_normal(n), rng.standard_normal((n, 3)), rng.standard_normal(m)
    cases = {"vector": (op @ x, lin @ x), "column": (op @ x[:, None], lin @ x[:, None]),
             "matrix": (op @ X, lin @ X), "dot": (op.dot(X), lin.dot(X)),
             "matmat": (op.matmat(X), lin.matmat(X)),
             "vector @ A": (y @ op, y @ lin)}
    for what, (got, want) in cases.items():
        assert got.shape == want.shape, what
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, err_msg=what)
    np.testing.assert_allclose(op @ x, op.matvec(x), rtol=1e-13)
    with pytest.raises(ValueError, match="Scalar operands are not allowed"):
        op @ 2.0
    product = op @ op.aslinearoperator().H
    assert isinstance(product, spla.LinearOperator) and product.shape == (m, m)


def test_rmatmat_is_the_adjoint_per_column(rng):
    op = _operators(rng)["from_conv"]
    Y = rng.standard_normal((op.shape[0], 2))
    np.testing.assert_allclose(op.rmatmat(Y),
                               np.stack([op.rmatvec(c) for c in Y.T], axis=1), rtol=1e-13)


def test_from_conv_accepts_the_unbatched_shape_conv_accepts(rng):
    w = random_array(rng, (4, 2, 3, 3), np.float64)
    x = random_array(rng, (2, 5, 4), np.float64)
    op = cupyconv.ConvOperator.from_conv(w, x.shape, stride=2, padding=1)
    y = cupyconv.conv(x, w, stride=2, padding=1)
    assert op.input_shape == x.shape and op.output_shape == y.shape
    np.testing.assert_allclose(op @ x.ravel(), y.ravel(), rtol=1e-13)
    u = rng.standard_normal(op.shape[0])
    back = cupyconv.conv_grad_input(u.reshape((1,) + y.shape), w, (1,) + x.shape,
                                    stride=2, padding=1)[0]
    np.testing.assert_allclose(op.rmatvec(u), back.ravel(), rtol=1e-13)
    assert abs(np.vdot(op @ x.ravel(), u) - np.vdot(x.ravel(), op.rmatvec(u))) <= 1e-12


@pytest.mark.parametrize("make", ["constructor", "from_conv"])
def test_both_constructors_reference_the_kernel_live(any_dev, rng, make):
    """A write into the kernel after construction is seen by the next ``matvec`` and
    ``rmatvec`` (first and replayed calls), on every backend."""
    if make == "constructor":
        k, k_new = (random_array(rng, (3, 3), np.float64) for _ in range(2))
        x_shape = (6, 5)

        def forward(x, k):
            return cupyconv.convolve(x, k, "same")
    else:
        k, k_new = (random_array(rng, (3, 2, 3, 3), np.float64) for _ in range(2))
        x_shape = (2, 5, 4)

        def forward(x, k):
            return cupyconv.conv(x, k, padding=1)
    x = random_array(rng, x_shape, np.float64)
    with any_dev.scope():
        kd = any_dev.to_dev(k.copy())
        op = (cupyconv.ConvOperator(kd, x_shape) if make == "constructor"
              else cupyconv.ConvOperator.from_conv(kd, x_shape, padding=1))
        xd = any_dev.to_dev(x.ravel())
        first = any_dev.to_host(op.matvec(xd))
        u = any_dev.to_dev(rng.standard_normal(op.shape[0]))
        op.rmatvec(u)
        kd[...] = any_dev.to_dev(k_new)
        for _ in range(2):
            got = any_dev.to_host(op.matvec(xd))
            np.testing.assert_allclose(got, forward(x, k_new).ravel(), rtol=1e-12, atol=1e-12)
            back = any_dev.to_host(op.rmatvec(u))
            assert np.vdot(got, any_dev.to_host(u)) == pytest.approx(np.vdot(x.ravel(), back),
                                                                     rel=1e-12)
    np.testing.assert_allclose(first, forward(x, k).ravel(), rtol=1e-12, atol=1e-12)
