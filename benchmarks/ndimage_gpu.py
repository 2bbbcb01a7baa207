"""``cupyconv.ndimage`` and ``separable`` on the GPU against cupyx, same run.

``python -m benchmarks.ndimage_gpu [--json PATH]``

Two tables (CUDA events, medians after a warm-up; issue 13's GPU goals):

1. the ndimage suite on CuPy arrays: ``cupyconv.ndimage`` against
   ``cupyx.scipy.ndimage`` (goal >= 5x for kernels of 5 taps or more, 3-D/4-D).  cupyx
   compiles a kernel per weights shape: its first call is reported separately
   (``cupyx 1st``), the ratio uses warm calls only; our kernels alone (the call captured
   once as a CUDA graph and replayed, :func:`.timing.graph_time`) say how much of our
   time is host time;
2. a 40^4 float32 volume with a 7^4 Gaussian (``convolve``, ``same``): ``auto``,
   ``method="separable"`` and ``method="fft"`` (goal: separable >= 3x faster than fft),
   and ``cupyx.scipy.ndimage.convolve`` with the N-D kernel; then a 128^3 float32 volume
   with a 7^3 difference of Gaussians (two outer products: separable's terms against
   the FFT and what ``auto`` makes of them).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from .host_path import gaussian_4d
from .separable_terms import dog
from cupyconv._bench.timing import graph_time, time_cuda

#: (name, shape, dtype, function, argument, taps of the largest axis, kwargs)
CASES = [
    ("2-D gauss s=2", (1024, 1024), "float32", "gaussian_filter", 2.0, 17, {}),
    ("3-D gauss s=1.5", (128, 128, 128), "float32", "gaussian_filter", 1.5, 13, {}),
    ("3-D uniform 5", (128, 128, 128), "float32", "uniform_filter", 5, 5, {"mode": "constant"}),
    ("3-D random 5^3", (96, 96, 96), "float32", "correlate", (5, 5, 5), 5, {}),
    ("4-D gauss s=1", (32, 32, 32, 32), "float32", "gaussian_filter", 1.0, 9, {}),
    ("4-D random 3^4", (24, 24, 24, 24), "float32", "correlate", (3, 3, 3, 3), 3, {}),
    ("3-D gauss s=2 f64", (96, 96, 96), "float64", "gaussian_filter", 2.0, 17, {}),
]


def _call(module, func, x, arg, kw):
    fn = getattr(module, func)
    if func in ("correlate", "convolve"):
        import cupy
        w = cupy.asarray(np.random.default_rng(1).standard_normal(arg).astype(x.dtype))
        return lambda: fn(x, w, **kw)
    return lambda: fn(x, arg, **kw)


def ndimage_rows(budget):
    import cupy
    import cupyx.scipy.ndimage as cnd

    from cupyconv import ndimage as ours
    rows = []
    for name, shape, dtype, func, arg, taps, kw in CASES:
        x = cupy.asarray(np.random.default_rng(0).standard_normal(shape).astype(dtype))
        a, b = _call(ours, func, x, arg, kw), _call(cnd, func, x, arg, kw)
        t0 = time.perf_counter()
        b()
        cupy.cuda.get_current_stream().synchronize()
        first = time.perf_counter() - t0
        err = float(cupy.abs(a() - b()).max() / max(float(cupy.abs(b()).max()), 1e-30))
        ta, tb = time_cuda(a, budget=budget), time_cuda(b, budget=budget)
        kernels, why = graph_time(a)           # our kernels alone: the rest is host time
        r = dict(name=name, dtype=dtype, taps=taps, ours_ms=1e3 * ta, cupyx_ms=1e3 * tb,
                 cupyx_first_ms=1e3 * first, ratio=tb / ta, max_rel_diff=err,
                 ours_kernels_ms=None if kernels is None else 1e3 * kernels,
                 no_graph_reason=why)
        rows.append(r)
        graph = "-" if kernels is None else f"{1e3 * kernels:.3f}"
        print(f"| {r['name']} | {r['dtype']} | {r['taps']} | {r['ours_ms']:.3f} | {graph} "
              f"| {r['cupyx_ms']:.3f} | {r['cupyx_first_ms']:.1f} | {r['ratio']:.2f}x "
              f"| {r['max_rel_diff']:.1e} |", flush=True)
    return rows


def separable_rows(budget):
    import cupy
    import cupyx.scipy.ndimage as cnd

    import cupyconv
    k = gaussian_4d()
    x = cupy.asarray(np.random.default_rng(0).standard_normal((40,) * 4).astype(np.float32))
    kd = cupy.asarray(k)
    v = cupy.asarray(np.random.default_rng(0).standard_normal((128,) * 3).astype(np.float32))
    kdog = cupy.asarray(dog(3).astype(np.float32))            # two outer products
    out = {}
    for label, fn in (("auto", lambda: cupyconv.convolve(x, kd, "same")),
                      ("separable", lambda: cupyconv.convolve(x, kd, "same", method="separable")),
                      ("fft", lambda: cupyconv.convolve(x, kd, "same", method="fft")),
                      ("cupyx.ndimage.convolve", lambda: cnd.convolve(x, kd, mode="constant")),
                      ("128^3 * 7^3 DoG: auto", lambda: cupyconv.convolve(v, kdog, "same")),
                      ("128^3 * 7^3 DoG: separable (2 terms)",
                       lambda: cupyconv.convolve(v, kdog, "same", method="separable")),
                      ("128^3 * 7^3 DoG: fft", lambda: cupyconv.convolve(v, kdog, "same",
                                                                        method="fft"))):
        out[label] = 1e3 * time_cuda(fn, budget=budget)
        kernels, why = graph_time(fn)
        out[f"{label}: kernels alone"] = (1e3 * kernels if kernels is not None
                                          else f"no graph replay: {why}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per timing")
    opts = ap.parse_args(argv)
    sep = separable_rows(opts.budget)
    print("| 40^4 float32 * 7^4 Gaussian, same | ms |")
    print("|---|---:|")
    for label, ms in sep.items():
        print(f"| {label} | {ms:.3f} |" if isinstance(ms, float) else f"| {label} | {ms} |")
    print(f"separable vs fft: {sep['fft'] / sep['separable']:.2f}x faster", flush=True)
    print()
    print("| case | dtype | taps | cupyconv ms | its kernels alone (graph replay) ms | cupyx ms "
          "| cupyx 1st call ms | cupyx/ours | max rel. diff |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    rows = ndimage_rows(opts.budget)
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as fh:
            json.dump(dict(ndimage=rows, separable=sep), fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
