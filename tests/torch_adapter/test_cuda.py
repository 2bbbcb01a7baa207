"""CUDA tensors: DLPack both ways without copies, on torch's current stream, results and
gradients equal to the CPU path's (needs a CUDA device; skipped without one)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import cupyconv  # noqa: E402
import cupyconv.torch as ct  # noqa: E402
from helpers import require_cuda  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture
def cupy():
    cp = require_cuda()
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return cp


def test_cuda_tensors_run_on_torchs_current_stream_without_copies(cupy, monkeypatch):
    seen = []
    real = cupyconv.conv

    def spy(x, w, b, **kw):
        seen.append((x.data.ptr, w.data.ptr, cupy.cuda.get_current_stream().ptr))
        y = real(x, w, b, **kw)
        seen.append(y.data.ptr)
        return y
    monkeypatch.setattr(cupyconv, "conv", spy)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.randn(2, 3, 6, 5, 4, 3, device="cuda")
        w = torch.randn(4, 3, 3, 2, 2, 2, device="cuda")
        b = torch.randn(4, device="cuda")
        y = ct.conv(x, w, b, padding=1)
    (xp, wp, sp), yp = seen
    assert (xp, wp) == (x.data_ptr(), w.data_ptr())
    assert sp == stream.cuda_stream
    assert y.data_ptr() == yp and y.device == x.device
    stream.synchronize()
    ref = ct.conv(x.cpu(), w.cpu(), b.cpu(), padding=1)
    # float32 on both devices; only summation order differs (TF32 off by default)
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-4)


def test_cuda_gradients_and_double_backward_match_the_cpu(cupy):
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(s, generator=gen, dtype=torch.float64) for s in
           ((2, 2, 5, 4, 3, 4), (4, 1, 2, 3, 2, 2), (4,))]
    results = []
    for device in ("cpu", "cuda"):
        x, w, b = (t.to(device).requires_grad_() for t in cpu)
        y = ct.conv(x, w, b, stride=(1, 2, 1, 1), padding=1, groups=2,
                    padding_mode="reflect")
        gx, gw = torch.autograd.grad(y.square().sum(), (x, w), create_graph=True)
        penalty = gx.square().sum() + gw.square().sum()
        results.append([t.detach().cpu() for t in
                        (y, gx, gw, *torch.autograd.grad(penalty, (x, w, b)))])
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_modules_on_cuda_and_mixed_devices(cupy):
    torch.manual_seed(0)
    layer = ct.Conv4d(2, 3, 3, padding=1, device="cuda")
    y = layer(torch.randn(1, 2, 4, 4, 4, 4, device="cuda"))
    y.sum().backward()
    assert y.device.type == "cuda" and layer.weight.grad.device.type == "cuda"
    with pytest.raises(RuntimeError, match="same device"):
        layer(torch.randn(1, 2, 4, 4, 4, 4))
