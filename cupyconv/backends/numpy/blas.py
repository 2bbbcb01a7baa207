"""The CPU GEMM of the ``gemm`` blocks: Intel oneMKL's ``cblas_?gemm`` where the ``mkl``
package is installed, else NumPy's ``matmul`` (OpenBLAS in the NumPy wheels).

oneMKL runs the column blocks' narrow products 1.2-2.6x faster than OpenBLAS on the
development machine (one core, float32, blocks of 448 positions, lower quartile of 9 at
load 9: ``(32, 864) @ (864, 448)`` 174-183 GFLOP/s against 85-93; ``(16, 1296) @
(1296, 448)`` 151-152 against 58-83; ``(64, 576) @ (576, 448)`` 157-165 against
134-135; ``(128, 640) @ (640, 448)`` 189-198 against 132-144), which is where PyTorch's
oneDNN was ahead.  It is loaded through :mod:`ctypes` with its sequential threading
layer: the blocks already run one per core (:mod:`.threads`), and ctypes releases the
GIL for the call.  Only real float32/float64 operands whose rows or columns are
contiguous go to oneMKL; anything else, and every call when ``CUPYCONV_MKL=0`` is set or
the library is absent, runs ``numpy.matmul``.

oneMKL is used on Intel CPUs only, unless ``CUPYCONV_MKL=1`` asks for it anywhere: on
other x86-64 CPUs it takes slower code paths (AMD EPYC with AVX-512, one core, quiet,
against NumPy's OpenBLAS: float32 ``(1000, 324) @ (324, 8)`` 18 GFLOP/s against 48,
``(448, 864) @ (864, 32)`` 74 against 86, float64 ``(448, 864) @ (864, 32)`` 22 against
36; every shape the blocks use was slower).
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import pathlib
import platform

import numpy as np
from ..._lru import cached

__all__ = ["matmul", "matmul_into", "mkl", "load_mkl", "intel_cpu", "MKL_DTYPES"]

#: The dtypes oneMKL computes here (``cblas_sgemm``, ``cblas_dgemm``).
MKL_DTYPES = {np.dtype(np.float32): "cblas_sgemm", np.dtype(np.float64): "cblas_dgemm"}
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_SEQUENTIAL = 1            # MKL_THREADING_SEQUENTIAL
_INT_MAX = 2**31 // 16     # dimensions and strides (bytes) that fit MKL_INT as elements


def _library_paths():
    """``libmkl_rt`` files of the installed ``mkl`` distribution (none without it)."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    return [pathlib.Path(f.locate()) for f in files if f.name.startswith("libmkl_rt.so")]


def intel_cpu():
    """Whether this is an Intel CPU (``GenuineIntel`` in ``/proc/cpuinfo``; where that
    file is missing, an x86-64 machine whose processor name does not say AMD)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return "GenuineIntel" in line
    except OSError:
        pass
    return "amd" not in platform.processor().lower()


@cached(maxsize=1, keep=True)
def mkl():
    """``{dtype: cblas gemm}`` of oneMKL (:func:`load_mkl`) where the gemm blocks use it:
    on an Intel CPU (:func:`intel_cpu`) or with ``CUPYCONV_MKL=1``; else ``None``
    (never under ``CUPYCONV_MKL=0``).  Decided and loaded once per process."""
    choice = os.environ.get("CUPYCONV_MKL")
    if choice == "0" or (choice != "1" and not intel_cpu()):
        return None
    return load_mkl()


def load_mkl():
    """``{dtype: cblas gemm}`` of oneMKL, loaded with its sequential threading layer,
    whatever the CPU and ``CUPYCONV_MKL`` say (:func:`mkl` decides and keeps it), or
    ``None`` (not installed, or unloadable)."""
    for path in _library_paths():
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
        lib.MKL_Set_Threading_Layer(_SEQUENTIAL)
        funcs = {}
        for dtype, name in MKL_DTYPES.items():
            scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
            fn = getattr(lib, name)
            fn.restype = None
            # the LP64 interface of libmkl_rt: MKL_INT is a C int
            fn.argtypes = ([ctypes.c_int] * 6
                           + [scalar, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                              ctypes.c_int, scalar, ctypes.c_void_p, ctypes.c_int])
            funcs[dtype] = fn
        return funcs
    return None


def _operand(a):
    """``(trans, ld)`` of a 2-D array for row-major BLAS, or ``None`` when neither its
    rows nor its columns are contiguous."""
    item = a.itemsize
    rows, cols = a.shape
    s0, s1 = a.strides
    if (s1 == item or cols == 1) and s0 % item == 0 and s0 // item >= max(cols, 1):
        return _NO_TRANS, s0 // item
    if (s0 == item or rows == 1) and s1 % item == 0 and s1 // item >= max(rows, 1):
        return _TRANS, s1 // item
    return None


def matmul(a, b):
    """``a @ b`` for 2-D operands or stacks of them (the same leading shape), through
    oneMKL where :func:`mkl` loads and the operands allow, else ``numpy.matmul``."""
    if not _mkl_applies(a, b):
        return np.matmul(a, b)
    out = np.empty(a.shape[:-1] + b.shape[-1:], dtype=a.dtype)
    _products(a, b, out)
    return out


def _mkl_applies(a, b):
    funcs = mkl()
    return not (funcs is None or a.dtype != b.dtype or a.dtype not in funcs
                or a.ndim != b.ndim or a.ndim not in (2, 3) or a.shape[:-2] != b.shape[:-2]
                or a.shape[-1] != b.shape[-2] or 0 in a.shape or 0 in b.shape
                or max(map(abs, a.strides + b.strides + a.shape + b.shape)) >= _INT_MAX)


def matmul_into(a, b, out):
    """``out[...] = a @ b`` for 2-D operands or stacks of them, ``out`` any view of the
    result's shape and dtype (a block of rows of a larger array, with its row stride:
    the gemm blocks write their products straight into the result).  oneMKL where
    :func:`mkl` loads and the operands and ``out`` allow (``out``'s rows contiguous),
    else ``numpy.matmul(a, b, out=out)``."""
    if not (_mkl_applies(a, b) and out.dtype == a.dtype
            and out.shape == a.shape[:-1] + b.shape[-1:]
            and max(map(abs, out.strides)) < _INT_MAX):
        np.matmul(a, b, out=out)
        return
    _products(a, b, out)


def _products(a, b, out):
    """oneMKL's products of operands :func:`_mkl_applies` passed, into ``out``; a pair
    whose layout BLAS cannot take runs ``numpy.matmul`` (a 2-D pair is called directly:
    this Python is held under the GIL once per gemm block and group)."""
    gemm = mkl()[a.dtype]
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    for ai, bi, oi in ((a, b, out),) if a.ndim == 2 else zip(a, b, out):
        pa, pb, po = _operand(ai), _operand(bi), _operand(oi)
        if pa is None or pb is None or po is None or po[0] != _NO_TRANS:
            np.matmul(ai, bi, out=oi)
            continue
        gemm(_ROW_MAJOR, pa[0], pb[0], m, n, k, 1.0, ai.ctypes.data, pa[1],
             bi.ctypes.data, pb[1], 0.0, oi.ctypes.data, po[1])
