"""ConvOperator: exact adjoint, LinearOperator interop, and the deconvolution example."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import cupyconv
from helpers import random_array

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "deconvolution.py")


def _adjoint_error(op, rng, dtype):
    x = random_array(rng, (op.shape[1],), dtype)
    y = random_array(rng, (op.shape[0],), dtype)
    lhs, rhs = np.vdot(op.matvec(x), y), np.vdot(x, op.rmatvec(y))
    return abs(lhs - rhs) / (np.linalg.norm(op.matvec(x)) * np.linalg.norm(y))


@pytest.mark.parametrize("mode", ["same", "full", "valid"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("shapes", [((6, 5, 4), (3, 2, 3), None),
                                    ((3, 4, 5, 2), (1, 3, 2, 2), (1, 2, 3)),
                                    ((3, 2), (5, 4), None)])      # kernel larger (valid swaps)
def test_rmatvec_is_the_exact_adjoint(rng, mode, dtype, shapes):
    in_shape, k_shape, axes = shapes
    kernel = random_array(rng, k_shape, dtype)
    op = cupyconv.ConvOperator(kernel, in_shape, mode, axes=axes)
    z = cupyconv.convolve(np.zeros(in_shape), kernel, mode, axes=axes)
    assert op.shape == (z.size, int(np.prod(in_shape))) and op.output_shape == z.shape
    assert op.dtype == np.dtype(dtype)
    assert _adjoint_error(op, rng, dtype) <= 1e-13


@pytest.mark.parametrize("padding_mode", ["constant", "reflect", "wrap"])
def test_from_conv(rng, padding_mode):
    w = rng.standard_normal((4, 2, 3, 2))
    op = cupyconv.ConvOperator.from_conv(w, (2, 2, 7, 6), stride=(2, 1), padding=2,
                                         padding_mode=padding_mode)
    assert op.output_shape == cupyconv.conv(np.zeros((2, 2, 7, 6)), w, stride=(2, 1),
                                            padding=2).shape
    assert _adjoint_error(op, rng, np.float64) <= 1e-13


def test_aslinearoperator_runs_scipy_solvers(rng):
    kernel = np.array([[0.25, 0.5, 0.25]])
    op = cupyconv.ConvOperator(kernel, (4, 9), "same")
    lin = op.aslinearoperator()
    assert isinstance(lin, spla.LinearOperator)
    x = rng.standard_normal(op.shape[1])
    np.testing.assert_allclose(lin @ x, op.matvec(x))
    np.testing.assert_allclose(lin.H @ x, op.rmatvec(x))
    b = op.matvec(x)
    sol = spla.lsqr(lin, b, atol=1e-12, btol=1e-12, iter_lim=500)[0]
    assert np.linalg.norm(op.matvec(sol) - b) <= 1e-6 * np.linalg.norm(b)


def test_cuda_path_operator(dev, rng):
    kernel = rng.standard_normal((3, 2))
    host = cupyconv.ConvOperator(kernel, (5, 4), "same")
    op = cupyconv.ConvOperator(dev.to_dev(kernel), (5, 4), "same")
    v = rng.standard_normal(op.shape[1])
    with dev.scope():
        np.testing.assert_allclose(dev.to_host(op.rmatvec(dev.to_dev(v))), host.rmatvec(v),
                                   rtol=1e-13, atol=1e-14)
        if dev.name == "cuda":
            import cupyx.scipy.sparse.linalg as cla
            assert isinstance(op.aslinearoperator(), cla.LinearOperator)


def test_bad_vectors_and_shapes():
    op = cupyconv.ConvOperator(np.ones(3), (5,))
    with pytest.raises(ValueError, match="matvec expects"):
        op.matvec(np.ones(4))
    with pytest.raises(ValueError, match="input_shape"):
        cupyconv.ConvOperator(np.ones(3), (5, 2))


def test_deconvolution_example_residual_falls_100x(capsys):
    spec = importlib.util.spec_from_file_location("deconvolution_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    history = module.main(["--size", "16", "--iters", "60"])
    assert history[0] / history[-1] >= 100
    assert "residual" in capsys.readouterr().out
