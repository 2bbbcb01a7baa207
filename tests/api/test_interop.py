"""GPU arrays of other libraries are wrapped as CuPy arrays without a copy (issue 16).

On this machine (CuPy without a GPU cannot wrap device memory) small fakes
expose ``__cuda_array_interface__`` or a CUDA ``__dlpack__``, and the tests
check the dispatch decision and the conversion call: ``cupy.asarray`` for
the interface, ``cupy.from_dlpack`` for DLPack, both handed the caller's
object itself (nothing goes through NumPy).  The ``gpu`` tests run the real
PyTorch and JAX where a GPU and the library are present.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.core import args
from helpers import require_cuda

cupy = pytest.importorskip("cupy")


class FakeCudaArray:
    """What Numba's and PyTorch's CUDA arrays expose: the CUDA array interface (v3)."""

    def __init__(self, shape=(1, 1, 4, 4), typestr="<f4"):
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (0xDEAD0000, False), "version": 3,
                                         "strides": None, "stream": 1}


class FakeDLPack:
    """A DLPack producer on a given device type (2: CUDA, 1: CPU)."""

    def __init__(self, device_type=2):
        self.device_type = device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("the fake cannot export")


class CpuTensorLike:
    """A CPU tensor: its ``__cuda_array_interface__`` raises, its DLPack device is the CPU."""

    @property
    def __cuda_array_interface__(self):
        raise TypeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError


class Wrapped(Exception):
    """Raised by the patched CuPy entry points with the object they were handed."""


@pytest.fixture
def cupy_entry_points(monkeypatch):
    """``cupy.asarray``/``cupy.from_dlpack`` raise :class:`Wrapped` (no device here)."""
    def asarray(a, *rest, **kw):
        raise Wrapped("asarray", a)

    def from_dlpack(a, *rest, **kw):
        raise Wrapped("from_dlpack", a)
    monkeypatch.setattr(cupy, "asarray", asarray)
    monkeypatch.setattr(cupy, "from_dlpack", from_dlpack)


@pytest.mark.parametrize("obj, kind", [
    (FakeCudaArray(), "cuda_array_interface"), (FakeDLPack(2), "dlpack"),
    (FakeDLPack(13), "dlpack"), (FakeDLPack(1), None), (CpuTensorLike(), None),
    (np.ones(3), None), (3.0, None), ([1, 2], None)])
def test_gpu_interop_classifies(obj, kind):
    assert args.gpu_interop(obj) == kind


def test_foreign_gpu_arrays_select_cupy():
    assert args.array_module_of(x=FakeCudaArray(), w=FakeDLPack()) is cupy
    assert args.array_module_of(x=CpuTensorLike(), w=np.ones(3)) is np


def test_mixing_a_foreign_gpu_array_with_numpy_names_both():
    with pytest.raises(TypeError, match=r"x is a GPU array \(test_interop.FakeCudaArray\).*"
                                        r"w is a NumPy \(CPU\) array"):
        args.array_module_of(x=FakeCudaArray(), w=np.ones((1, 1, 3, 3)))


def test_as_array_hands_the_object_itself_to_cupy(cupy_entry_points):
    cai, dl = FakeCudaArray(), FakeDLPack()
    with pytest.raises(Wrapped) as info:
        args.as_array(cupy, cai)
    assert info.value.args == ("asarray", cai)
    with pytest.raises(Wrapped) as info:
        args.as_array(cupy, dl)
    assert info.value.args == ("from_dlpack", dl)
    assert isinstance(args.as_array(np, [1.0, 2.0]), np.ndarray)


@pytest.mark.parametrize("call", [
    lambda x, w: cupyconv.conv(x, w),
    lambda x, w: cupyconv.convolve(x, w),
    lambda x, w: cupyconv.correlate(x, w, mode="same"),
    lambda x, w: cupyconv.conv_transpose(x, w),
    lambda x, w: cupyconv.plan_conv((1, 1, 4, 4), (1, 1, 3, 3), np.float32)(x, w),
])
@pytest.mark.parametrize("make", [FakeCudaArray, FakeDLPack], ids=["cai", "dlpack"])
def test_public_functions_wrap_foreign_arrays_on_the_cupy_path(call, make, cupy_entry_points):
    x, w = make(), make()
    with pytest.raises(Wrapped) as info:
        call(x, w)
    assert info.value.args[0] == ("asarray" if make is FakeCudaArray else "from_dlpack")
    assert info.value.args[1] is x or info.value.args[1] is w


def _gpu():
    require_cuda()


@pytest.mark.gpu
def test_pytorch_tensors_in_cupy_out_no_copy():
    torch = pytest.importorskip("torch")
    _gpu()
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    x = torch.randn(2, 3, 9, 9, 9, 9, device="cuda")
    w = torch.randn(4, 3, 3, 3, 3, 3, device="cuda")
    assert args.as_array(cupy, x).data.ptr == x.data_ptr()            # wrapped, not copied
    y = cupyconv.conv(x, w, padding=1)
    assert isinstance(y, cupy.ndarray) and y.shape == (2, 4, 9, 9, 9, 9)
    x2, w2 = x[:, :, 0], w[:, :, 1]                                   # a 3-D slice for torch's conv3d
    ref = torch.nn.functional.conv3d(x2.contiguous(), w2.contiguous(), padding=1)
    got = cupyconv.conv(x2, w2, padding=1)
    np.testing.assert_allclose(cupy.asnumpy(got), ref.cpu().numpy(), rtol=1e-4, atol=1e-4)
    back = torch.from_dlpack(got)                                     # and back without a copy
    assert back.data_ptr() == got.data.ptr


@pytest.mark.gpu
def test_jax_arrays_in_cupy_out_no_copy():
    jax = pytest.importorskip("jax")
    _gpu()
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX without a GPU")
    import jax.numpy as jnp
    x = jnp.asarray(np.random.default_rng(0).standard_normal((16, 16, 16)), dtype=jnp.float32)
    k = jnp.ones((3, 3, 3), dtype=jnp.float32) / 27
    wrapped = args.as_array(cupy, x)
    assert wrapped.data.ptr == x.unsafe_buffer_pointer()
    y = cupyconv.convolve(x, k, mode="same")
    assert isinstance(y, cupy.ndarray)
    from scipy import signal
    np.testing.assert_allclose(cupy.asnumpy(y), signal.convolve(np.asarray(x), np.asarray(k),
                                                                mode="same"), rtol=1e-4, atol=1e-5)
