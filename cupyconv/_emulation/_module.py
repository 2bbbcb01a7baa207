"""CuPy ``RawModule`` / ``RawKernel`` look-alikes backed by the CPU emulator."""
from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path

import numpy as np

from . import _build
from .._lru import cached

__all__ = ["EmulatedModule", "EmulatedFunction", "EmulationError", "build_module"]

_launch_lock = threading.Lock()
_DEFAULT_MAX_DYNAMIC_SHARED = 48 * 1024
_HARD_MAX_DYNAMIC_SHARED = 227 * 1024


class EmulationError(RuntimeError):
    """An emulated launch failed (divergent barrier, deadlock, bad config, ...)."""


def _wrapper_source(body: str, name_expressions) -> str:
    """C++ translation unit: the kernel source plus one launcher per kernel."""
    lines = [body, "", "#define CUPYCONV_EMU_EXPORT extern \"C\" __attribute__((visibility(\"default\")))",
             "CUPYCONV_EMU_EXPORT const char* emu_last_error() { return ::cupyconv_emu::last_error(); }",
             "CUPYCONV_EMU_EXPORT const char* emu_backend() { return ::cupyconv_emu::backend_name(); }",
             "CUPYCONV_EMU_EXPORT const char* emu_names() { return "
             + json.dumps("\n".join(name_expressions)) + "; }"]
    for i, expr in enumerate(name_expressions):
        lines += [
            f"// kernel {i}: {expr}",
            f"CUPYCONV_EMU_EXPORT int emu_launch_{i}(unsigned gx, unsigned gy, unsigned gz,"
            " unsigned bx, unsigned by, unsigned bz, unsigned long long shmem, void** args,"
            " int schedule) {",
            f"  return ::cupyconv_emu::launch_kernel(&{expr}, dim3(gx, gy, gz), dim3(bx, by, bz),"
            " static_cast<std::size_t>(shmem), args, schedule);",
            "}",
            f"CUPYCONV_EMU_EXPORT int emu_num_args_{i}() {{"
            f" return ::cupyconv_emu::kernel_num_args(&{expr}); }}",
            f"CUPYCONV_EMU_EXPORT long long emu_arg_info_{i}(int k, int* is_pointer) {{"
            f" return ::cupyconv_emu::kernel_arg_info(&{expr}, k, is_pointer); }}",
        ]
    return "\n".join(lines) + "\n"


@cached(maxsize=64, keep=True)
def _load(path: str) -> ctypes.CDLL:
    """dlopen a built library once per process."""
    lib = ctypes.CDLL(path)
    for name in ("emu_last_error", "emu_backend", "emu_names", _build.ENTRY_KEY_SYMBOL):
        getattr(lib, name).restype = ctypes.c_char_p
    return lib


def _delete_hint(lib: Path) -> str:
    return (f"delete {lib} and {lib.with_suffix('.sha256')} (or set CUPYCONV_CACHE_DIR to "
            f"another directory) and try again")


def _open_library(build, names) -> tuple[Path, ctypes.CDLL]:
    """Build (or find) a library and load it, checked against its entry after ``dlopen``.

    A library that does not load (a corrupt file whose sidecar still matches)
    is evicted and rebuilt once; the error of a second failure names the file.
    """
    lib = build()
    try:
        handle = _load(str(lib))
    except OSError:
        _build.evict(lib)
        lib = build()
        try:
            handle = _load(str(lib))
        except OSError as exc:
            raise EmulationError(f"the emulated kernel library {lib} does not load even after "
                                 f"a rebuild ({exc}); {_delete_hint(lib)}") from exc
    try:
        key = handle.emu_entry_key().decode()
        loaded_names = handle.emu_names().decode().split("\n")
    except (AttributeError, UnicodeDecodeError):
        key, loaded_names = None, None
    if key != _build.entry_mark(lib.stem) or loaded_names != list(names):
        raise EmulationError(f"the emulated kernel library {lib} is not the entry it is named "
                             f"for (it changed after it was verified); {_delete_hint(lib)}")
    return lib, handle


_INTS, _BOOLS = (int, np.integer), (bool, np.bool_)


def _dims(value, what: str) -> tuple[int, int, int]:
    """Normalise an int or tuple of up to three ints to a 3-tuple."""
    dims = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(dims) <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    for d in dims:
        if not isinstance(d, _INTS) or isinstance(d, _BOOLS):
            raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    out = (*map(int, dims), 1, 1)[:3]
    for d in out:
        if d < 1 or d > 0xFFFFFFFF:
            raise ValueError(f"{what} dimensions must be positive 32-bit integers, got {value!r}")
    return out


def _resolve_source(path) -> Path:
    """Kernel source path: as given, else relative to cuda_src's parent."""
    p = Path(path)
    for candidate in (p, _build.cuda_src_dir().parent / p):
        if candidate.is_file():
            return candidate.resolve()
    raise FileNotFoundError(f"kernel source {path!s} not found")


def build_module(code: str | None = None, path=None, options=(), name_expressions=(),
                 mode: str = "normal", stack_size: int | None = None) -> Path:
    """Compile (or find in the cache) the library of an emulated module.

    Does not load it, so an ``asan`` library can be prepared by a process
    without the ASan runtime.  Parameters are those of :class:`EmulatedModule`.

    Returns
    -------
    pathlib.Path
        The shared library.
    """
    if (code is None) == (path is None):
        raise TypeError("exactly one of code and path must be given")
    if mode not in _build.MODES:
        raise ValueError(f"mode must be one of {_build.MODES}, got {mode!r}")
    source_file = _resolve_source(path) if path is not None else None
    body = f'#include "{source_file}"' if source_file is not None else code
    return _build.build_library(_wrapper_source(body, list(name_expressions)), source_file,
                                options, mode, stack_size)


class EmulatedFunction:
    """One kernel of an :class:`EmulatedModule`; call like ``cupy.RawKernel``.

    Attributes
    ----------
    name : str
        The name expression the kernel was instantiated from.
    max_dynamic_shared_size_bytes : int
        Largest ``shared_mem`` accepted by a launch (48 KiB by default, up
        to 227 KiB), mirroring the CUDA function attribute.
    """

    def __init__(self, module: "EmulatedModule", index: int, name: str):
        self.name = name
        self._module = module
        self._launch = getattr(module._lib, f"emu_launch_{index}")
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_ulonglong, ctypes.c_void_p,
                                                       ctypes.c_int]
        self._params = self._param_info(module._lib, index)
        self._max_shared = _DEFAULT_MAX_DYNAMIC_SHARED

    @staticmethod
    def _param_info(lib, index: int) -> list[tuple[int, bool]]:
        num = getattr(lib, f"emu_num_args_{index}")
        num.restype = ctypes.c_int
        info = getattr(lib, f"emu_arg_info_{index}")
        info.restype = ctypes.c_longlong
        info.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        params = []
        for k in range(num()):
            is_ptr = ctypes.c_int(0)
            size = info(k, ctypes.byref(is_ptr))
            params.append((int(size), bool(is_ptr.value)))
        return params

    @property
    def num_args(self) -> int:
        """Number of kernel parameters."""
        return len(self._params)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._max_shared

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        value = int(value)
        if not 0 <= value <= _HARD_MAX_DYNAMIC_SHARED:
            raise ValueError(f"max_dynamic_shared_size_bytes must be in [0, "
                             f"{_HARD_MAX_DYNAMIC_SHARED}], got {value}")
        self._max_shared = value

    def _marshal(self, args) -> tuple[ctypes.Array, list]:
        """Build the ``void*`` argument array; returns it and the objects to keep alive."""
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"args must be a tuple, got {type(args).__name__}")
        if len(args) != len(self._params):
            raise TypeError(f"{self.name} takes {len(self._params)} arguments, got {len(args)}")
        keep = []
        ptrs = (ctypes.c_void_p * max(1, len(args)))()
        for k, (arg, (size, is_ptr)) in enumerate(zip(args, self._params)):
            where = f"argument {k} of {self.name}"
            if isinstance(arg, np.ndarray) and not (arg.ndim == 0 and arg.dtype.fields):
                if not is_ptr:
                    raise TypeError(f"{where}: kernel expects a {size}-byte value, got an array")
                holder = ctypes.c_void_p(arg.__array_interface__["data"][0])
                keep += [arg, holder]
                ptrs[k] = ctypes.addressof(holder)
                continue
            if isinstance(arg, np.ndarray):  # 0-d structured array: struct by value
                value = arg
            elif isinstance(arg, np.generic):
                value = np.asarray(arg)
            else:
                raise TypeError(f"{where}: expected a numpy array or numpy scalar, got "
                                f"{type(arg).__name__} (wrap Python numbers, e.g. np.int32(x))")
            if is_ptr:
                raise TypeError(f"{where}: kernel expects a pointer (pass an array), got "
                                f"{value.dtype}")
            if value.dtype.itemsize != size:
                raise TypeError(f"{where}: kernel expects a {size}-byte value, got {value.dtype} "
                                f"({value.dtype.itemsize} bytes)")
            value = np.array(value)  # private, aligned copy of the bytes
            keep.append(value)
            ptrs[k] = value.__array_interface__["data"][0]
        return ptrs, keep

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None,
                 enable_cooperative_groups: bool = False) -> None:
        """Launch the kernel (synchronously).

        Parameters
        ----------
        grid, block : int or tuple of int
            Launch dimensions (up to three).
        args : tuple
            numpy arrays (passed as pointers to element ``[0, ..., 0]``),
            numpy scalars and 0-d structured arrays (passed by value).
        shared_mem : int
            Dynamic shared memory per block in bytes.
        stream, enable_cooperative_groups
            Accepted for CuPy compatibility; ignored (cooperative launches
            are rejected).

        Raises
        ------
        EmulationError
            If the configuration is invalid or the kernel hits a divergent
            barrier, deadlock or exception.
        """
        if enable_cooperative_groups:
            raise EmulationError("cooperative launches are not supported by the emulator")
        g = _dims(grid, "grid")
        b = _dims(block, "block")
        shared_mem = int(shared_mem)
        if not 0 <= shared_mem <= self._max_shared:
            raise EmulationError(f"{self.name}: shared_mem={shared_mem} exceeds "
                                 f"max_dynamic_shared_size_bytes={self._max_shared}")
        ptrs, keep = self._marshal(args)
        lib = self._module._lib
        with _launch_lock:
            rc = self._launch(*g, *b, shared_mem, ptrs, self._module._schedule)
            message = lib.emu_last_error().decode(errors="replace") if rc else ""
        del keep
        if rc:
            raise EmulationError(f"{self.name}: {message}")


class EmulatedModule:
    """CPU-emulated counterpart of ``cupy.RawModule``.

    Parameters
    ----------
    code : str, optional
        Kernel source text (mutually exclusive with `path`).
    path : str or os.PathLike, optional
        Kernel source file; relative paths are tried against the current
        directory, then against :func:`cuda_src_dir`'s parent.
    options : sequence of str
        NVRTC-style options; ``-D``, ``-U`` and ``-I`` are honoured, GPU-only
        ones ignored, anything else rejected.
    name_expressions : sequence of str
        Kernels to instantiate, e.g. ``"conv<float, 3>"`` or ``"my_kernel"``.
    mode : {"normal", "reverse", "asan"}, optional
        Schedule / build flavour.  Defaults to ``$CUPYCONV_EMU_MODE`` or
        ``"normal"``.  ``asan`` requires the process to run with the ASan
        runtime preloaded (the tests' ``emulation_support.run_in_asan_subprocess``).
    stack_size : int, optional
        Fiber stack bytes per CUDA thread.

    Raises
    ------
    RuntimeError
        If emulation is unavailable on this machine.
    EmulationCompileError
        If the source does not compile.
    EmulationError
        For an ``asan`` module in a process without the ASan runtime.
    """

    def __init__(self, code: str | None = None, path=None, options=(), name_expressions=(),
                 *, mode: str | None = None, stack_size: int | None = None):
        mode = mode if mode is not None else os.environ.get("CUPYCONV_EMU_MODE", "normal")
        if mode not in _build.MODES:
            raise ValueError(f"mode must be one of {_build.MODES}, got {mode!r}")
        if (code is None) == (path is None):
            raise TypeError("exactly one of code and path must be given")
        names = list(name_expressions)
        if not names or not all(isinstance(n, str) and n.strip() for n in names):
            raise ValueError("name_expressions must be a non-empty sequence of kernel names")
        if len(set(names)) != len(names):
            raise ValueError("name_expressions contains duplicates")
        reason = _build.emulation_unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"CUDA emulation is unavailable: {reason}")
        if mode == "asan" and not _build.asan_preloaded():
            raise EmulationError(
                "mode='asan' needs the AddressSanitizer runtime preloaded into Python: run "
                f"LD_PRELOAD={_build.asan_runtime_path() or '$(g++ -print-file-name=libasan.so)'} "
                "ASAN_OPTIONS=detect_leaks=0 python ... (or use "
                "run_in_asan_subprocess of tests/emulation_support.py)")
        self.mode = mode
        self._schedule = 1 if mode == "reverse" else 0
        self._names = {name: i for i, name in enumerate(names)}
        self.library_path, self._lib = _open_library(
            lambda: build_module(code, path, options, names, mode, stack_size), names)
        self.backend = self._lib.emu_backend().decode()
        self._functions: dict[str, EmulatedFunction] = {}

    def get_function(self, name: str) -> EmulatedFunction:
        """Kernel for a name expression given at construction.

        Raises
        ------
        ValueError
            If `name` was not among the name expressions.
        """
        if name not in self._names:
            raise ValueError(f"{name!r} is not one of this module's name_expressions "
                             f"{sorted(self._names)}")
        if name not in self._functions:
            self._functions[name] = EmulatedFunction(self, self._names[name], name)
        return self._functions[name]
