"""Runners: what the CUDA orchestration needs from a device.

Two implementations of one small interface, so that :mod:`.algorithms` is
written once:

- :class:`CupyRunner` — CuPy arrays, kernels from cached NVRTC cubins
  (:func:`cupyconv._compile.load_module`), launches on the current CuPy
  stream, memory from CuPy's pool, properties queried from the device.
- :class:`EmulatedRunner` — NumPy arrays as device memory, the same ``.cu``
  kernels compiled with g++ against the CUDA emulation layer.

A runner provides ``xp`` (the array module), ``loader(source, names)``
(module-like objects for :mod:`cupyconv._kernels.launch`), ``workspace``
(allocations that may fail and are counted), ``constant`` (small host arrays
on the device, copied once), ``free_cached``, ``synchronize``, ``device`` (a
:class:`DeviceInfo` with the free memory queried now) and ``static`` (the same
without the query: what launches read).
"""
from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np

from ..._dtypes import is_half_float
from ..._compile import load_module
from ..._emulation import EmulatedModule, cuda_src_dir
from ..._kernels import evidence, program, registry
from ..._lru import LRU, cached
from ..base import OutOfMemoryError
from .cublas_gemm import batched_matmul

__all__ = ["DeviceInfo", "CupyRunner", "EmulatedRunner", "StandInRunner", "runner_for"]


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """The device properties the cost model uses (queried, never assumed)."""

    #: device name as the driver reports it.
    name: str
    #: compute capability, e.g. 90.
    arch: int
    #: streaming multiprocessors.
    sm_count: int
    #: SM clock in Hz.
    clock_hz: float
    #: peak DRAM bandwidth in bytes/s (from memory clock and bus width).
    bandwidth: float
    #: FP32 lanes per SM (from the compute capability).
    fp32_lanes: int
    #: FP64 rate relative to FP32.
    fp64_ratio: float
    #: shared memory per block without opt-in, bytes.
    smem_per_block: int
    #: free device memory when queried, bytes.
    free_memory: int
    #: a GPU (not the emulator or a stand-in): what the evidence ledger's filter reads.
    hardware: bool = False

    @cached(maxsize=64, keep=True)
    def peak_flops(self, dtype):
        """Peak FLOP/s (an FMA counts 2) for ``dtype``'s real arithmetic (memoised: the
        cost model asks it per candidate and per pass)."""
        base = 2.0 * self.sm_count * self.clock_hz * self.fp32_lanes
        return base * (self.fp64_ratio if np.dtype(dtype).char in "dDq" else 1.0)


def _fp32_lanes(cc):
    """FP32 lanes per SM by compute capability (CUDA programming guide table)."""
    major, minor = divmod(cc, 10)
    if major >= 9 or (major == 8 and minor >= 6):
        return 128
    return 64 if major in (6, 7, 8) else 128


def _fp64_ratio(cc):
    """FP64:FP32 throughput ratio (data-centre parts 1/2, others 1/32 or less)."""
    return 0.5 if cc in (60, 70, 80, 90, 100) else 1.0 / 32


#: Host constants up to this many bytes are kept on the device by :meth:`_Constants.constant`
#: (the largest N-D Winograd ``G``, ``winograd_conv.KRON_BYTES``), at most
#: :data:`CONSTANTS_KEPT` of them (16 MiB at worst; a few KiB in practice).
CONSTANT_BYTES = 1 << 18
CONSTANTS_KEPT = 64


#: The host copies of the dispatched call in progress on this thread (``None`` outside).
_CALL = threading.local()


class _CallScope:
    """The context of :attr:`_HostCopies.call_scope` (a class: a generator-based context
    manager cost ~3 us a call, 7% of a small direct call's host path)."""

    __slots__ = ("outer",)

    def __enter__(self):
        self.outer = getattr(_CALL, "copies", None)
        if self.outer is None:
            _CALL.copies = {}

    def __exit__(self, *exc):
        if self.outer is None:
            _CALL.copies = None


class _HostCopies:
    """Small device arrays the host reads (the ``separable`` weights, factored on the host)
    copied once per dispatched call instead of once per reader: on CuPy each copy waits
    for the device.  Only inside :meth:`call_scope`, so an array the caller changes
    between calls is read again."""

    #: Share host copies until the outermost scope on this thread ends (a class: making
    #: one runs no Python code).
    call_scope = _CallScope

    def host_copy(self, a):
        """``a`` as a NumPy array (NumPy arrays as they are; a device array copied once per
        :meth:`call_scope`)."""
        program.host_read("the call reads device data on the host", a)   # (a compiled call
        if not hasattr(a, "get"):           # compares a small one's bytes, or never replays)
            program.count("syncs")          # (the emulator's arrays are host arrays:
            program.count("d2h")            # counted as the device's copy would be)
            return np.asarray(a)
        memo = getattr(_CALL, "copies", None)
        if memo is None:
            return a.get()
        hit = memo.get(id(a))
        if hit is None or hit[0] is not a:         # the object kept: its id stays its own
            program.count("syncs")
            program.count("d2h")
            hit = memo[id(a)] = (a, a.get())
        return hit[1]


class _Constants:
    """Small read-only host arrays (transform matrices, 1-D filter taps) copied to the
    device once per runner (a runner serves one device) instead of on every call: on CuPy
    each copy is a host-to-device transfer and several calls into the driver."""

    def constant(self, host):
        """``host`` (a NumPy array) as a read-only array of ``xp``, cached by its dtype,
        shape and bytes (arrays above :data:`CONSTANT_BYTES` are copied every time).
        The caller must not write to it."""
        host = np.ascontiguousarray(host)
        if host.nbytes > CONSTANT_BYTES:
            return self.xp.asarray(host)
        key = (host.dtype.str, host.shape, host.tobytes())
        cache = self.__dict__.setdefault("_constants", LRU(CONSTANTS_KEPT))
        return cache.get_or_compute(key, lambda: self._frozen(host))

    def _frozen(self, host):
        program.count("h2d")
        arr = self.xp.array(host)
        if isinstance(arr, np.ndarray):
            arr.flags.writeable = False
        else:       # the copy is on this call's stream; later calls may run on others
            self.xp.cuda.get_current_stream().synchronize()
        return arr


class CupyRunner(_Constants, _HostCopies):
    """CuPy arrays on the current device and stream."""

    name = "cuda"

    def __init__(self):
        import cupy
        self.xp = cupy
        self._cupy = cupy
        self.device_id = cupy.cuda.Device().id
        self.peak_workspace = 0
        #: exceptions that mean "the device ran out of memory" (cuFFT plans, pool).
        self.out_of_memory = (cupy.cuda.memory.OutOfMemoryError,)

    def loader(self, source, names):
        return load_module(source, names, device=self.device_id)

    def workspace(self, shape, dtype):
        """Allocate workspace; CuPy's OOM becomes :class:`OutOfMemoryError`."""
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        program.count_allocation(nbytes)
        try:
            arr = self._cupy.empty(shape, dtype=dtype)
        except self._cupy.cuda.memory.OutOfMemoryError as exc:
            raise OutOfMemoryError(f"workspace of {nbytes} bytes: {exc}") from exc
        self.peak_workspace = max(self.peak_workspace, nbytes)
        return arr

    def matmul(self, a, b, out=None, precision="highest"):
        """``a @ b`` on cuBLAS with the compute type stated
        (:func:`.cublas_gemm.batched_matmul`): float32 is FP32 FMA unless
        ``precision="tf32"`` (``CUBLAS_COMPUTE_32F_FAST_TF32``; the dispatcher has already
        rounded the operands with ``cvt.rna``, so cuBLAS's own conversion changes nothing:
        products exact, sums in float32, the contract of every algorithm); float16 is half
        in and out with float32 sums (one rounding); float64 ``CUBLAS_COMPUTE_64F`` (DMMA
        on sm_80+).  Other dtypes and layouts cuBLAS cannot read as a strided batch go
        through ``cupy.matmul`` with CuPy's compute-type switch pinned the same way (it
        reaches only CuPy's 2-D path), and so does every call while the evidence ledger
        keeps to verified library calls (``_kernels.evidence.library_runs``: the
        strided-batched call has no hardware evidence yet).  The device running out of memory is
        :class:`OutOfMemoryError`, so the dispatcher can fall back."""
        program.count("library")
        try:
            res = None
            if evidence.library_runs("cuBLAS strided-batched", hardware=True):
                res = batched_matmul(self._cupy, a, b, out=out, precision=precision)
            if res is not None:
                return res
            restore = _pin_compute_types(tf32=precision == "tf32")
            try:
                return self._cupy.matmul(a, b, out=out)
            finally:
                restore()
        except self._cupy.cuda.memory.OutOfMemoryError as exc:
            raise OutOfMemoryError(f"GEMM: {exc}") from exc

    def free_cached(self):
        self._cupy.get_default_memory_pool().free_all_blocks()

    def synchronize(self):
        program.count("syncs")
        self._cupy.cuda.get_current_stream().synchronize()

    @property
    def device(self):
        return _cupy_device_info(self.device_id, self._cupy.cuda.runtime.memGetInfo()[0])

    @property
    def static(self):
        """:attr:`device` without the free-memory query (``free_memory`` is 0)."""
        return _cupy_static_device(self.device_id)


#: Operand dtypes whose cuBLAS compute type :meth:`CupyRunner.matmul` pins (to float32;
#: float32's to TF32 under ``precision="tf32"``).
_PINNED_COMPUTE = (np.dtype(np.float16), np.dtype(np.float32))


def _pin_compute_types(tf32=False):
    """Set CuPy's (private) cuBLAS compute-type switch to float32 for float16 and float32
    GEMMs (float32's to TF32 when ``tf32``); returns the function that restores the
    previous settings.  A CuPy without the switch (or part of it) keeps its default for
    what could not be set."""
    previous = []
    try:
        from cupy._core import _routines_linalg as linalg
        for dtype in _PINNED_COMPUTE:
            before = linalg.get_compute_type(dtype)
            wanted = (linalg.COMPUTE_TYPE_TF32 if tf32 and dtype == np.float32
                      else linalg.COMPUTE_TYPE_FP32)
            linalg.set_compute_type(dtype, wanted)
            previous.append((dtype, before))
    except Exception:  # noqa: BLE001 - no switch: CuPy's default
        pass

    def restore():
        for dtype, before in previous:
            linalg.set_compute_type(dtype, before)
    return restore


#: ``cudaDeviceAttr`` numbers (CUDA runtime API, ``driver_types.h``); CUDA 13
#: removed ``clockRate`` and ``memoryClockRate`` from ``cudaDeviceProp``, the
#: attributes remain.
ATTR_CLOCK_RATE_KHZ = 13
ATTR_MEMORY_CLOCK_RATE_KHZ = 36
ATTR_GLOBAL_MEMORY_BUS_WIDTH = 37


def device_static_info(device_id, attribute, props):
    """The :class:`DeviceInfo` fields that do not change, from queried attributes.

    ``attribute(attr, device_id)`` is ``cupy.cuda.runtime.deviceGetAttribute``;
    ``props`` the ``getDeviceProperties`` dict (name, compute capability, SMs,
    shared memory).  Raises ``RuntimeError`` when a clock cannot be queried:
    the cost model never runs on made-up numbers.
    """
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    cc = props["major"] * 10 + props["minor"]
    clock = attribute(ATTR_CLOCK_RATE_KHZ, device_id) * 1e3
    mem_clock = attribute(ATTR_MEMORY_CLOCK_RATE_KHZ, device_id) * 1e3
    bus = attribute(ATTR_GLOBAL_MEMORY_BUS_WIDTH, device_id)
    if not (clock > 0 and mem_clock > 0 and bus > 0):
        raise RuntimeError(
            f"device {device_id} ({name}) reports clock {clock} Hz, memory clock "
            f"{mem_clock} Hz, bus width {bus} bits: cannot build the cost model")
    return dict(name=name, arch=cc, sm_count=props["multiProcessorCount"],
                clock_hz=clock, bandwidth=2 * mem_clock * bus / 8,
                fp32_lanes=_fp32_lanes(cc), fp64_ratio=_fp64_ratio(cc),
                smem_per_block=props["sharedMemPerBlock"])


@cached(maxsize=16)
def _cupy_static_device(device_id):
    return DeviceInfo(free_memory=0, hardware=True, **_cupy_static_info(device_id))


@cached(maxsize=16)
def _cupy_static_info(device_id):
    import cupy  # optional dependency: only reached by a CupyRunner
    runtime = cupy.cuda.runtime
    return device_static_info(device_id, runtime.deviceGetAttribute,
                              runtime.getDeviceProperties(device_id))


def _cupy_device_info(device_id, free):
    return DeviceInfo(free_memory=int(free), hardware=True, **_cupy_static_info(device_id))


class EmulatedRunner(_Constants, _HostCopies):
    """NumPy arrays through the CPU emulation layer.

    Parameters
    ----------
    memory_limit : int, optional
        Workspace allocations beyond this many bytes raise
        :class:`OutOfMemoryError` (tests inject out-of-memory this way).
    """

    name = "emulated"
    #: The emulator has no device to query; the cost model sees this nominal
    #: data-centre part so that ``auto`` decides as it would on such a GPU.
    NOMINAL = DeviceInfo(name="emulated (nominal sm_80-class device)", arch=80,
                         sm_count=108, clock_hz=1.41e9, bandwidth=1.55e12,
                         fp32_lanes=64, fp64_ratio=0.5, smem_per_block=48 * 1024,
                         free_memory=8 * 2**30)
    #: :attr:`device` without the free-memory query (the nominal device as it is).
    static = NOMINAL

    def __init__(self, memory_limit=None):
        self.xp = np
        self.memory_limit = memory_limit
        self.peak_workspace = 0
        #: exceptions that mean "out of memory" (the host's own MemoryError stays one).
        self.out_of_memory = ()

    def loader(self, source, names):
        return _emulated_group(source, tuple(sorted(_group_names(source, names))))

    def workspace(self, shape, dtype):
        nbytes = int(math.prod(shape)) * np.dtype(dtype).itemsize
        if self.memory_limit is not None and nbytes > self.memory_limit:
            raise OutOfMemoryError(
                f"workspace of {nbytes} bytes exceeds the emulated memory limit "
                f"({self.memory_limit} bytes)")
        self.peak_workspace = max(self.peak_workspace, nbytes)
        program.count_allocation(nbytes)
        return np.empty(shape, dtype=dtype)

    @staticmethod
    def matmul(a, b, out=None, precision="highest"):
        """``numpy.matmul`` (the CPU has no TF32: under ``precision="tf32"`` the operands
        arrive rounded, so the products are the TF32 ones); float16 operands are multiplied in
        float32 and the result rounded once to half, as cuBLAS's ``CUBLAS_COMPUTE_32F``
        (NumPy's own half matmul is not documented to accumulate in float)."""
        program.count("library")
        dtype = np.result_type(a, b)
        if not is_half_float(dtype):
            return np.matmul(a, b, out=out)
        with np.errstate(over="ignore"):         # beyond the type's range: inf, as on a GPU
            res = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
        if out is None:
            return res
        out[...] = res
        return out

    def free_cached(self):
        pass

    def synchronize(self):
        program.count("syncs")

    @property
    def device(self):
        if self.memory_limit is None:
            return self.NOMINAL
        return dataclasses.replace(self.NOMINAL, free_memory=self.memory_limit)


class StandInRunner(EmulatedRunner):
    """The emulated runner seen as a device of compute capability ``arch`` (``80``, ``90``
    ...): what the CUDA path chooses on that device, computed by the emulator (the
    hardware-evidence ledger's tests, the device check's plan, the choice corpus)."""

    def __init__(self, arch, memory_limit=None):
        super().__init__(memory_limit)
        self.NOMINAL = self.static = dataclasses.replace(EmulatedRunner.NOMINAL, arch=arch,
                                                         name=f"stand-in sm_{arch}")


def _group_names(source, names):
    """Every instantiation compiled with ``names`` (the registry's groups)."""
    out = set()
    for name in names:
        group = registry.group_members(name)
        out.update((name,) if group is None else group[1])
    return out


@cached(maxsize=64)
def _emulated_group(source, names):
    if source in registry.FAMILIES:
        source = registry.FAMILIES[source].source
    return EmulatedModule(path=str(cuda_src_dir() / source), name_expressions=list(names))


def clear_module_caches():
    """Drop loaded emulated modules (the CuPy loader has its own cache)."""
    _emulated_group.cache_clear()
    _cupy_static_info.cache_clear()
    _cupy_static_device.cache_clear()


def runner_for(backend):
    """A runner for ``"cuda"`` or ``"emulated"``."""
    if backend == "cuda":
        return CupyRunner()
    if backend == "emulated":
        return EmulatedRunner()
    raise ValueError(f"no CUDA runner for backend {backend!r}")
