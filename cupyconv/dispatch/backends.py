"""The one place a backend is resolved: ``numpy`` (CPU), ``cuda`` (CuPy), ``emulated``.

By default the backend follows the arrays: NumPy arrays run on ``numpy``,
CuPy arrays on ``cuda``.  ``use_backend("emulated")`` runs the CUDA path
(the same orchestration and ``.cu`` kernels) on NumPy arrays through the
CPU emulation layer.  :func:`backend_for` returns the memoised
:class:`~cupyconv.backends.base.Backend` object the dispatcher runs on.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, List

import numpy as np

from .._kernels import program
from .._vocabulary import BACKENDS, describe_choices
from ..backends.numpy import NumpyBackend
from .._lru import cached

__all__ = ["use_backend", "get_backend", "available_backends", "backend_for",
           "backend_reasons", "reset", "device_constant", "BACKENDS", "FORCED"]


class _ForcedBackend(threading.local):
    """This thread's backend forced by :func:`use_backend` (class default: none)."""

    forced = None


#: read as ``FORCED.forced`` (one attribute lookup: a compiled call's key reads it per call)
FORCED = _ForcedBackend()


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
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
        raise ValueError(f"backend must be {describe_choices(BACKENDS)}; got {name!r}")
    reason = backend_reasons()[name]
    if reason is not None:
        raise ValueError(f"backend {name!r} is not available here: {reason}")
    previous = FORCED.forced
    FORCED.forced = name
    try:
        yield name
    finally:
        FORCED.forced = previous


def get_backend(xp: Any = None) -> str:
    """Name of the backend in force (for arrays of module ``xp``, if given)."""
    forced = FORCED.forced
    if forced is not None:
        return forced
    if xp is not None and xp is not np and xp.__name__ == "cupy":
        return "cuda"
    return "numpy"


def available_backends() -> List[str]:
    """Backends that work on this machine, in :data:`BACKENDS` order."""
    return [name for name, why in backend_reasons().items() if why is None]


@cached(maxsize=1)
def backend_reasons():
    """``{name: None if usable else reason}`` (probed once per process)."""
    from .._emulation import emulation_unavailable_reason  # the CUDA path loads on first use
    return {"numpy": None, "cuda": _cuda_reason(), "emulated": emulation_unavailable_reason()}


def _cuda_reason():
    from .._compile.compat import GPU_INSTALL  # the CUDA path loads on first use
    try:
        import cupy  # optional dependency: probing whether it works is the point
    except ImportError as exc:
        return (f"CuPy is not installed ({exc.__class__.__name__}: {exc}). "
                f"For the GPU: {GPU_INSTALL}")
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install
        return (f"CuPy is not importable ({exc.__class__.__name__}: {exc}). "
                f"Reinstall it: {GPU_INSTALL}")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no device
        return f"no usable CUDA device ({exc.__class__.__name__}: {exc})"
    if count < 1:
        return "no CUDA device found"
    return None


@cached(maxsize=None)
def _cuda_backend(device_id):
    return _cuda_path_backend("cuda")


@cached(maxsize=1)
def _emulated_backend():
    return _cuda_path_backend("emulated")


def _cuda_path_backend(runner):
    """A new :class:`~cupyconv.backends.cuda.CudaBackend` on the ``runner`` named
    (the CUDA path's modules load here, on its first use)."""
    from ..backends.cuda import CudaBackend, runner_for
    return CudaBackend(runner_for(runner))


_NUMPY = NumpyBackend()


def backend_for(xp, name=None):
    """The backend object for arrays of module ``xp`` (``name``: the one in force).

    Raises
    ------
    TypeError
        When the arrays cannot run there (CuPy arrays on ``emulated``, NumPy
        arrays on ``cuda``).
    """
    name = get_backend(xp) if name is None else name
    is_cupy = xp is not np
    if name == "numpy":
        if is_cupy:
            return _cuda_backend(xp.cuda.Device().id)
        return _NUMPY
    if name == "cuda":
        if not is_cupy:
            raise TypeError("the 'cuda' backend needs CuPy arrays; got NumPy arrays "
                            "(use cupy.asarray, or the 'emulated' backend)")
        return _cuda_backend(xp.cuda.Device().id)
    if is_cupy:
        raise TypeError("the 'emulated' backend runs on NumPy arrays; got CuPy arrays")
    return _emulated_backend()


def device_constant(xp, host):
    """A small host array the library computed (filter taps) as an array of ``xp``:
    NumPy's unchanged; on CuPy copied to the current device once and then reused
    (:meth:`~cupyconv.backends.cuda.runners.CupyRunner.constant`; read-only by contract)."""
    if xp is np:
        return program.constant(host)
    return program.constant(backend_for(xp).runner.constant(host))


def reset():
    """Forget probe results and backend objects (tests install or remove toolchains)."""
    backend_reasons.cache_clear()
    _cuda_backend.cache_clear()
    _emulated_backend.cache_clear()
