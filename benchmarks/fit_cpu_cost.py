"""Fit the CPU cost model's gemm and depthwise constants to timings on this machine.

``python -m benchmarks.fit_cpu_cost [--rounds 5] [--small] [--cpu-time]``

Times ``gemm`` (forward and both gradients) and the depthwise tap loop (``direct``, one
filter per channel) on layers from 1-D to 4-D, float32 and float64, together with
single-channel ``convolve`` and ``ndimage`` cases (:data:`SINGLE`: the tap loop, gemm
and the FFT on each, so that a refit keeps their crossovers), and fits
:data:`cupyconv.backends.numpy.cost.CPU`'s terms by non-negative least squares on the
work each timing counts (the model of :func:`cupyconv.backends.numpy.cost.predict_times`:
blocks, column elements, multiply-adds, the narrow-GEMM terms and the copy's contiguous
runs spread over ``min(cores, blocks)``; tap-loop multiply-adds and chunk taps for the
depthwise path).  The FFT's measured / predicted ratios are printed per path (SciPy's
single-signal ``fftconvolve``, the batched transforms), from which ``fft_scipy_axis`` was
set; ``fft_short`` and ``fft_batched`` are fitted on the batched transforms (every
operation of the :data:`FFT_LAYERS`).  Where the blocks run ``numpy.matmul``
(oneMKL off: ``backends/numpy/blas.mkl``) the gemm ratio fit scales ``matmul_work``,
the factor on the oneMKL-fitted work terms.
Prints the fitted values next to the ones in force, then each case's measured and
predicted milliseconds with the constants in force.  The machine this runs on decides
the numbers: a loaded machine fits slower constants (say so where they are committed).
``--cpu-time`` times each call by the process's CPU time (the least of ``--rounds``)
instead of the wall clock, which a shared machine's other processes inflate by their
share of the core; run it on one core (``taskset -c 0``): the constants are per core,
and on more cores the CPU time of the threads adds up.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.optimize import nnls

from cupyconv._bench.timing import time_cpu

#: (name, x shape, w shape, groups, padding, stride, op)
CASES = [
    ("2-D 64->64 56^2", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, "forward"),
    ("2-D 16->16 32^2", (4, 16, 32, 32), (16, 16, 3, 3), 1, 1, 1, "forward"),
    ("2-D 3->32 64^2", (4, 3, 64, 64), (32, 3, 3, 3), 1, 1, 1, "forward"),
    ("2-D 128->128 14^2 s2", (8, 128, 28, 28), (128, 128, 3, 3), 1, 1, 2, "forward"),
    ("2-D groups 4, 32^2", (4, 64, 32, 32), (64, 16, 3, 3), 4, 1, 1, "forward"),
    ("3-D 32->32 32^3", (2, 32, 32, 32, 32), (32, 32, 3, 3, 3), 1, 1, 1, "forward"),
    ("3-D 8->8 24^3", (2, 8, 24, 24, 24), (8, 8, 3, 3, 3), 1, 1, 1, "forward"),
    ("1-D 128->128 1024 k5", (16, 128, 1024), (128, 128, 5), 1, 2, 1, "forward"),
    ("4-D 16->16 12^4", (2, 16, 12, 12, 12, 12), (16, 16, 3, 3, 3, 3), 1, 1, 1, "forward"),
    ("4-D 4->8 10^4", (2, 4, 10, 10, 10, 10), (8, 4, 3, 3, 3, 3), 1, 1, 1, "forward"),
    ("5-D 4->4 7^5", (1, 4, 7, 7, 7, 7, 7), (4, 4, 3, 3, 3, 3, 3), 1, 1, 1, "forward"),
    ("4-D 8->8 12^4 dw", (1, 8, 12, 12, 12, 12), (8, 8, 3, 3, 3, 3), 1, 1, 1, "grad_weight"),
    ("2-D depthwise gemm", (8, 64, 56, 56), (64, 1, 3, 3), 64, 1, 1, "forward"),
    ("2-D 64->64 56^2 dw", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, "grad_weight"),
    ("3-D 32->32 32^3 dw", (2, 32, 32, 32, 32), (32, 32, 3, 3, 3), 1, 1, 1, "grad_weight"),
    ("2-D 64->64 56^2 dx", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, "grad_input"),
    ("2-D 128->128 28^2 s2 dx", (8, 128, 28, 28), (128, 128, 3, 3), 1, 1, 2, "grad_input"),
]
#: The gemm constants per unit of work, which the ratio fit scales (``block`` and the
#: fixed costs are Python, not the machine's rate).
GEMM_WORK = ("column", "block_mac", "narrow_mac", "narrow_cols", "column_run", "grid_column",
             "grid_mac", "grid_narrow")
#: (name, x shape, kernel): depthwise layers for the tap loop
DEPTHWISE = [
    ("depthwise 2-D 64ch 56^2 3x3", (8, 64, 56, 56), (3, 3)),
    ("depthwise 2-D 32ch 112^2 5x5", (2, 32, 112, 112), (5, 5)),
    ("depthwise 3-D 16ch 32^3 3^3", (2, 16, 32, 32, 32), (3, 3, 3)),
    ("depthwise 1-D 64ch 4096 k7", (8, 64, 4096), (7,)),
]


#: (name, x shape, kernel, padding mode): single channel, size-keeping padding;
#: ``constant`` is ``convolve(mode="same")``, ``symmetric`` is ``ndimage.convolve``'s
#: default boundary
SINGLE = [
    ("convolve 1-D 65536 k3", (1, 1, 65536), (3,), "constant"),
    ("convolve 2-D 256^2 3x3", (1, 1, 256, 256), (3, 3), "constant"),
    ("convolve 2-D 512^2 3x3", (1, 1, 512, 512), (3, 3), "constant"),
    ("convolve 2-D 256^2 7x7", (1, 1, 256, 256), (7, 7), "constant"),
    ("convolve 3-D 64^3 3^3", (1, 1, 64, 64, 64), (3, 3, 3), "constant"),
    ("convolve 4-D 16^4 3^4", (1, 1, 16, 16, 16, 16), (3, 3, 3, 3), "constant"),
    ("ndimage 2-D 512^2 5x5", (1, 1, 512, 512), (5, 5), "symmetric"),
    ("ndimage 3-D 64^3 3^3", (1, 1, 64, 64, 64), (3, 3, 3), "symmetric"),
]
#: Channelled forward layers of :data:`CASES` whose FFT is timed too, for each operation
#: (the others' FFT takes seconds).
FFT_LAYERS = ("2-D 16->16 32^2", "3-D 8->8 24^3", "2-D 3->32 64^2", "4-D 4->8 10^4",
              "5-D 4->4 7^5")


def _problem(xs, ws, groups, padding, stride, op, dtype, padding_mode="constant"):
    from cupyconv.core import ConvProblem
    return ConvProblem.create(x_shape=xs, w_shape=ws, groups=groups, padding=padding,
                              stride=stride, dtype=np.dtype(dtype), op=op,
                              padding_mode=padding_mode)


def _cpu_seconds(fn, rounds):
    """The least process CPU time of ``rounds`` calls of ``fn`` (after one untimed)."""
    fn()
    best = float("inf")
    for _ in range(max(rounds, 1)):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def _time(problem, algorithm, rounds, cpu_time=False):
    from cupyconv.backends.numpy import NumpyBackend
    from cupyconv.core.problem import Operands
    rng = np.random.default_rng(0)
    dtype = problem.dtype
    x = rng.standard_normal(problem.x_shape).astype(dtype)
    w = rng.standard_normal(problem.w_shape).astype(dtype)
    dy = rng.standard_normal(problem.y_shape).astype(dtype)
    ops = Operands(activation=x, filter=w, output=dy)
    backend = NumpyBackend()
    call = lambda: backend.run(problem, algorithm, ops, 2**34)  # noqa: E731
    return _cpu_seconds(call, rounds) if cpu_time else time_cpu(call, repeat=rounds)


def _shrink(xs, small):
    return xs if not small else xs[:2] + tuple(max(s // 2, 4) for s in xs[2:])


def _fit_fft_short(timed):
    """Print the batched FFT's ``fft_short`` (per line of a pass) that best fits ``timed``
    (``(problem, seconds)``), each candidate with ``fft_batched`` at the geometric mean of
    measured / predicted: the spread of the log ratios, least first."""
    from cupyconv.backends.numpy import cost
    if not timed:
        return
    keep = cost.CPU["fft_short"], cost.CPU["fft_batched"]
    fits = []
    try:
        for short in (0, 5, 10, 15, 20, 25, 30, 40):
            cost.CPU["fft_short"], cost.CPU["fft_batched"] = short, 1.0
            logs = [math.log(t / cost.predict(p, "fft")) for p, t in timed]
            batched = math.exp(float(np.mean(logs)))
            fits.append((float(np.std(logs)), short, batched))
    finally:
        cost.CPU["fft_short"], cost.CPU["fft_batched"] = keep
    spread, short, batched = min(fits)
    print(f"\nfft, batched: fft_short {short}, fft_batched {batched:.2f} fit best (spread of "
          f"log(measured / predicted) {spread:.3f}; in force {keep[0]}, {keep[1]})")


def main(argv=None):
    from cupyconv.backends.numpy import cost
    from cupyconv.backends.numpy.direct import single_signal
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="halve the spatial extents")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by process CPU time (a loaded machine; one core)")
    opts = parser.parse_args(argv)
    from cupyconv.backends.numpy.threads import workers
    if opts.cpu_time and workers() > 1:
        parser.error("--cpu-time measures one core: run it under taskset -c 0")
    rows, feats, times = [], [], []
    fixed = cost.CPU["call"] + cost.CPU["gemm_call"]
    singles = [(name, _problem(_shrink(xs, opts.small), (1, 1) + ks, 1, [k // 2 for k in ks],
                               1, "forward", dtype, mode))
               for dtype in ("float32", "float64") for name, xs, ks, mode in SINGLE]
    for dtype in ("float32", "float64"):
        for name, xs, ws, g, pad, stride, op in CASES:
            p = _problem(_shrink(xs, opts.small), ws, g, pad, stride, op, dtype)
            feats.append(cost.gemm_terms(p))
            t = _time(p, "gemm", opts.rounds, opts.cpu_time)
            times.append(t - fixed - cost.gemm_serial(p))
            rows.append((f"{name} {dtype}", p, "gemm", t))
            if name in FFT_LAYERS and op == "forward":
                for fop in ("forward", "grad_input", "grad_weight"):
                    q = p.with_(op=fop)
                    rows.append((f"{name} {fop} {dtype}", q, "fft",
                                 _time(q, "fft", opts.rounds, opts.cpu_time)))
    for name, p in singles:
        feats.append(cost.gemm_terms(p))
        t = _time(p, "gemm", opts.rounds, opts.cpu_time)
        times.append(t - fixed)
        rows.append((f"{name} {p.dtype}", p, "gemm", t))
        rows.append((f"{name} {p.dtype}", p, "fft", _time(p, "fft", opts.rounds,
                                                          opts.cpu_time)))
    fitted = nnls(np.array(feats), np.array(times))[0]
    dfeats, dtimes = [], []
    for dtype in ("float32", "float64"):
        for name, xs, ks in DEPTHWISE:
            c = xs[1]
            p = _problem(_shrink(xs, opts.small), (c, 1) + ks, c, [k // 2 for k in ks], 1,
                         "forward", dtype)
            dfeats.append(cost.depthwise_terms(p))
            t = _time(p, "direct", opts.rounds, opts.cpu_time)
            dtimes.append(t - cost.CPU["call"])
            rows.append((f"{name} {dtype}", p, "direct", t))
    for name, p in singles:
        if p.ndim == 1:              # NumPy's compiled convolve, not the tap loop
            rows.append((f"{name} {p.dtype}", p, "direct",
                         _time(p, "direct", opts.rounds, opts.cpu_time)))
            continue
        dfeats.append(cost.depthwise_terms(p))
        t = _time(p, "direct", opts.rounds, opts.cpu_time)
        dtimes.append(t - cost.CPU["call"])
        rows.append((f"{name} {p.dtype}", p, "direct", t))
    dfit = nnls(np.array(dfeats), np.array(dtimes))[0]
    print("| constant | in force | fitted |\n|---|---:|---:|")
    for key, value in zip(cost.GEMM_KEYS, fitted):         # column_run: whatever the dtype
        print(f"| {key} | {cost.CPU[key]:.3g} | {value:.3g} |")
    for key, value in zip(("depthwise_mac", "chunk_tap"), dfit):
        print(f"| {key} | {cost.CPU[key]:.3g} | {value:.3g} |")
    print("\n| case | algorithm | measured ms | predicted ms | predicted / measured |"
          "\n|---|---|---:|---:|---:|")
    for name, p, algo, t in rows:
        pred = cost.predict_times(p, [algo])[algo]
        print(f"| {name} | {algo} | {1e3 * t:.1f} | {1e3 * pred:.1f} | {pred / t:.2f} |")
    ratios = [cost.predict_times(p, [a])[a] / t for _, p, a, t in rows]
    # the ratio fit: one factor per path, the geometric mean of measured / predicted (the
    # NNLS fit's terms are nearly collinear on these layers and come out 0 in turn; a
    # common factor keeps the constants' proportions, fitted before on more cases)
    for algo, keys in (("gemm", GEMM_WORK), ("direct", ("depthwise_mac",))):
        logs = [math.log(t / (cost.predict_times(p, [a])[a])) for _, p, a, t in rows
                if a == algo and (algo != "gemm" or p.groups < p.in_channels)
                and (algo != "direct" or p.ndim > 1 or p.in_channels > 1)]
        factor = math.exp(float(np.mean(logs)))
        if algo == "gemm" and cost.blas.mkl() is None:
            keys = ("matmul_work",)      # numpy.matmul: its factor on the oneMKL-fitted terms
        print(f"\nratio fit, {algo}: measured / predicted {factor:.2f} (geometric mean of "
              f"{len(logs)}): " + ", ".join(f"{k} {cost.CPU[k] * factor:.3g}" for k in keys))
    _fit_fft_short([(p, t) for _, p, a, t in rows if a == "fft" and not single_signal(p)])
    for path, pick in (("single signal (fft_scipy_axis)", True),
                       ("batched (fft_batched)", False)):
        logs = [math.log(t / cost.predict_times(p, ["fft"])["fft"]) for _, p, a, t in rows
                if a == "fft" and single_signal(p) == pick]
        if logs:
            print(f"\nfft, {path}: measured / predicted {math.exp(float(np.mean(logs))):.2f} "
                  f"(geometric mean of {len(logs)})")
    print(f"\ngeometric mean predicted / measured {math.exp(np.mean(np.log(ratios))):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
