"""Interleaved A/B timing: ``cupyconv.ndimage`` vs ``scipy.ndimage`` (CPU, NumPy arrays).

``python -m benchmarks.ndimage_vs_scipy [--quick] [--rounds 9] [--json out.json]``

Each round times cupyconv and SciPy back to back on the same input (alternating which
goes first), so the drift of a shared machine cancels; the ratio reported is the median
of the per-round ratios ``t_scipy / t_cupyconv`` (above 1: cupyconv is faster), with the
25th-75th percentile range, and the geometric mean over the suite; the 1-minute load
average is printed before and after.  Every case first
checks that both give the same result (exactly for integer outputs).

Suite: 2-D, 3-D and 4-D images, float32/float64/uint8, with Gaussian
(``gaussian_filter``), box (``uniform_filter``) and random N-D kernels
(``correlate``/``convolve``), in several boundary modes; ``--derivatives``: the
derivative filters (``sobel``, ``prewitt``, ``laplace``, ``gaussian_laplace``,
``gaussian_gradient_magnitude``) on 1024^2 and 128^3 images
(docs/benchmarks/ndimage_speed.md).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

#: (name, shape, dtype, function, argument, keyword arguments)
CASES = [
    ("2-D gauss s=2", (1024, 1024), "float32", "gaussian_filter", 2.0, {}),
    ("2-D gauss s=2 f64", (1024, 1024), "float64", "gaussian_filter", 2.0, {}),
    ("2-D gauss s=3 u8", (1024, 1024), "uint8", "gaussian_filter", 3.0, {"mode": "nearest"}),
    ("2-D uniform 5", (1024, 1024), "float32", "uniform_filter", 5, {}),
    ("2-D uniform 9 u8", (1024, 1024), "uint8", "uniform_filter", 9, {"mode": "mirror"}),
    ("2-D random 5x5", (512, 512), "float64", "correlate", (5, 5), {}),
    ("2-D random 9x9", (512, 512), "float32", "convolve", (9, 9), {"mode": "wrap"}),
    ("3-D gauss s=1.5", (128, 128, 128), "float32", "gaussian_filter", 1.5, {}),
    ("3-D uniform 3", (128, 128, 128), "float64", "uniform_filter", 3, {"mode": "constant"}),
    ("3-D random 3^3", (96, 96, 96), "float32", "correlate", (3, 3, 3), {}),
    ("3-D random 5^3", (64, 64, 64), "float64", "correlate", (5, 5, 5), {"mode": "nearest"}),
    ("4-D gauss s=1", (32, 32, 32, 32), "float32", "gaussian_filter", 1.0, {}),
    ("4-D uniform 3", (32, 32, 32, 32), "float64", "uniform_filter", 3, {"mode": "wrap"}),
    ("4-D random 3^4", (24, 24, 24, 24), "float64", "correlate", (3, 3, 3, 3), {}),
    ("2-D gauss s=1 1d", (2048, 2048), "float32", "gaussian_filter1d", 1.0, {"axis": 0}),
]
#: The derivative filters (``--derivatives``); the argument ``None``: none after the input.
DERIVATIVES = [
    (f"{nd}-D {fn}{suffix}", shape, dtype, fn, arg, {})
    for nd, shape in ((2, (1024, 1024)), (3, (128, 128, 128)))
    for dtype, suffix in (("float32", ""), ("float64", " f64"))
    for fn, arg in (("sobel", 0), ("prewitt", -1), ("laplace", None),
                    ("gaussian_laplace", 1.5), ("gaussian_gradient_magnitude", 1.5))
] + [("3-D sobel u8", (128, 128, 128), "uint8", "sobel", 1, {})]
QUICK = {"2-D gauss s=2", "2-D uniform 5", "2-D random 5x5", "3-D gauss s=1.5",
         "4-D random 3^4"}


def _input(shape, dtype, rng):
    if np.dtype(dtype).kind == "u":
        return rng.integers(0, 256, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _call(module, func, x, arg, kw, rng_seed):
    fn = getattr(module, func)
    if func in ("correlate", "convolve"):
        w = np.random.default_rng(rng_seed).standard_normal(arg)
        return lambda: fn(x, w, **kw)
    if arg is None:
        return lambda: fn(x, **kw)
    return lambda: fn(x, arg, **kw)


def _load():
    """The 1-minute load average (``n/a`` where the OS does not report one)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "n/a"


def _once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(case, rounds, seed=0):
    """``dict`` of one case: per-round ratio median and quartiles, both medians."""
    import scipy.ndimage as sndi
    from cupyconv import ndimage as cndi
    name, shape, dtype, func, arg, kw = case
    x = _input(shape, dtype, np.random.default_rng(seed))
    ours, theirs = _call(cndi, func, x, arg, kw, seed), _call(sndi, func, x, arg, kw, seed)
    a, b = ours(), theirs()                                          # warm-up, and a check
    if a.dtype.kind in "iub":
        mismatch = int((a != b).sum())
    else:
        err = float(np.abs(a.astype(np.float64) - b).max())
        mismatch = int(err > 1e-4 * max(float(np.abs(b).max()), 1.0))
    t_ours, t_theirs = [], []
    for i in range(rounds):
        if i % 2:
            t_theirs.append(_once(theirs))
            t_ours.append(_once(ours))
        else:
            t_ours.append(_once(ours))
            t_theirs.append(_once(theirs))
    ratios = sorted(s / o for s, o in zip(t_theirs, t_ours))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return dict(name=name, shape=list(shape), dtype=dtype, func=func,
                ratio=statistics.median(ratios), p25=q[0], p75=q[2],
                ours_ms=1e3 * statistics.median(t_ours),
                scipy_ms=1e3 * statistics.median(t_theirs), mismatched=mismatch)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="five cases only")
    parser.add_argument("--derivatives", action="store_true",
                        help="the derivative filters' cases instead of the suite")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cases", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--json", help="write the results here")
    opts = parser.parse_args(argv)
    cases = [c for c in (DERIVATIVES if opts.derivatives else CASES)
             if (not opts.quick or c[0] in QUICK or opts.derivatives)
             and (not opts.cases or c[0] in opts.cases)]
    print(f"load average at the start: {_load()}")
    print(f"{'case':22s} {'dtype':8s} {'cupyconv ms':>12s} {'scipy ms':>10s} "
          f"{'scipy/ours':>10s} {'p25-p75':>13s}")
    rows = []
    for case in cases:
        r = compare(case, opts.rounds)
        rows.append(r)
        print(f"{r['name']:22s} {r['dtype']:8s} {r['ours_ms']:12.2f} {r['scipy_ms']:10.2f} "
              f"{r['ratio']:9.2f}x {r['p25']:6.2f}-{r['p75']:<6.2f}"
              + ("  RESULTS DIFFER" if r["mismatched"] else ""), flush=True)
    geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    worst = min(rows, key=lambda r: r["ratio"])
    print(f"geometric mean scipy/ours: {geo:.2f}x; lowest {worst['ratio']:.2f}x "
          f"({worst['name']})")
    print(f"load average at the end: {_load()}")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as fh:
            json.dump(dict(rows=rows, geomean=geo), fh, indent=1)
    return 0 if not any(r["mismatched"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
