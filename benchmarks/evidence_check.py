"""Correctness of every ledger configuration on a GPU, at the sizes ``auto`` picks it for:
the evidence ``scripts/device_check.sh`` writes and ``benchmarks.promote_evidence`` turns
into ledger rows (docs/evidence.md).

``python -m benchmarks.evidence_check [--out DIR] [--plan] [--arch 90] [--budget S]``

For each configuration of ``cupyconv._kernels.evidence.configurations()`` of the device's
arch classes (verified or not) it runs:

- ``auto`` problems: the corpus problems (:data:`CORPUS`) whose automatic choice on the CPU
  stand-in of this device under ``config.kernels = "all"`` is that configuration, through
  the public function (the device makes the same choice);
- one stress problem: many CTAs, several channel tiles and groups, K tails
  (:func:`stress_problem`), by explicit tile (implicit-GEMM tiles) or explicit method;

each against an on-device float64 reference (``method="gemm"`` in float64 under
``config.kernels = "verified"``: vol2col and ``cupy.matmul``), the largest error relative to
the reference's largest magnitude against :data:`TOLERANCE`.  Also: the 64-bit index
direct kernel on a float16 array past 2**31 elements (checked on its last rows), and each
launch path (compiled replay, prebuilt driver launch, CUDA graph) on a multistage tile
(more than 48 KiB of dynamic shared memory).  A failure prints the configuration, the
problem and the largest error.  Writes ``DIR/evidence.json``.  ``--plan`` (no GPU needed)
prints the configurations and the problems the stand-in picks for each.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import cupyconv
from cupyconv import config
from cupyconv._kernels import evidence
from cupyconv.core.problem import ConvProblem

#: Largest error over the reference's largest magnitude, by arithmetic (uniform data in
#: [-1, 1]; the products of TF32/half operands are exact in float32, the sums round).
TOLERANCE = {"float64": 1e-11, "float32": 1e-5, "TF32": 3e-3, "float16": 3e-3,
             "bfloat16": 2e-2}

#: ``(x shape, w shape, groups, dtype, op, precision, layout)`` of the corpus: the
#: reference layers scaled down, small calls, gradients, groups, channels-last data.
CORPUS = [
    ((8, 64, 28, 28), (64, 64, 3, 3), 1, "float32", "forward", "highest", "channels_first"),
    ((8, 64, 28, 28), (64, 64, 3, 3), 1, "float32", "forward", "tf32", "channels_first"),
    ((8, 64, 28, 28), (64, 64, 3, 3), 1, "float32", "forward", "tf32", "channels_last"),
    ((8, 64, 28, 28), (64, 64, 3, 3), 1, "float64", "forward", "highest", "channels_first"),
    ((8, 64, 28, 28), (64, 64, 3, 3), 1, "float16", "forward", "highest", "channels_last"),
    ((8, 64, 28, 28), (64, 64, 3, 3), 1, "bfloat16", "forward", "highest", "channels_last"),
    ((4, 128, 16, 16, 16), (128, 128, 3, 3, 3), 1, "float32", "forward", "highest",
     "channels_first"),
    ((4, 64, 14, 14, 14), (64, 64, 3, 3, 3), 1, "float16", "grad_input", "highest",
     "channels_first"),
    ((16, 64, 28, 28), (64, 64, 3, 3), 1, "float32", "grad_weight", "highest",
     "channels_first"),
    ((16, 64, 28, 28), (64, 64, 3, 3), 1, "float64", "grad_weight", "highest",
     "channels_first"),
    ((2, 64, 20, 20), (64, 16, 3, 3), 4, "float32", "forward", "highest", "channels_first"),
    ((2, 3, 64, 64), (8, 3, 5, 5), 1, "float32", "forward", "highest", "channels_first"),
    ((1, 1, 256, 256), (1, 1, 7, 7), 1, "float64", "forward", "highest", "channels_first"),
]


def _problem(x_shape, w_shape, groups, dtype, op, precision, layout="channels_first"):
    rank = len(x_shape) - 2
    return ConvProblem.create(
        x_shape=x_shape, w_shape=w_shape, stride=(1,) * rank, padding=((1, 1),) * rank,
        dilation=(1,) * rank, groups=groups, padding_mode="constant", cval=0,
        layout="channels_first", dtype=cupyconv_dtype(dtype),
        precision=precision).with_(op=op, layout=layout)


def cupyconv_dtype(name):
    """The NumPy dtype of ``name`` (bfloat16: ml_dtypes')."""
    if name == "bfloat16":
        from cupyconv._dtypes import BFLOAT16
        return BFLOAT16
    return np.dtype(name)


def standin(arch):
    """The CPU stand-in of a device of compute capability ``arch`` (not hardware)."""
    from cupyconv.backends.cuda import EmulatedRunner
    return dataclasses.replace(EmulatedRunner.NOMINAL, arch=arch, sm_count=132 if arch >= 90
                               else 108, name=f"stand-in sm_{arch}")


def _key(cfg):
    return (cfg.family, tuple(cfg.tile) if cfg.variant is not None else None, cfg.variant,
            cfg.dtype, cfg.index64, cfg.arch)


def auto_picks(arch):
    """``{configuration key: [corpus entry, ...]}``: what ``auto`` picks on the stand-in of
    ``arch`` under ``config.kernels = "all"`` (every kernel the call launches counts)."""
    from cupyconv.backends.cuda import CudaBackend, EmulatedRunner
    from cupyconv.dispatch.dispatcher import choose
    device = standin(arch)

    class Runner(EmulatedRunner):
        static = property(lambda self: device)
    backend = CudaBackend(Runner())
    picks = {}
    before = config.kernels
    config.kernels = "all"
    try:
        for entry in CORPUS:
            problem = _problem(*entry)
            choice = choose(problem, backend)
            if choice.algorithm is None:
                continue
            cfg = backend.kernel_config(problem, choice.algorithm, choice.limit)
            for part in ((cfg,) if cfg.family else ()) + cfg.companions:
                picks.setdefault(_key(part), []).append(entry)
    finally:
        config.kernels = before
    return picks


def ledger_for(arch):
    """The ledger configurations of a device of compute capability ``arch``."""
    classes = {evidence.arch_class(arch)} | ({"sm_90a"} if arch == 90 else set())
    return [c for c in evidence.configurations() if c.arch in classes]


def stress_problem(cfg):
    """A forward problem for ``cfg`` with many CTAs, several channel tiles and groups and
    K tails: two groups; per group ``2 BN + 5`` output channels and, for the tap-aligned
    and channels-last tiles, two K-tiles of input channels (three and a tail for the
    general variant 0); a 2-D 96x96 image pair (dozens of row tiles per group)."""
    if cfg.variant is None:
        return ((2, 16, 96, 96), (10, 8, 3, 3), 2, cfg.dtype, "forward", "highest",
                "channels_first")
    bm, bn, bk = cfg.tile
    cpg = 3 * bk + 3 if cfg.variant == 0 else 2 * bk
    kpg = 2 * bn + 5
    layout = "channels_last" if cfg.layout == "channels_last" else "channels_first"
    precision = "tf32" if cfg.math in ("TF32", "wgmma") and cfg.dtype == "float32" else "highest"
    return ((2, 2 * cpg, 96, 96), (2 * kpg, cpg, 3, 3), 2, cfg.dtype, "forward", precision,
            layout)


def plan(arch):
    """``[(configuration, [(source, corpus entry), ...]), ...]`` for ``arch`` (no stress
    problem for a 64-bit configuration of a family without tiles: the public call it
    goes through would choose the 32-bit instance)."""
    picks = auto_picks(arch)
    return [(cfg, [("auto", e) for e in picks.get(_key(cfg), [])]
             + ([("stress", stress_problem(cfg))]
                if cfg.variant is not None or not cfg.index64 else []))
            for cfg in ledger_for(arch)]


# -- on the device ---------------------------------------------------------------------

def _operands(cp, entry, rng):
    x_shape, w_shape, groups, dtype, op, precision, layout = entry
    dt = cupyconv_dtype(dtype)
    return rng.uniform(-1, 1, x_shape), rng.uniform(-1, 1, w_shape), dt


def _public(cp, entry, x64, w64, dt, method, dy64=None):
    """The entry's public call on device copies in ``dt`` (float64 inputs rounded)."""
    x_shape, w_shape, groups, dtype, op, precision, layout = entry
    geo = dict(padding=1, groups=groups, layout=layout)
    if dt != np.float64:
        geo["precision"] = precision
    last = layout == "channels_last"

    def dev(a):             # the physical array of the layout (channels-last: moved, copied)
        d = cp.asarray(a.astype(dt))
        return cp.ascontiguousarray(cp.moveaxis(d, 1, -1)) if last else d

    def shape(s):
        return (s[0],) + tuple(s[2:]) + (s[1],) if last else s
    if op == "forward":
        y = cupyconv.conv(dev(x64), dev(w64), method=method, **geo)
    elif op == "grad_input":
        y = cupyconv.conv_grad_input(dev(dy64), dev(w64), shape(x_shape), method=method, **geo)
    else:
        y = cupyconv.conv_grad_weight(dev(x64), dev(dy64), shape(w_shape), method=method, **geo)
    return cp.moveaxis(y, -1, 1) if last else y


def _largest_error(cp, y, ref):
    y64 = cp.asarray(y).astype(cp.float64)
    scale = float(cp.abs(ref).max()) or 1.0
    return float(cp.abs(y64 - ref).max()) / scale


def _tolerance(cfg_math, dtype):
    return TOLERANCE["TF32" if cfg_math in ("TF32", "wgmma") and dtype == "float32" else dtype]


def check(cp, cfg, source, entry, rng):
    """One result row: run ``entry`` (``source``: ``"auto"`` through the public function,
    ``"stress"`` by explicit tile or method) and compare with the float64 reference."""
    x_shape, w_shape, groups, dtype, op, precision, layout = entry
    x, w, dt = _operands(cp, entry, rng)
    problem = _problem(*entry)
    dy = rng.uniform(-1, 1, problem.y_shape) if op != "forward" else None
    with _kernels("verified"):
        ref = cp.asarray(_public(cp, entry, x, w, np.dtype(np.float64), "gemm", dy))
    with _kernels("all"):
        if source == "auto" or cfg.variant is None:
            y = _public(cp, entry, x, w, dt, "auto" if source == "auto" else cfg.algorithm, dy)
        else:
            y = _explicit_tile(cp, cfg, problem, x, w, dt)
    err = _largest_error(cp, y, ref)
    tol = _tolerance(cfg.math, dtype)
    return dict(config=cfg.describe(), key=list(_key(cfg)), source=source,
                problem=_describe(entry), max_error=err, tolerance=tol, passed=err <= tol)


def _explicit_tile(cp, cfg, problem, x, w, dt):
    from cupyconv._kernels import launch, wgmma_launch
    from cupyconv.dispatch import backend_for
    loader = backend_for(cp).runner.loader
    tf32 = cfg.math in ("TF32", "wgmma") and dt == np.float32
    xs, ws = (cp.asarray(a.astype(dt)) for a in (x, w))
    if tf32:
        from cupyconv.backends.arrays import to_tf32
        xs, ws = to_tf32(xs), to_tf32(ws)
    if cfg.layout == "channels_last":
        xs, ws = (cp.moveaxis(cp.ascontiguousarray(cp.moveaxis(a, 1, -1)), -1, 1)
                  for a in (xs, ws))
    problem = problem.with_(layout="channels_first", dtype=np.dtype(dt))
    y = cp.zeros(problem.y_shape, dt)
    run = wgmma_launch.run_wgmma if cfg.family == "implicit_gemm_wgmma" else \
        launch.run_implicit_gemm_fprop
    run(loader, problem, xs, ws, y, tile=cfg.gemm_tile, index64=cfg.index64, tf32=tf32)
    return y


class _kernels:
    """``config.kernels`` set inside a ``with`` block."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.before, config.kernels = config.kernels, self.mode

    def __exit__(self, *exc):
        config.kernels = self.before


def _describe(entry):
    x_shape, w_shape, groups, dtype, op, precision, layout = entry
    return (f"{op} x{tuple(x_shape)} w{tuple(w_shape)} groups={groups} {dtype} "
            f"{precision} {layout}")


def index64_check(cp, rng):
    """The direct kernel's 64-bit index instance on a float16 input past 2**31 elements,
    checked on its last 64 output rows against float64."""
    x = cp.asarray(rng.uniform(-1, 1, (2, 8, 8200, 16400)).astype(np.float16))
    w = cp.asarray(rng.uniform(-1, 1, (8, 8, 3, 3)).astype(np.float16))
    with _kernels("all"):
        y = cupyconv.conv(x, w, method="direct")
    ref = cupyconv.conv(x[:, :, -66:].astype(cp.float64), w.astype(cp.float64), method="gemm")
    err = _largest_error(cp, y[:, :, -64:], ref)
    return dict(config="direct_conv float16 64-bit index", key=["direct_conv", None, None,
                "float16", True, evidence.arch_class(int(cp.cuda.Device().compute_capability))],
                source="index64",
                problem="forward x(2, 8, 8200, 16400) w(8, 8, 3, 3) float16", max_error=err,
                tolerance=TOLERANCE["float16"], passed=err <= TOLERANCE["float16"])


def launch_path_checks(cp, rng):
    """Each launch path on a float16 layer that runs a multistage tile (64-96 KiB of
    dynamic shared memory) after the re-layout (a program of several launches, so a graph
    can take it): three calls each against float64; a path passes only where the compiled
    call says it took that path (``CompiledCall`` repr: launches, prebuilt, one graph)."""
    from cupyconv.api.compiled import lookup
    entry = ((4, 128, 28, 28), (128, 128, 3, 3), 1, "float16", "forward", "highest",
             "channels_first")
    x, w, dt = _operands(cp, entry, rng)
    with _kernels("verified"):
        ref = cp.asarray(_public(cp, entry, x, w, np.dtype(np.float64), "gemm"))
    xd, wd = cp.asarray(x.astype(dt)), cp.asarray(w.astype(dt))
    rows = []
    for path, settings, sign in (("compiled replay", {}, "launches"),
                                 ("prebuilt driver launch", {"prebuilt_launches": True},
                                  "launches"),
                                 ("CUDA graph", {"cuda_graphs": True}, "one CUDA graph")):
        saved = {k: getattr(config, k) for k in settings}
        try:
            for k, v in settings.items():
                setattr(config, k, v)
            with _kernels("all"):
                errs = [_largest_error(cp, cupyconv.conv(xd, wd, padding=1), ref)
                        for _ in range(3)]
                took = repr(lookup(cupyconv.conv, xd, wd, padding=1))
        finally:
            for k, v in saved.items():
                setattr(config, k, v)
        tol = TOLERANCE["float16"]
        rows.append(dict(config=f"launch path {path}", key=["launch", path], source="path",
                         problem=_describe(entry), max_error=max(errs), tolerance=tol,
                         engaged=took, passed=max(errs) <= tol and sign in took))
    return rows


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _device_reason():
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return None
    except Exception as exc:       # no CuPy, no driver, no device
        return f"no CUDA device ({type(exc).__name__}: {exc})"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.evidence_check")
    ap.add_argument("--out", default=".")
    ap.add_argument("--plan", action="store_true", help="print the plan only (no GPU)")
    ap.add_argument("--arch", type=int, default=None, help="compute capability XY of --plan")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for all checks")
    args = ap.parse_args(argv)
    why = _device_reason()
    if args.plan or why:
        if why:
            print(f"evidence check: {why}; the plan of the stand-in only")
        for cfg, problems in plan(args.arch or 90):
            print(f"{cfg.describe()}: " + "; ".join(f"{s} {_describe(e)}" for s, e in problems))
        return 0
    import cupy as cp
    arch = int(cp.cuda.Device().compute_capability)
    rng = np.random.default_rng(0)
    t0, rows = time.perf_counter(), []
    extra = (launch_path_checks, index64_check)
    for cfg, problems in plan(arch):
        for source, entry in problems:
            if time.perf_counter() - t0 > args.budget:
                break
            try:
                rows.append(check(cp, cfg, source, entry, rng))
            except Exception as exc:     # a refusal or a launch failure is evidence too
                rows.append(dict(config=cfg.describe(), key=list(_key(cfg)), source=source,
                                 problem=_describe(entry), max_error=None, passed=False,
                                 error=f"{type(exc).__name__}: {exc}"))
    for fn in extra:
        try:
            got = fn(cp, rng)
            rows += got if isinstance(got, list) else [got]
        except Exception as exc:
            rows.append(dict(config=fn.__name__, key=[fn.__name__], source="extra",
                             problem="", max_error=None, passed=False,
                             error=f"{type(exc).__name__}: {exc}"))
    for r in rows:
        if not r["passed"]:
            print(f"FAIL {r['config']} on {r['problem']}: largest error {r['max_error']} "
                  f"(tolerance {r.get('tolerance')}) {r.get('error', '')}")
    gpu = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    doc = dict(gpu=gpu.decode() if isinstance(gpu, bytes) else gpu, arch=arch,
               date=datetime.date.today().isoformat(), commit=_commit(), results=rows)
    out = Path(args.out) / "evidence.json"
    out.write_text(json.dumps(doc, indent=1))
    print(f"{sum(r['passed'] for r in rows)} passed, {sum(not r['passed'] for r in rows)} "
          f"failed; {out}")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
