"""How far one first call of a new signature travels through the package's files.

``python -m benchmarks.call_profile [--json PATH]``

Per case, a warm-up call builds the kernels and fills the caches that do not depend on
the shape; then one call with a new shape (a signature the chooser and the compiled-call
cache have not seen) runs under ``sys.setprofile``.  Counted over the frames of
``cupyconv`` only:

- *files*: distinct source files entered;
- *calls*: Python function calls;
- *returns*: returns into a ``cupyconv`` frame of another file (a return to a file the
  call had left).

The cases are the four of the redesign issue: ``conv`` under ``auto`` and
``convolve(mode="same")`` on the emulated backend, ``conv_grad_weight`` on the emulated
backend and ``conv`` under ``auto`` on NumPy.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

import cupyconv

_PACKAGE = os.path.dirname(os.path.abspath(cupyconv.__file__)) + os.sep


def _ours(frame):
    return frame is not None and frame.f_code.co_filename.startswith(_PACKAGE)


def profile(fn):
    """``dict(files=, calls=, returns=)`` of one call of ``fn`` over cupyconv's frames."""
    files, counts = set(), dict(calls=0, returns=0)

    def hook(frame, event, arg):
        if not _ours(frame):
            return
        name = frame.f_code.co_filename
        if event == "call":
            counts["calls"] += 1
            files.add(name)
        elif event == "return":
            back = frame.f_back
            if _ours(back) and back.f_code.co_filename != name:
                counts["returns"] += 1

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return dict(files=len(files), calls=counts["calls"], returns=counts["returns"])


def cases():
    """``name -> (backend, warm-up call, measured call)``."""
    rng = np.random.default_rng(0)

    def arrays(*shapes):
        return [rng.standard_normal(s).astype(np.float32) for s in shapes]

    x1, w1, x2, w2 = arrays((2, 4, 16, 16), (8, 4, 3, 3), (2, 4, 19, 17), (8, 4, 3, 3))
    a1, k1, a2, k2 = arrays((32, 32), (5, 5), (37, 29), (5, 5))
    dy1 = np.ones((2, 8, 16, 16), np.float32)
    dy2 = np.ones((2, 8, 19, 17), np.float32)
    return {
        "conv, auto (emulated)": ("emulated", lambda: cupyconv.conv(x1, w1, padding=1),
                                  lambda: cupyconv.conv(x2, w2, padding=1)),
        "convolve, same (emulated)": ("emulated",
                                      lambda: cupyconv.convolve(a1, k1, mode="same"),
                                      lambda: cupyconv.convolve(a2, k2, mode="same")),
        "conv_grad_weight (emulated)": (
            "emulated", lambda: cupyconv.conv_grad_weight(x1, dy1, w1.shape, padding=1),
            lambda: cupyconv.conv_grad_weight(x2, dy2, w2.shape, padding=1)),
        "conv, auto (numpy)": ("numpy", lambda: cupyconv.conv(x1, w1, padding=1),
                               lambda: cupyconv.conv(x2, w2, padding=1)),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows to this file")
    opts = ap.parse_args(argv)
    rows = {}
    print(f"| call | files | calls | returns to a file already left |\n|---|---:|---:|---:|")
    for name, (backend, warm, measured) in cases().items():
        if backend not in cupyconv.available_backends():
            print(f"| {name} | skipped: {backend} unavailable | | |")
            continue
        with cupyconv.use_backend(backend):
            warm()
            rows[name] = profile(measured)
        r = rows[name]
        print(f"| {name} | {r['files']} | {r['calls']} | {r['returns']} |")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
