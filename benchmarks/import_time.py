"""Import time of cupyconv against scipy.signal + scipy.ndimage, each in a fresh interpreter.

``python -m benchmarks.import_time [--rounds 9] [--as-environment]``

Alternates the two imports ``--rounds`` times (each child times its own ``import``
statement with ``time.perf_counter`` and ``time.process_time``, so the interpreter's
start-up is left out) and prints min/median/max of the wall time of each, the median of
its CPU time, the median of the per-round ratios of both, and the load average before
and after.  On a shared machine the CPU-time ratio is the steadier one: other processes
stretch the wall time of a child, not the CPU time it spends importing.

Both sides import from a warm bytecode cache, as an installed package does (pip writes
``.pyc`` files at install): the children share a temporary ``PYTHONPYCACHEPREFIX``,
filled by one untimed import of each first.  Without that, an environment with
``PYTHONDONTWRITEBYTECODE=1`` and a source checkout compiles every cupyconv module at
every import while SciPy reads its installed bytecode; ``--as-environment`` measures that
case (the children inherit the environment unchanged, no warm-up).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

SUBJECTS = {"cupyconv": "import cupyconv", "scipy": "import scipy.signal, scipy.ndimage"}


def import_seconds(statement, env):
    """``(wall, cpu)`` seconds ``statement`` takes in a fresh interpreter of environment
    ``env`` (``None``: this one's), as the child times it."""
    code = ("import time; t0, c0 = time.perf_counter(), time.process_time()\n" + statement
            + "\nprint(time.perf_counter() - t0, time.process_time() - c0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def cached_env(cache):
    """The environment of a child that reads and writes bytecode under ``cache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    return env


def _rounds(rounds, env):
    """``{name: [(wall, cpu) seconds per round]}``, the subjects alternated."""
    times = {name: [] for name in SUBJECTS}
    for _ in range(rounds):
        for name, statement in SUBJECTS.items():
            times[name].append(import_seconds(statement, env))
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--as-environment", action="store_true",
                        help="inherit the environment's bytecode settings; no warm-up")
    opts = parser.parse_args(argv)
    load = os.getloadavg()[0]
    if opts.as_environment:
        times = _rounds(opts.rounds, None)
    else:
        with tempfile.TemporaryDirectory(prefix="import-time-pyc-") as cache:
            env = cached_env(cache)
            _rounds(1, env)                                 # fills the bytecode cache
            times = _rounds(opts.rounds, env)
    print("| import | min s | median s | max s | median CPU s |\n|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        wall = [w for w, _ in ts]
        print(f"| {SUBJECTS[name]} | {min(wall):.3f} | {statistics.median(wall):.3f} "
              f"| {max(wall):.3f} | {statistics.median(c for _, c in ts):.3f} |")
    print()
    for i, kind in enumerate(("wall", "CPU")):
        ratios = [a[i] / b[i] for a, b in zip(times["cupyconv"], times["scipy"])]
        print(f"ratio cupyconv / scipy per round, {kind} time: median "
              f"{statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})")
    print(f"load average (1 min) before {load:.2f}, after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
