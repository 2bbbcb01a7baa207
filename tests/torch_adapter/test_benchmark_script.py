"""benchmarks/torch_layers.py runs: every implementation it times computes the same
layer (outputs and gradients, from one grad_output), and one measured row has a time per
implementation."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks import torch_layers  # noqa: E402

TINY = ("4-D 4^4, 2->2, k3", 1, 2, 2, (4,) * 4, 3, 1, 1)


def _operands():
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True)
               for s in ((1, 2, 5, 4, 5), (3, 2, 3, 2, 3), (3,)))
    dy = torch.randn(1, 3, 3, 3, 3, generator=gen, dtype=torch.float64)
    return x, w, b, dy


def _tensors(results):
    """The results of one implementation (tensors or NumPy arrays) as detached tensors."""
    return [t.detach().clone() if isinstance(t, torch.Tensor) else torch.from_numpy(t)
            for t in results]


def _assert_same(got, ref, name):
    for a, r in zip(got, ref, strict=True):
        # float64 sums of at most 3*27*(3*2*3) products: 1e-10 is far above rounding
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-10, msg=name)


def test_implementations_compute_the_same_layer():
    # every row, the least autograd wrapper included, computes the output and the three
    # gradients nn.Conv3d computes for the same grad_output; without one, the output
    x, w, b, dy = _operands()
    impls = torch_layers.implementations(3, 2, 1)
    assert {"cupyconv.torch", "cupyconv direct", "nn.Conv3d"} <= set(impls)
    impls["least autograd"] = torch_layers._least_autograd(dict(stride=2, padding=1))
    seen = {}
    for name, fn in impls.items():
        operands = [t.detach().clone().requires_grad_() for t in (x, w, b)]
        seen[name] = _tensors(fn(*operands, dy))
        assert len(seen[name]) == 4, name
        forward = _tensors(fn(*operands, None))
        _assert_same(forward, seen[name][:1], name)
    ref = seen.pop("nn.Conv3d")
    for name, got in seen.items():
        _assert_same(got, ref, name)


def test_measure_gives_a_time_per_implementation():
    times, best = torch_layers.measure(TINY, "cpu", 1, True, torch.float64)
    assert {"cupyconv.torch", "cupyconv direct"} <= set(times)
    assert all(t > 0 for t in times.values()) and best > 0


def test_measure_records_each_round_for_paired_ratios():
    rounds = {}
    times, _ = torch_layers.measure(TINY, "cpu", 3, False, torch.float64, samples=rounds)
    assert set(rounds) == set(times) and all(len(v) == 3 for v in rounds.values())
    q1, median, q3 = torch_layers.paired_ratios(rounds, "cupyconv direct")
    assert 0 < q1 <= median <= q3


def test_paired_ratios_divide_within_each_round():
    # the peer twice as slow in two rounds of three, in each under a load that moved
    # 10x between rounds: the rounds' median ratio is 2, the medians' ratio 0.3
    samples = {"cupyconv.torch": [1.0, 10.0, 10.0], "peer": [2.0, 20.0, 3.0]}
    assert torch_layers.paired_ratios(samples, "peer")[1] == pytest.approx(2.0)
    samples = {"cupyconv.torch": [1.0, 1.0, 1.0], "peer": [1.0, 2.0, 4.0]}
    assert torch_layers.paired_ratios(samples, "peer") == pytest.approx((1.5, 2.0, 3.0))
    assert torch_layers.paired_ratios({"cupyconv.torch": [2.0], "peer": [3.0]},
                                      "peer") == pytest.approx((1.5,) * 3)


def test_measure_times_the_least_autograd_wrapper():
    times, _ = torch_layers.measure(TINY, "cpu", 1, True, torch.float64, repeat=2,
                                    only=("cupyconv.torch", "cupyconv direct",
                                          "least autograd"))
    assert set(times) == {"cupyconv.torch", "cupyconv direct", "least autograd"}


def test_stubbed_overhead_table_restores_cupyconv(capsys):
    import cupyconv
    real = {name: getattr(cupyconv, name) for name in torch_layers.STUBBED}
    assert torch_layers.main(["--overhead", "--stubbed", "--rounds", "1", "--cases",
                              "no case", "--dtype", "float64"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(f"| {torch_layers.TINY[0]} |")]
    assert len(rows) == 2                              # fwd, fwd+bwd
    assert {name: getattr(cupyconv, name) for name in torch_layers.STUBBED} == real


def test_stub_returns_a_fresh_copy_of_the_real_result():
    calls = []

    def real(a, shape, *, k):
        calls.append(1)
        return torch.full(shape, float(k)).numpy() + a
    stub = torch_layers._stub(real)
    a = torch.ones(2).numpy()
    first, again = stub(a, (2,), k=3), stub(a, (2,), k=3)
    assert len(calls) == 1 and first is not again and (first == again).all()
    stub(a, (2,), k=4)
    assert len(calls) == 2
