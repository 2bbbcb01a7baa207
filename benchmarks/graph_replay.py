"""Graphed against plain replay of compiled calls on a GPU (issue 24 part 3).

``python -m benchmarks.graph_replay [--out DIR] [--repeat N]``

Per case (a 3-pass ``gaussian_filter`` on a small and a mid-sized volume, a ``gemm``
layer: vol2col + cuBLAS), in one run: the compiled call's repeated call with
``config.cuda_graphs`` off (plain replay) and on (one graph launch, pointers re-pointed),
each as host and device time per call (:func:`cupyconv._bench.timing.host_device_split`)
and the wall time per call of a loop of calls on one stream (what a user's loop sees);
whether the graphed result equals the plain one bit for bit, and why a call was not
graphed.  Writes ``graph_replay.json`` under ``--out``: the numbers that decide
``config.cuda_graphs``'s default.  Needs CuPy and a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import cupyconv
from cupyconv import config, ndimage
from cupyconv._bench.timing import host_device_split
from cupyconv.api.compiled import lookup


def _gaussian(a):
    """``(call, entry)`` of a 3-pass Gaussian (sigma 1) of ``a``."""
    return (lambda: ndimage.gaussian_filter(a, 1.0),
            lambda: lookup(ndimage.gaussian_filter, a, 1.0))


def _gemm(x, w):
    """``(call, entry)`` of a ``gemm`` layer (vol2col + cuBLAS), padding 1."""
    return (lambda: cupyconv.conv(x, w, padding=1, method="gemm"),
            lambda: lookup(cupyconv.conv, x, w, padding=1, method="gemm"))


def _cases(cp):
    rng = np.random.default_rng(0)
    small = cp.asarray(rng.standard_normal((32, 32, 32)).astype(np.float32))
    mid = cp.asarray(rng.standard_normal((128, 128, 128)).astype(np.float32))
    x = cp.asarray(rng.standard_normal((8, 32, 28, 28)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((64, 32, 3, 3)).astype(np.float32))
    return {"gaussian_filter 32^3 sigma 1 (3 passes)": _gaussian(small),
            "gaussian_filter 128^3 sigma 1 (3 passes)": _gaussian(mid),
            "conv gemm 8x32x28x28 * 64x32x3x3": _gemm(x, w)}


def _loop_time(cp, call, n):
    """Wall seconds per call of ``n`` calls on one stream, synchronised once at the end."""
    cp.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    cp.cuda.get_current_stream().synchronize()
    return (time.perf_counter() - t0) / n


def _measure(cp, call, find, graphs, repeat):
    config.cuda_graphs = graphs
    cupyconv.clear_caches()
    call()                                  # the key noted
    call()                                  # recorded and compiled
    y = call()                              # replayed; with graphs: captured here
    entry = find()
    host, device = host_device_split(call, repeat=repeat)
    graph = getattr(entry, "graph", None)
    return y, {
        "host_us": host * 1e6, "device_us": device * 1e6,
        "loop_us": _loop_time(cp, call, repeat) * 1e6,
        "entry": repr(entry),
        "graphed": graph is not None and graph.reason is None and graph.captures == 1,
        "graph_reason": None if graph is None else graph.reason,
        "device_bytes": getattr(entry, "device_bytes", None),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder of graph_replay.json")
    parser.add_argument("--repeat", type=int, default=200, help="calls timed per case")
    args = parser.parse_args(argv)
    import cupy as cp
    saved = config.cuda_graphs
    rows = []
    try:
        for name, (call, find) in _cases(cp).items():
            row = {"case": name}
            try:
                plain_y, row["plain"] = _measure(cp, call, find, False, args.repeat)
                graph_y, row["graphed"] = _measure(cp, call, find, True, args.repeat)
                row["equal"] = bool(cp.array_equal(plain_y, graph_y))
                row["host_ratio"] = row["plain"]["host_us"] / row["graphed"]["host_us"]
                row["loop_ratio"] = row["plain"]["loop_us"] / row["graphed"]["loop_us"]
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            print(json.dumps(row))
    finally:
        config.cuda_graphs = saved
    report = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
              "cupy": cp.__version__, "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "graph_replay.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"{'case':44s} {'plain host/loop us':>20s} {'graphed host/loop us':>22s} equal")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:44s} {r['error']}")
            continue
        p, g = r["plain"], r["graphed"]
        print(f"{r['case']:44s} {p['host_us']:9.1f}/{p['loop_us']:9.1f} "
              f"{g['host_us']:10.1f}/{g['loop_us']:10.1f} {r['equal']} "
              f"{g['graph_reason'] or ''}")


if __name__ == "__main__":
    main()
