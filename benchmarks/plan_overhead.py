"""Per-call Python overhead of a planned call, vs the unplanned call.

``python -m benchmarks.plan_overhead [--backend numpy|cuda|emulated]``

Times ``plan(x, w)`` and ``cupyconv.conv(x, w)`` on a tiny problem (so the
arithmetic is negligible) and the bare algorithm call underneath; the
differences are the Python overheads of the two public paths.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from .timing import timer_for


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="numpy", choices=("numpy", "cuda", "emulated"))
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args(argv)
    import cupyconv
    from cupyconv import _dispatch
    xp = np
    if args.backend == "cuda":
        import cupy as xp
    x = xp.ones((1, 1, 8, 8), np.float32)
    w = xp.ones((1, 1, 3, 3), np.float32)
    plan = cupyconv.plan_conv(x.shape, w.shape, np.float32, padding=1, backend=args.backend,
                              method="direct")
    cf_problem = plan.problem
    timer = timer_for(xp)
    ctx = cupyconv.use_backend("emulated") if args.backend == "emulated" else None
    if ctx:
        ctx.__enter__()
    try:
        bare = timer(lambda: _dispatch.execute(cf_problem, x, w, method="direct", xp=xp),
                     repeat=args.repeat)
        planned = timer(lambda: plan(x, w), repeat=args.repeat)
        unplanned = timer(lambda: cupyconv.conv(x, w, padding=1, method="direct"),
                          repeat=args.repeat)
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    print(f"backend {args.backend}: bare algorithm {bare * 1e6:.1f} us, "
          f"plan(x, w) {planned * 1e6:.1f} us (+{(planned - bare) * 1e6:.1f} us), "
          f"conv(x, w) {unplanned * 1e6:.1f} us (+{(unplanned - bare) * 1e6:.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
