"""Glue smoke test: every kernel family x rank x dtype launched once, checked against NumPy.

``python -m benchmarks.glue_smoke [--backend cuda|emulated] [--ranks 1-3] [--out FILE.json]``

The first thing ``scripts/device_check.sh`` runs on a GPU: the by-value
parameter struct, the mangled names, the cubin loader and the streams have
never run on a device, and a mistake there shows on the first launch.  Each
family is reached the way the library reaches it, through the dispatcher with
an explicit method on the backend's arrays:

- ``direct_conv`` -> ``conv(method="direct")``, ``implicit_gemm_fprop`` ->
  ``conv(method="implicit_gemm")``, ``vol2col`` -> ``conv(method="gemm")``,
  ``col2vol`` -> ``conv_grad_input(method="gemm")``, ``winograd_input`` /
  ``winograd_output`` -> ``conv(method="winograd")`` (float and complex dtypes: the
  families have no int64 instance);
- float16 likewise where the CUDA path runs half natively (direct, implicit GEMM, the
  gemm forward's vol2col); col2vol and the Winograd transforms compute a float16
  problem in float32, so their half instances are not reached this way and are skipped;
- the multistage families (``implicit_gemm_fma_dmma``, ``implicit_gemm_multistage``)
  are taken by ``auto`` only on problems of 16+ channels per group and thousands of GEMM
  rows (the TF32 tiles only under ``precision="tf32"`` on channels-last data), past a
  smoke size, so each of their tiles is launched by explicit tile instead
  (``launch.run_implicit_gemm_fprop(tile=...)`` on the backend's loader): one K-tile of
  channels (``BK``), the multistage tiles on channels-last operands (float32 as TF32:
  small integers are exact there);
- the re-layout kernel (``relayout_channels_last``) by its launch program on a
  channels-first operand, checked against NumPy's ``moveaxis`` copy.

Every result is compared with the NumPy backend on small integers (exact for
integer dtypes; relative-norm error against a tolerance per dtype otherwise).
Prints one line per case, then ``N passed, M failed``; exit code 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import cupyconv
from cupyconv._kernels import registry

#: Relative-norm tolerance per dtype (small-integer data: only rounding of sums).
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5, "complex64": 1e-5,
             "float64": 1e-12, "complex128": 1e-12, "int64": 0.0}

#: family -> (public function, method); ``("tile", None)``: each compiled tile launched by
#: explicit tile; ``("relayout", None)``: the re-layout program; ``("scan", None)``: the
#: one-flag data scan's program; ``("splitk", None)``: the split-K weight gradient's program.
ROUTES = {"direct_conv": ("conv", "direct"), "implicit_gemm_fprop": ("conv", "implicit_gemm"),
          "vol2col": ("conv", "gemm"), "col2vol": ("conv_grad_input", "gemm"),
          "winograd_input": ("conv", "winograd"), "winograd_output": ("conv", "winograd"),
          "winograd_weights": ("conv", "winograd"),
          "implicit_gemm_fma_dmma": ("tile", None), "implicit_gemm_multistage": ("tile", None),
          "relayout_channels_last": ("relayout", None), "data_scan": ("scan", None),
          "splitk_reduce": ("splitk", None)}
#: families whose float16 problems the CUDA path widens to float32 (not reached in half)
WIDENED_HALF = ("col2vol", "winograd_input", "winograd_output", "winograd_weights")
#: families the public calls reach only on a compute capability 9.0 device (the sm_90a
#: wgmma tiles)
NOT_AT_SMOKE_SIZE = ("implicit_gemm_wgmma",)


def _data(rng, shape, dtype):
    a = rng.integers(-3, 4, size=shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.integers(-3, 4, size=shape)
    return a.astype(dtype)


def _shapes(rank):
    return (2, 3) + (5,) * rank, (4, 3) + (3,) * rank


def _call(func, x, w, dy):
    geo = dict(padding=1, stride=1)
    if func == "conv":
        return lambda xp, method: cupyconv.conv(xp.asarray(x), xp.asarray(w), method=method, **geo)
    return lambda xp, method: cupyconv.conv_grad_input(xp.asarray(dy), xp.asarray(w), x.shape,
                                                       method=method, **geo)


def _tile_cases(family, dtype, rank, rng, module):
    """``(label, run(xp), ref)`` per compiled tile of a multistage family: one K-tile of
    channels, the operands of the multistage tiles and of the float64 DMMA tiles' channels-last
    twins (``registry.FMA_DMMA_CHANNELS_LAST``) channels-last (16-byte copies)."""
    from cupyconv._kernels import launch
    from cupyconv.core.problem import ConvProblem
    from cupyconv.dispatch import backend_for
    loader = backend_for(module).runner.loader
    for tile in registry.tiles_for(family, dtype, rank):
        c = tile[2] if family == "implicit_gemm_multistage" else 16
        xs, ws = (2, c) + (5,) * rank, (4, c) + (3,) * rank
        x, w = _data(rng, xs, dtype), _data(rng, ws, dtype)
        problem = ConvProblem.create(x_shape=xs, w_shape=ws, padding=1, dtype=dtype)
        last = (family == "implicit_gemm_multistage"          # channels-last tiles
                or tile[3] in registry.FMA_DMMA_CHANNELS_LAST)

        def run(xp, x=x, w=w, tile=tile, problem=problem, last=last):
            xd, wd = (xp.asarray(np.ascontiguousarray(np.moveaxis(a, 1, -1)) if last else a)
                      for a in (x, w))
            xd, wd = ((xp.moveaxis(a, -1, 1) for a in (xd, wd)) if last else (xd, wd))
            y = xp.zeros(problem.y_shape, dtype)
            launch.run_implicit_gemm_fprop(loader, problem, xd, wd, y, tile=tile,
                                           tf32=np.dtype(dtype) == np.float32)
            return y
        with cupyconv.use_backend("numpy"):
            ref = cupyconv.conv(x, w, padding=1)
        yield f"tile {tile}, ", run, ref


def _relayout_case(dtype, rank, rng, module):
    """The re-layout program on a channels-first ``(2, 33, 5, ...)`` operand."""
    from cupyconv._kernels import program, relayout_launch
    from cupyconv._kernels.params import logical_strides
    from cupyconv.dispatch import backend_for
    loader = backend_for(module).runner.loader
    a = _data(rng, (2, 33) + (5,) * rank, dtype)

    def run(xp):
        ad = xp.asarray(a)
        prog = relayout_launch.relayout_program(
            loader, dtype, 2, 33, (5,) * rank, logical_strides(ad, "channels_first", rank),
            False)
        return program.execute(prog, xp, {"a": ad})[prog.result]
    return "relayout", run, np.moveaxis(a, 1, -1)


def _scan_case(dtype, rank, rng, module):
    """The one-flag data scan over two operands, a NaN planted in the second of a float
    dtype: per operand its finite flag and largest magnitude, against NumPy's."""
    from cupyconv._kernels import scan_launch
    from cupyconv.dispatch import backend_for
    loader = backend_for(module).runner.loader
    a, b = _data(rng, (2, 3) + (5,) * rank, dtype), _data(rng, (3, 2) + (4,) * rank, dtype)
    if np.dtype(dtype).kind in "fc":
        b.reshape(-1)[-1] = np.nan

    def magnitude(v):
        v = np.asarray(v, np.complex128 if v.dtype.kind == "c" else np.float64)
        parts = np.abs(np.concatenate([v.real.ravel(), v.imag.ravel()]))
        return float(np.max(parts[np.isfinite(parts)], initial=0.0))

    def run(xp):
        res = scan_launch.run_scan(loader, xp, (xp.asarray(a), xp.asarray(b)))
        return np.array([float(f) for f in res.finite] + [float(m) for m in res.magnitude])
    ref = np.array([float(np.isfinite(np.asarray(v, np.complex128)).all()) for v in (a, b)]
                   + [magnitude(v) for v in (a, b)])
    return "scan", run, ref


def _splitk_case(dtype, rank, rng, module):
    """The split-K weight gradient's program (two parts summed by the reduction kernel) on
    a ``(4, 3, 5, ...)`` layer, against NumPy's gradient."""
    from cupyconv._kernels import program
    from cupyconv.backends.cuda import algorithms, implicit_grads
    from cupyconv.core.problem import ConvProblem
    from cupyconv.dispatch import backend_for
    runner = backend_for(module).runner
    xs, ws = (4, 3) + (5,) * rank, (4, 3) + (3,) * rank
    problem = ConvProblem.create(x_shape=xs, w_shape=ws, padding=1, dtype=dtype,
                                 op="grad_weight")
    x, dy = _data(rng, xs, dtype), _data(rng, problem.y_shape, dtype)

    def run(xp):
        xd, dyd = xp.asarray(x), xp.asarray(dy)
        prog = implicit_grads.grad_weight_program(
            problem, xd, dyd, runner, algorithms.tensor_core_flags(problem, runner.static),
            splits=2)
        return program.execute(prog, xp, {"x": xd, "dy": dyd})[prog.result]
    with cupyconv.use_backend("numpy"):
        ref = cupyconv.conv_grad_weight(x, dy, ws, padding=1, method="gemm")
    return "split-K x2", run, ref


def _cases(family, dtype, rank, rng, module):
    """``(label, run(xp), ref)`` of one family, dtype and rank (a setup error is a case
    that fails, not a crash of the smoke)."""
    func, method = ROUTES[family]
    try:
        if func == "tile":
            return list(_tile_cases(family, dtype, rank, rng, module))
        if func == "relayout":
            label, run, ref = _relayout_case(dtype, rank, rng, module)
            return [(label + ", ", run, ref)]
        if func in ("scan", "splitk"):
            case = _scan_case if func == "scan" else _splitk_case
            label, run, ref = case(dtype, rank, rng, module)
            return [(label + ", ", run, ref)]
        xs, ws = _shapes(rank)
        x, w = _data(rng, xs, dtype), _data(rng, ws, dtype)
        with cupyconv.use_backend("numpy"):   # the shape only
            dy = _data(rng, cupyconv.conv(x, w, padding=1).shape, dtype)
        call = _call(func, x, w, dy)
        with cupyconv.use_backend("numpy"):
            ref = call(np, "gemm")
        return [("", lambda xp: call(xp, method), ref)]
    except Exception as exc:  # noqa: BLE001
        def fail(xp, exc=exc):
            raise exc
        return [("setup: ", fail, np.zeros(0))]


def _rel_err(got, ref):
    got, ref = np.asarray(got, np.complex128), np.asarray(ref, np.complex128)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.glue_smoke")
    ap.add_argument("--backend", choices=("cuda", "emulated"), default="cuda")
    ap.add_argument("--ranks", default="1-3")
    ap.add_argument("--out", help="write the per-case results as JSON here")
    opts = ap.parse_args(argv)
    lo, _, hi = opts.ranks.partition("-")
    ranks = range(int(lo), int(hi or lo) + 1)
    if opts.backend not in cupyconv.available_backends():
        print(f"glue_smoke: backend {opts.backend!r} is not available here", file=sys.stderr)
        return 2
    if opts.backend == "cuda":
        import cupy as xp     # the device being checked
        scope = cupyconv.use_backend("cuda")
    else:
        xp, scope = np, cupyconv.use_backend("emulated")
    rng = np.random.default_rng(0)
    results = []
    with scope:
        for family in (f for f in registry.FAMILIES if f not in NOT_AT_SMOKE_SIZE):
            for dtype in registry.DTYPES:
                for rank in ranks:
                    if not registry.tiles_for(family, dtype, rank) or (
                            dtype == "float16" and family in WIDENED_HALF):
                        continue
                    for label, run, ref in _cases(family, dtype, rank, rng, xp):
                        t0 = time.perf_counter()
                        try:
                            got = run(xp)
                            got = got.get() if hasattr(got, "get") else np.asarray(got)
                            err = _rel_err(got, ref)
                            ok = got.shape == ref.shape and err <= TOLERANCE[dtype]
                            detail = f"{label}rel. err {err:.2e}"
                        except Exception as exc:  # noqa: BLE001 - a smoke test reports every failure
                            ok, detail = False, f"{label}{type(exc).__name__}: {exc}"[:300]
                        seconds = time.perf_counter() - t0
                        results.append(dict(family=family, dtype=dtype, rank=rank, ok=ok,
                                            detail=detail, seconds=round(seconds, 3)))
                        print(f"{'ok  ' if ok else 'FAIL'} {family:<20} {dtype:<10} {rank}-D "
                              f"{detail} ({seconds:.2f} s)", flush=True)
    if opts.out:
        with open(opts.out, "w") as fh:
            json.dump(dict(backend=opts.backend, results=results), fh, indent=1)
    failed = sum(not r["ok"] for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
