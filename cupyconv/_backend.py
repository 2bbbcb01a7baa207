"""Backend selection: ``numpy`` (CPU), ``cuda`` (CuPy) and ``emulated``.

By default the backend follows the arrays: NumPy arrays run on ``numpy``,
CuPy arrays on ``cuda``.  ``use_backend("emulated")`` runs the CUDA path
(the same orchestration and ``.cu`` kernels) on NumPy arrays through the
CPU emulation layer.
"""
from __future__ import annotations

import contextlib
import functools
import threading

__all__ = ["use_backend", "get_backend", "available_backends", "BACKENDS"]

#: Every backend name the library knows.
BACKENDS = ("numpy", "cuda", "emulated")

_state = threading.local()


def _forced():
    return getattr(_state, "forced", None)


@contextlib.contextmanager
def use_backend(name):
    """Force a backend inside a ``with`` block (per thread).

    Parameters
    ----------
    name : {"numpy", "cuda", "emulated"}

    Raises
    ------
    ValueError
        For an unknown name, or one that does not work on this machine
        (the message says why).
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {name!r}")
    reasons = _availability()
    if reasons[name] is not None:
        raise ValueError(f"backend {name!r} is not available here: {reasons[name]}")
    previous = _forced()
    _state.forced = name
    try:
        yield name
    finally:
        _state.forced = previous


def get_backend(xp=None):
    """Name of the backend in force (for arrays of module ``xp``, if given)."""
    forced = _forced()
    if forced is not None:
        return forced
    if xp is not None and xp.__name__ == "cupy":
        return "cuda"
    return "numpy"


def available_backends():
    """Backends that work on this machine, in :data:`BACKENDS` order."""
    return [name for name, why in _availability().items() if why is None]


@functools.lru_cache(maxsize=1)
def _availability():
    """``{name: None if usable else reason}`` (probed once per process)."""
    return {"numpy": None, "cuda": _cuda_reason(), "emulated": _emulated_reason()}


def _cuda_reason():
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        return f"CuPy is not importable ({exc.__class__.__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no usable CUDA device ({exc.__class__.__name__}: {exc})"
    if count < 1:
        return "no CUDA device found"
    return None


def _emulated_reason():
    try:
        from . import _engine  # noqa: F401  (the CUDA orchestration)
        from ._emulation import emulation_available, emulation_unavailable_reason
    except ImportError as exc:
        return f"the emulated CUDA engine is not installed ({exc})"
    if not emulation_available():
        return emulation_unavailable_reason()
    return None


def reset():
    """Forget the probe results (tests install or remove toolchains)."""
    _availability.cache_clear()
