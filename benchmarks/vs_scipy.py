"""Interleaved A/B timing: cupyconv ``auto`` vs ``scipy.signal`` ``auto`` (CPU).

``python -m benchmarks.vs_scipy [--quick] [--rounds 21]``

On a shared 2-core VM the speed of the machine drifts between measurements
by tens of percent, so timing all of one side and then all of the other
biases the ratio.  Here each round times cupyconv and scipy back to back
(alternating which goes first) on the same operands; the ratio reported is
the median of the per-round ratios, with the 25th-75th percentile range.
Cases: the ``cpu_scientific`` suite (ranks 2-5, kernels 3-15, single channel).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from cupyconv._bench.problems import cases
from cupyconv._bench.run import operands


def _once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(case, rounds):
    """``(median ratio scipy/ours, p25, p75, ours median s, scipy median s)``."""
    import scipy.signal as ss
    import cupyconv
    arrays = operands(case)
    a, b = arrays["in1"], arrays["in2"]
    ours = lambda: getattr(cupyconv, case.func)(a, b, case.mode)       # noqa: E731
    theirs = lambda: getattr(ss, case.func)(a, b, case.mode)           # noqa: E731
    ours(), theirs()                                                   # warm-up
    t_ours, t_theirs = [], []
    for i in range(rounds):
        first, second = (ours, theirs) if i % 2 == 0 else (theirs, ours)
        ta, tb = _once(first), _once(second)
        t_ours.append(ta if i % 2 == 0 else tb)
        t_theirs.append(tb if i % 2 == 0 else ta)
    ratios = np.array(t_theirs) / np.array(t_ours)
    return (float(np.median(ratios)), float(np.percentile(ratios, 25)),
            float(np.percentile(ratios, 75)), float(np.median(t_ours)),
            float(np.median(t_theirs)))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vs_scipy")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args(argv)
    print("| case | cupyconv auto (ms) | scipy auto (ms) | speed-up (median of rounds) | "
          "25-75% |")
    print("|---|---:|---:|---:|---|")
    ratios = []
    for case in cases("cpu_scientific", args.quick):
        r, lo, hi, to, ts = compare(case, args.rounds)
        ratios.append(r)
        print(f"| {case.name} | {to * 1e3:.2f} | {ts * 1e3:.2f} | {r:.2f}x | "
              f"{lo:.2f}-{hi:.2f} |", flush=True)
    print(f"\ngeometric mean {float(np.exp(np.mean(np.log(ratios)))):.2f}x, "
          f"worst {min(ratios):.2f}x over {len(ratios)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
