"""Compilation of CUDA sources into host shared libraries for the emulator.

The emulator compiles a kernel source (``.cu``) with the host C++ compiler
against ``cuda_src/emu/cuda_emu.cuh`` and wraps every requested kernel in an
``extern "C"`` launcher.  Results are cached on disk, keyed by a hash of
everything that affects the build.

The cache holds libraries that this process loads with ``dlopen``, so
anyone who can write it can run code here: its directories are created 0700
and its files 0600 (:mod:`cupyconv._fsutil`), a directory or file owned by
another user or group/world-writable is refused with
:class:`cupyconv._fsutil.InsecureCacheError`, and a library is only loaded
when it is bound to its entry: the ``.sha256`` sidecar (written last) holds
a digest over the entry's name (its key) and the library's bytes, the
library carries its key as a string (``emu_entry_key``, compiled in, checked
in the file before ``dlopen`` and through the symbol after it), and a
symbolic link in place of either file is a miss.  Anything else (a library
of another group under this name, a corrupt or truncated one) reads as a
miss and is rebuilt; a library that passes these checks but fails to load is
evicted and rebuilt once (:func:`evict`), and if it still fails the error
names the file to delete.  A cache that cannot
be written (a shared, prebuilt one) still serves hits; a miss is built into
a private temporary directory of this process, with one
:class:`cupyconv._fsutil.ReadOnlyCacheWarning`.  Compiler probe results are
remembered on disk, keyed by the compiler, the probe source and its flags.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .._fsutil import (InsecureCacheError, atomic_write, check_private, clean_stale_tmp,
                       existing_private_dir, private_dir, scratch_for, sha256_bytes,
                       warn_read_only)
from .._paths import cache_root, cuda_src_dir  # noqa: F401 (re-exported)
from ._entry import (ENTRY_KEY_SYMBOL, FORMAT, entry_digest, entry_mark,  # noqa: F401
                     entry_source, evict, library_verified)
from .._lru import cached

__all__ = [
    "EmulationCompileError", "cuda_src_dir", "cache_dir", "find_compiler",
    "emulation_available", "emulation_unavailable_reason", "boost_context_available",
    "asan_runtime_path", "asan_preloaded", "build_library", "build_stats", "library_verified",
    "entry_digest", "entry_mark", "evict", "ENTRY_KEY_SYMBOL", "MODES",
]

#: Emulation modes: ``normal`` (forward schedule), ``reverse`` (reverse
#: schedule, same library) and ``asan`` (AddressSanitizer + UBSan build).
MODES = ("normal", "reverse", "asan")


_SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inc")
_PASSTHROUGH_PREFIXES = ("-D", "-U", "-I", "--define-macro=", "--undefine-macro=",
                         "--include-path=")
# NVRTC options with no meaning for the host build; accepted and dropped.
_IGNORED_PREFIXES = (
    "-std=", "--std=", "-arch", "--gpu-architecture", "-lineinfo", "--generate-line-info",
    "--use_fast_math", "-use_fast_math", "-G", "--device-debug", "--fmad", "-fmad",
    "--ftz", "-ftz", "--prec-div", "-prec-div", "--prec-sqrt", "-prec-sqrt",
    "--extra-device-vectorization", "-restrict", "--restrict", "-default-device",
    "--device-as-default-execution-space", "-dopt", "--dopt", "--maxrregcount",
    "-maxrregcount", "-w", "--disable-warnings", "-rdc", "--relocatable-device-code",
    "--dlink-time-opt", "-dlto", "--device-int128", "-builtin-move-forward",
    "-builtin-initializer-list", "--minimal", "-minimal",
)

_stats = {"compiles": 0}
_stats_lock = threading.Lock()
_build_lock = threading.Lock()


class EmulationCompileError(RuntimeError):
    """The host compiler rejected an emulated kernel source.

    Attributes
    ----------
    command : list of str
        The compiler command line.
    log : str
        Compiler output (stdout and stderr).
    """

    def __init__(self, message: str, command: list[str], log: str):
        super().__init__(f"{message}\ncommand: {' '.join(command)}\n{log}")
        self.command = command
        self.log = log


def cache_dir() -> Path:
    """Directory of compiled emulation libraries.

    ``$CUPYCONV_CACHE_DIR/emu`` if set, else ``~/.cache/cupyconv/emu``.

    Returns
    -------
    pathlib.Path
    """
    return cache_root() / "emu"


def find_compiler() -> str | None:
    """Path of the host C++ compiler (``$CXX``, else g++, c++, clang++), or None."""
    env = os.environ.get("CXX")
    candidates = [env] if env else ["g++", "c++", "clang++"]
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a tool without inheriting a sanitizer LD_PRELOAD of this process."""
    env = dict(os.environ)
    if "LD_PRELOAD" in env:
        kept = [p for p in env["LD_PRELOAD"].split() if "asan" not in p and "ubsan" not in p]
        env["LD_PRELOAD"] = " ".join(kept)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          text=True, timeout=timeout, check=False)


@cached(maxsize=None, keep=True)
def _compiler_version(cxx: str) -> str:
    return _run([cxx, "--version"]).stdout.strip()


def _probe_build(name: str, cxx: str, source: str, extra: list[str]) -> tuple[bool, str]:
    """Build ``source`` into a scratch shared library; ``(ok, compiler output)``.

    A success is remembered on disk, keyed by the compiler, the probe source
    and the full command line; a missing, unwritable or untrusted cache only
    costs a re-probe (building a kernel reports an untrusted cache).
    """
    flags = ["-std=c++17", "-fPIC", "-shared"] + extra
    key = sha256_bytes("\0".join([name, cxx, _compiler_version(cxx), source] + flags).encode())
    marker = cache_dir() / f"probe-{name}-{key[:24]}.ok"
    try:
        if existing_private_dir(marker.parent, cache_root()) and marker.is_file():
            check_private(marker)
            return True, ""
    except (OSError, InsecureCacheError):
        pass
    with tempfile.TemporaryDirectory(prefix="cupyconv-probe-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text(source)
        cmd = [cxx, str(src), "-o", str(Path(tmp) / "p.so")] + flags
        try:
            proc = _run(cmd, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{' '.join(cmd)}: {exc}"
    if proc.returncode == 0:
        try:
            private_dir(marker.parent, cache_root())
            atomic_write(marker, b"ok\n")
        except (OSError, InsecureCacheError):
            pass
    return proc.returncode == 0, proc.stdout


@cached(maxsize=None, keep=True)
def _probe() -> str | None:
    """None if a C++17 compiler can build shared libraries, else the reason."""
    if not sys.platform.startswith("linux"):
        return f"the CUDA emulator supports Linux only (platform is {sys.platform})"
    cxx = find_compiler()
    if cxx is None:
        return "no C++ compiler found (set CXX or install g++)"
    ok, log = _probe_build(
        "cxx", cxx, '#include <vector>\nextern "C" int probe() { return 1; }\n', [])
    if not ok:
        return f"the C++ compiler {cxx} cannot build a trivial shared library:\n{log}"
    return None


def emulation_available() -> bool:
    """Whether CUDA kernels can be emulated on this machine."""
    return _probe() is None


def emulation_unavailable_reason() -> str | None:
    """Why emulation is unavailable, or None when it is available."""
    return _probe()


@cached(maxsize=None, keep=True)
def boost_context_available() -> bool:
    """Whether boost.context fibers compile and link (else ucontext is used)."""
    cxx = find_compiler()
    if cxx is None:
        return False
    source = ("#include <boost/context/fiber.hpp>\n"
              'extern "C" int probe() { namespace ctx = boost::context;\n'
              "  ctx::fiber f{[](ctx::fiber&& c) { return std::move(c); }};\n"
              "  f = std::move(f).resume(); return f ? 1 : 0; }\n")
    return _probe_build("boost", cxx, source, ["-lboost_context"])[0]


@cached(maxsize=None, keep=True)
def asan_runtime_path() -> str | None:
    """Path of the compiler's shared AddressSanitizer runtime, or None."""
    cxx = find_compiler()
    if cxx is None:
        return None
    try:
        out = _run([cxx, "-print-file-name=libasan.so"], timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(out)
    return str(path.resolve()) if path.is_absolute() and path.exists() else None


def asan_preloaded() -> bool:
    """Whether the AddressSanitizer runtime is loaded into this process."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            maps = fh.read()
    except OSError:
        return False
    return "libasan" in maps or "libclang_rt.asan" in maps


def build_stats() -> dict:
    """Counters of this process: ``{"compiles": number of compiler runs}``."""
    with _stats_lock:
        return dict(_stats)


def _host_options(options) -> list[str]:
    """Translate NVRTC-style options to host compiler flags."""
    out = []
    for opt in options:
        if not isinstance(opt, str):
            raise TypeError(f"compiler options must be strings, got {opt!r}")
        if opt.startswith("--define-macro="):
            out.append("-D" + opt.split("=", 1)[1])
        elif opt.startswith("--undefine-macro="):
            out.append("-U" + opt.split("=", 1)[1])
        elif opt.startswith("--include-path="):
            out.append("-I" + opt.split("=", 1)[1])
        elif opt.startswith(_PASSTHROUGH_PREFIXES) and len(opt) > 2:
            out.append(opt)
        elif opt.startswith(_IGNORED_PREFIXES):
            continue
        else:
            raise ValueError(f"compiler option {opt!r} is not supported by the CUDA emulator")
    return out


def _flags(mode: str, stack_size: int | None) -> list[str]:
    flags = ["-std=c++17", "-fPIC", "-shared", "-fvisibility=hidden", "-w"]
    if mode == "asan":
        flags += ["-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=all"]
    else:
        flags += ["-O2"]
        if boost_context_available():
            flags += ["-lboost_context"]
        else:
            flags += ["-DCUPYCONV_EMU_FORCE_UCONTEXT"]
    if stack_size is not None:
        flags.append(f"-DCUPYCONV_EMU_STACK_SIZE={int(stack_size)}")
    return flags


def _portable(text: str) -> str:
    """``text`` with the checkout's folder replaced by a placeholder.

    The cache key is then the same in every clone or worktree of one tree, so a
    second checkout reuses the libraries the first one built.
    """
    return text.replace(str(cuda_src_dir().parent), "<checkout>")


def _dependency_digest(source_file: Path | None) -> str:
    """Hash of every source that can be included: cuda_src and the kernel's folder."""
    h = hashlib.sha256()
    roots = [cuda_src_dir()]
    if source_file is not None:
        roots.append(source_file.parent)
    seen = set()
    for root in roots:
        files = sorted(root.rglob("*")) if root == roots[0] else sorted(root.glob("*"))
        for f in files:
            if f.suffix in _SOURCE_SUFFIXES and f.is_file() and f not in seen:
                seen.add(f)
                h.update(_portable(str(f)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _compile(cxx: str, src: Path, flags: list[str]) -> bytes:
    """Run the compiler on ``src`` into a private scratch directory; the library's bytes."""
    with tempfile.TemporaryDirectory(prefix="cupyconv-emu-") as tmp:
        out = Path(tmp) / "lib.so"
        cmd = [cxx, str(src), "-o", str(out)] + flags
        with _stats_lock:
            _stats["compiles"] += 1
        try:
            proc = _run(cmd)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmulationCompileError("could not run the C++ compiler", cmd, str(exc)) from exc
        if proc.returncode != 0:
            raise EmulationCompileError("compilation of emulated CUDA source failed", cmd,
                                        proc.stdout)
        return out.read_bytes()


def _prepare(out_dir: Path, top: Path, stem: str, wrapper_source: str) -> Path:
    """Create the cache directory (below ``top``), write the wrapper source; its path."""
    private_dir(out_dir, top)
    clean_stale_tmp(out_dir)
    src = out_dir / f"{stem}.cpp"
    atomic_write(src, wrapper_source.encode())
    return src


def _commit(out_dir: Path, stem: str, data: bytes) -> Path:
    """Store a library, then its ``.sha256`` sidecar (the commit record)."""
    lib = out_dir / f"{stem}.so"
    atomic_write(lib, data)
    atomic_write(lib.with_suffix(".sha256"), (entry_digest(stem, data) + "\n").encode())
    return lib


def build_library(wrapper_source: str, source_file: Path | None, options=(),
                  mode: str = "normal", stack_size: int | None = None) -> Path:
    """Compile a wrapper translation unit into a cached shared library.

    Parameters
    ----------
    wrapper_source : str
        Complete C++ translation unit (includes the kernel source).
    source_file : pathlib.Path or None
        The kernel source it includes; its folder is searched for includes
        and hashed.
    options : sequence of str
        NVRTC-style options (``-D``/``-U``/``-I`` are honoured).
    mode : {"normal", "reverse", "asan"}
        Build flavour; ``normal`` and ``reverse`` share one library.
    stack_size : int, optional
        Fiber stack size in bytes (default set by the header).

    Returns
    -------
    pathlib.Path
        Path of the shared library.

    Raises
    ------
    RuntimeError
        If emulation is unavailable.
    EmulationCompileError
        If compilation fails.
    cupyconv._fsutil.InsecureCacheError
        If the cache is owned by another user or group/world-writable.
    """
    reason = _probe()
    if reason is not None:
        raise RuntimeError(f"CUDA emulation is unavailable: {reason}")
    cxx = find_compiler()
    flavour = "asan" if mode == "asan" else "normal"
    includes = [f"-I{cuda_src_dir()}"]
    if source_file is not None:
        includes.append(f"-I{source_file.parent}")
    flags = includes + _host_options(options) + _flags(flavour, stack_size)
    key = hashlib.sha256("\0".join(
        [_portable(wrapper_source), _dependency_digest(source_file), _compiler_version(cxx),
         cxx, flavour, f"format={FORMAT}"] + [_portable(f) for f in flags]).encode()
    ).hexdigest()[:32]
    stem = f"{key}-{flavour}"
    wrapper_source = entry_source(wrapper_source, stem)
    out_dir = cache_dir()
    with _build_lock:
        for where, above in ((out_dir, cache_root()), (scratch_for(out_dir, create=False),) * 2):
            lib = where / f"{stem}.so" if where is not None else None
            if lib is not None and existing_private_dir(where, above) and library_verified(lib):
                return lib
        where = out_dir
        try:
            src = _prepare(where, cache_root(), stem, wrapper_source)
        except OSError as exc:          # a read-only (e.g. shared, prebuilt) cache
            warn_read_only(out_dir, exc)
            where = scratch_for(out_dir)
            src = _prepare(where, where, stem, wrapper_source)
        data = _compile(cxx, src, flags)
        try:
            return _commit(where, stem, data)
        except OSError as exc:
            if where != out_dir:
                raise
            warn_read_only(out_dir, exc)
            where = scratch_for(out_dir)
            _prepare(where, where, stem, wrapper_source)
            return _commit(where, stem, data)
