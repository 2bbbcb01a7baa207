"""The one-flag device scan (cuda_src/conv/data_scan.cu): a call's operands read once by
one kernel, its small result read back with one device-to-host copy.

What the data rules ask of the operands (the fft error bound, Winograd's finite data,
the warning of an explicit ``method="fft"``/``"winograd"``) is answered by one launch
over up to three arrays of one dtype (float16, bfloat16, float32, float64, complex64,
complex128, int64; any shape, any strides, any sign of stride) instead of two host
reads (min and max) per array and part.

Interface (small on purpose; :mod:`cupyconv.backends.cuda` and the fft program use it):

- :func:`scan_check` ``(loader, arrays, decide, output="scan")``: the
  :class:`~._kernels.program.Check` step of a program whose operands ``a0``, ``a1``,
  ``a2`` are ``arrays`` (``None`` where absent): the launch, the zeroed 4-word result
  buffer, ``decide`` (called on the :class:`ScanResult`; its return value is bound as
  ``output``).  Memoised per dtype and layout of the arrays, so a program holding it
  is cached like any other and a compiled call replays it: 1 launch, 1 allocation,
  1 synchronisation, 1 device-to-host copy.
- :func:`scan_program` ``(loader, arrays, decide=None)``: a one-step program around
  :func:`scan_check` (result ``"scan"``: ``decide(ScanResult)``, the
  :class:`ScanResult` itself by default); :func:`run_scan` ``(loader, xp, arrays)``
  builds and executes it.
- :class:`ScanResult`: ``finite`` (per operand), ``magnitude`` (per operand: ``max |a|``
  as an ``int`` for int64 data, the largest finite ``max(|re|, |im|)`` as a ``float``
  for floating data, 0 for an absent or empty operand), ``all_finite``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import registry
from .launch import grid_stride_blocks, kernel_for
from .program import Check, Launch, Program
from .scan_result import ScanResult
from .._lru import cached

__all__ = ["ScanResult", "WORDS", "MAX_OPERANDS", "scan_params_dtype", "scan_check",
           "scan_program", "run_scan", "decode", "scans"]

#: Operands one launch reads.
MAX_OPERANDS = 3
#: 64-bit words of the result: the non-finite bits, then one magnitude per operand.
WORDS = 1 + MAX_OPERANDS

_I8 = np.dtype(np.int64)
_INT32_MAX = 2 ** 31 - 1


@cached(maxsize=None)
def scan_params_dtype(rank: int) -> np.dtype:
    """Structured dtype with the field order of ``cc::ScanParams<rank>``."""
    axes = int(rank) + 2
    return np.dtype([("count", _I8, (MAX_OPERANDS,)), ("dims", _I8, (MAX_OPERANDS,)),
                     ("shape", _I8, (MAX_OPERANDS, axes)),
                     ("stride", _I8, (MAX_OPERANDS, axes))], align=True)


def scans(dtype) -> bool:
    """Whether the kernel has an instance for ``dtype``."""
    try:
        return bool(registry.tiles_for("data_scan", registry.dtype_spec(dtype).dtype, 1))
    except TypeError:
        return False


def _layout(a):
    """``(count, ((extent, element stride), ...) innermost first)`` of ``a``, axes of
    extent 1 dropped and axes contiguous with their inner neighbour merged."""
    item = np.dtype(a.dtype).itemsize
    count = math.prod(a.shape)
    if count == 0:
        return 0, ((1, 1),)
    axes = []
    for n, st in zip(reversed(a.shape), reversed(a.strides)):
        if n == 1:
            continue
        st //= item
        if axes and axes[-1][1] * axes[-1][0] == st:
            axes[-1] = (axes[-1][0] * n, axes[-1][1])
        else:
            axes.append((n, st))
    return count, tuple(axes) or ((1, 1),)


def _dtype_of(arrays):
    present = [a for a in arrays if a is not None]
    if not present:
        raise ValueError("a scan needs at least one array")
    if len(arrays) > MAX_OPERANDS:
        raise ValueError(f"a scan reads at most {MAX_OPERANDS} arrays; got {len(arrays)}")
    dtype = np.dtype(present[0].dtype)
    if any(np.dtype(a.dtype) != dtype for a in present) or not scans(dtype):
        raise TypeError("a scan reads arrays of one of the dtypes "
                        f"{sorted(d for d in registry.DTYPES if scans(d))}; got "
                        f"{[np.dtype(a.dtype).name for a in present]}")
    return dtype


def scan_check(loader, arrays, decide, output="scan", warns=False):
    """The :class:`~.program.Check` step scanning ``arrays`` (operand slots ``a0``..``a2``,
    result buffer ``scanbuf``); ``decide(ScanResult)`` is bound as ``output``; ``warns``:
    the decision only warns (``Check.warns``).  ``decide`` is part of the memo key:
    give an object that compares equal from call to call."""
    arrays = tuple(arrays) + (None,) * (MAX_OPERANDS - len(arrays))
    dtype = _dtype_of(arrays)
    layouts = tuple(None if a is None else _layout(a) for a in arrays)
    return _check(loader, dtype, layouts, decide, output, warns)


@cached(maxsize=256)
def _check(loader, dtype, layouts, decide, output, warns=False):
    axes = max(len(lay[1]) for lay in layouts if lay is not None)
    rank = min(max(axes - 2, 1), registry.MAX_RANK)
    if axes > rank + 2:
        raise ValueError(f"a scanned array has {axes} axes that do not merge; at most "
                         f"{registry.MAX_RANK + 2}")
    p = np.zeros((), scan_params_dtype(rank))
    reach, most = 0, 0
    for i, lay in enumerate(layouts):
        count, dims = lay if lay is not None else (0, ((1, 1),))
        p["count"][i], p["dims"][i] = count, len(dims)
        for d, (n, st) in enumerate(dims):
            p["shape"][i][d], p["stride"][i][d] = n, st
        reach = max(reach, sum((n - 1) * abs(st) for n, st in dims))
        most = max(most, count)
    index64 = max(reach, most) > _INT32_MAX
    kern = kernel_for(loader, "data_scan", dtype, rank, index64)
    present = [f"a{i}" for i, lay in enumerate(layouts) if lay is not None]
    slots = tuple(f"a{i}" if lay is not None else present[0] for i, lay in enumerate(layouts))
    launch = Launch(kern, (grid_stride_blocks(max(most, 1)),), (registry.THREADS,), 0,
                    p[()], slots + ("scanbuf",))
    return Check(launch, "scanbuf", WORDS, functools.partial(_decided, decide, dtype,
                                                              len(layouts)), output, warns)


def _decided(decide, dtype, n, words):
    return decide(decode(words, dtype, n))


#: ``_FINITE[n][bits]``: the per-operand finite flags of ``n`` operands whose non-finite
#: bits are ``bits``.
_FINITE = {n: tuple(tuple(not b >> i & 1 for i in range(n)) for b in range(1 << n))
           for n in range(1, MAX_OPERANDS + 1)}


def decode(words, dtype, n=MAX_OPERANDS):
    """The :class:`ScanResult` of the kernel's ``words`` (a host ``uint64`` array) for
    ``n`` operands of ``dtype``."""
    words = np.asarray(words, np.uint64)
    mags = words[1:1 + n]
    mags = mags.tolist() if np.dtype(dtype).kind in "iu" else mags.view(np.float64).tolist()
    return ScanResult(_FINITE[n][int(words[0]) & ((1 << n) - 1)], tuple(mags))


def _identity(result):
    return result


def scan_program(loader, arrays, decide=None, warns=False):
    """A one-step :class:`~.program.Program` around :func:`scan_check` (operands ``a0``,
    ``a1``, ``a2``; result ``"scan"``: ``decide(ScanResult)``, by default the
    :class:`ScanResult`)."""
    arrays = tuple(arrays) + (None,) * (MAX_OPERANDS - len(arrays))
    dtype = _dtype_of(arrays)
    layouts = tuple(None if a is None else _layout(a) for a in arrays)
    return _program(loader, dtype, layouts, _identity if decide is None else decide,
                    bool(warns))


@cached(maxsize=256)
def _program(loader, dtype, layouts, decide, warns):
    return Program("data_scan", tuple(f"a{i}" for i in range(MAX_OPERANDS)), (),
                   (_check(loader, dtype, layouts, decide, "scan", warns),), "scan")


def run_scan(loader, xp, arrays, decide=None, warns=False):
    """The :class:`ScanResult` of ``arrays`` (device arrays of ``xp``; ``None`` where
    absent), one entry per array given: one launch, one device-to-host copy.  With
    ``decide``: its value on the (untrimmed) :class:`ScanResult` instead."""
    from .program import execute
    n = len(arrays)
    arrays = tuple(arrays) + (None,) * (MAX_OPERANDS - n)
    prog = scan_program(loader, arrays, decide, warns)
    first = next(a for a in arrays if a is not None)
    bound = {f"a{i}": (first if a is None else a) for i, a in enumerate(arrays)}
    res = execute(prog, xp, bound)["scan"]
    return res if decide is not None else ScanResult(res.finite[:n], res.magnitude[:n])


def clear_program_cache():
    """Forget the memoised scan steps (they hold the runners' kernels)."""
    _check.cache_clear()
    _program.cache_clear()
