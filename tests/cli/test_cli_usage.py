"""Help text of ``python -m cupyconv``: usage lines and plain text (issue 16)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cupyconv._bench import run
from cupyconv._bench.problems import suite_names
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


def test_bench_parser_usage_and_default_output_in_the_working_directory():
    parser = run.build_parser()
    text = parser.format_help()
    assert text.startswith("usage: python -m cupyconv bench")
    assert not [m for m in MARKUP if m in text], text
    assert parser.parse_args([]).out == "cupyconv-bench"                   # relative: the cwd
    assert parser.parse_args(["--docs"]).out == os.path.join(str(ROOT), "docs", "benchmarks")
    with pytest.raises(SystemExit):
        parser.parse_args(["--docs", "--out", "x"])


def test_bench_help_is_the_parser_that_runs(capsys):
    """``bench --help`` prints the runner's own parser: every flag, every suite."""
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out == run.build_parser().format_help()
    for flag in ("--suite", "--quick", "--cases", "--repeat", "--peers", "--out", "--docs",
                 "--backend", "--no-plots"):
        assert flag in out, flag
    for name in suite_names():
        assert name in out, name


def test_bench_runs_outside_the_checkout(tmp_path):
    """The suite is in the package: ``bench`` parses and runs from any directory, with only
    the package on the path (``benchmarks/`` of the checkout is not importable there)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "cupyconv").symlink_to(ROOT / "cupyconv", target_is_directory=True)
    proc = subprocess.run([sys.executable, "-m", "cupyconv", "bench", "--quick", "--cases",
                           "no-such-case", "--no-plots"], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert "No module named" not in proc.stderr, proc.stderr
    assert proc.returncode == 1 and "no case selected" in proc.stdout, proc.stdout + proc.stderr


def test_docs_flag_needs_a_checkout(monkeypatch, capsys):
    monkeypatch.setattr(run, "DOCS_OUT", str(ROOT / "no-such-dir"))
    with pytest.raises(SystemExit) as info:
        run.main(["--docs"])
    assert info.value.code == 2
    assert "source checkout" in capsys.readouterr().err


@pytest.mark.parametrize("argv0, prog", [("/venv/bin/cupyconv", "cupyconv"),
                                         ("/x/cupyconv/__main__.py", "python -m cupyconv")])
def test_usage_names_the_console_script(monkeypatch, capsys, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} ")
