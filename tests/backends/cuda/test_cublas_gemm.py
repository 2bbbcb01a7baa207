"""The cuBLAS call of the ``gemm`` path, checked on the CPU: the layout arithmetic
(:func:`matrix_layout`, :func:`gemm_arguments`) read back through a NumPy model of
cuBLAS's column-major strided-batched GEMM, for every operand layout the algorithms
pass (row-major, transposed views, broadcast weights, 4-D batches); then, on a GPU,
the real call against NumPy."""
import numpy as np
import pytest

from cupyconv._dtypes import BFLOAT16 as BF16

from cupyconv.backends.cuda.cublas_gemm import (emulate_strided_batched, gemm_arguments,
                                                matrix_layout)


def _in_buffer(buf, arr_view_fn, shape, rng):
    """A view made by ``arr_view_fn`` of a fresh array placed inside ``buf``."""
    size = int(np.prod(shape))
    start = int(rng.integers(0, 7))
    base = buf[start:start + size].reshape(shape)
    base[...] = rng.standard_normal(shape)
    return arr_view_fn(base), start


def _offset(buf, view):
    return (view.__array_interface__["data"][0] - buf.__array_interface__["data"][0]) // buf.itemsize


CASES = {   # name -> (a maker, b maker): each returns a view of its own buffer
    "row-major 3-D": (lambda r, b: _in_buffer(b, lambda x: x, (3, 4, 5), r),
                      lambda r, b: _in_buffer(b, lambda x: x, (3, 5, 6), r)),
    "a transposed": (lambda r, b: _in_buffer(b, lambda x: x.transpose(0, 2, 1), (3, 5, 4), r),
                     lambda r, b: _in_buffer(b, lambda x: x, (3, 5, 6), r)),
    "b transposed (weight gradient)": (
        lambda r, b: _in_buffer(b, lambda x: x, (2, 4, 5), r),
        lambda r, b: _in_buffer(b, lambda x: x.transpose(0, 2, 1), (2, 6, 5), r)),
    "both transposed": (lambda r, b: _in_buffer(b, lambda x: x.transpose(0, 2, 1), (2, 5, 4), r),
                        lambda r, b: _in_buffer(b, lambda x: x.transpose(0, 2, 1), (2, 6, 5), r)),
    "4-D batch (Winograd)": (lambda r, b: _in_buffer(b, lambda x: x, (3, 2, 4, 5), r),
                             lambda r, b: _in_buffer(b, lambda x: x, (3, 2, 5, 7), r)),
    "broadcast a": (lambda r, b: _in_buffer(b, lambda x: np.broadcast_to(x, (4, 3, 5)), (1, 3, 5), r),
                    lambda r, b: _in_buffer(b, lambda x: x, (4, 5, 2), r)),
    "padded rows (sliced)": (lambda r, b: _in_buffer(b, lambda x: x[:, :, :5], (2, 3, 8), r),
                             lambda r, b: _in_buffer(b, lambda x: x, (2, 5, 3), r)),
    "single row and column": (lambda r, b: _in_buffer(b, lambda x: x, (2, 1, 5), r),
                              lambda r, b: _in_buffer(b, lambda x: x, (2, 5, 1), r)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_arguments_reproduce_matmul(name, dtype):
    rng = np.random.default_rng(len(name))
    make_a, make_b = CASES[name]
    abuf, bbuf = np.zeros(4096, dtype), np.zeros(4096, dtype)
    (a, _), (b, _) = make_a(rng, abuf), make_b(rng, bbuf)
    la = matrix_layout(a.shape, a.strides, a.itemsize)
    lb = matrix_layout(b.shape, b.strides, b.itemsize)
    args = gemm_arguments(la, lb)
    assert args is not None
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    c = np.full(want.size + 3, np.nan, dtype)
    emulate_strided_batched(args, bbuf, _offset(bbuf, b), abuf, _offset(abuf, a), c, 0)
    got = c[: want.size].reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert np.isnan(c[want.size:]).all()            # nothing written past C


def test_planted_layout_bug_is_caught():
    """The model is not blind: a wrong leading dimension changes the product."""
    rng = np.random.default_rng(1)
    abuf, bbuf = np.zeros(512), np.zeros(512)
    a, _ = _in_buffer(abuf, lambda x: x[:, :, :5], (2, 3, 8), rng)
    b, _ = _in_buffer(bbuf, lambda x: x, (2, 5, 3), rng)
    args = list(gemm_arguments(matrix_layout(a.shape, a.strides, 8),
                               matrix_layout(b.shape, b.strides, 8)))
    args[7] = 5                                      # A's ld: 5 instead of 8
    c = np.zeros(2 * 3 * 3)
    emulate_strided_batched(tuple(args), bbuf, _offset(bbuf, b), abuf, _offset(abuf, a), c, 0)
    assert not np.allclose(c.reshape(2, 3, 3), np.matmul(a, b))


@pytest.mark.parametrize("shape,strides", [
    ((2, 3, 4), (96, 8, 32)),         # neither rows nor columns contiguous
    ((2, 3, 4), (-48, 16, 4)),        # negative batch stride
    ((2, 3, 4, 5), (4, 160, 20, 4)),  # batch axes that do not collapse
    ((2, 3, 4), (48, 8, 4)),          # rows overlapping (ld < cols)
])
def test_layouts_cublas_cannot_read_are_refused(shape, strides):
    assert matrix_layout(shape, strides, 4) is None


def test_mismatched_batches_and_empty_products_are_refused():
    one = matrix_layout((3, 4, 5), (80, 20, 4), 4)
    other = matrix_layout((2, 5, 6), (120, 24, 4), 4)
    assert gemm_arguments(one, other) is None
    empty = matrix_layout((3, 5, 0), (0, 0, 4), 4)
    assert gemm_arguments(one, empty) is None


@pytest.mark.gpu
@pytest.mark.parametrize("precision,dtype,tol", [
    ("highest", np.float64, 1e-13), ("highest", np.float32, 1e-5),
    ("tf32", np.float32, 5e-3), ("highest", np.float16, 5e-3),
    *([("highest", BF16, 3e-2)] if BF16 is not None else [])])   # bf16: 8 mantissa bits
def test_cublas_call_matches_numpy(precision, dtype, tol):
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no GPU")
    from cupyconv.backends.cuda.cublas_gemm import batched_matmul
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 40, 24)).astype(dtype)
    b = rng.standard_normal((3, 33, 24)).astype(dtype)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64).transpose(0, 2, 1))
    got = batched_matmul(cp, cp.asarray(a), cp.asarray(b).transpose(0, 2, 1), precision=precision)
    assert got is not None
    err = np.linalg.norm(cp.asnumpy(got).astype(np.float64) - want) / np.linalg.norm(want)
    assert err < tol
    out = cp.zeros((3, 40, 33), dtype)
    assert batched_matmul(cp, cp.asarray(a), cp.asarray(b).transpose(0, 2, 1), out=out) is out
    assert cp.asnumpy(out).any()
