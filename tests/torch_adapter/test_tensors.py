"""Tensors in and out: zero copy on the CPU, dtypes (half precision, autocast as
``conv3d``), clear errors, and ``import cupyconv`` without torch."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv.torch as ct  # noqa: E402
from limits import child_limit  # noqa: E402
from torch_oracle import assert_close  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=child_limit())


def test_import_cupyconv_does_not_import_torch():
    proc = _python("import sys, cupyconv\n"
                   "assert 'torch' not in sys.modules, 'torch imported'\n"
                   "import cupyconv.torch\n"
                   "assert 'torch' in sys.modules\n")
    assert proc.returncode == 0, proc.stderr


def test_missing_torch_names_the_extra():
    proc = _python("import sys\n"
                   "class NoTorch:                  # as if torch were not installed\n"
                   "    def find_spec(self, name, path=None, target=None):\n"
                   "        if name == 'torch' or name.startswith('torch.'):\n"
                   "            raise ModuleNotFoundError(\"No module named 'torch'\")\n"
                   "sys.meta_path.insert(0, NoTorch())\n"
                   "import cupyconv\n"
                   "import cupyconv.torch\n")
    assert proc.returncode != 0
    assert "cupyconv.torch needs PyTorch" in proc.stderr and "[torch]" in proc.stderr


@pytest.fixture
def seen(monkeypatch):
    """The arrays ``cupyconv.conv`` receives and returns under the adapter."""
    calls = []
    real = cupyconv.conv

    def spy(*args, **kwargs):
        y = real(*args, **kwargs)
        calls.append((args, y))
        return y
    monkeypatch.setattr(cupyconv, "conv", spy)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_tensors_are_passed_and_returned_without_copies(seen, dtype):
    base = torch.randn(2, 6, 5, 3, dtype=dtype)
    x = base.transpose(1, 3)                        # (2, 3, 5, 6), not contiguous
    w = torch.randn(4, 3, 2, 2, dtype=dtype)
    y = ct.conv(x, w)
    (xa, wa, _), ya = seen[0]
    assert xa.ctypes.data == x.data_ptr() and xa.strides == tuple(
        s * x.element_size() for s in x.stride())
    assert wa.ctypes.data == w.data_ptr()
    assert y.data_ptr() == ya.ctypes.data            # the result is wrapped, not copied


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_forward_and_gradients(dtype):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 2, 5, 4, 3, generator=gen).to(dtype).requires_grad_()
    w = torch.randn(3, 2, 2, 3, 2, generator=gen).to(dtype).requires_grad_()
    y = ct.conv(x, w, padding=1)
    assert y.dtype == dtype
    dy = torch.randn(y.shape, generator=gen).to(dtype)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    assert dx.dtype == dw.dtype == dtype
    # the reference: the same half-precision values, computed in float64
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    ref = F.conv3d(x64, w64, padding=1)
    ref_dx, ref_dw = torch.autograd.grad(ref, (x64, w64), dy.double())
    xa, wa = (t.detach().abs().requires_grad_() for t in (x64, w64))
    scale = F.conv3d(xa, wa, padding=1)
    s_dx, s_dw = torch.autograd.grad(scale, (xa, wa), dy.double().abs())
    assert_close(y.double(), ref, scale, dtype, 2 * 12, "y")
    assert_close(dx.double(), ref_dx, s_dx, dtype, 3 * 12, "dx")
    assert_close(dw.double(), ref_dw, s_dw, dtype, 2 * 6 * 5 * 4, "dw")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_autocast_follows_conv3d(dtype):
    x = torch.randn(1, 2, 4, 4, 4, dtype=dtype)
    w = torch.randn(3, 2, 3, 3, 3, dtype=dtype)
    b = torch.randn(3, dtype=dtype)
    with torch.autocast("cpu"):
        ref = F.conv3d(x, w, b, padding=1)
        y = ct.conv(x, w, b, padding=1)
    assert y.dtype == ref.dtype
    scale = F.conv3d(x.abs().double(), w.abs().double(), b.abs().double(), padding=1)
    assert_close(y.double(), ref.double(), scale, ref.dtype, 2 * 27 + 1, "autocast")


def test_mixed_devices_are_refused():
    x, w = torch.randn(1, 1, 3, 3), torch.empty(1, 1, 2, 2, device="meta")
    with pytest.raises(RuntimeError, match="same device: x is on cpu, w is on meta"):
        ct.conv(x, w)


@pytest.mark.parametrize("dtype", [torch.int64, torch.complex64, torch.bool])
def test_unsupported_dtypes_are_refused(dtype):
    x = torch.ones(1, 1, 3, 3, dtype=dtype)
    with pytest.raises(TypeError, match=f"x has dtype {str(dtype)[6:]}.*float32"):
        ct.conv(x, x)


def test_integers_next_to_a_trainable_weight_are_refused():
    # torch itself refuses requires_grad on an integer tensor; an integer input to a
    # layer with trainable weights is refused before anything runs, with the fix
    with pytest.raises(RuntimeError, match="floating point"):
        torch.ones(3, dtype=torch.int64).requires_grad_()
    w = torch.randn(1, 1, 2, 2, requires_grad=True)
    with pytest.raises(TypeError, match=r"integer tensors no gradients.*\.float\(\)"):
        ct.conv(torch.ones(1, 1, 3, 3, dtype=torch.int32), w)


def test_mixed_dtypes_and_arrays_are_refused():
    with pytest.raises(TypeError, match="same dtype.*: x is float32, w is float64"):
        ct.conv(torch.ones(1, 1, 3, 3), torch.ones(1, 1, 2, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="w must be a torch.Tensor"):
        ct.conv(torch.ones(1, 1, 3, 3), np.ones((1, 1, 2, 2), np.float32))


def test_geometry_errors_are_cupyconvs():
    x, w = torch.ones(1, 2, 5, 5), torch.ones(3, 2, 3, 3)
    with pytest.raises(ValueError, match="stride"):
        ct.conv(x, w, stride=0)
    with pytest.raises(ValueError, match="cval"):
        ct.conv(x, w, padding=1, padding_mode="reflect", cval=1.0)
    with pytest.raises(ValueError, match="padding_mode"):
        ct.conv(x, w, padding_mode="mirror")
    with pytest.raises(ValueError, match="spatial axes"):
        ct.conv(torch.ones(1, 1, *[2] * 9), torch.ones(1, 1, *[1] * 9))


#: (a valid argument, one equal to it in Python that cupyconv refuses)
EQUAL_BUT_REFUSED = [
    ("stride", 1, True), ("stride", (1, 1), (True, 1)), ("padding", 1, 1.0),
    ("padding", (1, 1), (1.0, 1)), ("padding", ((1, 1), (1, 1)), ((1, True), (1, 1))),
    ("dilation", (1, 1), (1.0, 1)), ("cval", 1, True),
]


@pytest.mark.parametrize("name,valid,refused", EQUAL_BUT_REFUSED)
def test_every_call_checks_its_own_arguments(name, valid, refused):
    # a layer's arguments are normalised once per distinct call; an argument equal to a
    # valid one (True == 1 == 1.0) is still refused, and an error is raised every time
    x, w = torch.ones(1, 2, 5, 5), torch.ones(3, 2, 3, 3)
    ct.conv(x, w, **{name: valid})
    for _ in range(2):
        with pytest.raises(TypeError, match=name):
            ct.conv(x, w, **{name: refused})
    ct.conv_transpose(x, w.transpose(0, 1), stride=2, output_padding=1)
    with pytest.raises(TypeError, match="output_padding"):
        ct.conv_transpose(x, w.transpose(0, 1), stride=2, output_padding=True)


def test_repeated_argument_objects_follow_their_values_and_shapes():
    # the same argument objects again (a layer's attributes, a literal) reuse the
    # normalised geometry: for each input shape, and never for a list changed in place
    # or an attribute given a new value
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64)
    pads, twos, stride = (1, 1), (2, 2), [1, 1]
    for size in (5, 8, 5):
        x = torch.randn(1, 2, size, size + 2, dtype=torch.float64)
        # float64 sums of 18 products: the two engines' orders differ by a few ulps
        torch.testing.assert_close(ct.conv(x, w, padding=pads),
                                   F.conv2d(x, w, padding=pads), rtol=1e-12, atol=1e-12)
        # "same" with a stride: the padding depends on the input size
        assert torch.equal(ct.conv(x, w, padding="same", stride=twos),
                           ct.conv(x, w, padding="same", stride=tuple([2, 2])))
    assert ct.conv(x, w, stride=stride).shape == (1, 3, 3, 5)
    stride[0] = 2
    assert ct.conv(x, w, stride=stride).shape == (1, 3, 2, 5)
    layer = ct.ConvNd(2, 3, (3, 3), padding=1, dtype=torch.float64)
    assert layer(x).shape == (1, 3, 5, 7)
    layer.padding = (0, 0)
    assert layer(x).shape == (1, 3, 3, 5)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")   # torch's
@pytest.mark.parametrize("size", [5, 6, 7])
def test_same_padding_follows_each_input_size(size):
    x = torch.randn(1, 2, size, size + 1, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 2, dtype=torch.float64)
    ct.conv(torch.randn(1, 2, 9, 9, dtype=torch.float64), w, padding="same")  # another size
    # float64 sums of 12 products: the two engines' orders differ by a few ulps
    torch.testing.assert_close(ct.conv(x, w, padding="same"), F.conv2d(x, w, padding="same"),
                               rtol=1e-12, atol=1e-12)
