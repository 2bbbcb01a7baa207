"""Helpers imported by the toolchain tests (not fixtures)."""
from __future__ import annotations


def nvrtc_available() -> bool:
    """Whether an NVRTC library can be loaded here."""
    try:
        from cupyconv._compile import nvrtc_version
        nvrtc_version()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no NVRTC here"
        return False
