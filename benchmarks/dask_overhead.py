"""Overhead of ``cupyconv.dask`` against the single-array path on the CPU.

Convolves one in-memory volume (default: a 336^3 float64 volume, 303 MB)
with a 5^3 kernel in ``mode='same'``, once with :func:`cupyconv.convolve`
and once through :func:`cupyconv.dask.convolve` on a few chunks of the same
array (graph construction included), and prints both times and the ratio.

The Dask path is timed twice: with the ``synchronous`` scheduler (one
thread, so the ratio is the pure cost of padding, halo exchange, per-block
planning and concatenation) and with the ``threads`` scheduler (what a user
gets by default).

Usage::

    python benchmarks/dask_overhead.py [--size 336] [--chunks 168] \\
        [--kernel 5] [--method auto] [--threads 2] [--repeat 3]

Nothing is written to disk.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

if __package__ in (None, ""):    # run as a script: this checkout, after PYTHONPATH's entries
    sys.path.insert(1 + len([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
                    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import time_cpu  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=336, help="edge of the cubic volume")
    parser.add_argument("--chunks", type=int, default=168, help="chunk edge along axes 0 and 1")
    parser.add_argument("--kernel", type=int, default=5, help="edge of the cubic kernel")
    parser.add_argument("--method", default="auto", help="cupyconv method of every call")
    parser.add_argument("--threads", type=int, default=2, help="workers of the threads scheduler")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    import dask
    import dask.array as da

    import cupyconv
    import cupyconv.dask

    rng = np.random.default_rng(0)
    vol = rng.standard_normal((args.size,) * 3)
    psf = rng.random((args.kernel,) * 3)
    xd = da.from_array(vol, chunks=(args.chunks, args.chunks, args.size))
    print(f"volume {vol.shape} float64 ({vol.nbytes / 1e6:.0f} MB), kernel {psf.shape}, "
          f"mode='same', method={args.method!r}, chunks {xd.chunksize} "
          f"({xd.npartitions} blocks), chosen for the whole array: "
          f"{cupyconv.choose_conv_method(vol, psf, 'same')}")

    def single():
        return cupyconv.convolve(vol, psf, "same", method=args.method)

    def lazy():
        return cupyconv.dask.convolve(xd, psf, "same", method=args.method).compute()

    ref = single()
    with dask.config.set(scheduler="synchronous"):
        err = float(np.max(np.abs(lazy() - ref)))
    t_single = time_cpu(single, repeat=args.repeat, warmup=0)
    with dask.config.set(scheduler="synchronous"):
        t_sync = time_cpu(lazy, repeat=args.repeat, warmup=0)
    with dask.config.set(scheduler="threads", num_workers=args.threads):
        t_threads = time_cpu(lazy, repeat=args.repeat, warmup=0)
    print(f"max |dask - single| = {err:.3g}")
    print(f"single array         : {t_single:8.3f} s")
    print(f"dask, synchronous    : {t_sync:8.3f} s   ratio {t_sync / t_single:.3f}")
    print(f"dask, {args.threads} threads      : {t_threads:8.3f} s   "
          f"ratio {t_threads / t_single:.3f}")


if __name__ == "__main__":
    main()
