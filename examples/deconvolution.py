"""Deconvolution: recover a 3-D volume blurred by a known kernel.

The blur is ``b = convolve(x_true, psf, mode="same")``.  We solve the least-
squares problem ``min ||A x - b||^2`` with conjugate gradients on the normal
equations ``A^H A x = A^H b`` (CGNR), where ``A = cupyconv.ConvOperator(psf,
x.shape)``: ``matvec`` is the convolution, ``rmatvec`` its exact adjoint.
The solver is SciPy's ``cg`` on NumPy arrays or ``cupyx.scipy``'s on the GPU.

    python examples/deconvolution.py                 # CPU (NumPy), 24^3
    python examples/deconvolution.py --device gpu    # CuPy + a CUDA device
    python examples/deconvolution.py --size 48 --iters 100

Prints the residual ``||A x_k - b|| / ||b||`` after every iteration.
"""
from __future__ import annotations

import argparse

import numpy as np

import cupyconv


def gaussian_psf(xp, size=5, sigma=1.0, ndim=3):
    """A normalised separable Gaussian blur kernel of ``size**ndim`` taps."""
    r = xp.arange(size, dtype=xp.float64) - (size - 1) / 2
    g = xp.exp(-0.5 * (r / sigma) ** 2)
    psf = g
    for _ in range(ndim - 1):
        psf = xp.multiply.outer(psf, g)
    return psf / psf.sum()


def phantom(xp, size, seed=0):
    """A volume of a few random boxes (piecewise constant, sharp edges)."""
    rng = np.random.default_rng(seed)
    vol = np.zeros((size,) * 3)
    for _ in range(6):
        lo = rng.integers(0, size - 4, 3)
        hi = lo + rng.integers(2, max(3, size // 3), 3)
        vol[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] += rng.uniform(0.5, 1.5)
    return xp.asarray(vol)


def main(argv=None):
    """Run the demo; returns the list of relative residuals (initial first)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--size", type=int, default=24, help="edge of the cubic volume")
    parser.add_argument("--iters", type=int, default=60, help="CG iterations")
    args = parser.parse_args(argv)
    if args.device == "gpu":
        import cupy as xp
        from cupyx.scipy.sparse.linalg import LinearOperator, cg
    else:
        xp = np
        from scipy.sparse.linalg import LinearOperator, cg

    x_true = phantom(xp, args.size)
    psf = gaussian_psf(xp)
    A = cupyconv.ConvOperator(psf, x_true.shape, mode="same")
    b = A.matvec(x_true.ravel())
    bnorm = float(xp.linalg.norm(b))
    normal = LinearOperator((A.shape[1],) * 2, dtype=A.dtype,
                            matvec=lambda v: A.rmatvec(A.matvec(v)))
    history = []

    def record(xk):
        history.append(float(xp.linalg.norm(A.matvec(xk) - b)) / bnorm)
        print(f"iter {len(history) - 1:3d}  residual {history[-1]:.3e}")

    record(xp.zeros(A.shape[1]))
    x, _ = cg(normal, A.rmatvec(b), maxiter=args.iters, callback=record)
    err = float(xp.linalg.norm(x - x_true.ravel()) / xp.linalg.norm(x_true))
    print(f"{args.device}: {A!r}; residual fell {history[0] / history[-1]:.1f}x in "
          f"{len(history) - 1} iterations; relative error of the volume {err:.3f}")
    return history


if __name__ == "__main__":
    main()
