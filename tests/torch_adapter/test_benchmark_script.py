"""benchmarks/torch_layers.py runs: every implementation it times computes the same
layer (outputs and gradients), and one measured row has a time per implementation."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks import torch_layers  # noqa: E402

TINY = ("4-D 4^4, 2->2, k3", 1, 2, 2, (4,) * 4, 3, 1, 1)


def test_implementations_compute_the_same_layer():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 5, 4, 5, generator=gen, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 2, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(3, generator=gen, dtype=torch.float64)
    impls = torch_layers.implementations(3, 2, 1)
    assert {"cupyconv.torch", "cupyconv direct", "nn.Conv3d"} <= set(impls)
    seen = {}
    for name, fn in impls.items():
        if name == "cupyconv direct":         # works on arrays; no tensor gradients
            continue
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        fn(xs, ws, bs, True)
        seen[name] = (xs.grad, ws.grad, bs.grad)
    ref = seen.pop("nn.Conv3d")
    for name, got in seen.items():
        for a, r in zip(got, ref):
            # float64 sums of at most 2*27*(3*2*3) products: 1e-10 is far above rounding
            torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-10, msg=name)


def test_measure_gives_a_time_per_implementation():
    times, best = torch_layers.measure(TINY, "cpu", 1, True, torch.float64)
    assert {"cupyconv.torch", "cupyconv direct"} <= set(times)
    assert all(t > 0 for t in times.values()) and best > 0


def test_least_autograd_wrapper_computes_the_layer():
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True)
               for s in ((1, 2, 5, 4, 5), (3, 2, 3, 2, 3), (3,)))
    torch_layers._least_autograd(dict(stride=2, padding=1))(x, w, b, True)
    xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, w, b))
    torch.nn.functional.conv3d(xs, ws, bs, stride=2, padding=1).sum().backward()
    for a, r in zip((x.grad, w.grad, b.grad), (xs.grad, ws.grad, bs.grad)):
        # float64 sums of at most 2*27*(3*2*3) products: 1e-10 is far above rounding
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-10)
    times, _ = torch_layers.measure(TINY, "cpu", 1, True, torch.float64,
                                    only=("cupyconv.torch", "cupyconv direct",
                                          "least autograd"))
    assert set(times) == {"cupyconv.torch", "cupyconv direct", "least autograd"}
