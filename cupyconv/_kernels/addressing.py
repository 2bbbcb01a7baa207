"""Which operands the kernels can address in place (strides, alignment).

Kernels index element ``[0, ..., 0]`` of each view with the view's element
strides; they cannot address a byte stride that is not a multiple of the
itemsize (a record field) or a pointer aligned below the element type's
alignment (a complex view only 4/8-byte aligned), which would fault on the
device with a misaligned address.  The launchers refuse such operands; the
CUDA backend copies them first.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from .._lru import cached

__all__ = ["addressable", "unaddressable", "check_addressable", "data_pointer", "extent",
           "span", "spans", "span_in", "aligned", "device_alignment"]


def data_pointer(array) -> int:
    """Address of element ``[0, ..., 0]`` of a NumPy or CuPy array (or array-like)."""
    iface = getattr(array, "__array_interface__", None)      # NumPy (host / emulated)
    if iface is not None:
        return int(iface["data"][0])
    ptr = getattr(getattr(array, "data", None), "ptr", None)  # CuPy: MemoryPointer.ptr
    if ptr is not None:
        return int(ptr)
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    raise TypeError(f"cannot find the data pointer of a {type(array).__name__}")


def extent(array, ptr=None):
    """``(lowest, highest + 1)`` byte address of ``array``'s elements (``None`` if empty);
    ``ptr``: its :func:`data_pointer`, when the caller has it."""
    if 0 in array.shape:
        return None
    lo = hi = data_pointer(array) if ptr is None else ptr
    for n, st in zip(array.shape, array.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + int(np.dtype(array.dtype).itemsize)


def span(array):
    """``(data pointer, extent)`` of ``array`` (:func:`data_pointer`, :func:`extent`);
    ``(None, None)`` for what is not an array (no ``shape``: nothing lies within it)."""
    if getattr(array, "shape", None) is None:
        return None, None
    ptr = data_pointer(array)
    return ptr, extent(array, ptr)


def spans(arrays, memo=None):
    """The :func:`span` of each of ``arrays``, as a list (through :func:`span_in` and
    ``memo`` when given)."""
    out = []
    for a in arrays:
        out.append(span(a) if memo is None else span_in(memo, a))
    return out


def span_in(memo, array):
    """:func:`span` of ``array``, remembered in the dict ``memo`` (``id`` -> ``(array,
    span)``: the array is kept with its span, so its ``id`` is not reused while ``memo``
    lives).  For arrays looked at many times in one call (a recording)."""
    known = memo.get(id(array))
    if known is None:
        known = memo[id(array)] = (array, span(array))
    return known[1]


def aligned(arrays, nbytes: int) -> bool:
    """Whether every array of ``arrays`` (``None`` entries skipped) starts at a multiple
    of ``nbytes``."""
    for a in arrays:
        if a is not None and data_pointer(a) % nbytes:
            return False
    return True


@cached(maxsize=64, keep=True)
def device_alignment(dtype) -> int:
    """Bytes to which the kernels' element type of ``dtype`` must be aligned.

    ``cc::complex<Real>`` is ``alignas(2 * sizeof(Real))``: complex64 needs 8 and
    complex128 16 bytes, more than NumPy's ``dtype.alignment``; others their size.
    """
    dt = np.dtype(dtype)
    if dt.kind in "biufc":
        return int(dt.itemsize)
    return max(int(dt.alignment), 1)


def addressable(array) -> Tuple[bool, str]:
    """Whether the kernels can address ``array`` in place.

    True when every byte stride is a multiple of the itemsize (the kernels
    take element strides) and the data pointer is aligned to the element
    type (:func:`device_alignment`).  A record-field view (stride 9) or a
    complex64 view of a float32 buffer at an odd offset is not: launching
    on it would fault on the device with a misaligned address and kill the
    CUDA context.  Such operands must be copied first.

    Parameters
    ----------
    array : numpy.ndarray or cupy.ndarray

    Returns
    -------
    (bool, str)
        ``(True, "")`` or ``(False, reason)``.
    """
    dt = np.dtype(array.dtype)
    item = int(array.itemsize)
    for ax, st in enumerate(array.strides):
        if int(st) % item:
            return False, (f"stride {int(st)} of axis {ax} is not a multiple of the itemsize {item} "
                           f"({dt.name} array of shape {tuple(array.shape)}); copy the array first")
    align = device_alignment(dt)
    if align == dt.alignment and type(array) is np.ndarray and array.flags.aligned:
        return True, ""         # NumPy's flag: the pointer is a multiple of dt.alignment
    ptr = data_pointer(array)
    if ptr % align:
        return False, (f"data pointer {ptr:#x} is not aligned to {align} bytes, as the kernels' "
                       f"{dt.name} elements require ({dt.name} array of shape {tuple(array.shape)}); "
                       f"copy the array first")
    return True, ""


def unaddressable(**arrays) -> Dict[str, str]:
    """``{name: reason}`` of the named arrays the kernels cannot address in place
    (:func:`addressable`), in argument order; ``None`` entries skipped."""
    bad = {}
    for name, a in arrays.items():
        if a is not None:
            ok, why = addressable(a)
            if not ok:
                bad[name] = why
    return bad


def check_addressable(**arrays) -> None:
    """Raise ``ValueError`` naming the first operand the kernels cannot address."""
    for name, why in unaddressable(**arrays).items():
        raise ValueError(f"{name}: {why}")
