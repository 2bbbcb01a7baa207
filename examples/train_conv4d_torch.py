"""Train a small 4-D CNN in PyTorch with ``cupyconv.torch.Conv4d`` and ``torch.optim.Adam``.

The same task as ``examples/train_cnn_4d.py``, written the PyTorch way: autograd computes
the gradients (through cupyconv's ``conv_grad_input``/``conv_grad_weight``/
``conv_grad_bias``), ``torch.optim.Adam`` updates the parameters.  ``x`` is white noise
of shape ``(N, 1, S, S, S, S)`` and the target is ``x`` blurred by a separable 4-D
``[1, 2, 1]`` kernel; the network ``Conv4d(1, C, 3) -> ReLU -> Conv4d(C, 1, 3)`` with
``'same'`` padding can represent it exactly, so the mean squared error falls.

    python examples/train_conv4d_torch.py                   # CPU, 6^4, batch 2
    python examples/train_conv4d_torch.py --device cuda     # a CUDA device (CuPy)
    python examples/train_conv4d_torch.py --steps 100 --size 10 --compile

Prints ``step, loss`` as the loss falls.
"""
from __future__ import annotations

import argparse
import sys

import torch

import cupyconv.torch as ct

NDIM = 4


def make_data(size, batch, generator, device="cpu"):
    """``(x, target)``: noise and its separable blur, target scaled to unit variance."""
    x = torch.randn((batch, 1) + (size,) * NDIM, generator=generator,
                    dtype=torch.float64).to(device)
    taps = torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64)
    g = taps
    for _ in range(NDIM - 1):
        g = g[..., None] * taps
    blurred = ct.conv(x, g.reshape((1, 1) + (3,) * NDIM).to(device), padding="same")
    return x, blurred / blurred.std()


def make_model(hidden=4, device="cpu"):
    return torch.nn.Sequential(
        ct.Conv4d(1, hidden, 3, padding="same"), torch.nn.ReLU(),
        ct.Conv4d(hidden, 1, 3, padding="same")).to(device=device, dtype=torch.float64)


def train(steps=30, size=6, batch=2, seed=0, lr=2e-2, device="cpu", compile=False,
          log=None):
    """Adam on the mean squared error; returns the loss of every step."""
    torch.manual_seed(seed)
    x, target = make_data(size, batch, torch.Generator().manual_seed(seed), device)
    model = make_model(device=device)
    forward = torch.compile(model, fullgraph=True, backend="aot_eager") if compile \
        else model
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(forward(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log is not None:
            log(step, losses[-1])
    return losses


def main(argv=None):
    """Command-line entry point; returns 0 when the loss fell."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = dict(steps=30, size=6, batch=2, lr=2e-2, seed=0)
    for name, value in defaults.items():
        parser.add_argument(f"--{name}", type=type(value), default=value)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile(fullgraph=True, backend='aot_eager')")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.size < 3:
        parser.error("--steps must be >= 1 and --size >= 3")
    shape = (args.batch, 1) + (args.size,) * NDIM
    print(f"{args.device}: x {shape}, float64, {'compiled' if args.compile else 'eager'}")
    print(f"{'step':>5}  {'loss':>10}")
    settings = {k: getattr(args, k) for k in (*defaults, "device", "compile")}
    losses = train(**settings,
                   log=lambda step, loss: print(f"{step:5d}  {loss:10.6f}", flush=True))
    first, last = losses[0], losses[-1]
    print(f"loss {first:.6f} -> {last:.6f} ({first / last:.1f}x lower) in {args.steps} steps")
    return int(not last < first)


if __name__ == "__main__":
    sys.exit(main())
