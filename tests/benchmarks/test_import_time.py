"""The import-time benchmark (benchmarks/import_time.py) times both imports from a warm
bytecode cache, as installed packages have it, even where the environment turns bytecode
writing off (``PYTHONDONTWRITEBYTECODE=1``: SciPy reads its installed ``.pyc`` files while
a source checkout of cupyconv would be compiled at every import)."""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # the repo root

from benchmarks import import_time  # noqa: E402


def test_a_timed_import_writes_and_reads_the_shared_bytecode_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = import_time.cached_env(str(tmp_path))
    assert "PYTHONDONTWRITEBYTECODE" not in env
    wall, cpu = import_time.import_seconds("import cupyconv", env)
    cached = {p.name.split(".")[0] for p in tmp_path.rglob("*.pyc") if "cupyconv" in p.parts}
    assert wall > 0 and cpu > 0 and {"__init__", "conv", "dispatcher"} <= cached
