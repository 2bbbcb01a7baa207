"""The emulated kernel cache binds a library to its key (issue 25, item 3).

Each case runs in a fresh interpreter with a private ``CUPYCONV_CACHE_DIR``
(a library, once ``dlopen``'ed, stays loaded for the life of a process):
the cache holds two entries of one source (``FACTOR=3`` and ``FACTOR=5``, built
once per module and copied), the child tampers with the ``FACTOR=3`` entry, then constructs its module again and
reports what it computes, whether it recompiled and whether the error (if
any) names the file.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from emulation_support import require_emulation
from limits import child_limit

SOURCE = """
#include "platform.cuh"
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= FACTOR;
}
"""

CHILD = textwrap.dedent('''
    import json, os, shutil, sys
    import numpy as np
    from cupyconv._emulation import EmulatedModule, EmulationError, _build, build_module

    SOURCE = sys.argv[2]

    def build(factor):
        return build_module(code=SOURCE, options=(f"-DFACTOR={factor}",),
                            name_expressions=["scale"])

    def rebind(lib, data):
        lib.with_suffix(".sha256").write_text(_build.entry_digest(lib.stem, data) + "\\n")

    lib3, lib5 = build(3), build(5)                 # hits: the copied cache
    hits = _build.build_stats()["compiles"] == 0
    other = lib5.read_bytes()
    case = sys.argv[1]
    if case == "other-library-old-sidecar":      # what the issue found: the plain hash matches
        shutil.copyfile(lib5, lib3)
        lib3.with_suffix(".sha256").write_text(_build.sha256_bytes(other) + "\\n")
    elif case == "other-library-rebound":        # even the entry digest is rewritten to match
        shutil.copyfile(lib5, lib3)
        rebind(lib3, other)
    elif case == "symlink":
        os.unlink(lib3)
        os.symlink(lib5, lib3)
        rebind(lib3, other)
    elif case == "corrupt-elf":                  # the sidecar matches a library that cannot load
        data = b"\\0" * 64 + lib3.read_bytes()[64:]
        lib3.write_bytes(data)
        rebind(lib3, data)
    elif case == "corrupt-every-build":          # a rebuild does not help: say what to delete
        real = _build._compile
        def broken(*args):
            data = real(*args)
            return b"\\0" * 64 + data[64:]
        _build._compile = broken
        os.unlink(lib3)
    before = _build.build_stats()["compiles"]
    report = {"lib": str(lib3), "hits": hits}
    try:
        module = EmulatedModule(code=SOURCE, options=("-DFACTOR=3",), name_expressions=["scale"])
    except EmulationError as exc:
        report["error"] = str(exc)
    else:
        x = np.arange(8, dtype=np.float32)
        module.get_function("scale")(1, 32, (x, np.int32(x.size)))
        report.update(result=(x / np.arange(8)).tolist()[1:], path=str(module.library_path),
                      regular=not os.path.islink(module.library_path),
                      verified=_build.library_verified(module.library_path))
    report["compiles"] = _build.build_stats()["compiles"] - before
    print("REPORT" + json.dumps(report))
''')

#: Tampered entries that must read as a miss (rebuilt once, then computing FACTOR=3).
REBUILT = ["other-library-old-sidecar", "other-library-rebound", "symlink", "corrupt-elf"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache holding the two entries every child starts from (built once, not loaded)."""
    require_emulation()
    from cupyconv._emulation import build_module

    root = tmp_path_factory.mktemp("emu-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUPYCONV_CACHE_DIR", str(root))
        for factor in (3, 5):
            build_module(code=SOURCE, options=(f"-DFACTOR={factor}",),
                         name_expressions=["scale"])
    return root


def _run_child(case, template, tmp_path):
    """The child's report: ``lib``, ``compiles`` (after tampering), ``error`` or ``result``."""
    cache = tmp_path / "cache"
    shutil.copytree(template, cache)            # modes kept: 0700 directories, 0600 files
    env = dict(os.environ, CUPYCONV_CACHE_DIR=str(cache), CUPYCONV_EMU_MODE="normal")
    proc = subprocess.run([sys.executable, "-c", CHILD, case, SOURCE], env=env,
                          capture_output=True, text=True, timeout=child_limit(start_s=75),
                          check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    report = json.loads(lines[-1][len("REPORT"):])
    assert report["hits"], "the copied entries were rebuilt before tampering"
    return report


@pytest.mark.parametrize("case", REBUILT)
def test_tampered_entry_is_rebuilt_not_loaded(built, tmp_path, case):
    report = _run_child(case, built, tmp_path)
    assert "error" not in report, report
    assert report["result"] == [3.0] * 7          # FACTOR=5's library would give 5.0
    assert report["compiles"] == 1
    assert report["path"] == report["lib"] and report["regular"] and report["verified"]


def test_library_that_never_loads_names_the_file(built, tmp_path):
    report = _run_child("corrupt-every-build", built, tmp_path)
    assert report["compiles"] == 2                # the first build, then one rebuild
    message = report["error"]
    assert f"delete {report['lib']}" in message and "CUPYCONV_CACHE_DIR" in message
