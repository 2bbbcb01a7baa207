"""Help text of ``python -m cupyconv``: usage lines and plain text (issue 16)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cupyconv.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
#: reStructuredText that must not reach a terminal.
MARKUP = ("``", ":func:", ":mod:", ":class:", ":meth:", ":data:", ".. ")


@pytest.mark.parametrize("sub", [None, "info", "demo", "build", "sass", "bench"])
def test_usage_reads_python_m_cupyconv_and_help_is_plain_text(sub, capsys):
    with pytest.raises(SystemExit) as info:
        main(([sub] if sub else []) + ["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m cupyconv" + (f" {sub}" if sub else "")), out[:80]
    assert not [m for m in MARKUP if m in out], out


def _bench_run():
    sys.path.insert(0, str(ROOT))
    from benchmarks import run
    return run


def test_bench_parser_usage_and_default_output_in_the_working_directory():
    run = _bench_run()
    parser = run.build_parser()
    text = parser.format_help()
    assert text.startswith("usage: python -m cupyconv bench")
    assert not [m for m in MARKUP if m in text], text
    assert parser.parse_args([]).out == "cupyconv-bench"                   # relative: the cwd
    assert parser.parse_args(["--docs"]).out == os.path.join(str(ROOT), "docs", "benchmarks")
    with pytest.raises(SystemExit):
        parser.parse_args(["--docs", "--out", "x"])


def test_cli_bench_forwards_docs(monkeypatch):
    run = _bench_run()
    seen = {}
    monkeypatch.setattr(run, "main", lambda argv: seen.setdefault("argv", argv) and 0)
    monkeypatch.chdir(ROOT)
    main(["bench", "--quick", "--docs", "--no-plots"])
    assert seen["argv"] == ["--quick", "--docs", "--no-plots"]
