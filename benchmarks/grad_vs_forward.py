"""Gradient throughput relative to the forward pass (NumPy backend).

``python -m benchmarks.grad_vs_forward``: for a few layers, the median time
of ``conv`` (auto), ``conv_grad_input`` and ``conv_grad_weight``, and the
ratios forward / gradient (above 1: the gradient is faster than the forward).
"""
from __future__ import annotations

import sys

import numpy as np

from cupyconv._bench.timing import time_cpu

CASES = [
    # (x shape, w shape, geometry)
    ((4, 16, 32, 32, 32), (16, 16, 3, 3, 3), dict(padding=1)),
    ((8, 32, 64, 64), (32, 32, 3, 3), dict(padding=1)),
    ((2, 8, 24, 24, 24), (8, 8, 3, 3, 3), dict(padding=1, stride=2, padding_mode="reflect")),
    ((1, 8, 12, 12, 12, 12), (8, 8, 3, 3, 3, 3), dict(padding=1)),
]


def main(argv=None):
    import cupyconv
    rng = np.random.default_rng(0)
    print("| layer | forward (ms) | grad input (ms) | ratio | grad weight (ms) | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for xs, ws, geo in CASES:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        y = cupyconv.conv(x, w, **geo)
        dy = rng.standard_normal(y.shape).astype(np.float32)
        t_f = time_cpu(lambda: cupyconv.conv(x, w, **geo), repeat=5)
        t_i = time_cpu(lambda: cupyconv.conv_grad_input(dy, w, x.shape, **geo), repeat=5)
        t_w = time_cpu(lambda: cupyconv.conv_grad_weight(x, dy, w.shape, **geo), repeat=5)
        print(f"| x{xs} w{ws} {geo} | {t_f * 1e3:.1f} | {t_i * 1e3:.1f} | {t_f / t_i:.2f} | "
              f"{t_w * 1e3:.1f} | {t_f / t_w:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
