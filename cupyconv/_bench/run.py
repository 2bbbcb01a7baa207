"""Benchmark runner: ``python -m cupyconv bench [--suite NAME] [--quick]``.

For every case of a suite (see :mod:`cupyconv._bench.problems`) it times
cupyconv's ``auto`` and every forced algorithm that can run, every peer
that is importable and applies (see :mod:`cupyconv._bench.peers`), measures the
peak extra memory of one call, and turns the counted work of the case's
:class:`~cupyconv.ConvProblem` into FLOP/s, bytes/s and a fraction of the
roofline whose ceilings are measured at the start of the same run.

Every figure is either a ratio against a peer measured in the same run or
a roofline fraction from counted work (the FFT's own work where ``auto`` ran the FFT:
:mod:`cupyconv._bench.work`).  ``auto``'s time is reported as the median with the
least and the largest of its runs; a row whose spread (largest / least) is wider than
one of its ratios says so, and the run records the machine's load average at its
start and end.  Writes ``<out>/<stem>.json`` and
``<out>/<stem>.md`` (after every case, so an interrupted run keeps what it
measured) and, when matplotlib is importable, two plots.  ``<out>`` is
``cupyconv-bench/`` in the current directory unless ``--out`` names another;
``--docs`` writes into the tracked ``docs/benchmarks/`` of a source checkout on
purpose.  Before each case it prints ``[i/n] case name``.

The suite is part of the installed package (``cupyconv/_bench/``), so
``python -m cupyconv bench`` runs from any directory and from an installed
wheel; the developer benchmarks in ``benchmarks/`` of the checkout import it.

On a machine without a usable GPU it benchmarks the NumPy backend against
the CPU peers (SciPy) and says so.
"""
from __future__ import annotations

import argparse
import datetime
import inspect
import os
import platform
import subprocess
import sys
import zlib

import numpy as np

from ..api.calls import logical_views
from ..api.conv import prepare_conv
from ..api.signal import signal_problem
from ..core.args import array_module_of
from ..core.problem import Operands
from ..dispatch import backend_for, choose, run

from . import peers as peers_mod
from . import report
from .problems import cases, suite_names
from .timing import measure_ceilings, peak_memory, roofline, time_cpu, timer_for
from .work import counted_flops

__all__ = ["main", "run_case", "Context"]

#: Forced methods predicted to take longer than this (seconds) are not timed.
SKIP_PREDICTED_S = {"cpu": 5.0, "gpu": 2.0}
#: Seconds after which one timing loop stops repeating.
BUDGET_S = {"cpu": 2.0, "gpu": 1.0}


class Context:
    """What every case of one run shares.

    Parameters
    ----------
    backend : {"numpy", "cuda"}
    repeat : int
        Timed repetitions per measurement (median reported).
    quick : bool
        CPU-scale ceilings.
    peer_names : sequence of str, optional
        Restrict the peers to these names.
    ceilings : dict, optional
        Reuse measured ceilings instead of measuring them.
    """

    def __init__(self, backend, repeat=5, quick=False, peer_names=None, ceilings=None):
        self.backend = backend
        self.gpu = backend == "cuda"
        self.device = "gpu" if self.gpu else "cpu"
        if self.gpu:
            import cupy
            self.xp = cupy
        else:
            self.xp = np
        self.timer = timer_for(self.xp)
        self.repeat = repeat
        self.budget = BUDGET_S[self.device]
        self.skip_predicted = SKIP_PREDICTED_S[self.device]
        self.ceilings = ceilings if ceilings is not None else measure_ceilings(self.xp, quick)
        listed = peers_mod.peers_for(self.device, peer_names)
        self.peers = [p for p, why in listed if why is None]
        self.peer_status = {p.name: why or "available" for p, why in listed}

    def time(self, fn, stream_ordered=True, repeat=None, samples=None):
        """Median seconds of ``fn`` with this run's timer (wall clock when the
        callable synchronises itself); ``samples`` receives every timed run."""
        timer = self.timer if stream_ordered else time_cpu
        return timer(fn, repeat=repeat or self.repeat, budget=self.budget, samples=samples)

    def release(self):
        """Return cached device memory between cases."""
        if self.gpu:
            self.xp.get_default_memory_pool().free_all_blocks()
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available():
                torch.cuda.empty_cache()


# ------------------------------------------------------------------ operands
def operands(case, xp=np):
    """Seeded operands of ``case`` (a dict of ``xp`` arrays in its layout)."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    dt = np.dtype(case.dtype)

    def draw(shape):
        a = rng.standard_normal(shape)
        if dt.kind == "c":
            a = a + 1j * rng.standard_normal(shape)
        return xp.asarray(a.astype(dt))
    if case.kind == "signal":
        return {"in1": draw(case.shape), "in2": draw(case.kernel)}
    names = {"conv": ("x", "w"), "grad_input": ("dy", "w"), "grad_weight": ("x", "dy")}
    shapes = {"x": case.x_shape, "w": case.w_shape, "dy": case.y_shape()}
    return {n: draw(shapes[n]) for n in names[case.kind]}


# --------------------------------------------------------------------- ours
def _grad_function(case):
    import cupyconv
    return getattr(cupyconv, "conv_" + case.kind, None)


def ours(case, arrays):
    """``(call, takes_method)``: ``call(method)`` returns a zero-argument
    callable running cupyconv's public function on ``arrays``."""
    import cupyconv
    geo = case.geometry() if case.kind != "signal" else {}
    if case.kind == "signal":
        fn = getattr(cupyconv, case.func)
        a, b = arrays["in1"], arrays["in2"]
        return (lambda m: lambda: fn(a, b, case.mode, method=m)), True
    if case.kind == "conv":
        x, w = arrays["x"], arrays["w"]
        return (lambda m: lambda: cupyconv.conv(x, w, method=m, **geo)), True
    fn = _grad_function(case)
    takes = "method" in inspect.signature(fn).parameters
    if case.kind == "grad_input":
        args = (arrays["dy"], arrays["w"], case.x_shape)
    else:
        args = (arrays["x"], arrays["dy"], case.w_shape)
    if takes:
        return (lambda m: lambda: fn(*args, method=m, **geo)), True
    return (lambda m: lambda: fn(*args, **geo)), False


def _logical(case, arrays):
    """``(problem, operands, xp)`` exactly as the public function plans it."""
    if case.kind == "signal":
        call, xp, in1, in2 = signal_problem(arrays["in1"], arrays["in2"], case.mode, None,
                                            case.func == "correlate")
        return call.problem, call.operands(in1, in2, xp), xp
    if case.kind in ("grad_input", "grad_weight"):
        problem = case.problem().with_(op=case.kind)
        xp = array_module_of(**arrays)
        roles = (dict(output=arrays["dy"], filter=arrays["w"]) if case.kind == "grad_input"
                 else dict(activation=arrays["x"], output=arrays["dy"]))
        return problem, Operands(**logical_views(problem, xp, **roles)), xp
    problem, _, xp, x, w, _ = prepare_conv(
        arrays["x"], arrays["w"], None, groups=1, padding_mode="constant", cval=0,
        **case.geometry())
    views = logical_views(problem, xp, activation=x, filter=w)
    return problem, Operands(**views), xp


def auto_choice(case, arrays):
    """``(algorithm, workspace_bytes)`` that ``auto`` uses, from the dispatcher's
    ``stats``, for every kind (the gradients' problems and roles as their functions
    plan them)."""
    problem, operands, xp = _logical(case, arrays)
    stats = {}
    _, name = run(problem, operands, backend_for(xp), method="auto", stats=stats)
    return name, int(stats.get("peak_workspace", 0))


def candidate_methods(case, ctx):
    """``{method: predicted seconds}`` for every algorithm that can run the case."""
    problem = case.problem().with_(layout="channels_first")
    if not ctx.gpu:
        return choose(problem, backend_for(np)).times
    import cupy  # optional dependency: only with a GPU
    return choose(problem, backend_for(cupy)).times


def _rel_diff(got, ref):
    got = np.asarray(got, dtype=np.complex128 if np.iscomplexobj(got) else np.float64)
    ref = np.asarray(ref, dtype=got.dtype if np.iscomplexobj(ref) else np.float64)
    if got.shape != ref.shape:
        return f"shape {got.shape} != {ref.shape}"
    den = float(np.linalg.norm(ref)) or 1.0
    return float(np.linalg.norm(got - ref)) / den


def _error(exc):
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


# --------------------------------------------------------------------- a case
def _time_methods(case, ctx, call, chosen):
    timed, skipped = {}, {}
    for name, predicted in sorted(candidate_methods(case, ctx).items()):
        if predicted > ctx.skip_predicted and name != chosen:
            skipped[name] = f"predicted {predicted:.3g} s > {ctx.skip_predicted:g} s"
            continue
        try:
            timed[name] = ctx.time(call(name), repeat=max(3, ctx.repeat // 2))
        except Exception as exc:                 # a forced method may refuse a case
            skipped[name] = _error(exc)
    return timed, skipped


def _run_peer(peer, case, arrays, ours_cf, ctx, seconds):
    why = peer.applies(case)
    if why is not None:
        return {"status": "n/a", "note": why}
    try:
        fn = peer.prepare(case, arrays)
        result, peak, _ = peak_memory(fn, ctx.gpu)       # also the first (compiling) call
        t = ctx.time(fn, peer.stream_ordered)
    except Exception as exc:                     # record the failure, keep going
        return {"status": "fails", "error": type(exc).__name__, "note": _error(exc)}
    out = {"status": "ok", "time_s": t, "speedup": t / seconds, "peak_bytes": peak,
           "timer": ("cuda events" if ctx.gpu and peer.stream_ordered else "wall clock")}
    diff = _rel_diff(ours_cf, peers_mod.as_numpy(result))
    out["rel_diff"] = diff
    return out


def run_case(case, ctx):
    """Benchmark one case; returns its JSON row."""
    problem = case.problem()
    row = dict(name=case.name, suite=case.suite, kind=case.kind, ndim=case.ndim,
               dtype=case.dtype, layout=case.layout if case.kind != "signal" else None,
               flops=int(problem.flops), bytes=int(problem.bytes_moved))
    if case.kind in ("grad_input", "grad_weight") and _grad_function(case) is None:
        row["skipped"] = (f"cupyconv.conv_{case.kind} is not in this version of the "
                          "library (being written); case skipped")
        return row
    arrays = operands(case, ctx.xp)
    call, takes_method = ours(case, arrays)
    samples = []
    try:
        chosen, workspace = auto_choice(case, arrays)
        result, peak, source = peak_memory(call("auto"), ctx.gpu)
        seconds = ctx.time(call("auto"), samples=samples)
    except Exception as exc:
        row["skipped"] = "cupyconv failed: " + _error(exc)
        return row
    row.update(auto_s=seconds, auto_min_s=min(samples), auto_max_s=max(samples),
               auto_runs=len(samples), auto_choice=chosen, peak_bytes=peak,
               peak_source=source, workspace_bytes=workspace)
    if takes_method:
        timed, skipped = _time_methods(case, ctx, call, chosen)
        row.update(method_s=timed, method_skipped=skipped)
        if timed:
            fastest = min(timed, key=timed.get)
            row.update(fastest=fastest, fastest_s=timed[fastest])
            if chosen in timed:
                row["auto_vs_fastest"] = timed[chosen] / timed[fastest]
    flops, counted = counted_flops(problem, chosen)
    row.update(flops=int(flops), flops_counted_as=counted)
    row.update(roofline(flops, problem.bytes_moved, seconds, case.dtype, ctx.ceilings))
    ours_cf = peers_mod.as_numpy(
        peers_mod.channels_first(result, case.layout if case.kind != "signal" else None))
    row["peers"] = {p.name: _run_peer(p, case, arrays, ours_cf, ctx, seconds)
                    for p in ctx.peers}
    note = spread_note(row)
    if note:
        row["spread_note"] = note
    ctx.release()
    return row


def spread_note(row):
    """The row's ratios (``auto`` against the fastest method, speed-ups against the
    peers) that its spread (``auto``'s largest run / its least) is wider than, said in
    words; ``""`` when there is none (or one run)."""
    spread = row["auto_max_s"] / row["auto_min_s"] if row.get("auto_min_s") else 1.0
    ratios = []
    if row.get("auto_vs_fastest") is not None:
        ratios.append(("auto / fastest", row["auto_vs_fastest"]))
    ratios += [(f"vs {name}", p["speedup"]) for name, p in row.get("peers", {}).items()
               if p.get("status") == "ok"]
    within = [f"{what} {r:.2f}x" for what, r in ratios if max(r, 1 / r) < spread]
    if not within:
        return ""
    return (f"spread {spread:.2f}x (max/min of {row['auto_runs']} runs) is wider than the "
            f"ratio: " + ", ".join(within) + "; the difference is within the noise")


# ---------------------------------------------------------------------- meta
def _git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()
    except Exception:                            # not a checkout, or git absent
        return ""


def _versions():
    out = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("scipy", "cupy", "torch", "jax", "matplotlib"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out


def _machine(ctx):
    cpu = f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} logical cores"
    if not ctx.gpu:
        return cpu.replace("  ", " ")
    from ..backends.cuda import runner_for
    d = runner_for("cuda").device
    return f"{d.name} (sm_{d.arch}, {d.sm_count} SMs); host {cpu}"


def load_average():
    """The 1, 5 and 15 minute load averages, or ``None`` where the OS has none."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def metadata(args, ctx, command):
    """The run's description: machine, date, commit, command, ceilings, peers, load."""
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    notes = [
        "Times are medians after one warm-up call; CUDA events on the GPU (peers that "
        "synchronise themselves, such as JAX, by wall clock), time.perf_counter on the CPU.",
        "cupyconv auto (ms) is the median [least, largest] of its runs; a row whose spread "
        "(largest / least) is wider than one of its ratios says so.",
        "FLOP/s and the roofline count the work of the algorithm auto ran: the FFT's own "
        "transforms and products for fft, the direct multiply-adds otherwise.",
        "speed-up = peer time / cupyconv auto time (above 1: cupyconv is faster).",
    ]
    if not ctx.gpu:
        notes.insert(0, "No usable GPU: this run benchmarks cupyconv's NumPy backend "
                        "against the CPU peers (SciPy).")
        notes.append("Shared machine: other processes may be running (see the load "
                     "average); the spread of each row says how noisy it is.")
    return dict(suite=args.suite, quick=args.quick, backend=ctx.backend,
                machine=_machine(ctx), date=datetime.datetime.now(
                    datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                commit=commit + ("+dirty" if dirty else ""), command=command,
                versions=_versions(), ceilings=ctx.ceilings, peers=ctx.peer_status,
                repeat=ctx.repeat, notes=notes, load_start=load_average(), load_end=None)


def _resolve_backend(name):
    import cupyconv
    available = cupyconv.available_backends()
    if name == "auto":
        return "cuda" if "cuda" in available else "numpy"
    if name not in available:
        raise SystemExit(f"backend {name!r} is not available here ({available})")
    return name


#: Default output folder, relative to the current directory.
DEFAULT_OUT = "cupyconv-bench"
#: The tracked results of a source checkout (``--docs``); absent in an installed package.
DOCS_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "docs", "benchmarks")


def build_parser(prog="python -m cupyconv bench"):
    """The ``bench`` argument parser (the one ``python -m cupyconv bench`` runs).

    Parameters
    ----------
    prog : str
        The program name of the usage line.

    Returns
    -------
    argparse.ArgumentParser
    """
    names = suite_names()
    p = argparse.ArgumentParser(
        prog=prog,
        description="Benchmark runner: times cupyconv against the peers on named problem sets "
                    "and writes JSON, markdown and plots. Suites: " + ", ".join(names) + ".")
    p.add_argument("--suite", default="all", choices=names, metavar="NAME",
                   help="problem set: " + ", ".join(names) + " (default: all)")
    p.add_argument("--quick", action="store_true", help="CPU-scale subset (1-2 min on a CPU)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", default=DEFAULT_OUT,
                     help=f"output folder (default: {DEFAULT_OUT}/ in the current directory)")
    out.add_argument("--docs", action="store_const", const=DOCS_OUT, dest="out",
                     help="write into docs/benchmarks/ of a source checkout (the tracked "
                          "results)")
    p.add_argument("--backend", default="auto", choices=("auto", "numpy", "cuda"),
                   help="default: cuda when a GPU is usable, else numpy")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per measurement")
    p.add_argument("--peers", help="comma-separated peer names (default: all available: "
                                   + ", ".join(peer.name for peer in peers_mod.PEERS) + ")")
    p.add_argument("--cases", help="only cases whose name contains this text")
    p.add_argument("--no-plots", action="store_true", help="JSON and markdown only")
    p.add_argument("--plots-from", metavar="JSON",
                   help="measure nothing: draw the plots of an earlier run's JSON beside it")
    return p


def main(argv=None, prog="python -m cupyconv bench"):
    """Run a suite.

    Parameters
    ----------
    argv : list of str, optional
        The command-line arguments (default: ``sys.argv[1:]``).
    prog : str
        The program name of the usage line.

    Returns
    -------
    int
        The process exit status.
    """
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.plots_from:
        paths = report.replot(args.plots_from)
        print("wrote " + (", ".join(paths) or "nothing"))
        return 0 if paths else 1
    if args.out == DOCS_OUT and not os.path.isdir(DOCS_OUT):
        parser.error(f"--docs writes into docs/benchmarks/ of a source checkout, and there is "
                     f"none at {DOCS_OUT}; use --out DIR")
    backend = _resolve_backend(args.backend)
    selected = [c for c in cases(args.suite, args.quick)
                if not args.cases or args.cases in c.name]
    if not selected:
        print("no case selected")
        return 1
    if backend == "numpy":
        print("No GPU in use: benchmarking cupyconv's NumPy backend against the CPU "
              "peers (scipy.signal / scipy.ndimage).")
    print(f"measuring the {'GPU' if backend == 'cuda' else 'CPU'} ceilings ...", flush=True)
    ctx = Context(backend, repeat=args.repeat, quick=args.quick,
                  peer_names=args.peers.split(",") if args.peers else None)
    print(report.ceilings_line(ctx.ceilings))
    print(report.load_line(load_average()))
    for name, status in ctx.peer_status.items():
        print(f"  peer {name}: {status}")
    command = "python -m cupyconv bench --suite " + args.suite + (
        " --quick" if args.quick else "") + (" --backend cuda" if backend == "cuda" else "")
    meta = metadata(args, ctx, command)
    stem = f"{args.suite}{'_quick' if args.quick else ''}_{backend}"
    rows = []
    for i, case in enumerate(selected, 1):
        print(f"[{i}/{len(selected)}] {case.name} ...", flush=True)
        row = run_case(case, ctx)
        rows.append(row)
        print(report.progress_line(row), flush=True)
        meta["versions"] = _versions()
        meta["load_end"] = load_average()
        paths = report.write(args.out, stem, meta, rows)
    if not args.no_plots:
        paths += report.plots(args.out, stem, meta, rows)
    print("wrote " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
