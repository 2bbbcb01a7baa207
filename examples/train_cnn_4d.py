"""Train a two-layer 4-D convolutional network with cupyconv's gradient helpers.

No deep-learning framework: the forward pass is :func:`cupyconv.conv`, the
backward pass is written out by hand with :func:`cupyconv.conv_grad_input`,
:func:`cupyconv.conv_grad_weight` and :func:`cupyconv.conv_grad_bias`, and
the optimiser is a hand-written Adam.  Everything is float64, on NumPy
(``--device cpu``) or CuPy (``--device gpu``) arrays.

The network maps ``x`` of shape ``(N, 1, S, S, S, S)`` (four spatial axes) to
``y`` of the same shape, with ``'same'`` padding so every spatial shape is
``S**4``::

    z = conv(x, w1) + b1          w1: (C, 1, 3, 3, 3, 3), b1: (C,)
    h = relu(z)
    y = conv(h, w2) + b2          w2: (1, C, 3, 3, 3, 3), b2: (1,)

The task is synthetic: ``x`` is white noise and the target ``t = conv(x, g)``
is a known separable 4-D blur ``g`` (taps ``[1, 2, 1]`` per axis, scaled so
``t`` has unit variance).  The network can represent it exactly (``w1``
holding ``g`` and ``-g``, ``w2`` subtracting the two ReLU outputs), so the
loss can fall towards zero.  The loss is the mean squared error over the
``M = y.size`` outputs, ``L = sum((y - t)**2) / M``.

Backward pass (the chain rule, layer by layer):

* ``dL/dy = 2 (y - t) / M``.
* Second conv: ``dL/dw2 = conv_grad_weight(h, dL/dy, w2.shape)``,
  ``dL/db2 = conv_grad_bias(dL/dy)`` (``dL/dy`` summed over batch and space),
  ``dL/dh = conv_grad_input(dL/dy, w2, h.shape)`` (the adjoint convolution).
* ReLU: ``dL/dz = dL/dh * (z > 0)``, the mask of active units.
* First conv: ``dL/dw1 = conv_grad_weight(x, dL/dz, w1.shape)``,
  ``dL/db1 = conv_grad_bias(dL/dz)``.  (``dL/dx`` is not needed.)

Adam keeps per-parameter moments ``m <- b1 m + (1 - b1) g`` and
``v <- b2 v + (1 - b2) g**2`` and updates
``p <- p - lr * m_hat / (sqrt(v_hat) + eps)`` with the bias-corrected
``m_hat = m / (1 - b1**k)``, ``v_hat = v / (1 - b2**k)`` at step ``k``.

    python examples/train_cnn_4d.py                  # CPU (NumPy), 8^4, batch 4
    python examples/train_cnn_4d.py --device gpu     # CuPy + a CUDA device
    python examples/train_cnn_4d.py --steps 200 --size 12 --lr 0.01

Prints ``step, loss`` as the loss falls.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import cupyconv

#: Geometry shared by the forward convolutions and their gradients.
GEOMETRY = dict(padding="same")
NDIM = 4


def blur_kernel(xp, ndim=NDIM):
    """``(1, 1, 3, ..., 3)`` separable ``[1, 2, 1]`` blur, scaled to unit L2 norm."""
    g = np.array([1.0, 2.0, 1.0])
    k = g
    for _ in range(ndim - 1):
        k = np.multiply.outer(k, g)
    k /= np.sqrt((k ** 2).sum())      # white noise in -> unit-variance target out
    return xp.asarray(k[None, None])


def make_data(xp, rng, size, batch, ndim=NDIM):
    """White-noise inputs ``x`` and their blurred targets ``t``, both ``(batch, 1, *S)``."""
    x = xp.asarray(rng.standard_normal((batch, 1) + (size,) * ndim))
    return x, cupyconv.conv(x, blur_kernel(xp, ndim), **GEOMETRY)


def init_params(xp, rng, hidden=4, ksize=3, ndim=NDIM):
    """He-normal weights (fan-in ``C_in * ksize**ndim``), zero biases; float64."""
    taps = (ksize,) * ndim
    fan1, fan2 = 1 * ksize ** ndim, hidden * ksize ** ndim
    return {
        "w1": xp.asarray(rng.standard_normal((hidden, 1) + taps) * np.sqrt(2.0 / fan1)),
        "b1": xp.zeros(hidden, dtype=xp.float64),
        "w2": xp.asarray(rng.standard_normal((1, hidden) + taps) * np.sqrt(1.0 / fan2)),
        "b2": xp.zeros(1, dtype=xp.float64),
    }


def forward(params, x):
    """Return ``(y, cache)``; ``cache = (x, z, h)`` is what :func:`backward` needs."""
    z = cupyconv.conv(x, params["w1"], params["b1"], **GEOMETRY)
    h = z * (z > 0)
    y = cupyconv.conv(h, params["w2"], params["b2"], **GEOMETRY)
    return y, (x, z, h)


def mse(y, target):
    """Mean squared error as a Python float."""
    return float(((y - target) ** 2).mean())


def backward(params, cache, dy):
    """Gradients of the loss w.r.t. every parameter, given ``dy = dL/dy``."""
    x, z, h = cache
    grads = {
        "w2": cupyconv.conv_grad_weight(h, dy, params["w2"].shape, **GEOMETRY),
        "b2": cupyconv.conv_grad_bias(dy),
    }
    dh = cupyconv.conv_grad_input(dy, params["w2"], h.shape, **GEOMETRY)
    dz = dh * (z > 0)                                  # ReLU mask
    grads["w1"] = cupyconv.conv_grad_weight(x, dz, params["w1"].shape, **GEOMETRY)
    grads["b1"] = cupyconv.conv_grad_bias(dz)
    return grads


def loss_and_grads(params, x, target):
    """``(L, grads)`` for ``L = mean((forward(x) - target)**2)``."""
    y, cache = forward(params, x)
    dy = 2.0 * (y - target) / y.size                   # dL/dy
    return mse(y, target), backward(params, cache, dy)


def adam_init(params):
    """Zero first and second moments and a step counter."""
    return {"m": {k: 0 * p for k, p in params.items()},
            "v": {k: 0 * p for k, p in params.items()}, "k": 0}


def adam_step(params, grads, state, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8):
    """One in-place Adam update of ``params`` (and of ``state``)."""
    state["k"] += 1
    c1, c2 = 1.0 - beta1 ** state["k"], 1.0 - beta2 ** state["k"]
    for name, g in grads.items():
        m, v = state["m"][name], state["v"][name]
        m *= beta1
        m += (1.0 - beta1) * g
        v *= beta2
        v += (1.0 - beta2) * g * g
        params[name] -= lr * (m / c1) / ((v / c2) ** 0.5 + eps)


def get_xp(device):
    """NumPy for ``'cpu'``, CuPy for ``'gpu'``."""
    if device == "gpu":
        import cupy
        return cupy
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    return np


def train(steps=40, size=8, batch=4, device="cpu", seed=0, lr=1e-2, hidden=4, log=None):
    """Fit the blur with Adam on one fixed batch; returns the loss before each step.

    ``log(step, loss)`` is called after each loss evaluation when given.  Data
    and initial weights come from ``numpy.random.default_rng(seed)`` on the
    host, so CPU and GPU runs start from the same numbers.
    """
    xp = get_xp(device)
    rng = np.random.default_rng(seed)
    x, target = make_data(xp, rng, size, batch)
    params = init_params(xp, rng, hidden)
    state = adam_init(params)
    losses = []
    for step in range(steps):
        loss, grads = loss_and_grads(params, x, target)
        losses.append(loss)
        if log is not None:
            log(step, loss)
        adam_step(params, grads, state, lr=lr)
    return losses


def main(argv=None):
    """Command-line entry point; returns 0 when the loss fell."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--steps", type=int, default=40, help="Adam steps")
    parser.add_argument("--size", type=int, default=8, help="edge of the 4-D grid")
    parser.add_argument("--batch", type=int, default=4, help="samples in the batch")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")

    print(f"{args.device}: x {(args.batch, 1) + (args.size,) * NDIM}, float64")
    print(f"{'step':>5}  {'loss':>10}")
    losses = train(args.steps, args.size, args.batch, args.device, args.seed, args.lr,
                   log=lambda step, loss: print(f"{step:5d}  {loss:10.6f}", flush=True))
    print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} "
          f"({losses[0] / losses[-1]:.1f}x lower) in {len(losses)} steps")
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
