"""Where one small call's time goes: cProfile of repeated ``conv``/``convolve`` calls.

``python -m benchmarks.profile_call [--backend cuda] [--calls 200]``

The quick GPU bench showed ~0.3-1 ms per call on problems whose kernels take
microseconds; this prints, per case, the wall time per call (CUDA-synchronised) and the
functions with the most cumulative and own time, so the host-side overhead can be read
off directly.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import numpy as np


def _cases(xp):
    rng = np.random.default_rng(0)
    f32 = np.float32
    x2 = xp.asarray(rng.standard_normal((4, 16, 32, 32)).astype(f32))
    w2 = xp.asarray(rng.standard_normal((32, 16, 3, 3)).astype(f32))
    a = xp.asarray(rng.standard_normal((256, 256)).astype(f32))
    k = xp.asarray(rng.standard_normal((3, 3)).astype(f32))
    v = xp.asarray(rng.standard_normal((32, 32, 32)).astype(f32))
    # issue 13: the H200 table had this call at 1.84 ms against cupyx's 0.10 ms
    v96 = xp.asarray(rng.standard_normal((96, 96, 96)).astype(f32))
    k5 = xp.asarray(rng.standard_normal((5, 5, 5)).astype(f32))
    # issue 15: Winograd's small layers took 1.4-2.5 ms a call
    x3 = xp.asarray(rng.standard_normal((1, 48, 14, 14, 14)).astype(f32))
    w3 = xp.asarray(rng.standard_normal((48, 48, 3, 3, 3)).astype(f32))
    import cupyconv
    import cupyconv.ndimage
    return {
        "conv 2-D N4 16->32 32x32 3x3": lambda: cupyconv.conv(x2, w2, padding=1),
        "convolve 256x256 * 3x3 same": lambda: cupyconv.convolve(a, k, "same"),
        # issue 13: three 1-D passes, the ndimage path's own overhead
        "ndimage.gaussian_filter 32^3 s=1.5": lambda: cupyconv.ndimage.gaussian_filter(v, 1.5),
        "ndimage.correlate 96^3 * random 5^3": lambda: cupyconv.ndimage.correlate(v96, k5),
        "conv 3-D 48->48 14^3 3^3 winograd": lambda: cupyconv.conv(x3, w3, padding=1,
                                                                  method="winograd"),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda", choices=("cuda", "numpy", "emulated"))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=25)
    opts = ap.parse_args(argv)
    import cupyconv
    if opts.backend == "cuda":
        import cupy as xp
        sync = xp.cuda.get_current_stream().synchronize
    else:
        xp, sync = np, (lambda: None)
    with cupyconv.use_backend(opts.backend):
        for name, fn in _cases(xp).items():
            for _ in range(5):
                fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(opts.calls):
                fn()
            sync()
            per = (time.perf_counter() - t0) / opts.calls
            split = ""
            if opts.backend == "cuda":
                from .timing import graph_time, host_device_split
                host, device = host_device_split(fn, repeat=opts.calls)
                kernels, why = graph_time(fn)
                split = (f"; host {1e6 * host:.1f} us, device {1e6 * device:.1f} us per call; "
                         + (f"kernels alone (CUDA graph replay) {1e6 * kernels:.1f} us"
                            if kernels is not None else f"no graph replay ({why})"))
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(opts.calls):
                fn()
            sync()
            prof.disable()
            out = io.StringIO()
            stats = pstats.Stats(prof, stream=out)
            stats.sort_stats("cumulative").print_stats(opts.top)
            stats.sort_stats("tottime").print_stats(opts.top)
            print(f"===== {name}: {1e6 * per:.1f} us per call ({opts.calls} calls){split}")
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
