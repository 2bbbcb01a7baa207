"""Benchmark runner: ``python -m cupyconv bench [--suite NAME] [--quick]``.

Every figure is a ratio against a peer measured in the same run, plus the
achieved FLOP/s from counted work.  Writes ``<out>/<suite>.json`` and
``<out>/<suite>.md``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

import numpy as np

from .problems import SUITES, cases
from .timing import time_cpu

__all__ = ["main", "run_signal_case"]

#: Forced methods predicted to take longer than this are not timed.
SKIP_PREDICTED_S = 5.0


def _git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def _operands(case, rng):
    dt = np.dtype(case["dtype"])
    def draw(shape):
        a = rng.standard_normal(shape)
        if dt.kind == "c":
            a = a + 1j * rng.standard_normal(shape)
        return a.astype(dt)
    return draw(case["shape"]), draw(case["kernel"])


def run_signal_case(case, rng, repeat=5):
    """Time cupyconv (auto and each method) and scipy (auto) on one case."""
    import scipy.signal as ss
    import cupyconv
    from cupyconv import _dispatch, _select
    from cupyconv._signal import _SignalCall
    a, b = _operands(case, rng)
    ours = getattr(cupyconv, case["func"])
    theirs = getattr(ss, case["func"])
    mode = case["mode"]
    call = _SignalCall(a, b, mode, None, correlate=case["func"] == "correlate")
    problem = call.problem
    predicted = _select.predict_times(problem)
    chosen = _dispatch.select_algorithm(problem, call.x, call.w)
    row = dict(case=case["name"], flops=problem.flops, auto_choice=chosen,
               predicted_s=predicted)
    row["scipy_auto_s"] = time_cpu(lambda: theirs(a, b, mode), repeat=repeat, budget=10)
    row["scipy_choice"] = ss.choose_conv_method(a, b, mode)
    row["auto_s"] = time_cpu(lambda: ours(a, b, mode), repeat=repeat, budget=10)
    methods = {}
    for name in ("direct", "gemm", "fft"):
        if predicted.get(name, 0) > SKIP_PREDICTED_S and name != chosen:
            continue
        methods[name] = time_cpu(lambda: ours(a, b, mode, method=name), repeat=3,
                                 budget=5)
    row["method_s"] = methods
    row["fastest"] = min(methods, key=methods.get)
    row["speedup_vs_scipy"] = row["scipy_auto_s"] / row["auto_s"]
    row["gflops"] = problem.flops / row["auto_s"] / 1e9
    ref = theirs(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64),
                 b.astype(np.complex128 if b.dtype.kind == "c" else np.float64), mode)
    got = ours(a, b, mode)
    row["rel_err"] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    return row


def _markdown(suite, rows, meta):
    lines = [f"# Benchmark `{suite}` ({meta['backend']})", "",
             f"{meta['date']}, commit `{meta['commit']}`, {meta['machine']}. "
             f"Command: `{meta['command']}`.", "",
             "| case | scipy auto (ms) | cupyconv auto (ms) | speed-up vs scipy | "
             "auto chose / fastest | scipy chose | GFLOP/s | rel. err |",
             "|---|---:|---:|---:|---|---|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['scipy_auto_s'] * 1e3:.1f} | {r['auto_s'] * 1e3:.1f} | "
            f"{r['speedup_vs_scipy']:.2f}x | {r['auto_choice']} / {r['fastest']} | "
            f"{r['scipy_choice']} | {r['gflops']:.1f} | {r['rel_err']:.1e} |")
    ratios = [r["speedup_vs_scipy"] for r in rows]
    lines += ["", f"Geometric-mean speed-up vs scipy: "
              f"{float(np.exp(np.mean(np.log(ratios)))):.2f}x; worst case {min(ratios):.2f}x; "
              f"auto picked the fastest measured method in "
              f"{sum(r['auto_choice'] == r['fastest'] for r in rows)}/{len(rows)} cases.", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m cupyconv bench")
    parser.add_argument("--suite", default="cpu_scientific", choices=sorted(SUITES))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join("docs", "benchmarks"))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    print("the CPU suite: cupyconv's NumPy backend against scipy.signal (no GPU here)"
          if args.suite.startswith("cpu") else f"suite {args.suite}")
    for case in cases(args.suite, args.quick):
        row = run_signal_case(case, rng, repeat=args.repeat)
        rows.append(row)
        print(f"  {row['case']:50s} scipy {row['scipy_auto_s'] * 1e3:8.1f} ms  "
              f"ours {row['auto_s'] * 1e3:8.1f} ms  x{row['speedup_vs_scipy']:.2f}  "
              f"({row['auto_choice']}; fastest {row['fastest']})", flush=True)
    meta = dict(suite=args.suite, quick=args.quick, backend="numpy",
                date=datetime.date.today().isoformat(), commit=_git_commit(),
                machine=f"{platform.machine()} {os.cpu_count()} cores, "
                        f"Python {platform.python_version()}, NumPy {np.__version__}",
                command="python -m cupyconv bench --suite " + args.suite
                        + (" --quick" if args.quick else ""))
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, args.suite + ("_quick" if args.quick else ""))
    with open(stem + ".json", "w") as fh:
        json.dump(dict(meta=meta, rows=rows), fh, indent=1)
    with open(stem + ".md", "w") as fh:
        fh.write(_markdown(args.suite, rows, meta))
    print(f"wrote {stem}.json and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
