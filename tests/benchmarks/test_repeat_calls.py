"""The repeated-calls benchmark (benchmarks/repeat_calls.py): its worker times each call
and the training step and counts page faults per call, and each side runs the worker in
a process of its own."""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # the repo root

from benchmarks import repeat_calls  # noqa: E402

#: One small layer in place of the benchmark's 4-D and 5-D ones.
SMALL = [("2-D 12^2, 2->3, k3", (1, 2, 12, 12), (3, 2, 3, 3), dict(padding=1))]


def test_the_worker_gives_time_and_faults_of_every_call(monkeypatch):
    monkeypatch.setattr(repeat_calls, "CASES", SMALL)
    rows = repeat_calls.worker(2)
    assert set(rows) == {SMALL[0][0]}
    assert set(rows[SMALL[0][0]]) == set(repeat_calls.CALLS)
    for ms, faults in rows[SMALL[0][0]].values():
        assert ms >= 0 and faults >= 0


def test_a_side_runs_the_worker_in_a_process_of_its_own():
    rows = repeat_calls.side(repeat_calls.ROOT, 1)
    assert set(rows) == {case[0] for case in repeat_calls.CASES}
