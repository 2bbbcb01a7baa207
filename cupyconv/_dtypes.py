"""The 16-bit floating types: float16 and, where ``ml_dtypes`` is installed, bfloat16.

Both are storage types: every backend computes them in float32 (the CUDA kernels with
half / bfloat16 storage and float32 accumulation) and rounds the result once
(docs/semantics.md, "Precision contract").  ``ml_dtypes`` is an optional dependency (the
``bf16`` extra); without it :data:`BFLOAT16` is ``None`` and bfloat16 arrays cannot exist.
NumPy gives ``ml_dtypes.bfloat16`` the dtype kind ``"V"``, so code that asks "is this a
floating dtype" must ask :func:`is_inexact`, not ``dtype.kind in "fc"``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["BFLOAT16", "HALF_FLOATS", "is_half_float", "is_inexact", "unit_roundoff"]

try:
    import ml_dtypes as _ml_dtypes
except ImportError:          # the optional bf16 extra is not installed
    BFLOAT16 = None
else:
    BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)

#: 16-bit floating storage types that compute in float32 and round once.
HALF_FLOATS = frozenset(d for d in (np.dtype(np.float16), BFLOAT16) if d is not None)


def is_half_float(dtype) -> bool:
    """True for float16 and bfloat16."""
    return np.dtype(dtype) in HALF_FLOATS


def is_inexact(dtype) -> bool:
    """True for the floating and complex dtypes, bfloat16 included."""
    dtype = np.dtype(dtype)
    return dtype.kind in "fc" or dtype in HALF_FLOATS


def unit_roundoff(dtype) -> float:
    """Half the machine epsilon of a floating dtype (2^-8 for bfloat16, 2^-11 for float16)."""
    dtype = np.dtype(dtype)
    if dtype == BFLOAT16:
        return 2.0 ** -8
    return float(np.finfo(dtype).eps) / 2
