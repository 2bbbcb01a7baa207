"""Test helpers for code that runs CUDA kernels under the emulator.

Importing this module does not import pytest; the skip helpers import it
lazily, so they are only usable inside a pytest run.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cupyconv._emulation import _build
from limits import child_limit

__all__ = ["require_emulation", "require_asan", "asan_available", "run_in_asan_subprocess",
           "cached_module", "assert_clean_under_asan"]


def require_emulation() -> None:
    """Skip the calling pytest test when CUDA emulation is unavailable."""
    reason = _build.emulation_unavailable_reason()
    if reason is not None:
        import pytest
        pytest.skip(f"CUDA emulation unavailable: {reason}")


_MODULES: dict = {}


def cached_module(path, names, mode: str = "normal"):
    """An ``EmulatedModule`` of ``path`` with ``names``, built once per test session and
    mode; skips the calling test when emulation is unavailable."""
    require_emulation()
    key = (str(path), tuple(names), mode)
    if key not in _MODULES:
        from cupyconv._emulation import EmulatedModule
        _MODULES[key] = EmulatedModule(path=path, name_expressions=list(names), mode=mode)
    return _MODULES[key]


def asan_available() -> bool:
    """Whether ``mode="asan"`` modules can be built and run in a subprocess."""
    return _build.emulation_available() and _build.asan_runtime_path() is not None


def require_asan() -> None:
    """Skip the calling pytest test when ASan emulation is unavailable."""
    require_emulation()
    if _build.asan_runtime_path() is None:
        import pytest
        pytest.skip("the C++ compiler provides no shared AddressSanitizer runtime (libasan.so)")


def run_in_asan_subprocess(code: str, timeout: float | None = None, env: dict | None = None,
                           cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run a Python snippet with the AddressSanitizer runtime preloaded.

    The child gets ``LD_PRELOAD`` of the compiler's ``libasan.so``,
    ``ASAN_OPTIONS=detect_leaks=0`` (CPython's allocations are not leak-clean)
    and a ``PYTHONPATH`` that finds this ``cupyconv`` package.

    Parameters
    ----------
    code : str
        Python source to execute (``python -c``).
    timeout : float, optional
        Seconds before the child is killed; by default ``limits.child_limit(start_s=75)``
        (one ASan build of a small kernel group and its launches), scaled by the load.
    env : dict, optional
        Extra environment variables.
    cwd : path-like, optional
        Working directory of the child.

    Returns
    -------
    subprocess.CompletedProcess
        With text ``stdout`` and ``stderr``; a sanitizer report makes
        ``returncode`` non-zero and ``stderr`` contain ``AddressSanitizer`` or
        ``runtime error``.

    Raises
    ------
    RuntimeError
        If no shared ASan runtime is available.
    """
    runtime = _build.asan_runtime_path()
    if runtime is None:
        raise RuntimeError("no shared AddressSanitizer runtime (libasan.so) found")
    import cupyconv
    package_root = str(Path(cupyconv.__file__).resolve().parents[1])   # the directory holding cupyconv/
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["LD_PRELOAD"] = " ".join(filter(None, [runtime, child_env.get("LD_PRELOAD")]))
    child_env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
    if "detect_leaks" not in child_env["ASAN_OPTIONS"]:
        child_env["ASAN_OPTIONS"] += ":detect_leaks=0"
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [package_root, child_env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], env=child_env, cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=child_limit(start_s=75) if timeout is None else timeout,
                          check=False)


_CACHED_MODULES: dict = {}


def cached_module(path, names, mode: str = "normal"):
    """The EmulatedModule of kernel file `path` with name expressions `names` in `mode`, built
    once per test process (skips without a compiler)."""
    from cupyconv._emulation import EmulatedModule
    require_emulation()
    key = (str(path), tuple(names), mode)
    if key not in _CACHED_MODULES:
        _CACHED_MODULES[key] = EmulatedModule(path=path, name_expressions=list(names), mode=mode)
    return _CACHED_MODULES[key]


def assert_clean_under_asan(path, names, body: str) -> None:
    """Build the kernels ``names`` of ``path`` in ``asan`` mode here, then run ``body`` (Python
    source; ``f`` is that module's ``get_function``, ``np`` NumPy) in an ASan subprocess and
    assert it finished without a sanitizer report (skips without ASan)."""
    from cupyconv._emulation import build_module
    require_asan()
    build_module(path=str(path), name_expressions=list(names), mode="asan")
    code = (f"import numpy as np\nfrom cupyconv._emulation import EmulatedModule\n"
            f"f = EmulatedModule(path={str(path)!r}, name_expressions={list(names)!r}, "
            f"mode='asan').get_function\n" + body + "\nprint('CHILD-OK', flush=True)\n")
    proc = run_in_asan_subprocess(code)
    assert proc.returncode == 0 and "CHILD-OK" in proc.stdout, proc.stderr[-3000:]
