"""Turn a device check's ``evidence.json`` (``benchmarks.evidence_check``) into ledger rows.

``python -m benchmarks.promote_evidence docs/benchmarks/gpu_<kind>_<date>/evidence.json``

Prints the ``RUNS`` entry of the run and one ``Row`` per configuration whose every checked
problem passed (configurations with a failure are listed apart, with their largest
error), to paste into ``cupyconv/_kernels/evidence.py`` and commit with the result files
(docs/evidence.md).  A configuration is promoted only for the arch class it ran on.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def promotable(doc):
    """``(passed, failed)``: the configuration keys (``[family, tile, variant, dtype,
    index64, arch]``) all of whose results passed, and ``{key: worst row}`` of the others
    (launch paths and extra checks included)."""
    by_key = {}
    for row in doc["results"]:
        by_key.setdefault(json.dumps(row["key"]), []).append(row)
    passed, failed = [], {}
    for key, rows in by_key.items():
        bad = [r for r in rows if not r["passed"]]
        if bad:
            failed[key] = max(bad, key=lambda r: r.get("max_error") or float("inf"))
        else:
            passed.append(json.loads(key))
    return passed, failed


def row_text(key, run):
    """The ``evidence.Row(...)`` source of one configuration ``key``."""
    if key[0] == "launch":
        return f'LAUNCH_PATHS["{key[1]}"] = "{run}"'
    family, tile, variant, dtype, index64, arch = key
    variants = "None" if variant is None else f"({variant},)"
    tiles = "None" if tile is None else f"({tuple(tile)},)"
    return (f'Row(("{family}",), {variants}, ("{dtype}",), (), ({64 if index64 else 32},), '
            f'("{arch}",), "{run}", {tiles}),')


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.promote_evidence")
    ap.add_argument("evidence", help="evidence.json of a device check, committed under "
                                     "docs/benchmarks/")
    args = ap.parse_args(argv)
    path = Path(args.evidence)
    doc = json.loads(path.read_text())
    words = doc["gpu"].split()
    run = f"{(words[1] if len(words) > 1 else words[0]).lower()}-{doc['date']}"
    print(f'RUNS["{run}"] = Run("{doc["gpu"]}", "{doc["date"]}", "{doc["commit"]}", '
          f'"{path.parent.as_posix()}")')
    passed, failed = promotable(doc)
    for key in passed:
        if key[0] in ("launch",) or len(key) == 6:
            print(row_text(key, run))
    for key, worst in failed.items():
        print(f"# not promoted: {worst['config']} on {worst['problem']}: largest error "
              f"{worst.get('max_error')} {worst.get('error', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
