"""The graph-replay device step (issue 24 part 3): scripts/device_check.sh runs
benchmarks/graph_replay.py within its limit and writes its JSON under $OUT; the cases it
times are compiled calls of several steps (so a GPU run can graph them)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import cupyconv
from benchmarks import graph_replay
from cupyconv.backends.cuda import graphs

ROOT = Path(__file__).resolve().parents[2]


def test_device_check_runs_the_graph_replay_step():
    script = (ROOT / "scripts" / "device_check.sh").read_text()
    steps = dict((s[0], s[1:]) for s in re.findall(r"^step (\S+) (\d+) (.*)$", script,
                                                  flags=re.M))
    limit, command = steps["graph-replay"]
    assert int(limit) <= 30 and "-m benchmarks.graph_replay --out \"$OUT\"" in command
    assert "graph_replay.json" in script


def test_the_timed_cases_have_several_device_steps(rng):
    """The benchmark's cases on NumPy arrays through the emulated runner: each compiles to
    programs of at least two device steps (what :func:`graphs.graphed` requires)."""
    if "emulated" not in cupyconv.available_backends():
        return
    small = rng.standard_normal((9, 8, 7)).astype(np.float32)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    with cupyconv.use_backend("emulated"):
        for call, find in (graph_replay._gaussian(small), graph_replay._gemm(x, w)):
            call()
            call()                          # the second call with a key compiles
            assert graphs.device_steps(find().programs) >= 2
