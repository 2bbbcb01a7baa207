"""Minimal ctypes binding of NVRTC (no GPU needed).

CuPy's ``nvrtc.getCUBIN`` drops the last byte of the cubin, so the whole
compile goes through the C API here: create, add name expressions, compile,
log, lowered names, ``nvrtcGetCUBINSize`` + ``nvrtcGetCUBIN`` (size checked)
or, for a ``compute_XY`` arch, ``nvrtcGetPTXSize`` + ``nvrtcGetPTX``, destroy.
:func:`supported_archs` asks NVRTC (``nvrtcGetSupportedArchs``, CUDA 11.2+)
which ``sm_XY`` it can compile for.  The library is the file named by the environment
variable ``CUPYCONV_NVRTC`` when it is set (only that one: how the test suite compiles
with NVRTC 13 next to CuPy's 12), else the one CuPy loads (located through
``/proc/self/maps`` after importing ``cupy.cuda.nvrtc``), else the
``nvidia-cuda-nvrtc`` wheels (CUDA 12 and 13 layouts), else the system loader.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from typing import Dict, List, Optional, Sequence, Tuple
from .._lru import cached

__all__ = ["KernelCompileError", "NvrtcUnavailable", "nvrtc_version", "supported_archs",
           "compile_program", "library_path"]


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
    """The NVRTC libraries to try, in order: ``$CUPYCONV_NVRTC`` alone when set, else every
    one found, those of CuPy's CUDA major first."""
    chosen = os.environ.get("CUPYCONV_NVRTC")
    if chosen:
        return [chosen]
    found = _found()
    major = _cupy_cuda_major()
    if major is not None:   # stable: CuPy's CUDA major first, the order found otherwise kept
        found.sort(key=lambda f: _soname_major(f) != major)
    return found


def _found() -> List[str]:
    """Every NVRTC library found: CuPy's loaded copy, the NVIDIA wheels, the system's."""
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
    try:  # other layouts of the NVIDIA wheels (CUDA 13's nvidia-cuda-nvrtc: nvidia/cu13/lib)
        import nvidia
        for base in nvidia.__path__:
            found += sorted(glob.glob(os.path.join(base, "*", "lib", "libnvrtc.so*")))
    except Exception:  # noqa: BLE001
        pass
    lib = ctypes.util.find_library("nvrtc")
    if lib:
        found.append(lib)
    return list(dict.fromkeys(f for f in found if "builtins" not in f and ".alt." not in f))


def _soname_major(path: str) -> Optional[int]:
    """The CUDA major of ``libnvrtc.so.MAJOR[...]`` (``None`` for an unversioned name)."""
    tail = os.path.basename(path).partition(".so.")[2]
    head = tail.split(".")[0]
    return int(head) if head.isdigit() else None


def _cupy_cuda_major() -> Optional[int]:
    """The CUDA major version the installed CuPy wheel is built for (``cupy-cuda12x``: 12),
    read from the package metadata (no GPU or CUDA library needed); ``None`` when unknown.

    Another package may install a different ``nvidia-cuda-nvrtc`` beside CuPy's (PyTorch's
    CUDA 13 wheels do); the NVRTC that matches CuPy's runtime is the one to compile with.
    """
    from importlib import metadata
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("cupy-cuda") and name[9:11].isdigit():
            return int(name[9:11])
    return None


@cached(maxsize=1, keep=True)
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
    raise NvrtcUnavailable("NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12 for CUDA 12 "
                           "or nvidia-cuda-nvrtc for CUDA 13)"
                           + ("; tried " + "; ".join(errors) if errors else ""))


def library_path() -> str:
    """Path of the loaded libnvrtc."""
    return _lib()._cupyconv_path


def _check(status: int, what: str) -> None:
    if status != 0:
        lib = _lib()
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{what} failed: {lib.nvrtcGetErrorString(status).decode()} ({status})")


@cached(maxsize=1, keep=True)
def nvrtc_version() -> Tuple[int, int]:
    """``(major, minor)`` of the loaded NVRTC."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


@cached(maxsize=1, keep=True)
def supported_archs() -> Optional[Tuple[int, ...]]:
    """The ``XY`` of every ``sm_XY`` the loaded NVRTC compiles for, ascending.

    ``None`` when this NVRTC predates ``nvrtcGetSupportedArchs`` (CUDA < 11.2);
    :func:`cupyconv._compile.compat.known_archs` is the fallback table.
    """
    lib = _lib()
    if not hasattr(lib, "nvrtcGetNumSupportedArchs") or not hasattr(lib, "nvrtcGetSupportedArchs"):
        return None
    count = ctypes.c_int()
    _check(lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
    archs = (ctypes.c_int * count.value)()
    _check(lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
    return tuple(sorted(archs))


def _binary(lib, prog, ptx: bool) -> bytes:
    """The compiled cubin, or the PTX text without its terminating NUL."""
    get_size, get = ((lib.nvrtcGetPTXSize, lib.nvrtcGetPTX) if ptx
                     else (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN))
    size = ctypes.c_size_t()
    _check(get_size(prog, ctypes.byref(size)), "nvrtcGetPTXSize" if ptx else "nvrtcGetCUBINSize")
    buf = ctypes.create_string_buffer(size.value)
    _check(get(prog, buf), "nvrtcGetPTX" if ptx else "nvrtcGetCUBIN")
    data = buf.raw[:size.value]
    return data.rstrip(b"\0") if ptx else data


def compile_program(source: str, filename: str, options: Sequence[str],
                    name_expressions: Sequence[str], *,
                    ptx: bool = False) -> Tuple[bytes, str, Dict[str, str]]:
    """Compile ``source`` to a cubin (or PTX).

    Parameters
    ----------
    source : str
    filename : str
        Name of the program in messages.
    options : sequence of str
        NVRTC options (``-arch=sm_XY`` for a cubin, ``-arch=compute_XY`` for PTX).
    name_expressions : sequence of str
    ptx : bool
        Return PTX text (for a ``compute_XY`` arch) instead of a cubin.

    Returns
    -------
    binary : bytes
        The cubin (an ELF file) or the PTX.
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
        data = _binary(lib, prog, ptx)
        if not data or (not ptx and not data.startswith(b"\x7fELF")):
            raise KernelCompileError(f"NVRTC returned a malformed {'PTX' if ptx else 'cubin'}",
                                     log=log, options=options, source=filename,
                                     name_expressions=name_expressions)
        return data, log, lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
