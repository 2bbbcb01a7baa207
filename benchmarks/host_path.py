"""Host time of the CUDA path's own Python, per call, measured without a GPU.

``python -m benchmarks.host_path [--rounds N] [--json PATH]``

The GPU runs showed small calls bound by host time (0.25-1.5 ms a call against
kernels of microseconds).  Part of it is CuPy's (allocations, launches, copies:
only a GPU shows those, ``benchmarks.profile_call --backend cuda``); the rest is
the orchestration this project writes, which is the same code on the emulated
runner.  This benchmark runs that orchestration on the emulated runner with every
kernel launch stubbed out (counted, not run), so what it times is the planning,
dispatch and launch preparation alone, and it counts what each call asks of the
device: kernel launches, GEMMs and workspace allocations.

Per case the median over ``--rounds`` of the mean per-call time (``timeit``'s
autorange), on NumPy data of the shapes the GPU benchmarks use.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import timeit

import numpy as np

import cupyconv
import cupyconv.ndimage
from cupyconv._emulation import _module
from cupyconv.backends.cuda import runners

#: (name, builder(rng) -> zero-argument call)
def _cases():
    f32 = np.float32

    def arr(rng, shape, dtype=f32):
        return rng.standard_normal(shape).astype(dtype)

    return [
        ("conv 2-D N4 16->32 32^2 3x3 (auto)",
         lambda r: (lambda x, w: lambda: cupyconv.conv(x, w, padding=1))(
             arr(r, (4, 16, 32, 32)), arr(r, (32, 16, 3, 3)))),
        ("conv 2-D same, implicit_gemm",
         lambda r: (lambda x, w: lambda: cupyconv.conv(x, w, padding=1, method="implicit_gemm"))(
             arr(r, (4, 16, 32, 32)), arr(r, (32, 16, 3, 3)))),
        ("convolve 256^2 * 3x3 same (auto)",
         lambda r: (lambda a, k: lambda: cupyconv.convolve(a, k, "same"))(
             arr(r, (256, 256)), arr(r, (3, 3)))),
        ("ndimage.correlate 24^4 * random 3^4",
         lambda r: (lambda a, k: lambda: cupyconv.ndimage.correlate(a, k))(
             arr(r, (24,) * 4), arr(r, (3,) * 4))),
        ("ndimage.gaussian_filter 32^3 s=1.5",
         lambda r: (lambda a: lambda: cupyconv.ndimage.gaussian_filter(a, 1.5))(
             arr(r, (32, 32, 32)))),
        ("convolve 40^4 * 7^4 Gaussian (separable)",
         lambda r: (lambda a, k: lambda: cupyconv.convolve(a, k, "same", method="separable"))(
             arr(r, (40,) * 4), _gaussian4())),
        ("conv 3-D 48->48 14^3 3^3, winograd",
         lambda r: (lambda x, w: lambda: cupyconv.conv(x, w, padding=1, method="winograd"))(
             arr(r, (1, 48, 14, 14, 14)), arr(r, (48, 48, 3, 3, 3)))),
    ]


def _gaussian4():
    from cupyconv.ndimage.filters import gaussian_kernel1d
    g = gaussian_kernel1d(1.0, 0, 3)
    return np.einsum("i,j,k,l->ijkl", g, g, g, g).astype(np.float32)


@contextlib.contextmanager
def stubbed(counts):
    """Kernel launches and GEMMs counted, not run (the result buffer of a GEMM without
    ``out`` is allocated); workspace allocations counted."""
    # the class attributes themselves (``matmul`` is a staticmethod object)
    launch = _module.EmulatedFunction.__dict__["__call__"]
    matmul, workspace = (runners.EmulatedRunner.__dict__[k] for k in ("matmul", "workspace"))

    def fake_launch(self, grid, block, args, **kw):
        counts["launches"] += 1

    def fake_matmul(a, b, out=None, precision="highest"):
        counts["gemms"] += 1
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        return out if out is not None else np.empty(shape, np.result_type(a, b))

    def fake_workspace(self, shape, dtype):
        counts["workspace"] += 1
        return workspace(self, shape, dtype)

    _module.EmulatedFunction.__call__ = fake_launch
    runners.EmulatedRunner.matmul = staticmethod(fake_matmul)
    runners.EmulatedRunner.workspace = fake_workspace
    try:
        yield
    finally:
        _module.EmulatedFunction.__call__ = launch
        runners.EmulatedRunner.matmul = matmul
        runners.EmulatedRunner.workspace = workspace


def measure(rounds):
    rng = np.random.default_rng(0)
    rows = []
    counts = collections.Counter()
    with cupyconv.use_backend("emulated"), stubbed(counts):
        for name, build in _cases():
            fn = build(rng)
            fn()                                  # plans, choices and modules cached
            counts.clear()
            fn()
            per_call_counts = dict(counts)
            samples = []
            for _ in range(rounds):
                n, _ = timeit.Timer(fn).autorange()
                samples.append(timeit.Timer(fn).timeit(n) / n)
            rows.append(dict(case=name, us=1e6 * statistics.median(samples),
                             launches=per_call_counts.get("launches", 0),
                             gemms=per_call_counts.get("gemms", 0),
                             workspace=per_call_counts.get("workspace", 0)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.host_path", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="also write the rows here")
    opts = ap.parse_args(argv)
    rows = measure(opts.rounds)
    print("| call | host us per call | launches | GEMMs | workspace allocations |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['us']:.1f} | {r['launches']} | {r['gemms']} | {r['workspace']} |")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
