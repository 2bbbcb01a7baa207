"""``auto`` against the fastest method on the CPU over a fixed grid.

``python -m benchmarks.auto_vs_fastest [--rounds 5] [--cpu-time] [--only TEXT]``

Each row is one problem as the dispatcher runs it (``dispatch.run``, the path every
public function takes): single-channel ``convolve(mode="same")`` from 1-D to 4-D with
kernels of 3 to 31 taps per axis, ``ndimage.convolve``'s mirrored boundary, and
channelled layers (``conv``, 3 to 64 channels, depthwise).  Every method that can run
the problem and ``auto`` are timed alternately, ``--rounds`` rounds, their order
turning by one each round (no method always follows the same one), each the least of
its rounds (the machine's other load only ever adds; a sample repeats a call that
takes under :data:`SAMPLE_S` enough times to last about that long, the count sized on
a second, warm call, since ``auto``'s first prices and plans; each sample follows one
untimed call: each method is timed warm, as repeated calls run); ``auto / fastest``
is the ratio of those, ``choice / fastest`` that of the method ``auto`` ran, timed
alone, to the fastest (the choice without ``auto``'s few microseconds of dispatch and
with the noise of one measurement fewer).  The goal (issue 35): every row within 1.2x, geometric mean at most 1.05x.
``--cpu-time`` times by the process's CPU time instead of the wall clock, which a shared
machine's other processes inflate; run it on one core (``taskset -c 0``): ``auto``
then plans for one core too (the cost model spreads work over the usable cores).
Random kernels: ``separable`` is refused by its data check and ``auto`` runs the next.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

#: (name, x shape, w shape, groups, padding mode); float32; padding keeps the size
GRID = [
    ("1-D 65536 k3", (1, 1, 65536), (1, 1, 3), 1, "constant"),
    ("1-D 65536 k31", (1, 1, 65536), (1, 1, 31), 1, "constant"),
    ("2-D 256^2 3x3", (1, 1, 256, 256), (1, 1, 3, 3), 1, "constant"),
    ("2-D 512^2 3x3", (1, 1, 512, 512), (1, 1, 3, 3), 1, "constant"),
    ("2-D 256^2 7x7", (1, 1, 256, 256), (1, 1, 7, 7), 1, "constant"),
    ("2-D 256^2 15x15", (1, 1, 256, 256), (1, 1, 15, 15), 1, "constant"),
    ("2-D 128^2 31x31", (1, 1, 128, 128), (1, 1, 31, 31), 1, "constant"),
    ("3-D 64^3 3^3", (1, 1, 64, 64, 64), (1, 1, 3, 3, 3), 1, "constant"),
    ("3-D 48^3 7^3", (1, 1, 48, 48, 48), (1, 1, 7, 7, 7), 1, "constant"),
    ("4-D 16^4 3^4", (1, 1, 16, 16, 16, 16), (1, 1, 3, 3, 3, 3), 1, "constant"),
    ("4-D 12^4 5^4", (1, 1, 12, 12, 12, 12), (1, 1, 5, 5, 5, 5), 1, "constant"),
    ("ndimage 2-D 512^2 5x5", (1, 1, 512, 512), (1, 1, 5, 5), 1, "symmetric"),
    ("ndimage 3-D 64^3 3^3", (1, 1, 64, 64, 64), (1, 1, 3, 3, 3), 1, "symmetric"),
    ("1-D 64->64 1024 k5 N4", (4, 64, 1024), (64, 64, 5), 1, "constant"),
    ("2-D 3->32 64^2 3x3 N2", (2, 3, 64, 64), (32, 3, 3, 3), 1, "constant"),
    ("2-D 16->16 32^2 3x3 N4", (4, 16, 32, 32), (16, 16, 3, 3), 1, "constant"),
    ("2-D 64->64 28^2 3x3 N2", (2, 64, 28, 28), (64, 64, 3, 3), 1, "constant"),
    ("2-D depthwise 32ch 56^2 3x3 N2", (2, 32, 56, 56), (32, 1, 3, 3), 32, "constant"),
    ("3-D 8->8 24^3 3^3 N2", (2, 8, 24, 24, 24), (8, 8, 3, 3, 3), 1, "constant"),
    ("4-D 4->4 10^4 3^4", (1, 4, 10, 10, 10, 10), (4, 4, 3, 3, 3, 3), 1, "constant"),
]
#: Seconds a timed sample lasts at least (short calls are repeated within it).
SAMPLE_S = 5e-3
#: The methods timed besides auto (implicit_gemm is direct's tap loop on the CPU).
METHODS = ("direct", "gemm", "fft", "separable", "winograd")


def _case(xs, ws, groups, mode):
    from cupyconv.core import ConvProblem
    from cupyconv.core.problem import Operands
    rng = np.random.default_rng(0)
    problem = ConvProblem.create(x_shape=xs, w_shape=ws, groups=groups,
                                 padding=[k // 2 for k in ws[2:]], padding_mode=mode,
                                 dtype=np.float32)
    ops = Operands(activation=rng.standard_normal(xs).astype(np.float32),
                   filter=rng.standard_normal(ws).astype(np.float32))
    return problem, ops


def measure(rounds, rows=GRID, clock=time.perf_counter):
    """``[(name, auto's algorithm, {method: seconds}, auto seconds)]`` (least of
    ``rounds`` per method, methods alternating within each round, timed by ``clock``)."""
    from cupyconv.dispatch import backend_for, run
    backend = backend_for(np)
    out = []
    for name, xs, ws, groups, mode in rows:
        problem, ops = _case(xs, ws, groups, mode)
        calls, repeats = {}, {}
        for m in ("auto",) + METHODS:
            call = (lambda m=m: run(problem, ops, backend, method=m))
            try:
                _, ran = call()                    # warm-up (and refusals)
            except (ValueError, MemoryError):
                continue
            t0 = time.perf_counter()
            call()                # warm: the first call prices and plans (auto: ~4 ms)
            once = time.perf_counter() - t0
            if m == "auto":
                chosen = ran
            calls[m], repeats[m] = call, max(1, min(100, int(SAMPLE_S / max(once, 1e-6))))
        best = {m: math.inf for m in calls}
        names = list(calls)
        for r in range(rounds):
            # the order turns by one each round: no method always follows the same one
            for m in names[r % len(names):] + names[:r % len(names)]:
                call = calls[m]
                call()           # untimed: the previous method's buffers and cache left
                t0 = clock()
                for _ in range(repeats[m]):
                    call()
                best[m] = min(best[m], (clock() - t0) / repeats[m])
        auto = best.pop("auto")
        out.append((name, chosen, best, auto))
    return out


def table(results):
    """The markdown table and the summary line."""
    lines = ["| case | auto ran | auto ms | fastest | fastest ms | auto / fastest | "
             "choice / fastest | " + " | ".join(f"{m} ms" for m in METHODS) + " |",
             "|---|---|---:|---|---:|---:|---:|" + "---:|" * len(METHODS)]
    ratios, choices = [], []
    for name, chosen, best, auto in results:
        fastest = min(best, key=best.get)
        ratio = auto / best[fastest]
        choice = best.get(chosen, auto) / best[fastest]
        ratios.append(ratio)
        choices.append(choice)
        flag = " **misses 1.2x**" if ratio > 1.2 else ""
        cells = " | ".join(f"{1e3 * best[m]:.3g}" if m in best else "-" for m in METHODS)
        lines.append(f"| {name} | {chosen} | {1e3 * auto:.3g} | {fastest} | "
                     f"{1e3 * best[fastest]:.3g} | {ratio:.2f}{flag} | {choice:.2f} | "
                     f"{cells} |")
    lines.append("")
    for what, values in (("auto / fastest", ratios), ("choice / fastest", choices)):
        geo = math.exp(sum(map(math.log, values)) / len(values))
        lines.append(f"geometric mean {what} {geo:.3f}; worst {max(values):.2f}; "
                     f"{sum(r > 1.2 for r in values)} of {len(values)} rows over 1.2x")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=None, help="rows whose name contains this")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by process CPU time (a loaded machine; one core)")
    opts = parser.parse_args(argv)
    from cupyconv.backends.numpy.threads import workers
    if opts.cpu_time and workers() > 1:
        parser.error("--cpu-time measures one core: run it under taskset -c 0")
    rows = [r for r in GRID if opts.only is None or opts.only in r[0]]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = measure(opts.rounds, rows,
                      time.process_time if opts.cpu_time else time.perf_counter)
    after = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"{started}; load average before {load[0]:.2f}, after {after[0]:.2f}; "
          f"{opts.rounds} rounds; float32; "
          f"{'process CPU time, one core' if opts.cpu_time else 'wall clock'}\n"
          if load else "")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
