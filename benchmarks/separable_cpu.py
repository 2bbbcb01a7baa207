"""The ``separable`` algorithm on the CPU: ``auto`` against FFT, 1-D passes and direct.

``python -m benchmarks.separable_cpu [--n 40] [--rounds 5]``

Issue 13's case: an ``n^4`` volume and a 7^4 Gaussian (an outer product of four 1-D
Gaussians), ``mode="same"``.  Rows: float32 (FFT allowed), float32 with one NaN (FFT not
allowed: ``auto`` must stay local), int32 with a binomial kernel (FFT not allowed for an
exact result past 2**53... here allowed, but ``separable`` is exact anyway), and a
non-separable kernel of the same size (the detection's cost when it refuses).  Columns:
median milliseconds of ``auto``, ``method="separable"``, ``method="fft"``, four
``scipy.ndimage.convolve1d`` passes (zero boundary), and ``direct`` (estimated from an
``n/2`` run times 16, it takes seconds).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import reduce

import numpy as np


def _median_ms(fn, rounds):
    fn()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(samples)


def main(argv=None):
    import scipy.ndimage as sndi
    import cupyconv
    from cupyconv.ndimage.filters import gaussian_kernel1d
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args(argv)
    n, rounds = opts.n, opts.rounds
    rng = np.random.default_rng(0)
    g = gaussian_kernel1d(1.0, 0, 3)
    gauss = reduce(np.multiply.outer, [g] * 4)
    binom = np.array([1, 6, 15, 20, 15, 6, 1])
    x32 = rng.standard_normal((n,) * 4).astype(np.float32)
    nan = x32.copy()
    nan[n // 2, n // 2, n // 2, n // 2] = np.nan
    rows = [
        ("float32, 7^4 Gaussian", x32, gauss.astype(np.float32), g.astype(np.float32)),
        ("float32 + one NaN", nan, gauss.astype(np.float32), g.astype(np.float32)),
        ("int32, 7^4 binomial", rng.integers(-100, 100, (n,) * 4).astype(np.int32),
         reduce(np.multiply.outer, [binom] * 4), binom),
        ("float32, random 7^4", x32, rng.standard_normal((7,) * 4).astype(np.float32), None),
    ]
    print(f"{n}^4 volume, mode='same' (ms, median of {rounds})")
    print(f"{'case':24s} {'auto':>9s} {'(chosen)':>11s} {'separable':>10s} {'fft':>9s} "
          f"{'4x 1-D scipy':>13s} {'direct~':>9s}")
    for name, x, k, factor in rows:
        chosen = cupyconv.choose_algorithm(x, k, "same")
        auto = _median_ms(lambda: cupyconv.convolve(x, k, "same"), rounds)
        sep = (_median_ms(lambda: cupyconv.convolve(x, k, "same", method="separable"), rounds)
               if factor is not None else float("nan"))
        fft = _median_ms(lambda: cupyconv.convolve(x, k, "same", method="fft"), rounds) \
            if np.isfinite(x).all() else float("nan")

        def passes(x=x, factor=factor):
            y = x
            for axis in range(4):
                y = sndi.convolve1d(y, factor, axis=axis, mode="constant")
            return y
        one_d = _median_ms(passes, rounds) if factor is not None else float("nan")
        half = x[(slice(0, n // 2),) * 4]
        direct = 16 * _median_ms(lambda: cupyconv.convolve(half, k, "same", method="direct"), 1)
        print(f"{name:24s} {auto:9.1f} {chosen:>11s} {sep:10.1f} {fft:9.1f} {one_d:13.1f} "
              f"{direct:9.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
