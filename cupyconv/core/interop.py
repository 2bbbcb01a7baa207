"""How an array of another library exposes its memory: the checks :mod:`.args` runs on
arrays that are neither NumPy's nor CuPy's, before it wraps them (:func:`.args.as_array`)."""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["is_cupy_array", "DLPACK_CUDA_DEVICES", "gpu_interop"]


def is_cupy_array(a):
    """True for CuPy arrays (checked by module name: CuPy need not be importable)."""
    return type(a).__module__.startswith("cupy")


#: DLPack device types whose memory CuPy can wrap: kDLCUDA and kDLCUDAManaged (dlpack.h).
DLPACK_CUDA_DEVICES = (2, 13)


def gpu_interop(a):
    """How a GPU array of another library exposes its memory, or ``None``.

    ``"cuda_array_interface"`` for an object with ``__cuda_array_interface__``
    (PyTorch CUDA tensors, Numba device arrays, JAX GPU arrays), else
    ``"dlpack"`` for one whose ``__dlpack_device__()`` is a CUDA device;
    ``None`` for NumPy and CuPy arrays, CPU tensors (whose DLPack device is
    the CPU), scalars and sequences.
    """
    if a is None or isinstance(a, (np.ndarray, np.generic, numbers.Number, str, bytes, list, tuple)):
        return None
    if is_cupy_array(a):
        return None
    try:
        if getattr(a, "__cuda_array_interface__", None) is not None:
            return "cuda_array_interface"
    except Exception:  # noqa: BLE001 - e.g. a CPU torch.Tensor raises on the attribute
        pass
    if callable(getattr(a, "__dlpack__", None)) and callable(getattr(a, "__dlpack_device__", None)):
        try:
            device_type = int(a.__dlpack_device__()[0])
        except Exception:  # noqa: BLE001 - a producer that cannot say
            return None
        if device_type in DLPACK_CUDA_DEVICES:
            return "dlpack"
    return None
