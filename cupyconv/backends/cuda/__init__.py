"""The CUDA path: one orchestration for CuPy arrays (``cuda``) and the CPU
emulator (``emulated``), behind the :class:`~cupyconv.backends.base.Backend`
interface.

The runner (:mod:`.runners`) is what differs: CuPy arrays and NVRTC cubins,
or NumPy arrays and the same ``.cu`` kernels built with g++.  Forward
algorithms are in :mod:`.algorithms` (``separable``'s 1-D passes in
:mod:`.separable`, ``winograd``'s transform kernels in :mod:`.winograd`, which also
computes stride-1 input gradients), the gradients' column-buffer GEMMs in
:mod:`.gradients`, FFT is the array-module-generic
:mod:`cupyconv.backends.fft_conv` (cuFFT through ``cupyx.scipy.fft``).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..._dtypes import BFLOAT16
from ..._kernels import launch, program, scan_launch
from ..._vocabulary import ALGORITHMS, FORWARD, GRAD_INPUT, GRAD_WEIGHT
from .. import fft_conv, winograd_conv
from ...core.args import LONG_DOUBLE
from ...core.problem import Operands
from ..arrays import in_compute_dtype, in_float32
from ..base import Backend, OutOfMemoryError
from ..separable_factors import NotSeparable, term_limit, terms_take
from . import algorithms, cost, gradients, implicit_grads, relayout, separable, winograd
from .runners import CupyRunner, DeviceInfo, EmulatedRunner, runner_for

__all__ = ["CudaBackend", "COMPILED", "FREE_MEMORY_FRACTION", "NATIVE_HALF", "CupyRunner",
           "EmulatedRunner", "DeviceInfo", "runner_for"]

_LONG_DOUBLE_WHY = ("{dtype} (long double) has no CUDA kernel; compute it on the CPU "
                    "(NumPy arrays on the 'numpy' backend) or cast to float64/complex128")

#: Fraction of free device memory one algorithm's workspace may use when
#: neither the call nor ``config.workspace_limit`` sets a limit.
FREE_MEMORY_FRACTION = 0.5

#: ``(op, algorithm)`` pairs that compute float16 natively: half storage, float32
#: accumulation, one rounding in the kernel's epilogue -- the direct and implicit-GEMM
#: kernels (the implicit-GEMM gradients are the forward kernel on role-swapped operands;
#: not its input gradients through the column buffer, whose col2vol sums would round again),
#: and the forward ``gemm``, whose half columns are a copy (exact) and whose GEMM sums in
#: float32 (``runner.matmul``).  Every other algorithm computes a float16 problem in
#: float32 (operands cast once, the result rounded once by the public function): FFT
#: spectra, the separable passes' partial results, Winograd transforms, ``col2vol``'s sums
#: of overlapping columns and the weight gradient's sums of batch chunks would each round
#: again in half.
NATIVE_HALF = frozenset({(FORWARD, "direct"), (FORWARD, "implicit_gemm"), (FORWARD, "gemm"),
                         (GRAD_INPUT, "implicit_gemm"), (GRAD_WEIGHT, "implicit_gemm")})
#: The same for bfloat16: the direct and implicit-GEMM kernels (cc::bfloat16 storage, the
#: m16n8k16 bf16 atom) and the forward ``gemm`` (bfloat16 vol2col columns, cuBLAS's bf16
#: GEMM with float32 compute: ``cublas_gemm``).
NATIVE_BFLOAT16 = NATIVE_HALF


#: ``(op, algorithm)`` pairs that run as one launch program (``_kernels.program``), which a
#: compiled call can replay; the others do device work between their launches in Python
#: (cuBLAS, cuFFT, host-side factoring) and take the normal path every call.
COMPILED = frozenset({(FORWARD, "direct"), (FORWARD, "implicit_gemm"), (FORWARD, "winograd"),
                      (FORWARD, "gemm"), (GRAD_INPUT, "implicit_gemm"), (GRAD_INPUT, "gemm"),
                      (GRAD_WEIGHT, "implicit_gemm"), (GRAD_WEIGHT, "gemm"),
                      (FORWARD, "separable"), (FORWARD, "fft")})


def _scannable(arrays):
    """Whether one scan kernel reads ``arrays`` (one dtype it has, at most three)."""
    return (0 < len(arrays) <= scan_launch.MAX_OPERANDS
            and len({a.dtype for a in arrays}) == 1 and scan_launch.scans(arrays[0].dtype))


def _widened(problem, algorithm, operands):
    """``(problem, operands)`` as ``algorithm`` computes them (float16 in float32 unless
    :data:`NATIVE_HALF`, bfloat16 unless :data:`NATIVE_BFLOAT16`)."""
    native = NATIVE_BFLOAT16 if problem.dtype == BFLOAT16 else NATIVE_HALF
    if (problem.op, algorithm) in native and not _columns(problem, algorithm):
        return problem, operands
    return in_float32(problem, operands)     # (the column path's col2vol would round again)


def _computed(problem, algorithm):
    """``(the problem algorithm computes, bytes of its float32 copies of x, w and y)``: what
    ``can_implement`` and the workspace judge, so a float16 problem is ranked as it runs."""
    wide, _ = _widened(problem, algorithm, Operands())
    return wide, (wide.bytes_moved if wide is not problem else 0)


def _columns(problem, algorithm):
    """Whether ``algorithm`` runs ``problem`` through the column buffer besides ``gemm``:
    the implicit GEMM's input gradients that are not convolutions of ``dy``."""
    return algorithm == "implicit_gemm" and implicit_grads.needs_columns(problem)


class CudaBackend(Backend):
    """The CUDA path on one runner (a CuPy device, or the emulator)."""

    def __init__(self, runner):
        self.runner = runner
        self.name = runner.name
        self.xp = runner.xp

    @property
    def device(self):
        """The runner's static :class:`~.runners.DeviceInfo` (no free-memory query: the
        checks and the cost model read only what does not change)."""
        return self.runner.static

    def can_implement(self, problem, algorithm):
        why = ALGORITHMS[algorithm].refusal(problem.op, self.name)
        if why:
            return False, why
        if problem.dtype in LONG_DOUBLE:
            return False, _LONG_DOUBLE_WHY.format(dtype=problem.dtype)
        problem, _ = _computed(problem, algorithm)
        return algorithms.can_implement(self.kernel_problem(problem), algorithm, self.device)

    def rounds_tf32(self, problem, algorithm):
        """The implicit GEMM rounds its float32 operands itself, fused into the re-layout
        (``.relayout``), the forward pass and the gradients that run as forward problems
        (``.implicit_grads``: their programs re-lay and round); not the input gradients
        through the column buffer, whose operands the dispatcher rounds."""
        return (algorithm == "implicit_gemm" and problem.dtype == np.float32
                and not implicit_grads.needs_columns(problem))

    def prepare_filter(self, problem, algorithm, w):
        """Frozen weights of the forward implicit GEMM: re-laid and rounded once
        (``relayout.freeze_filter``); ``w`` for every other algorithm and op."""
        if problem.op != FORWARD or algorithm != "implicit_gemm" or w.dtype != problem.dtype:
            return w
        return relayout.freeze_filter(problem, w, self.runner, **algorithms.tensor_core_flags(
            problem, self.device), round_tf32=relayout.rounds_here(problem),
            pays=functools.partial(cost.relayout_pays, problem, self.device))

    def compile_refusal(self, problem, algorithm):
        if (problem.op, algorithm) in COMPILED:
            return ""
        return f"{algorithm} ({problem.op}) is not a launch program yet"

    def call_scope(self):
        return self.runner.call_scope()

    def scan(self, arrays):
        """One :mod:`~cupyconv._kernels.scan_launch` launch over ``arrays`` and one read of
        its 4-word result (1 synchronisation, 1 copy), instead of a min and a max read
        per array and part; the host's scan for dtypes the kernel lacks."""
        arrays = list(arrays)
        if not _scannable(arrays):
            return super().scan(arrays)
        return scan_launch.run_scan(self.runner.loader, self.xp, arrays)

    def check(self, arrays, decide, warns=False):
        """``decide`` on one scan of ``arrays`` as a one-step program (its
        :class:`~cupyconv._kernels.program.Check`), which a compiled call replays: one
        launch, one read back (``decide`` must compare equal from call to call: it is
        part of the program's memo key)."""
        arrays = list(arrays)
        if not _scannable(arrays):
            return super().check(arrays, decide, warns)
        return scan_launch.run_scan(self.runner.loader, self.xp, arrays, decide, warns)

    def data_ok(self, problem, algorithm, operands, slack=math.inf):
        if algorithm == "winograd":
            program.host_read(f"whether {algorithm} may run depends on the data",
                              operands.activation, operands.filter, operands.output)
            return winograd_conv.data_ok(operands, self.scan)
        if algorithm != "separable":
            return True, ""
        activation = operands.activation
        problem, operands = _widened(problem, algorithm, Operands(filter=operands.filter))
        try:       # a host copy of device weights says why the call cannot compile
            plans = separable.pass_plans(problem, self.runner.host_copy(operands.filter),
                                         term_limit(problem, slack))
        except NotSeparable as exc:
            return False, str(exc)
        if len(plans) > 1 and activation is not None:
            program.host_read("whether a sum of separable terms may run depends on the "
                              "data (an infinity in x)", activation)
        return terms_take(len(plans), activation)

    def min_workspace_bytes(self, problem, algorithm):
        wide, copies = _computed(problem, algorithm)
        if copies:
            return copies + self.min_workspace_bytes(wide, algorithm)
        if algorithm == "gemm" or _columns(problem, algorithm):
            return problem.column_bytes(1)
        if algorithm == "winograd":
            return winograd.min_workspace_bytes(problem)
        return self.workspace_bytes(problem, algorithm)

    def workspace_bytes(self, problem, algorithm, workspace_limit=None):
        wide, copies = _computed(problem, algorithm)
        if copies:
            return copies + self.workspace_bytes(wide, algorithm, workspace_limit)
        if algorithm == "gemm" or _columns(problem, algorithm):
            nb = algorithms.gemm_batch_chunk(problem, workspace_limit)
            return problem.column_bytes(max(nb, 1))
        if algorithm == "fft":
            return fft_conv.workspace_bytes(problem)
        if algorithm == "separable":
            return separable.workspace_bytes(problem)
        if algorithm == "winograd":
            return winograd.workspace_bytes(problem, workspace_limit)
        return 0

    def predict_times(self, problem, names):
        times = {}
        for name in names:          # each on the problem it computes (float16 or float32)
            times.update(cost.predict_times(_computed(problem, name)[0], self.device, [name]))
        return times

    def default_workspace_limit(self):
        return int(self.runner.device.free_memory * FREE_MEMORY_FRACTION)

    def available_memory(self):
        return int(self.runner.device.free_memory)

    @staticmethod
    def kernel_problem(problem):
        """uint64 runs in the int64 kernels (two's complement: the same bits)."""
        if problem.dtype == np.uint64:
            return problem.with_(dtype=np.dtype(np.int64))
        return problem

    def prepare(self, problem, operands):
        """Views the kernels can address: uint64 as int64, unaddressable operands copied
        (float16 stays float16: ``run`` widens what does not compute it natively)."""
        if problem.dtype in LONG_DOUBLE:
            raise TypeError(_LONG_DOUBLE_WHY.format(dtype=problem.dtype))
        problem = problem.with_(layout="channels_first")   # operands are channels-first views
        operands = in_compute_dtype(problem, operands)     # the kernels take one dtype
        arrays = {}
        for role in ("activation", "filter", "output"):
            a = operands.get(role)
            if a is None:
                continue
            if a.dtype == np.uint64:
                a = a.view(np.int64)
            if not launch.addressable(a)[0]:
                a = a.copy()       # a record field, a misaligned view (a fresh, aligned array)
            arrays[role] = a
        return self.kernel_problem(problem), operands.replace(**arrays)

    def run(self, problem, algorithm, operands, workspace_limit, stats=None):
        runner = self.runner
        why = self.compile_refusal(problem, algorithm)
        if why:
            program.refuse(why)
        problem, operands = _widened(problem, algorithm, operands)
        if algorithm == "fft":
            need = fft_conv.workspace_bytes(problem)
            if need > min(workspace_limit, self.available_memory()):
                raise OutOfMemoryError(
                    f"fft needs about {need} bytes of spectra; workspace_limit is "
                    f"{workspace_limit}, the device has {self.available_memory()} bytes free")
            try:
                return fft_conv.run(problem, operands, runner.constant)
            except runner.out_of_memory as exc:      # cuFFT plans and spectra from the pool
                raise OutOfMemoryError(f"fft: {exc}") from exc
        runner.peak_workspace = 0
        pays = functools.partial(cost.relayout_pays, problem, self.device)
        if problem.op == FORWARD:
            y = algorithms.run(problem, operands.activation, operands.filter, algorithm,
                               runner, workspace_limit, relay_pays=pays)
        elif problem.op == GRAD_INPUT and algorithm == "winograd":
            y = winograd.grad_input(problem, operands.output, operands.filter, runner,
                                    workspace_limit)
        elif algorithm == "implicit_gemm" and implicit_grads.needs_columns(problem):
            y = gradients.grad_input(problem, operands.output, operands.filter, runner,
                                     workspace_limit,
                                     algorithms.tensor_core_flags(problem, runner.static))
        elif algorithm == "implicit_gemm":     # the gradients as forward problems
            y = implicit_grads.run(problem, operands, runner,
                                   algorithms.tensor_core_flags(problem, runner.static),
                                   relay_pays=pays, tile=algorithms.wgmma_program,
                                   splits=self._splits(problem, workspace_limit))
        elif problem.op == GRAD_INPUT:
            y = gradients.grad_input(problem, operands.output, operands.filter, runner,
                                     workspace_limit)
        else:
            y = gradients.grad_weight(problem, operands.activation, operands.output, runner,
                                      workspace_limit)
        if stats is not None:
            stats["peak_workspace"] = max(stats.get("peak_workspace", 0), runner.peak_workspace)
        return y

    def _splits(self, problem, workspace_limit):
        """The weight gradient's split-K (``cost.weight_gradient_splits``; 1 where its
        workspaces, the copy of ``dy`` and the partials, would pass ``workspace_limit``)."""
        splits = cost.weight_gradient_splits(problem, self.device)
        if splits > 1 and implicit_grads.split_workspace_bytes(problem, splits) > workspace_limit:
            return 1
        return splits

    def free_cached(self):
        self.runner.free_cached()

    def synchronize(self):
        self.runner.synchronize()
