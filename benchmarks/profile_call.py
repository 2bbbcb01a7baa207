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

from .host_path import small_calls


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
        for name, fn in small_calls(xp).items():
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
                from cupyconv._bench.timing import graph_time, host_device_split
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
