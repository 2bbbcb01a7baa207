"""What a user's type checker sees: calls of the public API, checked by mypy in the test
command (scripts/test.sh; not collected by pytest).  Each call passes mypy as written;
the commented lines show what mypy rejects."""
from __future__ import annotations

from typing import Any, List

import numpy as np

import cupyconv
import cupyconv.dask
import cupyconv.grad
import cupyconv.ndimage

x = np.ones((2, 3, 8, 8), np.float32)
w = np.ones((4, 3, 3, 3), np.float32)

y: Any = cupyconv.conv(x, w, np.zeros(4), stride=(1, 2), padding="same", method="auto",
                       precision="highest", workspace_limit=2**20)
yt: Any = cupyconv.conv_transpose(y, w.transpose(1, 0, 2, 3), padding=((1, 1), (0, 2)))
dx: Any = cupyconv.conv_grad_input(y, w, x.shape, padding="same")
dw: Any = cupyconv.conv_grad_weight(x, y, w.shape, padding="same")
db: Any = cupyconv.conv_grad_bias(y)
plan: cupyconv.ConvPlan = cupyconv.plan_conv(x.shape, w.shape, np.float32, padding=1)
lines: str = plan.explain()
flops: int = plan.flops
A = cupyconv.ConvOperator(np.ones((3, 3)), (8, 8), "same", axes=(0, 1))
B: cupyconv.ConvOperator = cupyconv.ConvOperator.from_conv(w, x.shape[1:], padding=1)
v: Any = A @ np.ones(64)
s: Any = cupyconv.convolve(x[0, 0], w[0, 0], "same", axes=[0, 1])
c: Any = cupyconv.fftconvolve(x[0, 0], w[0, 0])
g1, g2 = cupyconv.grad.convolve_vjp(x[0, 0], w[0, 0], np.ones((10, 10)))
n: Any = cupyconv.ndimage.gaussian_filter(x[0, 0], sigma=[1.0, 2.0], mode=("reflect", "wrap"))
e: Any = cupyconv.ndimage.sobel(x[0, 0], axis=0)
backends: List[str] = cupyconv.available_backends()
with cupyconv.use_backend("numpy") as name:
    assert name == "numpy"
cupyconv.clear_caches()
# Rejected by mypy (uncomment to see):
# cupyconv.conv(x, w, stride="2")            # stride: int or a sequence of ints
# cupyconv.ndimage.gaussian_filter(x, sigma="1")
