"""The 16-bit floating types: float16 and, where ``ml_dtypes`` is installed, bfloat16.

Both are storage types: every backend computes them in float32 (the CUDA kernels with
half / bfloat16 storage and float32 accumulation) and rounds the result once
(docs/semantics.md, "Precision contract").  ``ml_dtypes`` is an optional dependency (the
``bf16`` extra) and is not imported with cupyconv: a bfloat16 array can only exist once
something has imported ``ml_dtypes``, so the checks here (:func:`is_half_float`,
:func:`is_bfloat16`, :func:`is_inexact`) read it from ``sys.modules`` and never import it;
:func:`bfloat16` imports it where the dtype itself is needed (the CUDA kernel tables).
NumPy gives ``ml_dtypes.bfloat16`` the dtype kind ``"V"``, so code that asks "is this a
floating dtype" must ask :func:`is_inexact`, not ``dtype.kind in "fc"``.
``BFLOAT16`` and ``HALF_FLOATS`` remain as module attributes, resolved (and ``ml_dtypes``
imported) on first access.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np

__all__ = ["BFLOAT16", "HALF_FLOATS", "bfloat16", "loaded_bfloat16", "is_bfloat16",
           "is_half_float", "is_inexact", "unit_roundoff", "LazyTable"]

_FLOAT16 = np.dtype(np.float16)
_MISSING = object()
_bfloat16 = _MISSING


def bfloat16():
    """The bfloat16 dtype, importing ``ml_dtypes`` on the first call; ``None`` where it
    is not installed."""
    global _bfloat16
    if _bfloat16 is _MISSING:
        try:
            import ml_dtypes
        except ImportError:          # the optional bf16 extra is not installed
            _bfloat16 = None
        else:
            _bfloat16 = np.dtype(ml_dtypes.bfloat16)
    return _bfloat16


def loaded_bfloat16():
    """The bfloat16 dtype if ``ml_dtypes`` has been imported (by anyone), else ``None``:
    before that no bfloat16 array exists.  Never imports it."""
    return bfloat16() if "ml_dtypes" in sys.modules else None


def is_bfloat16(dtype) -> bool:
    """True for ``ml_dtypes.bfloat16`` (or its name)."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return bfloat16() is not None
    bf = loaded_bfloat16()
    return bf is not None and np.dtype(dtype) == bf


def is_half_float(dtype) -> bool:
    """True for float16 and bfloat16."""
    if isinstance(dtype, np.dtype) and dtype.itemsize != 2:
        return False
    return is_bfloat16(dtype) or np.dtype(dtype) == _FLOAT16


def is_inexact(dtype) -> bool:
    """True for the floating and complex dtypes, bfloat16 included."""
    return is_bfloat16(dtype) or np.dtype(dtype).kind in "fc"


def unit_roundoff(dtype) -> float:
    """Half the machine epsilon of a floating dtype (2^-8 for bfloat16, 2^-11 for float16)."""
    if is_bfloat16(dtype):
        return 2.0 ** -8
    return float(np.finfo(np.dtype(dtype)).eps) / 2


class LazyTable(Mapping):
    """A read-only mapping built by ``build()`` on its first use: a table with a
    bfloat16 entry (:func:`bfloat16`) that must not import ``ml_dtypes`` with cupyconv.
    Read as a set, its keys are its members."""

    def __init__(self, build):
        self._build, self._table = build, None

    def _get(self):
        if self._table is None:
            self._table = self._build()
        return self._table

    def __getitem__(self, key):
        return self._get()[key]

    def __iter__(self):
        return iter(self._get())

    def __len__(self):
        return len(self._get())

    def __repr__(self):
        return f"LazyTable({self._get()!r})"


def __getattr__(name):
    """``BFLOAT16`` (the dtype or ``None``) and ``HALF_FLOATS`` (the 16-bit floating
    storage types that compute in float32 and round once), importing ``ml_dtypes``."""
    if name == "BFLOAT16":
        return bfloat16()
    if name == "HALF_FLOATS":
        return frozenset(d for d in (_FLOAT16, bfloat16()) if d is not None)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
