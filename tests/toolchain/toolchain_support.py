"""Helpers imported by the toolchain tests (not fixtures)."""
from __future__ import annotations

import glob
import os


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
