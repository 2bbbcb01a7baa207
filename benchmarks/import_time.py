"""Import time of cupyconv against scipy.signal + scipy.ndimage, each in a fresh interpreter.

``python -m benchmarks.import_time [--rounds 9]``

Alternates the two imports ``--rounds`` times (each child times its own ``import``
statement with ``time.perf_counter``, so the interpreter's start-up is left out) and
prints min/median/max of each and the median of the per-round ratios.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

SUBJECTS = {"cupyconv": "import cupyconv", "scipy": "import scipy.signal, scipy.ndimage"}


def _seconds(statement):
    code = ("import time; t0 = time.perf_counter()\n" + statement
            + "\nprint(time.perf_counter() - t0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    opts = parser.parse_args(argv)
    times = {name: [] for name in SUBJECTS}
    for _ in range(opts.rounds):
        for name, statement in SUBJECTS.items():
            times[name].append(_seconds(statement))
    print("| import | min s | median s | max s |\n|---|---:|---:|---:|")
    for name, ts in times.items():
        print(f"| {SUBJECTS[name]} | {min(ts):.3f} | {statistics.median(ts):.3f} "
              f"| {max(ts):.3f} |")
    ratios = [a / b for a, b in zip(times["cupyconv"], times["scipy"])]
    print(f"\nratio cupyconv / scipy per round: median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
