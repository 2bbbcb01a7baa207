"""The NumPy backend's calls repeated on the same shapes in a plain process, against a
previous commit.

``python -m benchmarks.repeat_calls [--baseline REF] [--rounds 15] [--alternations 2]``

A training loop or a filter applied frame after frame calls ``conv`` and its gradients
over and over with the same shapes.  Per case (the 4-D and 5-D layers of
``benchmarks/torch_layers.py``, float32), a worker process with only NumPy and cupyconv
imported (no torch: its allocations change glibc's heap) times, on the process's CPU
clock, ``conv``, ``conv_grad_input`` and ``conv_grad_weight`` each called ``--rounds``
times in a row after three untimed calls, then the three in turn (a training step), and
counts the page faults per call (``ru_minflt``).  With ``--baseline REF`` the same worker
runs with git ``REF``'s package (:func:`benchmarks.baseline_tree.baseline_tree`), the two
sides taking turns ``--alternations`` times; each figure is the median of its side's turns.
``taskset -c 1`` compares one core with one core.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from .baseline_tree import baseline_tree

#: (name, x shape, w shape, geometry): torch_layers' 4-D and 5-D layers.
CASES = [
    ("4-D 10^4, 4->8, k3", (2, 4, 10, 10, 10, 10), (8, 4, 3, 3, 3, 3), dict(padding=1)),
    ("4-D 12^4, 8->8, k3", (1, 8, 12, 12, 12, 12), (8, 8, 3, 3, 3, 3), dict(padding=1)),
    ("4-D 14^4, 4->4, k3 s2", (2, 4, 14, 14, 14, 14), (4, 4, 3, 3, 3, 3),
     dict(padding=1, stride=2)),
    ("5-D 7^5, 4->4, k3", (1, 4, 7, 7, 7, 7, 7), (4, 4, 3, 3, 3, 3, 3), dict(padding=1)),
]
CALLS = ("conv", "grad_input", "grad_weight", "step")
#: This checkout (its ``cupyconv``, and this module for the workers).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(rounds):
    """This process's rows: ``{case: {call: [median ms, faults per call]}}``."""
    import resource
    import time

    import numpy as np

    import cupyconv

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    rows = {}
    rng = np.random.default_rng(0)
    for name, xs, ws, geo in CASES:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        dy = rng.standard_normal(cupyconv.conv(x, w, **geo).shape).astype(np.float32)
        calls = {"conv": lambda: cupyconv.conv(x, w, **geo),
                 "grad_input": lambda: cupyconv.conv_grad_input(dy, w, x.shape, **geo),
                 "grad_weight": lambda: cupyconv.conv_grad_weight(x, dy, w.shape, **geo)}
        calls["step"] = lambda: [f() for f in list(calls.values())[:3]]
        rows[name] = {}
        for call in CALLS:
            for _ in range(3):
                calls[call]()
            times, before = [], faults()
            for _ in range(rounds):
                t0 = time.process_time()
                calls[call]()
                times.append(time.process_time() - t0)
            rows[name][call] = [1e3 * statistics.median(times), (faults() - before) / rounds]
    return rows


def side(tree, rounds):
    """One worker process's rows with the package of ``tree`` (its directory first on
    the path; :data:`ROOT` after it, for this module)."""
    code = (f"import json, sys; sys.path.insert(1, {ROOT!r}); "
            f"from benchmarks.repeat_calls import worker; print(json.dumps(worker({rounds})))")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=tree),
                         capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(turns, name, call):
    return [statistics.median(t[name][call][i] for t in turns) for i in (0, 1)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="git commit to time against")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--alternations", type=int, default=2)
    opts = ap.parse_args(argv)
    base, commit = baseline_tree(opts.baseline) if opts.baseline else (None, None)
    ours, theirs = [], []
    try:
        for _ in range(opts.alternations if base else 1):
            ours.append(side(ROOT, opts.rounds))
            if base:
                theirs.append(side(base, opts.rounds))
    finally:
        if base:
            shutil.rmtree(base, ignore_errors=True)
    head = "| case | call | ms | faults per call |"
    if base:
        head += f" {commit} ms | {commit} faults | ms / {commit} |"
    print(head + "\n|" + "---|" * (head.count("|") - 1))
    for name, *_ in CASES:
        for call in CALLS:
            ms, flt = _median(ours, name, call)
            line = f"| {name} | {call} | {ms:.2f} | {flt:.0f} |"
            if base:
                bms, bflt = _median(theirs, name, call)
                line += f" {bms:.2f} | {bflt:.0f} | {ms / bms:.2f} |"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
