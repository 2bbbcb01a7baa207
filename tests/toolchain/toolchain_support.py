"""Helpers imported by the toolchain tests (not fixtures)."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from limits import child_limit


def nvrtc_available() -> bool:
    """Whether an NVRTC library can be loaded here."""
    try:
        from cupyconv._compile import nvrtc_version
        nvrtc_version()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no NVRTC here"
        return False


def nvrtc13_library() -> str:
    """``libnvrtc.so.13`` of ``.nvrtc13/`` at the repository root (``scripts/test.sh``
    installs the ``nvidia-cuda-nvrtc`` 13 wheel there) or of ``$CUPYCONV_NVRTC13_DIR``;
    empty when there is none.  A subprocess selects it with ``CUPYCONV_NVRTC``."""
    root = os.environ.get("CUPYCONV_NVRTC13_DIR") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".nvrtc13")
    found = [f for f in glob.glob(os.path.join(root, "nvidia", "cu13", "lib", "libnvrtc.so.13*"))
             if ".alt." not in f]
    return sorted(found)[0] if found else ""


def run_with_nvrtc(major: int, code: str, *args: str) -> dict:
    """Run ``code`` (Python printing one JSON line last) in a subprocess whose NVRTC is
    CuPy's 12.x (``major`` 12) or the 13.x of :func:`nvrtc13_library` (13); skips the test
    when that NVRTC is not here.  Returns the JSON."""
    if major == 12:
        if not nvrtc_available():
            pytest.skip("NVRTC unavailable")
        env = {k: v for k, v in os.environ.items() if k != "CUPYCONV_NVRTC"}
    else:
        lib = nvrtc13_library()
        if not lib:
            pytest.skip("NVRTC 13 is not in .nvrtc13/ (bash scripts/test.sh installs it there)")
        env = dict(os.environ, CUPYCONV_NVRTC=lib)
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=child_limit(start_s=150), cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"][0] == major, out["version"]
    return out
