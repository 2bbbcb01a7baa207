"""Torch tensors as NumPy or CuPy arrays and back, without copying.

CPU tensors become NumPy views (``Tensor.numpy()``; bfloat16 through ``ml_dtypes``),
CUDA tensors CuPy arrays by DLPack while torch's current stream is CuPy's current
stream, so the kernels queue behind the work that produced the inputs and nothing
synchronises the device.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

__all__ = ["SUPPORTED", "check_tensors", "device_of", "call", "call_checked"]

#: The dtypes the adapter accepts (those of ``torch.nn.functional.conv3d``'s real path).
SUPPORTED = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _describe(dtype):
    return str(dtype).replace("torch.", "")


def check_tensors(**tensors):
    """Raise a clear error for what the adapter does not take; returns the device.

    Every operand must be a tensor of one supported floating dtype, all of the same
    dtype, on one CPU or CUDA device.
    """
    given = {k: t for k, t in tensors.items() if t is not None}
    for name, t in given.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__} "
                            "(cupyconv.conv takes NumPy and CuPy arrays)")
    devices = {name: t.device for name, t in given.items()}
    if len(set(devices.values())) > 1:
        desc = ", ".join(f"{n} is on {d}" for n, d in devices.items())
        raise RuntimeError(f"all tensors must be on the same device: {desc}; move them "
                           "with .to(device) first")
    for name, t in given.items():
        if t.dtype not in SUPPORTED:
            hint = ""
            if not (t.dtype.is_floating_point or t.dtype.is_complex):
                hint = (" (torch gives integer tensors no gradients, so a layer cannot "
                        "train on them: cast with .float())")
            raise TypeError(
                f"{name} has dtype {_describe(t.dtype)}, which cupyconv.torch does not "
                f"support; use one of {', '.join(map(_describe, SUPPORTED))}{hint}")
    dtypes = {name: t.dtype for name, t in given.items()}
    if len(set(dtypes.values())) > 1:
        desc = ", ".join(f"{n} is {_describe(d)}" for n, d in dtypes.items())
        raise TypeError(f"all tensors must have the same dtype (as in torch's conv3d): "
                        f"{desc}")
    device = next(iter(devices.values()))
    if device.type not in ("cpu", "cuda", "meta"):      # meta: shapes only (the fake)
        raise RuntimeError(f"cupyconv.torch runs CPU and CUDA tensors; got a tensor on "
                           f"{device}")
    return device


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("bfloat16 tensors on the CPU need ml_dtypes (pip install "
                        "ml_dtypes, or cupyconv[bf16])") from None
    return np.dtype(ml_dtypes.bfloat16)


def _numpy_view(t):
    if t.dtype is torch.bfloat16:
        return t.detach().view(torch.int16).numpy().view(_bfloat16())
    return t.numpy(force=True)     # detached; a view of a CPU tensor of a real dtype


def _from_numpy(a):
    """``a`` as a contiguous tensor: its memory where torch can take it."""
    flags = a.flags
    if flags.c_contiguous and flags.writeable and a.dtype.kind != "V":
        return torch.from_numpy(a)             # the common case, checked first
    if not flags.writeable or (not flags.c_contiguous and min(a.strides, default=0) < 0):
        a = a.copy()               # torch.from_numpy takes writable, positive strides
    if a.dtype.kind == "V":        # ml_dtypes' bfloat16: torch has no NumPy twin
        out = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    else:
        out = torch.from_numpy(a)
    return out if out.is_contiguous() else out.contiguous()


def _from_dlpack(a):
    out = torch.from_dlpack(a)
    return out if out.is_contiguous() else out.contiguous()


@contextlib.contextmanager
def _cuda_stream(device):
    """CuPy's current device and stream set to torch's for the block."""
    import cupy  # only reached with CUDA tensors in hand
    stream = torch.cuda.current_stream(device)
    with cupy.cuda.Device(device.index), cupy.cuda.ExternalStream(
            stream.cuda_stream, device.index):
        yield cupy


_ACCEPTED = frozenset(SUPPORTED)


def device_of(tensors, names=None):
    """The operands' device: read off the first when every operand (``None`` skipped) is
    a tensor of one supported dtype on one CPU or CUDA device (the common case, checked
    cheaply), else by :func:`check_tensors` under ``names`` (default ``operand i``), which
    raises its error or answers a meta device."""
    first = None
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            break
        if first is None:
            first = t
            dtype, device = t.dtype, t.device
            if dtype not in _ACCEPTED or device.type not in ("cpu", "cuda"):
                break
        elif t.dtype != dtype or t.device != device:
            break
    else:
        if first is not None:
            return device
    names = names or [f"operand {i}" for i in range(len(tensors))]
    return check_tensors(**dict(zip(names, tensors)))


def call(fn, tensors, *args, **kwargs):
    """``fn(*arrays, *args, **kwargs)`` on the memory of ``tensors``; its array result
    (or each of a tuple of them) as a tensor, without copies.

    ``None`` passes through.  A result is contiguous (the operators promise torch
    contiguous outputs); a non-contiguous one is copied once.
    """
    device_of(tensors)
    return call_checked(fn, tensors, *args, **kwargs)


def call_checked(fn, tensors, *args, **kwargs):
    """:func:`call` for operands :func:`device_of` has accepted (``tensors[0]`` a
    tensor): the same views, call and results, without checking them again."""
    first = tensors[0]
    if first.is_cpu:
        return _tensors(fn(*[None if t is None else _numpy_view(t) for t in tensors],
                           *args, **kwargs), _from_numpy)
    with _cuda_stream(first.device) as cupy:    # results wrapped on torch's stream too
        return _tensors(fn(*[None if t is None else cupy.from_dlpack(t.detach())
                             for t in tensors], *args, **kwargs), _from_dlpack)


def _tensors(out, wrap):
    """``wrap`` of an array result, or of each of a tuple of them (``None`` kept)."""
    if type(out) is tuple:
        return tuple([None if a is None else wrap(a) for a in out])
    return wrap(out)
