"""Outputs of a benchmark run: JSON, a markdown table and matplotlib plots."""
from __future__ import annotations

import json
import math
import os

import numpy as np

__all__ = ["write", "plots", "replot", "markdown", "summary", "ceilings_line",
           "load_line", "progress_line", "print_summary"]


def _ms(s):
    return "-" if s is None else (f"{s * 1e3:.3g}" if s * 1e3 < 100 else f"{s * 1e3:.0f}")


def _auto_ms(row):
    """``"1.23 [1.10, 1.50]"``: auto's median [least, largest] milliseconds."""
    if row.get("auto_min_s") is None:
        return _ms(row["auto_s"])
    return f"{_ms(row['auto_s'])} [{_ms(row['auto_min_s'])}, {_ms(row['auto_max_s'])}]"


def load_line(load, end=None):
    """The machine's load average (1, 5, 15 min) at the start (and end) of a run."""
    if load is None:
        return "load average: not recorded (no os.getloadavg on this OS)"
    text = "load average (1, 5, 15 min): " + ", ".join(f"{v:.2f}" for v in load)
    if end is not None:
        text += " at the start; " + ", ".join(f"{v:.2f}" for v in end) + " at the end"
    return text + f" on {os.cpu_count()} logical cores"


def _mib(b):
    return "-" if b is None else f"{b / 2**20:.3g}"


def ceilings_line(ceilings):
    """One line with the measured ceilings."""
    f = ceilings["flops"]
    return (f"ceilings: bandwidth {ceilings['bandwidth'] / 1e9:.1f} GB/s, "
            f"float32 {f['float32'] / 1e9:.1f} GFLOP/s, float64 {f['float64'] / 1e9:.1f} "
            f"GFLOP/s ({ceilings['how']})")


def _peer_cell(peers):
    parts = []
    for name, p in peers.items():
        if p["status"] == "ok":
            parts.append(f"{name} {p['speedup']:.2f}x")
        elif p["status"] == "fails":
            parts.append(f"{name} fails ({p['error']})")
    return "; ".join(parts) or "no peer"


def _max_diff(peers):
    diffs = [p["rel_diff"] for p in peers.values()
             if p["status"] == "ok" and isinstance(p.get("rel_diff"), float)]
    return f"{max(diffs):.1e}" if diffs else "-"


def _choice(row):
    if "fastest" not in row:
        return row.get("auto_choice") or "-"
    chosen = row.get("auto_choice") or "n/r"
    extra = f" ({row['auto_vs_fastest']:.2f}x)" if row.get("auto_vs_fastest", 1) > 1.0 else ""
    return f"{chosen} / {row['fastest']}{extra}"


def _roof(row):
    """``"16%"``: the roofline fraction (``"16% (fft work)"`` where the FFT's own work
    was counted)."""
    pct = 100 * row["fraction"]
    text = f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%"
    return text + (" (fft work)" if row.get("flops_counted_as") == "fft" else "")


def _labelled_choice(row):
    """``auto chose fft, fastest gemm (1.30x)``: the console's form of :func:`_choice`."""
    chosen = row.get("auto_choice") or "not reported"
    if "fastest" not in row:
        return f"auto chose {chosen}"
    extra = f" ({row['auto_vs_fastest']:.2f}x)" if row.get("auto_vs_fastest", 1) > 1.0 else ""
    same = row["fastest"] == row.get("auto_choice")
    return f"auto chose {chosen}" + (" (the fastest)" if same else
                                     f", fastest {row['fastest']}{extra}")


def progress_line(row):
    """One console line per finished case, every figure labelled."""
    if "skipped" in row:
        return f"  {row['name']:58s} skipped: {row['skipped']}"
    note = f"; {row['spread_note']}" if row.get("spread_note") else ""
    return (f"  {row['name']:58s} auto {_auto_ms(row)} ms (median [min, max]); "
            f"{_labelled_choice(row)}; roofline {_roof(row)} of {row['bound']} peak; "
            f"speed-up vs peers: {_peer_cell(row['peers'])}{note}")


def _geomean(values):
    values = [v for v in values if v and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def summary(rows):
    """``{peer: (geometric-mean speed-up, cases)}`` and auto-vs-fastest counts."""
    per_peer = {}
    for r in rows:
        for name, p in r.get("peers", {}).items():
            if p["status"] == "ok":
                per_peer.setdefault(name, []).append(p["speedup"])
    speedups = {n: (_geomean(v), len(v)) for n, v in per_peer.items()}
    judged = [r for r in rows if r.get("auto_choice") and "fastest" in r]
    hits = sum(r["auto_choice"] == r["fastest"] for r in judged)
    return speedups, hits, len(judged)


def _table(rows):
    lines = ["| case | cupyconv auto (ms) | auto chose / fastest | speed-up vs peers | "
             "GFLOP/s | GB/s | roofline | peak MiB (workspace) | max rel. diff | noise |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['name']} | skipped: {r['skipped']} | | | | | | | | |")
            continue
        ws = f" ({_mib(r['workspace_bytes'])})" if r.get("workspace_bytes") is not None else ""
        lines.append(
            f"| {r['name']} | {_auto_ms(r)} | {_choice(r)} | {_peer_cell(r['peers'])} | "
            f"{r['flops_per_s'] / 1e9:.3g} | {r['bytes_per_s'] / 1e9:.3g} | "
            f"{_roof(r)} {r['bound']} | {_mib(r['peak_bytes'])}{ws} | "
            f"{_max_diff(r['peers'])} | {r.get('spread_note', '')} |")
    return lines


def markdown(meta, rows):
    """The markdown report of one run."""
    lines = [f"# cupyconv benchmark: suite `{meta['suite']}`"
             f"{' (quick)' if meta['quick'] else ''}, backend `{meta['backend']}`", "",
             f"- machine: {meta['machine']}",
             f"- date: {meta['date']}; commit `{meta['commit']}`",
             f"- command: `{meta['command']}`",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
             "- " + ceilings_line(meta["ceilings"]),
             "- " + load_line(meta.get("load_start"), meta.get("load_end")),
             "- peers: " + "; ".join(f"{k}: {v}" for k, v in meta["peers"].items())]
    lines += [f"- {n}" for n in meta["notes"]]
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    for suite in suites:
        part = [r for r in rows if r["suite"] == suite]
        lines += ["", f"## {suite}", ""] + _table(part)
        speedups, hits, judged = summary(part)
        lines.append("")
        for name, (g, n) in speedups.items():
            lines.append(f"- geometric-mean speed-up vs {name}: {g:.2f}x over {n} cases")
        if judged:
            lines.append(f"- `auto` chose the fastest measured algorithm in {hits}/{judged} "
                         "cases")
    lines += ["", "Columns are explained in docs/benchmarks/README.md.", ""]
    return "\n".join(lines)


def write(out, stem, meta, rows):
    """Write ``<out>/<stem>.json`` and ``.md``; returns the paths."""
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, stem + ".json"), os.path.join(out, stem + ".md")]
    with open(paths[0], "w") as fh:
        json.dump(dict(meta=meta, rows=rows), fh, indent=1, default=_jsonable)
        fh.write("\n")
    with open(paths[1], "w") as fh:
        fh.write(markdown(meta, rows))
    return paths


def _jsonable(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# --------------------------------------------------------------------- plots
def plots(out, stem, meta, rows):
    """Speed-up per peer and roofline PNGs; skipped with a note without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; plots skipped "
              "(pip install 'cupyconv[bench]')")
        return []
    done = [r for r in rows if "skipped" not in r]
    if not done:
        return []
    paths = [os.path.join(out, stem + "_speedup.png"), os.path.join(out, stem + "_roofline.png")]
    _speedup_plot(plt, paths[0], meta, done)
    _roofline_plot(plt, paths[1], meta, done)
    return paths


def replot(json_path, out=None):
    """Draw the plots of an earlier run from its JSON (no timing).

    Parameters
    ----------
    json_path : str
        A ``<stem>.json`` written by the runner.
    out : str, optional
        Folder of the PNGs (default: the JSON's folder).

    Returns
    -------
    list of str
        The PNGs written (empty without matplotlib).
    """
    with open(json_path) as fh:
        data = json.load(fh)
    stem = os.path.splitext(os.path.basename(json_path))[0]
    return plots(out or os.path.dirname(os.path.abspath(json_path)), stem, data["meta"],
                 data["rows"])


def _title(meta, what):
    return (f"{what}: {meta['suite']}{' (quick)' if meta['quick'] else ''}, "
            f"{meta['backend']} backend\n{meta['machine'][:70]}, {meta['date'][:10]}, "
            f"commit {meta['commit']}")


def _speedup_plot(plt, path, meta, rows):
    names = list(dict.fromkeys(n for r in rows for n, p in r["peers"].items()
                               if p["status"] == "ok"))
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.6))
    height = 0.8 / max(len(names), 1)
    for j, name in enumerate(names):
        ys, xs = [], []
        for i, r in enumerate(rows):
            p = r["peers"].get(name, {})
            if p.get("status") == "ok":
                ys.append(i + (j - (len(names) - 1) / 2) * height)
                xs.append(p["speedup"])
        ax.barh(ys, xs, height=height, label=name)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["name"] for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up of cupyconv auto = peer time / cupyconv time (log)")
    ax.set_title(_title(meta, "Speed-up per peer"), fontsize=8)
    if names:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _roofline_plot(plt, path, meta, rows):
    c = meta["ceilings"]
    bw = c["bandwidth"]
    ai = np.logspace(math.log10(min(r["intensity"] for r in rows) / 2),
                     math.log10(max(r["intensity"] for r in rows) * 2), 100)
    fig, ax = plt.subplots(figsize=(7, 5))
    for dt, style in (("float32", "-"), ("float64", "--")):
        ax.plot(ai, np.minimum(c["flops"][dt], ai * bw) / 1e9, "k" + style, lw=1,
                label=f"roof {dt} ({c['flops'][dt] / 1e9:.0f} GFLOP/s, {bw / 1e9:.0f} GB/s)")
    markers = {"signal": "o", "conv": "s", "grad_input": "^", "grad_weight": "v"}
    for kind, marker in markers.items():
        part = [r for r in rows if r["kind"] == kind]
        if part:
            ax.scatter([r["intensity"] for r in part], [r["flops_per_s"] / 1e9 for r in part],
                       marker=marker, s=18, label=kind)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (counted FLOP / compulsory byte)")
    ax.set_ylabel("achieved GFLOP/s (cupyconv auto)")
    ax.set_title(_title(meta, "Roofline"), fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_summary(json_path, steps_path=None, micro_path=None):
    """Print the short closing table of ``scripts/device_check.sh``.

    ``steps_path`` is a tab-separated file of ``step, status, rc, seconds``;
    ``micro_path`` the ``device_micro.json`` of ``benchmarks.device_micro`` (one line per
    measurement: TFLOP/s per MMA atom, GB/s per memory level).
    """
    if steps_path and os.path.exists(steps_path):
        print("| step | status | rc | s |\n|---|---|---:|---:|")
        with open(steps_path) as fh:
            for line in fh:
                print("| " + " | ".join(line.rstrip("\n").split("\t")) + " |")
    if micro_path and os.path.exists(micro_path):
        with open(micro_path) as fh:
            micro = json.load(fh)
        print(f"\n| micro ({micro['device']}) | rate |\n|---|---:|")
        for r in micro["rows"]:
            if r["kind"] == "mma":
                frac = r.get("fraction_of_model_peak")
                print(f"| {r['atom']} | {r['tflops']:.1f} TFLOP/s"
                      + (f" ({100 * frac:.0f}% of model peak)" if frac else "") + " |")
            else:
                print(f"| copy {r['level']} {r['working_set_bytes'] / 2**20:.0f} MiB | "
                      f"{r['gbps']:.0f} GB/s |")
    if not os.path.exists(json_path):
        print(f"no benchmark results at {json_path}")
        return
    with open(json_path) as fh:
        data = json.load(fh)
    meta, rows = data["meta"], data["rows"]
    print(f"\nbench {meta['suite']} ({meta['backend']}) on {meta['machine']}: "
          f"{len(rows)} cases; " + ceilings_line(meta["ceilings"]))
    print("| case | auto ms | auto chose / fastest | speed-up vs peers | roofline |")
    print("|---|---:|---|---|---:|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['name']} | skipped | | | |")
            continue
        print(f"| {r['name']} | {_auto_ms(r)} | {_labelled_choice(r)} | "
              f"{_peer_cell(r['peers'])} | {_roof(r)} {r['bound']} |")
    speedups, hits, judged = summary(rows)
    print("geomean speed-up: " + ", ".join(f"{n} {g:.2f}x ({k})"
                                           for n, (g, k) in speedups.items())
          + f"; auto = fastest in {hits}/{judged}")
