"""Implementations of ``python -m cupyconv info`` and ``demo``."""
from __future__ import annotations

import contextlib
import importlib.util
import platform
import sys
import time

import numpy as np
from scipy import signal

from ._compile import cache, compat, loader, prebuilt
from ._compile import library_path, nvrtc_version
from . import config
from ._kernels import evidence, registry
from ._paths import cuda_src_dir
from ._version import __version__
from .api.conv import conv
from .api.signal import choose_conv_method, convolve
from .dispatch import backends
from .backends.cuda import graphs

__all__ = ["info", "demo", "conv_reference"]

#: Relative-norm error the demo accepts against scipy (float64 inputs; the
#: FFT path's rounding grows like log(n) * eps, far below this).
DEMO_TOLERANCE = 1e-9


_GPU_INSTALL = compat.GPU_INSTALL
_NVRTC_INSTALL = ("pip install nvidia-cuda-nvrtc-cu12 (CUDA 12) or nvidia-cuda-nvrtc (CUDA 13); "
                  "both cuda12/cuda13 extras bring it")


def _cupy_status():
    """``(cupy module or None, lines)``: CuPy, the CUDA driver, the devices."""
    if importlib.util.find_spec("cupy") is None:
        return None, [f"CuPy: not installed. For the GPU: {_GPU_INSTALL}"]
    try:
        import cupy  # optional dependency: probing it is the point
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install
        return None, [f"CuPy: installed but does not import ({exc.__class__.__name__}: {exc}). "
                      f"Reinstall it: {_GPU_INSTALL}"]
    lines = []
    try:
        runtime = compat.split_driver_version(cupy.cuda.runtime.runtimeGetVersion())
        lines.append(f"CuPy {cupy.__version__} (CUDA runtime {compat.format_version(runtime)})")
    except Exception:  # noqa: BLE001
        runtime = None
        lines.append(f"CuPy {cupy.__version__}")
    try:
        code = cupy.cuda.runtime.driverGetVersion()
    except Exception:  # noqa: BLE001 - no libcuda at all
        code = 0
    if not code:
        lines.append("CUDA driver: none found. Install the NVIDIA driver: >= "
                     f"{compat.MIN_LINUX_DRIVER[12]} for CUDA 12 (cupy-cuda12x), >= "
                     f"{compat.MIN_LINUX_DRIVER[13]} for CUDA 13 (cupy-cuda13x)")
    else:
        driver = compat.split_driver_version(code)
        line = f"CUDA driver {compat.format_version(driver)}"
        if runtime is not None and driver[0] < runtime[0]:
            need = compat.MIN_LINUX_DRIVER.get(runtime[0], "a newer one")
            line += (f": too old for CuPy's CUDA {runtime[0]} runtime; update the driver "
                     f"(>= {need}) or install cupy-cuda{driver[0]}x")
        lines.append(line)
    return cupy, lines


def _devices(cupy):
    """``[(id, name, cc, SMs, GiB)]`` of the usable devices (empty without one)."""
    out = []
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no driver, no device
        return out
    for i in range(count):
        props = cupy.cuda.runtime.getDeviceProperties(i)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        cc = int(cupy.cuda.Device(i).compute_capability)
        out.append((i, name, cc, props["multiProcessorCount"], props["totalGlobalMem"] / 2**30))
    return out


def _nvrtc_line():
    """``(NVRTC version or None, line)``."""
    try:
        version = nvrtc_version()
        where = library_path()
    except Exception as exc:  # noqa: BLE001 - NvrtcUnavailable, a broken library
        return None, (f"NVRTC: not found ({exc.__class__.__name__}). Needed only for kernel groups "
                      f"that are not packaged: {_NVRTC_INSTALL}")
    return version, (f"NVRTC {compat.format_version(version)} ({where}): compiles the kernel "
                     "groups that are not packaged, on first use or ahead of time "
                     "(python -m cupyconv build; no GPU needed)")


def _packaged_line(pk):
    if not pk["present"]:
        return ("packaged in the wheel: none (a source checkout or an editable install; a release "
                "wheel build packs them: docs/install.md)")
    if pk["error"]:
        return f"packaged in the wheel: unusable ({pk['error']})"
    if not pk["kernels"]:
        return f"packaged in the wheel: none ({pk['reason'] or 'an empty pack'})"
    stale = "" if pk["matches_sources"] is not False else (
        "; NOT for these kernel sources (CUPYCONV_CUDA_SRC?), so unused")
    ptx = f" + PTX {', '.join(pk['ptx'])}" if pk["ptx"] else ""
    return (f"packaged in the wheel: {pk['kernels']:,} kernels in {pk['groups']} files, "
            f"{pk['bytes'] / 2**20:.1f} MiB ({pk['dir']}): cubins {', '.join(pk['archs'])}{ptx}; "
            f"{', '.join(pk['dtypes'])}; ranks {', '.join(map(str, pk['ranks']))}; built by NVRTC "
            f"{compat.format_version(pk['nvrtc'])}{stale}")


def _where_lines(pk, devices, driver, nvrtc):
    """Where the kernels of each device (or of any GPU, without one) would come from."""
    rest = "cache, then NVRTC" if nvrtc else "cache only (no NVRTC to compile a miss)"
    usable = pk["kernels"] and pk["matches_sources"] is not False
    if devices:
        lines = []
        for i, _, cc, _, _ in devices:
            arch = (prebuilt.summary(device_cc=cc, driver=driver).get("device_arch")
                    if usable and driver else None)
            head = f"device {i} (sm_{cc}): "
            if arch:
                kind = "PTX, JIT-compiled by the driver" if arch.startswith("compute_") else "cubins"
                lines.append(head + f"packaged {arch} {kind} for the packaged dtypes and ranks; "
                             f"other groups from the {rest}")
            else:
                lines.append(head + f"nothing packaged loads here; every group from the {rest}")
        return lines
    if not usable:
        return [f"no device here: on a GPU every kernel group would come from the {rest}"]
    ptx = ""
    if pk["ptx"]:
        ptx = (f"; newer GPUs the packaged PTX {', '.join(pk['ptx'])} (driver >= "
               f"{compat.format_version(pk['nvrtc'])})")
    return [f"no device here: on a GPU, {', '.join(pk['archs'])} (and same-major newer) GPUs "
            f"would load the packaged cubins{ptx}; other groups from the {rest}"]


def _specific_lines(pk, devices, driver):
    """Whether each arch-specific kernel source (sm_90a) runs on each device, and why."""
    sources = sorted({f.source for f in registry.FAMILIES.values() if f.arch_specific})
    if not sources:
        return [f"arch-specific kernels ({', '.join(compat.ARCH_SPECIFIC)}): no kernel family "
                "declares one; the portable kernels run everywhere"]
    lines = []
    for source in sources:
        declared = loader.declared_specific(source)
        if not devices or driver is None:
            packed = [a for a, srcs in pk.get("arch_specific", {}).items() if source in srcs]
            ccs = ", ".join(f"{a} on compute capability {compat.ARCH_SPECIFIC[a][0] / 10:.1f}"
                            for a in declared)
            lines.append(f"arch-specific {source}: {ccs} only (packaged: {', '.join(packed) or 'no'}"
                         "); the portable kernels elsewhere")
        for i, _, cc, _, _ in devices if driver is not None else ():
            choice = loader.specific_choice(source, cc, driver)
            used = f"uses {choice.arch}" if choice.arch else "does not use it"
            lines.append(f"device {i} {used} for {source}: {choice.reason}")
    lines += [f"not loaded here: {k}: {why}" for k, why in loader.arch_specific_refusals().items()]
    return lines


def info(kernels=False):
    """Print the backends, CuPy, the driver, the devices, NVRTC and where kernels come from.

    Says what to install when CuPy, the driver or NVRTC is missing.  ``kernels``: print
    the hardware-evidence ledger instead, one configuration a line with its status
    (``_kernels.evidence.ledger_lines``).
    """
    if kernels:
        print(f"kernel configurations (config.kernels = {config.kernels!r}; docs/evidence.md):")
        for line in evidence.ledger_lines():
            print(f"  {line}")
        return 0
    print(f"cupyconv {__version__} (Python {platform.python_version()}, "
          f"NumPy {np.__version__})")
    reasons = backends.backend_reasons()
    for name, why in reasons.items():
        print(f"  backend {name:9s} {'available' if why is None else 'unavailable: ' + why}")
    cupy, lines = _cupy_status()
    for line in lines:
        print(f"  {line}")
    if cupy is not None:
        off = graphs.graphs_off_reason(cupy)
        print(f"  CUDA graphs (config.cuda_graphs): {'off: ' + off if off else 'available'}")
    devices = _devices(cupy) if cupy is not None else []
    driver = None
    if devices:
        driver = compat.split_driver_version(cupy.cuda.runtime.driverGetVersion())
    for i, name, cc, sms, gib in devices:
        print(f"  device {i}: {name}, sm_{cc}, {sms} SMs, {gib:.1f} GiB")
    if cupy is not None and not devices:
        print("  device: none usable")
    nvrtc, line = _nvrtc_line()
    print(f"  {line}")
    pk = prebuilt.summary()
    counts = cache.entry_counts()
    cached = (f"{sum(counts.values())} kernel groups ("
              + ", ".join(f"{a}: {n}" for a, n in counts.items()) + ")") if counts else "empty"
    print("  kernels come from, in this order:")
    print(f"    1. {_packaged_line(pk)}")
    print(f"    2. user cache {cache.cache_dir()}: {cached}")
    print("    3. " + (f"NVRTC {compat.format_version(nvrtc)}: any other group, compiled on first "
                       "use and stored in the cache" if nvrtc else
                       f"NVRTC: missing, so a group in neither place cannot load ({_NVRTC_INSTALL})"))
    for line in _where_lines(pk, devices, driver, nvrtc) + _specific_lines(pk, devices, driver):
        print(f"  {line}")
    print(f"  kernel sources: {cuda_src_dir()}")
    return 0


def conv_reference(x, w, stride, padding, dilation, padding_mode="constant"):
    """Independent ``conv`` reference: scipy.signal.correlate per channel pair.

    Pads with :func:`numpy.pad`, dilates the kernel with zeros, correlates
    in ``valid`` mode and subsamples by the stride (groups=1, channels_first).
    """
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in padding), mode=padding_mode)
    span = tuple(d * (k - 1) + 1 for d, k in zip(dilation, w.shape[2:]))
    wd = np.zeros(w.shape[:2] + span, dtype=w.dtype)
    wd[(Ellipsis,) + tuple(slice(None, None, d) for d in dilation)] = w
    sub = (Ellipsis,) + tuple(slice(None, None, s) for s in stride)
    out = None
    for n in range(x.shape[0]):
        for k in range(w.shape[0]):
            acc = sum(signal.correlate(xp[n, c], wd[k, c], mode="valid", method="direct")
                      for c in range(x.shape[1]))
            acc = acc[sub]
            if out is None:
                out = np.zeros((x.shape[0], w.shape[0]) + acc.shape, dtype=acc.dtype)
            out[n, k] = acc
    return out


def _rel_err(y, ref):
    return float(np.linalg.norm((y - ref).ravel()) / max(np.linalg.norm(ref.ravel()), 1e-300))


def _pick_backend(requested):
    if requested != "auto":
        return requested
    return "cuda" if "cuda" in backends.available_backends() else "numpy"


def _timed(fn, sync):
    fn()                        # warm-up: kernel compile, FFT plans
    sync()
    t0 = time.perf_counter()
    res = fn()
    sync()
    return res, time.perf_counter() - t0


def demo(size=40, backend="auto"):
    """The main job: a 4-D convolve and a 3-D batched conv, checked against scipy.

    Returns a process exit code: 0 when every check passes.
    """
    if size < 8:
        print("demo: --size must be >= 8", file=sys.stderr)
        return 2
    backend = _pick_backend(backend)
    why = backends.backend_reasons().get(backend)
    if why is not None:
        print(f"demo: backend {backend!r} is not available here: {why}", file=sys.stderr)
        return 2
    xp, sync = np, (lambda: None)
    ctx = contextlib.nullcontext()
    if backend == "cuda":
        import cupy as xp
        sync = xp.cuda.Device().synchronize
    elif backend == "emulated":
        ctx = backends.use_backend("emulated")
    rng = np.random.default_rng(2026)
    failures = 0
    print(f"cupyconv demo on the {backend!r} backend")
    with ctx:
        # 1. A 4-D volume (e.g. 4D-STEM) blurred by a 5^4 kernel.
        vol = rng.standard_normal((size,) * 4)
        psf = rng.random((5,) * 4)
        psf /= psf.sum()
        dv, dp = xp.asarray(vol), xp.asarray(psf)
        method = choose_conv_method(dv, dp, mode="same")
        y, t = _timed(lambda: convolve(dv, dp, mode="same"), sync)
        t0 = time.perf_counter()
        ref = signal.convolve(vol, psf, mode="same")
        t_ref = time.perf_counter() - t0
        err = _rel_err(np.asarray(y.get() if hasattr(y, "get") else y), ref)
        ok = err < DEMO_TOLERANCE
        failures += not ok
        print(f"  convolve 4-D {vol.shape} * {psf.shape} mode='same': method={method!r}, "
              f"{t * 1e3:.1f} ms (scipy.signal.convolve {t_ref * 1e3:.1f} ms), "
              f"rel. error {err:.2e} {'OK' if ok else 'FAIL'}")
        # 2. A batched multi-channel 3-D conv with stride, dilation, reflect padding.
        x = rng.standard_normal((2, 4, 20, 20, 20))
        w = rng.standard_normal((8, 4, 3, 3, 3))
        geo = dict(stride=(2, 2, 1), padding=(2, 2, 2), dilation=(2, 1, 2))
        dx, dw = xp.asarray(x), xp.asarray(w)
        y, t = _timed(lambda: conv(dx, dw, padding_mode="reflect", **geo), sync)
        t0 = time.perf_counter()
        ref = conv_reference(x, w, padding_mode="reflect", **geo)
        t_ref = time.perf_counter() - t0
        err = _rel_err(np.asarray(y.get() if hasattr(y, "get") else y), ref)
        ok = err < DEMO_TOLERANCE and y.shape == ref.shape
        failures += not ok
        print(f"  conv 3-D x{x.shape} w{w.shape} stride=(2,2,1) dilation=(2,1,2) "
              f"reflect: y{tuple(y.shape)}, {t * 1e3:.1f} ms (reference: scipy.signal.correlate "
              f"per channel pair {t_ref * 1e3:.1f} ms), rel. error {err:.2e} {'OK' if ok else 'FAIL'}")
    print("demo " + ("passed" if not failures else f"FAILED ({failures} checks)"))
    return 1 if failures else 0
