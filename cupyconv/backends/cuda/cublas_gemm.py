"""Batched GEMM on cuBLAS with the compute type stated, for CuPy arrays.

CuPy's ``matmul`` on operands with a batch axis calls
``cublasGemmStridedBatchedEx`` with a compute type derived from the dtype alone:
the switch ``cupy._core._routines_linalg.set_compute_type`` reaches only 2-D
``dot``.  So a ``precision="tf32"`` product of the ``gemm`` path ran as FP32 FMA
on the H200 (3.86 ms for the 2-D reference layer against 3.27 ms without TF32:
``docs/benchmarks/gpu_h200_2026-12-01/``).  :func:`batched_matmul` makes that
call itself, with ``CUBLAS_COMPUTE_32F_FAST_TF32`` for TF32, ``CUBLAS_COMPUTE_32F``
for float32, float16 and bfloat16 (16-bit operands and result, products summed in
float32, one rounding: ``CUDA_R_16BF``, cuBLAS 11+ on sm_80+) and ``CUBLAS_COMPUTE_64F``
for float64.

The layout arithmetic is pure (:func:`matrix_layout`, :func:`gemm_arguments`) so
the tests check it on the CPU against a NumPy reading of cuBLAS's column-major
convention (:func:`emulate_strided_batched`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._dtypes import LazyTable, bfloat16

__all__ = ["MatrixLayout", "matrix_layout", "gemm_arguments", "emulate_strided_batched",
           "batched_matmul", "SUPPORTED"]

#: dtype -> (cuda data type name, compute type name, TF32 compute type name or None)
SUPPORTED = LazyTable(lambda: {
    np.dtype(np.float16): ("CUDA_R_16F", "CUBLAS_COMPUTE_32F", None),
    np.dtype(np.float32): ("CUDA_R_32F", "CUBLAS_COMPUTE_32F", "CUBLAS_COMPUTE_32F_FAST_TF32"),
    np.dtype(np.float64): ("CUDA_R_64F", "CUBLAS_COMPUTE_64F", None),
    **({bfloat16(): ("CUDA_R_16BF", "CUBLAS_COMPUTE_32F", None)} if bfloat16() is not None else {}),
})
#: ``cudaDataType`` values CuPy's runtime module may not name (``library_types.h``).
_DATA_TYPES = {"CUDA_R_16BF": 14}
_INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class MatrixLayout:
    """A strided batch of dense matrices ``(batch, rows, cols)`` as cuBLAS reads it.

    ``transposed`` is False for rows stored contiguously (row-major, ``ld`` elements
    between rows) and True for columns stored contiguously (``ld`` between columns);
    ``batch_stride`` is in elements (0: one matrix broadcast over the batch)."""

    rows: int
    cols: int
    transposed: bool
    ld: int
    batch: int
    batch_stride: int


def matrix_layout(shape, strides, itemsize):
    """The :class:`MatrixLayout` of an array view (``strides`` in bytes), or None when
    the view is not a strided batch of dense, possibly transposed, matrices."""
    if len(shape) < 2 or any(s % itemsize for s in strides):
        return None
    el = [s // itemsize for s in strides]
    if any(s < 0 for s in el):
        return None
    rows, cols = shape[-2:]
    rs, cs = el[-2:]
    if cs == 1 or cols == 1:
        transposed, ld = False, (rs if rows > 1 else cols)
        if ld < cols:
            return None
    elif rs == 1 or rows == 1:
        transposed, ld = True, (cs if cols > 1 else rows)
        if ld < rows:
            return None
    else:
        return None
    dims = [(n, s) for n, s in zip(shape[:-2], el[:-2]) if n != 1]
    batch = math.prod(n for n, _ in dims)
    if all(s == 0 for _, s in dims):      # one matrix, or one broadcast over the batch
        stride = 0
    else:
        for (_, outer), (inner_n, inner) in zip(dims, dims[1:]):
            if outer != inner * inner_n:
                return None
        stride = dims[-1][1]
        if stride == 0:
            return None
    return MatrixLayout(rows, cols, transposed, max(ld, 1), batch, stride)


def gemm_arguments(a, b):
    """cuBLAS ``gemmStridedBatchedEx`` arguments for ``C = A @ B`` with ``C`` a
    C-contiguous ``(batch, m, n)`` array: ``(transa, transb, m, n, k, lda, strideA,
    ldb, strideB, ldc, strideC, batch)`` with the operands swapped
    (``C^T = B^T A^T``, column-major), the first operand being ``b``; None when the
    batch counts differ (broadcast both first), a size is zero or exceeds cuBLAS's
    32-bit arguments."""
    m, k = a.rows, a.cols
    n = b.cols
    if b.rows != k or a.batch != b.batch or min(m, n, k, a.batch) == 0:
        return None
    batch = a.batch
    if max(m, n, k, a.ld, b.ld, batch) > _INT32_MAX:
        return None
    stride_a, stride_b = a.batch_stride, b.batch_stride
    # column-major C^T (n x m, ldc = n) = op(X) op(Y), X = B^T (n x k), Y = A^T (k x m):
    # a row-major B read column-major *is* B^T (no op); a column-stored one is B (op T).
    return (int(b.transposed), int(a.transposed), n, m, k, b.ld, stride_b, a.ld, stride_a,
            n, m * n, batch)


def _column_major(buf, offset, rows, cols, ld, stride, batch):
    s = buf.itemsize
    return np.lib.stride_tricks.as_strided(buf[offset:], (batch, rows, cols), (stride * s, s, ld * s))


def emulate_strided_batched(args, x_buf, x_off, y_buf, y_off, c_buf, c_off):
    """What cuBLAS computes for :func:`gemm_arguments`' ``args`` on flat NumPy buffers
    (element offsets of the first operand ``x`` = B, the second ``y`` = A and ``C``):
    the tests' model of the column-major convention."""
    transx, transy, m, n, k, ldx, sx, ldy, sy, ldc, sc, batch = args
    x = _column_major(x_buf, x_off, *((k, m) if transx else (m, k)), ldx, sx, batch)
    y = _column_major(y_buf, y_off, *((n, k) if transy else (k, n)), ldy, sy, batch)
    x = x.transpose(0, 2, 1) if transx else x
    y = y.transpose(0, 2, 1) if transy else y
    c = _column_major(c_buf, c_off, m, n, ldc, sc, batch)
    c[...] = np.matmul(x.astype(np.float64), y.astype(np.float64)).astype(c_buf.dtype)


def batched_matmul(cp, a, b, out=None, precision="highest"):
    """``a @ b`` for CuPy arrays through one ``cublasGemmStridedBatchedEx`` with the
    compute type of :data:`SUPPORTED`; None when the dtypes or layouts are outside
    it (the caller then uses ``cupy.matmul``)."""
    dtype = a.dtype
    if b.dtype != dtype or dtype not in SUPPORTED or a.ndim < 2 or b.ndim < 2:
        return None
    batch_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = cp.broadcast_to(a, batch_shape + a.shape[-2:])
    b = cp.broadcast_to(b, batch_shape + b.shape[-2:])
    la = matrix_layout(a.shape, a.strides, dtype.itemsize)
    lb = matrix_layout(b.shape, b.strides, dtype.itemsize)
    args = gemm_arguments(la, lb) if la and lb else None
    if args is None:
        return None
    shape = batch_shape + (a.shape[-2], b.shape[-1])
    direct = (out is not None and out.dtype == dtype and out.flags.c_contiguous
              and out.shape == shape)
    c = out if direct else cp.empty(shape, dtype=dtype)
    _call(cp, args, a, b, c, dtype, precision)
    if out is not None and not direct:
        out[...] = c
        return out
    return c


def _call(cp, args, a, b, c, dtype, precision):
    from cupy_backends.cuda.api import runtime
    from cupy_backends.cuda.libs import cublas
    data_type, compute, tf32 = SUPPORTED[dtype]
    compute_type = getattr(cublas, tf32 if precision == "tf32" and tf32 else compute)
    scalar = np.float64 if dtype == np.float64 else np.float32
    one, zero = np.ones((), scalar), np.zeros((), scalar)
    transx, transy, m, n, k, ldx, sx, ldy, sy, ldc, sc, batch = args
    cuda_type = getattr(runtime, data_type, None)
    if cuda_type is None:
        cuda_type = _DATA_TYPES[data_type]
    cublas.gemmStridedBatchedEx(
        cp.cuda.device.get_cublas_handle(), transx, transy, m, n, k, one.ctypes.data,
        b.data.ptr, cuda_type, ldx, sx, a.data.ptr, cuda_type, ldy, sy, zero.ctypes.data,
        c.data.ptr, cuda_type, ldc, sc, batch, compute_type, cublas.CUBLAS_GEMM_DEFAULT)
