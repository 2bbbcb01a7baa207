"""Minimal ctypes binding of NVRTC (no GPU needed).

CuPy's ``nvrtc.getCUBIN`` drops the last byte of the cubin, so the whole
compile goes through the C API here: create, add name expressions, compile,
log, lowered names, ``nvrtcGetCUBINSize`` + ``nvrtcGetCUBIN`` (size checked),
destroy.  The library is the one CuPy loads (located through
``/proc/self/maps`` after importing ``cupy.cuda.nvrtc``), else the
``nvidia-cuda-nvrtc`` wheel, else the system loader.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
from typing import Dict, List, Sequence, Tuple

__all__ = ["KernelCompileError", "NvrtcUnavailable", "nvrtc_version", "compile_program", "library_path"]


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel source.

    Attributes
    ----------
    log : str
        The NVRTC program log.
    options : tuple of str
        The compile options.
    source : str
        Path of the source file.
    name_expressions : tuple of str
    """

    def __init__(self, message: str, *, log: str = "", options: Sequence[str] = (),
                 source: str = "", name_expressions: Sequence[str] = ()):
        super().__init__(f"{message}\nsource: {source}\noptions: {' '.join(options)}\n{log}")
        self.log = log
        self.options = tuple(options)
        self.source = source
        self.name_expressions = tuple(name_expressions)


class NvrtcUnavailable(RuntimeError):
    """No NVRTC library could be loaded."""


def _candidates() -> List[str]:
    found = []
    try:  # the copy CuPy uses, if CuPy is installed
        from cupy.cuda import nvrtc as _cupy_nvrtc  # noqa: F401
        _cupy_nvrtc.getVersion()
        with open("/proc/self/maps") as fh:
            found += [ln.split()[-1] for ln in fh if "libnvrtc.so" in ln or "libnvrtc." in ln]
    except Exception:  # noqa: BLE001 - any failure just means "not from CuPy"
        pass
    try:
        import nvidia.cuda_nvrtc as wheel
        for base in wheel.__path__:
            found += sorted(glob.glob(os.path.join(base, "lib", "libnvrtc.so*")))
    except Exception:  # noqa: BLE001
        pass
    lib = ctypes.util.find_library("nvrtc")
    if lib:
        found.append(lib)
    return [f for f in found if "builtins" not in f and ".alt." not in f]


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    errors = []
    for cand in _candidates():
        try:
            lib = ctypes.CDLL(cand)
        except OSError as exc:
            errors.append(f"{cand}: {exc}")
            continue
        lib._cupyconv_path = cand
        return lib
    raise NvrtcUnavailable("NVRTC library not found (install cupy-cuda12x or nvidia-cuda-nvrtc-cu12)"
                           + ("; tried " + "; ".join(errors) if errors else ""))


def library_path() -> str:
    """Path of the loaded libnvrtc."""
    return _lib()._cupyconv_path


def _check(status: int, what: str) -> None:
    if status != 0:
        lib = _lib()
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{what} failed: {lib.nvrtcGetErrorString(status).decode()} ({status})")


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> Tuple[int, int]:
    """``(major, minor)`` of the loaded NVRTC."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def compile_program(source: str, filename: str, options: Sequence[str],
                    name_expressions: Sequence[str]) -> Tuple[bytes, str, Dict[str, str]]:
    """Compile ``source`` to a cubin.

    Returns
    -------
    cubin : bytes
    log : str
        Program log (ptxas ``-v`` output included).
    lowered : dict
        name expression -> mangled symbol.

    Raises
    ------
    KernelCompileError
        With the log and options when NVRTC reports an error.
    """
    lib = _lib()
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), filename.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        for name in name_expressions:
            _check(lib.nvrtcAddNameExpression(prog, name.encode()), "nvrtcAddNameExpression")
        opts = [o.encode() for o in options]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        status = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.value.decode(errors="replace")
        if status != 0:
            raise KernelCompileError(f"NVRTC failed to compile {os.path.basename(filename)}",
                                     log=log, options=options, source=filename,
                                     name_expressions=name_expressions)
        lowered = {}
        for name in name_expressions:
            ptr = ctypes.c_char_p()
            _check(lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(ptr)), "nvrtcGetLoweredName")
            lowered[name] = ptr.value.decode()
        _check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        data = cubin.raw[:size.value]
        if len(data) != size.value or not data.startswith(b"\x7fELF"):
            raise KernelCompileError("NVRTC returned a malformed cubin", log=log, options=options,
                                     source=filename, name_expressions=name_expressions)
        return data, log, lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
