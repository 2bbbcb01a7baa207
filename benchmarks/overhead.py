"""Per-call overhead on tiny problems, against SciPy in the same run (NumPy backend).

``python -m benchmarks.overhead [--rounds N] [--out FILE.md]``

For each tiny ``convolve`` the median per-call time of ``cupyconv.convolve``
and of ``scipy.signal.convolve`` (both ``method="auto"``), timed in
alternating order round by round, and their ratio (goal: <= 1.3, issue 24: a repeated
call is a compiled call, its host program (the tap loop, SciPy's FFT on one signal)
replayed without the dispatcher while ``auto``'s decisions on the data come out the
same), with the normal path (``config.compiled_calls`` off) timed in the same rounds and
what the call replays (``path``).  The load average is printed with the table.  For a
planned 8->8 channel 16x16 ``conv`` the median time of ``plan(x, w)``
against the bare algorithm (the backend's ``run`` on prepared channels-first
views, what a plan cannot avoid), and their difference (goal: <= 15 us).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit

import numpy as np
import scipy.signal

import cupyconv
from cupyconv import config
from cupyconv.api.compiled import CompiledCall, lookup
from cupyconv.core.problem import Operands
from cupyconv.dispatch import backend_for

CASES = [((64,), (3,)), ((4096,), (31,)), ((32, 32), (3, 3)), ((16, 16, 16), (3, 3, 3))]


def per_call(fn, seconds=0.05):
    """Seconds per call: ``timeit`` over enough calls to last about ``seconds``."""
    n, _ = timeit.Timer(fn).autorange()
    n = max(1, int(n * seconds / 0.2))
    return timeit.Timer(fn).timeit(n) / n


def interleaved(*fns, rounds):
    """Medians of per-call times of each of ``fns``, the order rotated round by round."""
    times = [[] for _ in fns]
    for r in range(rounds):
        for i in range(len(fns)):
            j = (i + r) % len(fns)
            times[j].append(per_call(fns[j]))
    return tuple(statistics.median(t) for t in times)


def _normal_path(fn):
    def run():
        config.compiled_calls = False
        try:
            return fn()
        finally:
            config.compiled_calls = True
    return run


def _path(a, k):
    """What a repeated ``convolve(a, k)`` runs: the compiled call's programs, or the normal
    path and why."""
    cupyconv.convolve(a, k)
    cupyconv.convolve(a, k)                 # the second call with a key compiles
    entry = lookup(cupyconv.convolve, a, k)
    if isinstance(entry, CompiledCall):
        return "compiled: " + " + ".join(p.name for p in entry.programs)
    return f"normal: {getattr(entry, 'reason', entry)}"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.overhead")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--out", help="also write the markdown table here")
    opts = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"load average at the start: {load:.2f}", "",
             "| call | cupyconv (us) | peer (us) | ratio / difference | goal | met | "
             "normal path (us) | path |",
             "|---|---:|---:|---:|---|---|---:|---|"]
    for s1, s2 in CASES:
        a, k = rng.standard_normal(s1), rng.standard_normal(s2)
        path = _path(a, k)
        ours, scipys, normal = interleaved(
            lambda: cupyconv.convolve(a, k), lambda: scipy.signal.convolve(a, k),
            _normal_path(lambda: cupyconv.convolve(a, k)), rounds=opts.rounds)
        ratio = ours / scipys
        lines.append(f"| convolve {s1}*{s2} (auto: {cupyconv.choose_conv_method(a, k)}) | "
                     f"{ours * 1e6:.1f} | {scipys * 1e6:.1f} (scipy.signal.convolve) | "
                     f"{ratio:.2f}x | <= 1.3x | {'yes' if ratio <= 1.3 else 'no'} | "
                     f"{normal * 1e6:.1f} | {path} |")
    x = rng.standard_normal((1, 8, 16, 16))
    w = rng.standard_normal((8, 8, 3, 3))
    plan = cupyconv.plan_conv(x.shape, w.shape, np.float64, padding=1, backend="numpy")
    backend = backend_for(np, "numpy")
    operands = Operands(activation=x, filter=w)          # channels-first already

    def bare():
        return backend.run(plan.problem, plan.algorithm, operands, plan.choice.limit)
    planned, bare_t = interleaved(lambda: plan(x, w), bare, rounds=opts.rounds)
    diff = planned - bare_t
    lines.append(f"| plan(x, w), 8->8 channels 16x16, 3x3 ({plan.algorithm}) | "
                 f"{planned * 1e6:.1f} | {bare_t * 1e6:.1f} (bare {plan.algorithm}) | "
                 f"+{diff * 1e6:.1f} us | <= +15 us | {'yes' if diff <= 15e-6 else 'no'} | | |")
    table = "\n".join(lines)
    print(table)
    if opts.out:
        with open(opts.out, "w") as fh:
            fh.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
