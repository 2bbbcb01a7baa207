"""benchmarks/auto_vs_fastest.py's sampling: each method's repeats are sized on a warm
call (``auto``'s first call prices and plans, ~4 ms, which once made its samples a
single call, read as 10-20% of dispatch on a 0.07 ms problem), and the order of the
methods turns each round.  A stand-in ``dispatch.run`` records the calls; nothing is
timed but its sleep."""
from __future__ import annotations

import pathlib
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repo root

from benchmarks import auto_vs_fastest  # noqa: E402

import cupyconv.dispatch  # noqa: E402

ROW = [("2-D 8^2 3x3", (1, 1, 8, 8), (1, 1, 3, 3), 1, "constant")]


@pytest.fixture
def calls(monkeypatch):
    """``dispatch.run`` as a recorder: ``auto``'s first call sleeps 20 ms (pricing),
    ``separable`` and ``winograd`` are refused, the rest return at once."""
    made = []

    def fake_run(problem, operands, backend, method="auto"):
        if method in ("separable", "winograd"):
            raise ValueError("refused")
        if method == "auto" and "auto" not in made:
            time.sleep(0.02)
        made.append(method)
        return None, "direct" if method == "auto" else method
    monkeypatch.setattr(cupyconv.dispatch, "run", fake_run)
    return made


def test_repeats_are_sized_on_a_warm_call(calls):
    rounds = 3
    (name, chosen, best, auto), = auto_vs_fastest.measure(rounds, ROW)
    assert chosen == "direct" and set(best) == {"direct", "gemm", "fft"}
    # warm-up, sizing call, then per round one untimed call and a full sample of 100
    assert calls.count("auto") == 2 + rounds * (1 + 100)
    assert calls.count("auto") == calls.count("direct")


def test_the_order_of_methods_turns_each_round(calls):
    rounds = 4
    auto_vs_fastest.measure(rounds, ROW)
    timed = calls[2 * 4:]                        # after each method's two first calls
    firsts = [timed[i * 4 * 101] for i in range(rounds)]
    assert firsts == ["auto", "direct", "gemm", "fft"]
