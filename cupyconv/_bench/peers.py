"""Peers the benchmark compares against, each used only when importable.

CPU: ``scipy.signal`` (``convolve``/``correlate``, ``method="auto"``),
``scipy.ndimage`` (``same`` mode, odd kernels), ``scipy.signal.fftconvolve``
broadcast over channels (what a SciPy user writes for a batched layer and
its gradients), PyTorch CPU and JAX CPU when already installed.

GPU: ``cupyx.scipy.signal.convolve/correlate`` (``method="direct"`` for N-D
input: CuPy's ``auto`` raises there), ``cupyx.scipy.signal.fftconvolve``,
``cupyx.scipy.ndimage.convolve/correlate``, PyTorch ``conv1d``-``conv3d``
(cuDNN, TF32 disabled), the recursive 4-D/5-D-from-3-D approach of public
wrappers (:func:`conv_recursive`), and JAX ``lax.conv_general_dilated``
(``Precision.HIGHEST``) where it runs.

Every peer receives the case's operands in the case's layout (NumPy or
CuPy arrays) and returns its result with the channel axis first.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Callable, Optional, Tuple

import numpy as np

__all__ = ["Peer", "PEERS", "peers_for", "conv_recursive", "as_numpy", "channels_first"]

#: A broadcast FFT peer is skipped when its spectra would pass this size.
FFT_BROADCAST_LIMIT = 2**30


def as_numpy(a):
    """A NumPy copy of a NumPy, CuPy, PyTorch or JAX array."""
    if hasattr(a, "detach"):                      # torch
        return a.detach().cpu().numpy()
    if hasattr(a, "get") and type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def channels_first(a, layout):
    """Move a trailing channel axis to position 1 (any array module)."""
    if layout != "channels_last":
        return a
    perm = (0, a.ndim - 1) + tuple(range(1, a.ndim - 1))
    return a.transpose(perm) if not hasattr(a, "permute") else a.permute(*perm)


def conv_recursive(x, w, stride, padding, dilation, base, base_rank=3, pad_first=None):
    """N-D cross-correlation as a sum of (N-1)-D ones, down to ``base_rank``.

    The approach of public N-D wrappers around ``conv3d``: for each tap ``t``
    of the first kernel axis, the input frames it meets are folded into the
    batch (a copy) and convolved with ``w[:, :, t]`` one rank down; the
    partial results are summed.

    Parameters
    ----------
    x, w : array (NumPy or PyTorch)
        ``(N, C, *S)`` and ``(K, C, *KS)``, channels first.
    stride, padding, dilation : tuple of int
        Per spatial axis (symmetric zero padding).
    base : callable
        ``base(x, w, stride, padding, dilation)`` for rank ``<= base_rank``.
    base_rank : int
    pad_first : callable, optional
        ``pad_first(x, p)`` zero-pads spatial axis 0 by ``p`` on both sides
        (default: :func:`numpy.pad`).
    """
    r = x.ndim - 2
    if r <= base_rank:
        return base(x, w, tuple(stride), tuple(padding), tuple(dilation))
    s0, p0, d0 = stride[0], padding[0], dilation[0]
    if p0:
        x = (pad_first(x, p0) if pad_first is not None else
             np.pad(x, ((0, 0), (0, 0), (p0, p0)) + ((0, 0),) * (r - 1)))
    n, c, k0 = x.shape[0], x.shape[1], w.shape[2]
    o0 = (x.shape[2] - d0 * (k0 - 1) - 1) // s0 + 1
    out = None
    for t in range(k0):
        frames = x[:, :, t * d0: t * d0 + s0 * (o0 - 1) + 1: s0]        # (N, C, O0, ...)
        folded = frames.swapaxes(1, 2).reshape((n * o0, c) + tuple(x.shape[3:]))
        part = conv_recursive(folded, w[:, :, t], stride[1:], padding[1:], dilation[1:],
                              base, base_rank, pad_first)
        out = part if out is None else out + part
    out = out.reshape((n, o0) + tuple(out.shape[1:]))                   # (N, O0, K, ...)
    return out.swapaxes(1, 2)


@dataclasses.dataclass(frozen=True)
class Peer:
    """One peer implementation.

    Attributes
    ----------
    name : str
    device : str
        ``"cpu"`` or ``"gpu"``: the benchmark backend it is compared on.
    module : str
        Imported to decide availability.
    applies : callable
        ``applies(case) -> None`` or the reason it does not apply.
    prepare : callable
        ``prepare(case, arrays) -> fn``; ``fn()`` runs the peer once and
        returns its result.  Conversions happen here, untimed.
    stream_ordered : bool
        True when the work is issued on the legacy default CUDA stream (CUDA
        events time it); False when ``fn`` synchronises itself (wall clock).
    """

    name: str
    device: str
    module: str
    applies: Callable
    prepare: Callable
    stream_ordered: bool = True

    def unavailable(self):
        """``None`` when importable, else the reason (the exception class)."""
        return _import_reason(self.module)


def _import_reason(module):
    try:
        _load(module)
    except Exception as exc:                  # any import failure is "absent"
        return f"not importable ({type(exc).__name__})"
    return None


def _load(module):
    if module == "jax":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        jax = importlib.import_module("jax")
        jax.config.update("jax_enable_x64", True)
        return jax
    mod = importlib.import_module(module)
    if module == "torch":
        # float32 comparisons against exact-float32 kernels: no TF32.
        mod.backends.cudnn.allow_tf32 = False
        mod.backends.cuda.matmul.allow_tf32 = False
    return mod


def _host(a):
    return as_numpy(a)


# ------------------------------------------------------------------ applies
def _only(*kinds, max_rank=None, same_odd=False):
    def applies(case):
        if case.kind not in kinds:
            return f"no {case.kind} here"
        if max_rank is not None and case.ndim > max_rank:
            return f"rank {case.ndim} > {max_rank}"
        if same_odd and (case.mode != "same" or any(k % 2 == 0 for k in case.kernel)):
            return "same mode with odd kernels only (its centring)"
        return None
    return applies


def _fft_sized(kinds):
    inner = _only(*kinds)

    def applies(case):
        why = inner(case)
        if why:
            return why
        if case.kind != "conv" and (case.stride != 1 or case.dilation != 1):
            return "gradients with stride 1, dilation 1 only"
        padded = np.prod([s + 2 * case.padding for s in case.shape], dtype=float)
        nbytes = 16.0 * case.batch * case.cin * case.cout * padded
        if nbytes > FFT_BROADCAST_LIMIT:
            return f"broadcast spectra of {nbytes / 2**30:.1f} GiB"
        return None
    return applies


# ----------------------------------------------------------------- scipy-like
def _signal_prepare(module, direct_nd):
    def prepare(case, arrays):
        sig = _load(module)
        a, b = arrays["in1"], arrays["in2"]
        fn = getattr(sig, case.func)
        method = "direct" if (direct_nd and case.ndim > 1) else "auto"
        return lambda: fn(a, b, case.mode, method=method)
    return prepare


def _fftconvolve_prepare(module):
    def prepare(case, arrays):
        sig = _load(module)
        a, b = arrays["in1"], arrays["in2"]
        if case.func == "correlate":
            b = b[(slice(None, None, -1),) * b.ndim].conj()
        return lambda: sig.fftconvolve(a, b, case.mode)
    return prepare


def _ndimage_prepare(module):
    def prepare(case, arrays):
        nd = _load(module)
        a, b = arrays["in1"], arrays["in2"]
        fn = getattr(nd, case.func)            # correlate conjugates complex weights too
        return lambda: fn(a, b, mode="constant", cval=0.0)
    return prepare


def _dilate(w, d, r):
    if d == 1:
        return w
    span = tuple(d * (k - 1) + 1 for k in w.shape[-r:])
    out = np.zeros(w.shape[:-r] + span, dtype=w.dtype)
    out[(Ellipsis,) + (slice(None, None, d),) * r] = w
    return out


def _scipy_batched_prepare(case, arrays):
    """Batched layer and gradients with scipy.signal.fftconvolve broadcasting."""
    from scipy import signal
    r, p = case.ndim, case.padding
    sp = tuple(range(3, 3 + r))
    flip = (Ellipsis,) + (slice(None, None, -1),) * r
    pad = ((0, 0), (0, 0)) + ((p, p),) * r
    cf = {k: channels_first(_host(v), case.layout) for k, v in arrays.items()}
    if case.kind == "conv":
        x = np.pad(cf["x"], pad)[:, None]                              # (N,1,C,*Sp)
        w = _dilate(cf["w"], case.dilation, r)[flip][None]             # (1,K,C,*KS)
        sub = (Ellipsis,) + (slice(None, None, case.stride),) * r
        return lambda: signal.fftconvolve(x, w, "valid", axes=sp).sum(axis=2)[sub]
    if case.kind == "grad_input":
        dy, w = cf["dy"][:, :, None], cf["w"][None]                    # (N,K,1,*O) (1,K,C,*KS)
        crop = (Ellipsis,) + tuple(slice(p, p + s) for s in case.shape)
        return lambda: signal.fftconvolve(dy, w, "full", axes=sp).sum(axis=1)[crop]
    x = np.pad(cf["x"], pad)[:, None]                                  # (N,1,C,*Sp)
    dy = cf["dy"][flip][:, :, None]                                    # (N,K,1,*O)
    return lambda: signal.fftconvolve(x, dy, "valid", axes=sp).sum(axis=0)


# --------------------------------------------------------------------- torch
def _torch_prepare(device):
    def prepare(case, arrays):
        torch = _load("torch")
        F = torch.nn.functional
        dev = "cuda" if device == "gpu" else "cpu"
        t = {k: channels_first(torch.as_tensor(v, device=dev), case.layout)
             for k, v in arrays.items()}
        r = case.ndim
        geo = dict(stride=(case.stride,) * r, padding=(case.padding,) * r,
                   dilation=(case.dilation,) * r)
        if case.kind == "conv":
            def base(x, w, stride, padding, dilation):
                return getattr(F, f"conv{x.dim() - 2}d")(x, w, stride=stride, padding=padding,
                                                          dilation=dilation)

            def pad_first(x, p):
                return F.pad(x, (0, 0) * (x.dim() - 3) + (p, p))
            x, w = t["x"], t["w"]
            return lambda: conv_recursive(x, w, geo["stride"], geo["padding"],
                                          geo["dilation"], base, 3, pad_first)
        grad = torch.nn.grad
        if case.kind == "grad_input":
            fn = getattr(grad, f"conv{r}d_input")
            size, w, dy = (case.batch, case.cin) + case.shape, t["w"], t["dy"]
            return lambda: fn(size, w, dy, **geo)
        fn = getattr(grad, f"conv{r}d_weight")
        size, x, dy = (case.cout, case.cin) + case.kernel, t["x"], t["dy"]
        return lambda: fn(x, size, dy, **geo)
    return prepare


def _torch_applies(case):
    if case.kind == "conv":
        return None if case.ndim <= 5 else f"rank {case.ndim}"
    return _only("grad_input", "grad_weight", max_rank=3)(case)


# ----------------------------------------------------------------------- jax
def _jax_prepare(device):
    def prepare(case, arrays):
        jax = _load("jax")
        from jax import lax
        platform = "gpu" if device == "gpu" else "cpu"
        dev = jax.devices(platform)[0]
        put = {k: jax.device_put(np.ascontiguousarray(channels_first(_host(v), case.layout)),
                                 dev) for k, v in arrays.items()}
        hi = lax.Precision.HIGHEST
        if case.kind == "signal":
            fn = getattr(importlib.import_module("jax.scipy.signal"), case.func)
            f = jax.jit(lambda a, b: fn(a, b, mode=case.mode, precision=hi))
            a, b = put["in1"], put["in2"]
        else:
            r = case.ndim
            f = jax.jit(lambda a, b: lax.conv_general_dilated(
                a, b, (case.stride,) * r, [(case.padding, case.padding)] * r,
                rhs_dilation=(case.dilation,) * r, precision=hi))
            a, b = put["x"], put["w"]
        return lambda: f(a, b).block_until_ready()
    return prepare


_SIG = ("signal",)
_GRADS = ("grad_input", "grad_weight")

PEERS: Tuple[Peer, ...] = (
    Peer("scipy.signal", "cpu", "scipy.signal", _only(*_SIG),
         _signal_prepare("scipy.signal", direct_nd=False), False),
    Peer("scipy.ndimage", "cpu", "scipy.ndimage", _only(*_SIG, same_odd=True),
         _ndimage_prepare("scipy.ndimage"), False),
    Peer("scipy.fftconvolve", "cpu", "scipy.signal",
         _fft_sized(("conv",) + _GRADS), _scipy_batched_prepare, False),
    Peer("torch-cpu", "cpu", "torch", _torch_applies, _torch_prepare("cpu"), False),
    Peer("jax-cpu", "cpu", "jax", _only("signal", "conv"), _jax_prepare("cpu"), False),
    Peer("cupyx.signal", "gpu", "cupyx.scipy.signal", _only(*_SIG),
         _signal_prepare("cupyx.scipy.signal", direct_nd=True)),
    Peer("cupyx.fftconvolve", "gpu", "cupyx.scipy.signal", _only(*_SIG),
         _fftconvolve_prepare("cupyx.scipy.signal")),
    Peer("cupyx.ndimage", "gpu", "cupyx.scipy.ndimage", _only(*_SIG, same_odd=True),
         _ndimage_prepare("cupyx.scipy.ndimage")),
    Peer("torch-cudnn", "gpu", "torch", _torch_applies, _torch_prepare("gpu")),
    Peer("jax-gpu", "gpu", "jax", _only("signal", "conv"), _jax_prepare("gpu"), False),
)


def peers_for(device, names=None):
    """The peers of ``device`` (``"cpu"``/``"gpu"``), optionally filtered by name.

    Returns a list of ``(peer, reason)``; ``reason`` is ``None`` when the
    peer is importable.
    """
    out = []
    for p in PEERS:
        if p.device != device or (names is not None and p.name not in names):
            continue
        out.append((p, p.unavailable()))
    return out


def applies(peer, case) -> Optional[str]:
    """``None`` when ``peer`` can run ``case``, else the reason."""
    return peer.applies(case)


def cudnn_conv(x, w, padding, tf32=False):
    """PyTorch's conv2d/conv3d (cuDNN, ``benchmark`` on, TF32 as asked) on CuPy arrays
    ``x``, ``w`` as a no-argument callable, or ``None`` (rank above 3, no PyTorch)."""
    if x.ndim - 2 > 3:
        return None                                  # no 4-D GPU convolution anywhere
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
    fn = torch.nn.functional.conv2d if x.ndim == 4 else torch.nn.functional.conv3d
    return lambda: fn(tx, tw, padding=padding)
