"""``print(plan)`` and ``plan.explain()`` say, in a user's words, what runs where and
whether a repeated call replays (no internal names as the first words)."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv import config


@pytest.mark.parametrize("backend, where", [("numpy", "the CPU (NumPy)"),
                                            ("emulated", "the CPU emulator of the CUDA kernels")])
def test_explain_names_the_algorithm_and_where_it_runs(backend, where):
    if backend not in cupyconv.available_backends():
        pytest.skip(f"backend {backend!r} is not available here")
    plan = cupyconv.plan_conv((1, 2, 6, 6), (3, 2, 3, 3), np.float32, padding=1,
                              method="direct", backend=backend)
    assert plan.explain().startswith(f"runs direct on {where}; repeated calls replay, from "
                                     "the third call with the same arrays")
    x, w = np.ones((1, 2, 6, 6), np.float32), np.ones((3, 2, 3, 3), np.float32)
    plan(x, w)                                 # noted: the next call records
    assert "repeated calls replay, from the third call" in plan.explain()
    plan(x, w)
    assert plan.explain().startswith(f"runs direct on {where}; repeated calls replay (")


def test_explain_says_when_every_call_dispatches_again(monkeypatch):
    plan = cupyconv.plan_conv((1, 2, 6, 6), (3, 2, 3, 3), np.float32, padding=1,
                              backend="numpy")
    monkeypatch.setattr(config, "compiled_calls", False)
    assert plan.explain() == (f"runs {plan.algorithm} on the CPU (NumPy); every call is "
                              "checked and dispatched again (cupyconv.config.compiled_calls "
                              "is off)")


def test_print_plan_shows_problem_path_fallbacks_and_cost():
    plan = cupyconv.plan_conv((1, 1, 256, 256), (1, 1, 31, 31), np.float32, backend="numpy")
    assert plan.algorithm == "fft"          # data rules: the fallbacks are printed
    lines = str(plan).splitlines()
    assert lines[0] == ("ConvPlan: 2-D conv, x(1, 1, 256, 256) * w(1, 1, 31, 31) -> "
                        "y(1, 1, 226, 226), float32")
    assert lines[1] == "  " + plan.explain().splitlines()[0]
    assert lines[2].startswith("  fft if the data are finite")
    assert lines[-1].startswith("  extra memory ") and "FLOPs" in lines[-1]
    assert repr(plan).startswith("ConvPlan(2-D conv")       # the repr stays one line
