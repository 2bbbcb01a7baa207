"""Lazy pricing: the chooser prices the candidates cheapest floor first and leaves those
whose floor already loses unpriced; the choice it makes, and the ranking it completes
when read, are the eager chooser's (every candidate priced)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import cupyconv
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backends, dispatcher
from cupyconv.dispatch.choice import choose_lazily


def _backends():
    return ["numpy"] + (["emulated"] if "emulated" in cupyconv.available_backends() else [])


@st.composite
def problems(draw):
    """Small problems of every op, rank 1-3, the dtypes both backends compute."""
    ndim = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2]))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ks = draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim))
    s = [k + draw(st.integers(0, 12)) for k in ks]
    return ConvProblem.create(
        x_shape=(draw(st.integers(1, 3)), cg * groups, *s),
        w_shape=(kg * groups, cg, *ks), groups=groups,
        stride=draw(st.integers(1, 2)), padding=draw(st.integers(0, 2)),
        dtype=draw(st.sampled_from(["float32", "float64", "complex128", "float16"])),
        op=draw(st.sampled_from(["forward", "grad_input", "grad_weight"])))


def _eager(problem, backend, limit):
    """The choice with every candidate priced (no floors)."""
    saved = backend.time_floors
    backend.time_floors = lambda p, names: dict.fromkeys(names, 0.0)
    try:
        choice = choose_lazily(problem, backend, limit)
    finally:
        del backend.time_floors
    assert backend.time_floors == saved
    return choice


@pytest.mark.parametrize("name", _backends())
@given(problem=problems())
def test_no_prediction_is_below_its_floor(name, problem):
    backend = backends.backend_for(np, name)
    problem = backend.prepare(problem, Operands())[0]
    floors = backend.time_floors(problem, list(backend.algorithms))
    for algorithm, floor in floors.items():
        if backend.can_implement(problem, algorithm)[0]:
            assert backend.predict_times(problem, [algorithm])[algorithm] >= floor


@pytest.mark.parametrize("name", _backends())
@given(problem=problems(), limit=st.sampled_from([None, 4096, 0]))
def test_the_lazy_choice_is_the_eager_one(name, problem, limit):
    backend = backends.backend_for(np, name)
    problem = backend.prepare(problem, Operands())[0]
    limit = backend.default_workspace_limit() if limit is None else limit
    lazy, eager = choose_lazily(problem, backend, limit), _eager(problem, backend, limit)
    assert lazy.algorithm == eager.algorithm
    assert type(lazy.refusal) is type(eager.refusal)
    if eager.refusal is not None:
        assert lazy.refusal.args == eager.refusal.args
    head = [lazy.ranked[i] for i in range(min(len(eager.ranked), 1))]    # before reading all
    assert head == list(eager.ranked[:1])
    assert lazy.time_of(lazy.algorithm) == eager.time_of(eager.algorithm)
    assert list(lazy.ranked) == list(eager.ranked) and lazy.ranked == eager.ranked
    assert lazy.times == eager.times and list(lazy.times) == list(eager.times)
    assert lazy.rejected == eager.rejected and list(lazy.rejected) == list(eager.rejected)
    assert lazy.by_workspace == eager.by_workspace


@pytest.mark.parametrize("name", _backends())
def test_a_small_3x3_layer_never_prices_winograd(name, monkeypatch, restore_config):
    backend = backends.backend_for(np, name)
    asked = []
    entry = backend.algorithms["winograd"]
    for question in ("can_implement", "workspace", "min_workspace", "predict"):
        real = getattr(entry, question)
        monkeypatch.setattr(entry, question,
                            lambda *a, _real=real, **k: asked.append(1) or _real(*a, **k))
    dispatcher.clear_cache()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 9, 8)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    with cupyconv.use_backend(name):
        y = cupyconv.conv(x, w, padding=1)
        ref = cupyconv.conv(x, w, padding=1, method="direct")
    # float32 sums of 18 products: the chosen algorithm (gemm: BLAS's order) rounds
    # differently from the tap loop, within a few units of roundoff
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert not asked


def test_a_data_rule_weighs_a_settled_runner_up():
    """A winner with a data rule (separable) is settled with its runner-up, whose time
    its slack reads without pricing the rest."""
    backend = backends.backend_for(np, "numpy")
    problem = ConvProblem.create(x_shape=(1, 1, 256, 256), w_shape=(1, 1, 7, 7),
                                 padding=3, flip=True)
    lazy = choose_lazily(problem, backend, backend.default_workspace_limit())
    eager = _eager(problem, backend, backend.default_workspace_limit())
    assert lazy.algorithm == eager.algorithm == "separable"
    assert [lazy.ranked[0], lazy.ranked[1]] == list(eager.ranked[:2])
    assert lazy.time_of(eager.ranked[1]) == eager.times[eager.ranked[1]]
    assert lazy.ranked == eager.ranked
