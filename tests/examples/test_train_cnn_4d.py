"""examples/train_cnn_4d.py: the loss falls, the hand-written backward pass
matches finite differences, and the command line prints a falling loss."""
from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np
import pytest

import cupyconv

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_cnn_4d.py"


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("train_cnn_4d", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_loss_falls(ex):
    # Size 5, batch 2, 20 steps: over seeds 0..19 the ratio last/first lay in
    # [0.07, 0.19], so 0.4 leaves a 2x margin and still demands real progress.
    seed = 3
    losses = ex.train(steps=20, size=5, batch=2, seed=seed, lr=1e-2)
    assert len(losses) == 20
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.4 * losses[0], losses
    # Better than predicting zero (the target's mean square, about 1): the
    # network learned the blur, not merely to shrink its output.
    _, target = ex.make_data(np, np.random.default_rng(seed), 5, 2)
    assert losses[-1] < 0.5 * float((target ** 2).mean()), losses


def test_gradients_match_finite_differences(ex, rng):
    size, batch, hidden = 4, 2, 3
    x, target = ex.make_data(np, rng, size, batch)
    params = ex.init_params(np, rng, hidden)
    # Non-zero biases so their effect (and the ReLU mask shifting) is exercised.
    params["b1"] = rng.uniform(-0.3, 0.3, hidden)
    params["b2"] = rng.uniform(-0.3, 0.3, 1)
    loss, grads = ex.loss_and_grads(params, x, target)
    assert loss == pytest.approx(ex.mse(ex.forward(params, x)[0], target), rel=0, abs=0)
    assert set(grads) == set(params)

    # Along one coordinate, as long as no ReLU unit changes sign, z and y are
    # linear in the parameter and L is quadratic in y: L is exactly quadratic,
    # so a central difference, or the one-sided 3-point stencil
    # (-3 L(0) + 4 L(h) - L(2h)) / 2h, has no truncation error at all.  We use
    # the largest h (from 1e-3 down) at which one of them sees no unit flip
    # (the mask z > 0 unchanged at every point it evaluates; w2/b2 never flip
    # one).  Only rounding is left, ~ eps64 * L / h with L ~ 1 and h >= 1e-5
    # in practice: <= 1e-11 absolute, against gradients of 4e-5 or more.
    # Measured worst relative error over EVERY coordinate for seeds 0..9:
    # 1.6e-9.  So rtol = 1e-6 has a >100x margin yet catches any real error
    # (a missing factor, a wrong mask, a wrong tensor in a gradient call are
    # O(1) off); atol, 1e-9 of the parameter's largest gradient, only matters
    # for an entry whose gradient is itself near zero.
    mask = ex.forward(params, x)[1][1] > 0

    def loss_at(name, idx, delta):
        """``(L, no unit flipped)`` with ``params[name][idx]`` moved by delta."""
        p = {k: v.copy() for k, v in params.items()}
        p[name][idx] += delta
        y, (_, z, _) = ex.forward(p, x)
        return ex.mse(y, target), np.array_equal(z > 0, mask)

    def finite_difference(name, idx):
        for h in (1e-3, 1e-4, 1e-5, 1e-6, 1e-7):
            (up, ok_up), (down, ok_down) = loss_at(name, idx, h), loss_at(name, idx, -h)
            if ok_up and ok_down:
                return (up - down) / (2 * h)
            for side, (near, ok_near) in ((1, (up, ok_up)), (-1, (down, ok_down))):
                if ok_near:
                    far, ok_far = loss_at(name, idx, 2 * side * h)
                    if ok_far:
                        return side * (-3 * loss + 4 * near - far) / (2 * h)
        raise AssertionError(f"{name}{idx}: a ReLU unit flips even at h = 1e-7")

    for name, p in params.items():
        assert grads[name].shape == p.shape and grads[name].dtype == np.float64
        count = min(5, p.size)
        flat = rng.choice(p.size, size=count, replace=False)
        idxs = [np.unravel_index(i, p.shape) for i in flat]
        fd = np.array([finite_difference(name, i) for i in idxs])
        an = np.array([grads[name][i] for i in idxs])
        scale = float(np.abs(grads[name]).max())
        assert scale > 0, name
        np.testing.assert_allclose(an, fd, rtol=1e-6, atol=1e-9 * scale, err_msg=name)


def test_adam_step_moves_against_the_gradient(ex):
    params = {"p": np.array([1.0, -2.0, 3.0])}
    grads = {"p": np.array([0.5, -4.0, 0.0])}
    state = ex.adam_init(params)
    ex.adam_step(params, grads, state, lr=0.1)
    # First step: m_hat = g, v_hat = g**2, so the update is lr * sign(g).
    np.testing.assert_allclose(params["p"], [0.9, -1.9, 3.0], rtol=0, atol=1e-8)
    assert state["k"] == 1


def test_main_prints_a_falling_loss(ex, capsys):
    rc = ex.main(["--device", "cpu", "--steps", "8", "--size", "4", "--batch", "2",
                  "--lr", "0.02", "--seed", "1"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\s*(\d+)\s+([0-9.eE+-]+)\s*$", out, flags=re.MULTILINE)
    assert [int(s) for s, _ in rows] == list(range(8)), out
    losses = [float(v) for _, v in rows]
    assert losses[-1] < 0.7 * losses[0], out
    assert rc == 0
    assert "->" in out


@pytest.mark.gpu
def test_gpu_matches_cpu(ex):
    if "cuda" not in cupyconv.available_backends():
        pytest.skip("no CUDA device")
    kw = dict(steps=5, size=5, batch=2, seed=0, lr=1e-2)
    cpu, gpu = ex.train(device="cpu", **kw), ex.train(device="gpu", **kw)
    # Same host-generated data and weights; float64 on both sides, so only
    # summation order differs (~1e-15 per step, amplified little in 5 steps).
    np.testing.assert_allclose(gpu, cpu, rtol=1e-9)
