"""Implementations of ``python -m cupyconv info`` and ``demo``."""
from __future__ import annotations

import contextlib
import platform
import sys
import time

import numpy as np
from scipy import signal

from ._paths import cache_root
from ._version import __version__
from .api.conv import conv
from .api.signal import choose_conv_method, convolve
from .dispatch import backends

__all__ = ["info", "demo", "conv_reference"]

#: Relative-norm error the demo accepts against scipy (float64 inputs; the
#: FFT path's rounding grows like log(n) * eps, far below this).
DEMO_TOLERANCE = 1e-9


def info():
    """Print the device, its architecture, the cache and the backends."""
    print(f"cupyconv {__version__} (Python {platform.python_version()}, "
          f"NumPy {np.__version__})")
    reasons = backends.backend_reasons()
    for name, why in reasons.items():
        print(f"  backend {name:9s} {'available' if why is None else 'unavailable: ' + why}")
    if reasons["cuda"] is None:
        import cupy
        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        print(f"  device {dev.id}: {name}, sm_{dev.compute_capability}, "
              f"{props['multiProcessorCount']} SMs, "
              f"{props['totalGlobalMem'] / 2**30:.1f} GiB")
    try:
        from cupy.cuda import nvrtc
        print("  NVRTC %d.%d (ahead-of-time builds possible)" % nvrtc.getVersion())
    except Exception as exc:
        print(f"  NVRTC unavailable ({exc.__class__.__name__})")
    print(f"  kernel cache: {cache_root()}")
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
              f"reflect: y{tuple(y.shape)}, {t * 1e3:.1f} ms (reference "
              f"{t_ref * 1e3:.1f} ms), rel. error {err:.2e} {'OK' if ok else 'FAIL'}")
    print("demo " + ("passed" if not failures else f"FAILED ({failures} checks)"))
    return 1 if failures else 0
