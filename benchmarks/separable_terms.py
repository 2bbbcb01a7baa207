"""Kernels that are a short sum of outer products: ``separable`` with several terms (CPU).

``python -m benchmarks.separable_terms [--rounds 5]``

A difference of Gaussians (sigma 1 and 2, radius 3: 7 taps per axis) is two outer
products, found as two terms in every rank (``separable_factors.low_rank``: the SVD in
2-D, Jennrich's decomposition from 3-D up).
Per case, same run, median milliseconds of ``auto`` (and what it chose),
``method="separable"`` (the terms), ``fft`` and ``direct``, first on normal data, then
with one NaN (the FFT is out: ``auto`` chooses between the terms and ``direct``).  The
accuracy table compares, on smaller arrays, the relative-norm error of ``separable`` and
of ``direct`` against a ``longdouble`` direct reference (float64 and float32 data).
"""
from __future__ import annotations

import argparse
import sys
from functools import reduce

import numpy as np

from .separable_cpu import _median_ms

#: (rank, array extent for timing, array extent for the error)
CASES = ((2, 1024, 128), (3, 96, 24), (4, 32, 12))


def dog(ndim):
    from cupyconv.ndimage.filters import gaussian_kernel1d
    parts = [reduce(np.multiply.outer, [gaussian_kernel1d(s, 0, 3)] * ndim) for s in (1.0, 2.0)]
    return parts[0] - parts[1]


def _rel(y, ref):
    ref = ref.astype(np.float64)
    return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref))


def main(argv=None):
    import cupyconv
    from cupyconv.backends.separable_factors import low_rank
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print("| case | dtype | data | terms | auto ms (chose) | separable ms | fft ms | direct ms |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for nd, n, _ in CASES:
        for dtype in (np.float32, np.float64):
            k = dog(nd).astype(dtype)
            terms = len(low_rank(k, dtype)[0])
            x = rng.standard_normal((n,) * nd).astype(dtype)
            nan = x.copy()
            nan[(n // 2,) * nd] = np.nan
            for label, a in (("finite", x), ("one NaN", nan)):
                chosen = cupyconv.choose_algorithm(a, k, "same")
                t = {m: _median_ms(lambda: cupyconv.convolve(a, k, "same", method=m), opts.rounds)
                     for m in ("auto", "separable")}
                t["fft"] = (_median_ms(lambda: cupyconv.convolve(a, k, "same", method="fft"),
                                       opts.rounds) if label == "finite" else float("nan"))
                t["direct"] = _median_ms(lambda: cupyconv.convolve(a, k, "same", method="direct"),
                                         1 if nd == 4 else opts.rounds)
                print(f"| {nd}-D {n}^{nd} * 7^{nd} DoG | {np.dtype(dtype).name} | {label} | "
                      f"{terms} | {t['auto']:.1f} ({chosen}) | {t['separable']:.1f} | "
                      f"{t['fft']:.1f} | {t['direct']:.1f} |", flush=True)
    print()
    print("| case | dtype | separable rel. error | direct rel. error |")
    print("|---|---|---:|---:|")
    for nd, _, m in CASES:
        k = dog(nd)
        x = rng.standard_normal((m,) * nd)
        ref = cupyconv.convolve(x.astype(np.longdouble), k.astype(np.longdouble), "same",
                                method="direct")
        for dtype in (np.float32, np.float64):
            a, kk = x.astype(dtype), k.astype(dtype)
            sep = _rel(cupyconv.convolve(a, kk, "same", method="separable"), ref)
            direct = _rel(cupyconv.convolve(a, kk, "same", method="direct"), ref)
            print(f"| {nd}-D {m}^{nd} * 7^{nd} DoG | {np.dtype(dtype).name} | {sep:.2e} | "
                  f"{direct:.2e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
