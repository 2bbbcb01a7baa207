"""Process-wide settings, validated on assignment.

``cupyconv.config`` is this module; assigning a setting checks the value and
raises ``TypeError``/``ValueError`` naming the setting and its allowed values,
so a bad value fails where it is set, not in some later call.  Assigning a
name that is not a setting is an ``AttributeError`` (a typo would otherwise
change nothing).

Attributes
----------
autotune : bool
    When True, ``method="auto"`` times every candidate algorithm the first
    time it sees a problem and reuses the winner (cached per problem key,
    bounded).  Default False: the cost model decides without running.
workspace_limit : int or None
    Default cap, in bytes, on the extra memory an algorithm may allocate
    (the ``gemm`` column buffer, FFT spectra).  ``None`` means no cap on
    the CPU and "what the device has free" on the GPU.
precision : {"highest", "tf32"}
    Default of every function's ``precision=``: ``"highest"`` (float32 data computed
    with float32 products and sums) or ``"tf32"`` (float32 operands rounded to TF32 --
    10 mantissa bits, round to nearest, ties away, as ``cvt.rna.tf32.f32`` -- then
    products and sums in float32: the numerics of TF32 tensor cores, as PyTorch's
    ``allow_tf32``).  Off by default.
winograd_max_error_growth : float or None
    The largest error growth (an RMS model relative to direct summation's,
    :func:`cupyconv.core.winograd.error_growth`, multiplied over the axes) a
    ``winograd`` tile may have.  ``None``: 10 for float32/float64/complex, 2 for
    float16.  ``0`` turns ``winograd`` off (``auto`` never considers it and an
    explicit ``method="winograd"`` is refused with this reason).
ndimage_integers : {"scipy", "exact"}
    How :mod:`cupyconv.ndimage` computes integer data with integer-valued weights
    where a double sum would round (``max|input dtype| * sum|weights| >= 2**53``:
    64-bit data, or 32-bit data with very large weights).  ``"scipy"`` (default):
    in float64, as ``scipy.ndimage`` does, so integer outputs are SciPy's exactly.
    ``"exact"``: in int64 (exact modulo 2**64, as integer arithmetic wraps), where
    SciPy's rounding loses the low bits.  Below the bound both are exact and agree.
compiled_calls : bool
    When True (default), a repeated call of a public function with the same key (the
    arrays' shapes, strides, dtypes, alignment and device, every argument, these
    settings and the backend) replays the launch programs its first call ran, without
    the dispatcher (``cupyconv.api.compiled``; docs/programs.md).  False: every
    call takes the normal path (what ``benchmarks.host_path`` compares against).
prebuilt_launches : bool
    When True, a compiled call on CuPy launches through ``cupy.cuda.driver.launchKernel``
    with its parameter struct and argument array built once
    (``cupyconv.backends.cuda.prebuilt_launch``) instead of ``RawKernel.__call__``, which
    marshals every argument per call.  Default False until a device check has run it.
compiled_call_bytes : int or None
    The most device memory, in bytes, that the compiled calls kept by one cache may hold
    between calls: their programs' device constants (transform matrices, filter taps) and,
    with ``cuda_graphs``, the buffers a captured graph owns.  Past it the least recently
    used calls are dropped (their memory goes back to the pool); a call holding more than
    this alone is not kept and takes the normal path (``plan.explain()`` says why).
    Default 256 MiB; ``0`` keeps only calls that hold no device memory; ``None``: no
    bound but the number of entries.
cuda_graphs : bool
    When True, a compiled call on CuPy whose programs take several steps (ndimage's passes,
    Winograd's transforms and GEMM, gemm's vol2col and GEMM) replays as one CUDA graph,
    captured on its first replay over buffers it owns, the call's pointers set per call
    (``cupyconv.backends.cuda.graphs``).  Default False until a device check shows it pays.
cpu_threads : int or None
    The most threads cupyconv's own CPU work runs on at once (the NumPy backend's block
    pool: gemm's column blocks, the depthwise tap loop; BLAS runs one thread per block
    there).  ``None`` (default): one per core this process may use.  ``1``: every block
    on the calling thread.  BLAS calls outside the pool keep BLAS's own thread count
    (``threadpoolctl.threadpool_limits`` sets that).  For a block of code,
    :func:`cpu_threads_limit` sets it and restores it, as ``threadpool_limits`` does.
progress : bool
    When True (default), a CPU call the cost model predicts will take longer than about
    2 seconds shows a ``tqdm`` progress bar on stderr (when ``tqdm`` is installed: the
    ``progress`` extra; without it, no bar).  False silences it.
kernels : {"auto", "verified", "all"}
    Which kernel configurations ``method="auto"`` may choose on the CUDA path (the
    hardware-evidence ledger, docs/evidence.md): ``"auto"`` (default) those verified on
    hardware on a GPU and all of them on the emulator; ``"verified"`` verified ones
    everywhere (the emulator standing in for a device); ``"all"`` every one, an
    unverified one with a one-time warning.  An explicit ``method=``/``tile=`` runs what
    it names, warning once where it is unverified.

Read-only attributes, kept up to date by every assignment of a setting (assigning or
deleting them is an ``AttributeError``):

in_force : namedtuple
    Every setting's value, its fields named as the settings above (``in_force.precision``;
    ``in_force._asdict()`` is a snapshot that ``setattr`` restores).
in_force_id : int
    A small int naming :data:`in_force` (equal settings, equal ids; never reused): what a
    compiled call's key holds, hashed and compared faster than the tuple.
"""
import collections as _collections
import contextlib as _contextlib
import numbers as _numbers
import sys as _sys
import types as _types

import numpy as _np

from ._vocabulary import NDIMAGE_INTEGERS as _NDIMAGE_INTEGERS
from ._vocabulary import PRECISIONS as _PRECISIONS
from ._vocabulary import describe_choices as _describe_choices

autotune = False
workspace_limit = None
winograd_max_error_growth = None
precision = "highest"
ndimage_integers = "scipy"
compiled_calls = True
prebuilt_launches = False
compiled_call_bytes = 256 * 2**20
cuda_graphs = False
cpu_threads = None
progress = True
kernels = "auto"


def _is_bool(value):
    return isinstance(value, (bool, _np.bool_))


def _boolean(name):
    """The check of a setting that is True or False."""
    def check(value):
        if not _is_bool(value):
            raise TypeError(f"cupyconv.config.{name} must be True or False, got {value!r}")
        return bool(value)
    return check


def _optional_number(name, allowed, kind, valid, convert):
    """The check of a setting that is ``None`` or a number of ``kind`` passing ``valid``."""
    def check(value):
        if value is None:
            return None
        message = f"cupyconv.config.{name} must be {allowed}, got {value!r}"
        if _is_bool(value) or not isinstance(value, kind):
            raise TypeError(message)
        if not valid(value):            # NaN fails every comparison
            raise ValueError(message)
        return convert(value)
    return check


def _one_of(name, choices):
    """The check of a setting that is one of the strings ``choices``."""
    def check(value):
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"cupyconv.config.{name} must be one of "
                             f"{_describe_choices(choices)}, got {value!r}")
        return value
    return check


_CHECKS = {
    "autotune": _boolean("autotune"),
    "workspace_limit": _optional_number(
        "workspace_limit", "None or a positive int number of bytes", _numbers.Integral,
        lambda v: v >= 1, int),
    "precision": _one_of("precision", _PRECISIONS),
    "ndimage_integers": _one_of("ndimage_integers", _NDIMAGE_INTEGERS),
    "winograd_max_error_growth": _optional_number(
        "winograd_max_error_growth", "None or a number >= 0 (0 turns winograd off)",
        _numbers.Real, lambda v: v >= 0, lambda v: v),
    "compiled_calls": _boolean("compiled_calls"),
    "prebuilt_launches": _boolean("prebuilt_launches"),
    "compiled_call_bytes": _optional_number(
        "compiled_call_bytes", "None or an int number of bytes >= 0", _numbers.Integral,
        lambda v: v >= 0, int),
    "cuda_graphs": _boolean("cuda_graphs"),
    "cpu_threads": _optional_number(
        "cpu_threads", "None or an int >= 1", _numbers.Integral, lambda v: v >= 1, int),
    "progress": _boolean("progress"),
    "kernels": _one_of("kernels", ("auto", "verified", "all")),
}


class _Config(_types.ModuleType):
    """This module's type: every assignment of a setting goes through its check."""

    def __setattr__(self, name, value):
        if name.startswith("_"):
            super().__setattr__(name, value)
            return
        check = _CHECKS.get(name)
        if check is None:
            if name in _FOLLOWERS:
                raise _read_only(name)
            raise AttributeError(f"cupyconv.config has no setting {name!r}; the settings are "
                                 f"{_describe_choices(sorted(_CHECKS))}")
        super().__setattr__(name, check(value))
        settings = _Settings._make(getattr(self, n) for n in _CHECKS)
        super().__setattr__("in_force", settings)
        super().__setattr__("in_force_id", _settings_id(settings))

    @_contextlib.contextmanager
    def cpu_threads_limit(self, limit):
        """``with cupyconv.config.cpu_threads_limit(2): ...``: :data:`cpu_threads` set to
        ``limit`` (``None``: one per core) inside the block and restored after it, as
        ``threadpoolctl.threadpool_limits`` does for BLAS.  The setting is process-wide."""
        before = self.cpu_threads
        self.cpu_threads = limit
        try:
            yield
        finally:
            self.cpu_threads = before

    def __delattr__(self, name):
        if name in _CHECKS:
            raise AttributeError(f"cupyconv.config.{name} cannot be deleted (assign it)")
        if name in _FOLLOWERS:
            raise _read_only(name)
        super().__delattr__(name)


def _read_only(name):
    """The error of assigning or deleting :data:`in_force` or :data:`in_force_id`."""
    return AttributeError(f"cupyconv.config.{name} is read-only: it follows the settings "
                          f"(assign those)")


#: settings tuple -> its :data:`in_force_id`; ids are never reused (the counter goes on
#: when the table is emptied), so a key holding an old id never matches other settings.
_SETTINGS_IDS = {}
_next_settings_id = [0]


def _settings_id(settings):
    """A small int naming ``settings`` (equal tuples, equal ids): what a compiled call's key
    holds instead of the tuple, whose hash would be computed on every call."""
    known = _SETTINGS_IDS.get(settings)
    if known is None:
        if len(_SETTINGS_IDS) >= 4096:       # settings of many distinct values (limits)
            _SETTINGS_IDS.clear()
        known = _SETTINGS_IDS[settings] = _next_settings_id[0]
        _next_settings_id[0] += 1
    return known


#: the read-only names that follow the settings (:data:`in_force`, :data:`in_force_id`).
_FOLLOWERS = ("in_force", "in_force_id")
_Settings = _collections.namedtuple("_Settings", tuple(_CHECKS))   # (named as found: pickles)
in_force = _Settings._make(globals()[name] for name in _CHECKS)
in_force_id = _settings_id(in_force)
_sys.modules[__name__].__class__ = _Config
