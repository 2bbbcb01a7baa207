"""The CUDA path's algorithm table: one class per ``method=`` name, the same on CuPy and
on the emulator (the backend's runner differs).

Each class states the operations it computes natively in float16/bfloat16
(:attr:`CudaAlgorithm.native_ops`; the others compute a 16-bit problem in float32, its
operands cast once) and those it runs as one launch program that a compiled call replays
(:attr:`CudaAlgorithm.compiled_ops`), and answers for itself: whether it applies, its
workspace, its price (its device time on the roofline of ``cost.py``, its host time per
call, its efficiency entry), its one kernel choice (:meth:`CudaAlgorithm.choose_kernel`:
the :class:`~cupyconv._kernels.kernel_config.KernelConfig` it is priced and built by), how
it runs.
"""
from __future__ import annotations

import math

import numpy as np

from ... import config
from ..._kernels import evidence, launch, program
from ..._kernels.kernel_config import family_config
from ..._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from ...core.args import LONG_DOUBLE
from ...core.problem import Operands
from .. import fft_conv, winograd_conv
from ..arrays import in_float32
from ..base import Algorithm, OutOfMemoryError
from ..separable_factors import NOT_APPLICABLE, NotSeparable, term_limit, terms_take
from ..separable_factors import applies as separable_applies
from . import (algorithms, cost, gradients, implicit_choice, implicit_grads, relayout,
               separable, winograd)

__all__ = ["TABLE", "LONG_DOUBLE_WHY", "COMPILED", "NATIVE_HALF", "NATIVE_BFLOAT16"]

LONG_DOUBLE_WHY = ("{dtype} (long double) has no CUDA kernel; compute it on the CPU "
                   "(NumPy arrays on the 'numpy' backend) or cast to float64/complex128")

_ALL_OPS = frozenset((FORWARD, GRAD_INPUT, GRAD_WEIGHT))
_FORWARD = frozenset((FORWARD,))
_UINT64 = np.dtype(np.uint64)


def kernel_problem(problem):
    """uint64 runs in the int64 kernels (two's complement: the same bits)."""
    if problem.dtype == _UINT64:
        return problem.with_(dtype=np.dtype(np.int64))
    return problem


class CudaAlgorithm(Algorithm):
    """An algorithm of the CUDA path (``self.backend``: a ``CudaBackend``)."""

    #: Ops computed natively in float16 and bfloat16: half storage, float32 accumulation,
    #: one rounding in the kernel's epilogue.  Every other op computes a 16-bit problem in
    #: float32 (operands cast once, the result rounded once by the public function): FFT
    #: spectra, separable passes' partial results, Winograd transforms, ``col2vol``'s sums
    #: of overlapping columns and the weight gradient's sums of batch chunks would each
    #: round again in half.
    native_ops = frozenset()
    #: Ops run as one launch program (``_kernels.program``), which a compiled call can
    #: replay; the others do device work between launches in Python.
    compiled_ops = _FORWARD

    def columns(self, problem):
        """Whether it runs ``problem`` through the column buffer (besides ``gemm``)."""
        return False

    def widened(self, problem, operands):
        """``(problem, operands)`` as it computes them (a 16-bit problem in float32 unless
        native; the column path's col2vol would round again)."""
        if problem.dtype.itemsize != 2 or (problem.op in self.native_ops
                                           and not self.columns(problem)):
            return problem, operands        # (only a 2-byte dtype can be a 16-bit float)
        return in_float32(problem, operands)

    def computed(self, problem):
        """``(the problem it computes, bytes of its float32 copies of x, w and y)``: what
        the checks and the workspace judge, so a float16 problem is ranked as it runs."""
        if problem.dtype.itemsize != 2:         # as :meth:`widened`: computed as it is
            return problem, 0
        wide, _ = self.widened(problem, Operands())
        return wide, (wide.bytes_moved if wide is not problem else 0)

    def applies(self, problem):
        return self._applies(problem, self.computed(problem)[0], self.backend.device)

    def _applies(self, problem, wide, device):
        if problem.dtype in LONG_DOUBLE:
            return False, LONG_DOUBLE_WHY.format(dtype=problem.dtype)
        return self.kernel_applies(kernel_problem(wide), device)

    def assess(self, problem, workspace_limit):
        """:meth:`can_implement`, :meth:`min_workspace`, :meth:`workspace` and
        :meth:`predict` in one pass: the problem it computes (:meth:`computed`) and the
        device read once; the workspace and the price are those of the record that runs
        under ``workspace_limit`` (:meth:`kernel_config`)."""
        if (problem.op, self.backend.name) not in self.spec.served:
            return super().can_implement(problem)[1], 0, 0, math.inf
        wide, copies = self.computed(problem)
        device = self.backend.device
        ok, why = self._applies(problem, wide, device)
        if not ok:
            return why, 0, 0, math.inf
        judged = wide if copies else problem
        return (None, copies + self.least_workspace(judged),
                copies + self.own_workspace(judged, workspace_limit),
                self.predicted(wide, device, workspace_limit=workspace_limit))

    def kernel_applies(self, problem, device):
        """``(ok, reason)`` of its kernels on ``device``."""
        return True, ""

    def workspace(self, problem, workspace_limit=None):
        wide, copies = self.computed(problem)
        if copies:
            return copies + self.workspace(wide, workspace_limit)
        return self.own_workspace(problem, workspace_limit)

    def own_workspace(self, problem, workspace_limit):
        """Workspace of the problem it computes (no widened copies)."""
        return 0

    def min_workspace(self, problem):
        wide, copies = self.computed(problem)
        if copies:
            return copies + self.min_workspace(wide)
        return self.least_workspace(problem)

    def least_workspace(self, problem):
        """Least workspace of the problem it computes (no widened copies)."""
        return self.own_workspace(problem, None)

    def predict(self, problem):
        return self.predicted(self.computed(problem)[0], self.backend.device)

    @classmethod
    def predicted(cls, problem, device, efficiency=None, workspace_limit=None):
        """Predicted seconds of ``problem`` (as it computes it) on ``device`` under
        ``workspace_limit``: the larger of its device time and its host time per call
        (asynchronous launches overlap the two); infinite where the evidence ledger keeps
        the choice to verified kernels and its configuration (:meth:`kernel_config` under
        the limit) is not one.  ``efficiency``: a full mapping replacing
        ``cost.efficiencies`` (``cost.calibrate`` varies one entry)."""
        if (evidence.FILTER[config.kernels, device.hardware][0]     # evidence.verified_only
                and not evidence.is_verified(cls.kernel_config(problem, device,
                                                               workspace_limit))):
            return math.inf
        eff_of = efficiency or cost.efficiencies(device.name)
        return max(cls.device_time(problem, device, eff_of, workspace_limit),
                   cls.host_time(problem))

    @classmethod
    def device_time(cls, problem, device, eff_of, workspace_limit=None):
        """Seconds of device work on ``problem`` under ``workspace_limit`` (``eff_of``: the
        efficiency fractions)."""
        raise NotImplementedError

    @classmethod
    def host_time(cls, problem):
        """Host seconds per call (``cost.HOST_S``)."""
        return cost.HOST_S[cls.name]

    @classmethod
    def efficiency_key(cls, problem, device):
        """The ``cost.EFFICIENCY`` entry that sets its prediction for ``problem``."""
        return cls.name

    @classmethod
    def choose_kernel(cls, problem, device, arch, index64):
        """Its :class:`~cupyconv._kernels.kernel_config.KernelConfig` of ``problem`` on
        ``device`` (``arch``: its arch class, ``index64``: the problem's index width)."""
        raise NotImplementedError

    @classmethod
    def kernel_config(cls, problem, device, workspace_limit=None):
        """:meth:`choose_kernel`, memoised (``cost.kernel_config_memo``, keyed by the
        evidence filter in force): the record that runs ``problem`` on operands as the cost
        model assumes them under ``workspace_limit`` (a split-K whose workspaces pass it
        runs unsplit, ``implicit_choice.under_limit``)."""
        cfg = cost.kernel_config_memo(cls.choose_kernel, problem, device,
                                      evidence.FILTER[config.kernels, device.hardware][0])
        if cfg.splits > 1 and workspace_limit is not None:
            return implicit_choice.under_limit(problem, cfg, device, workspace_limit)
        return cfg

    def floor(self, problem):
        """Its host time per call (``cost.HOST_S``): the cost model's least prediction."""
        return cost.HOST_S.get(self.name, 0.0)

    def compile_refusal(self, problem):
        if problem.op in self.compiled_ops:
            return ""
        return f"{self.name} ({problem.op}) is not a launch program yet"

    def run(self, problem, operands, workspace_limit, stats=None):
        runner = self.backend.runner
        why = self.compile_refusal(problem)
        if why:
            program.refuse(why)
        problem, operands = self.widened(problem, operands)
        cost.warn_if_unverified(self, problem, self.backend.device, workspace_limit)
        runner.peak_workspace = 0
        y = self.compute(problem, operands, workspace_limit)
        if stats is not None:
            stats["peak_workspace"] = max(stats.get("peak_workspace", 0), runner.peak_workspace)
        return y

    def compute(self, problem, operands, workspace_limit):
        """The result of the (widened) problem: forward by default (:meth:`forward`),
        the gradients through the column buffer and cuBLAS (:mod:`.gradients`)."""
        runner = self.backend.runner
        if problem.op == FORWARD:
            return self.forward(problem, operands.activation, operands.filter, workspace_limit)
        if problem.op == GRAD_INPUT:
            return gradients.grad_input(problem, operands.output, operands.filter, runner,
                                        workspace_limit)
        return gradients.grad_weight(problem, operands.activation, operands.output, runner,
                                     workspace_limit)

    def forward(self, problem, x, w, workspace_limit):
        raise NotImplementedError


class Direct(CudaAlgorithm):
    name = "direct"
    plus_zero_sums = True      # the kernels' accumulators start from +0.0
    native_ops = _FORWARD

    def kernel_applies(self, problem, device):
        """The direct kernel's shared-memory tile on ``device``."""
        return launch.can_implement_direct(problem, device.smem_per_block)

    @classmethod
    def device_time(cls, problem, device, eff_of, workspace_limit=None):
        return cost.direct_time(problem, device.peak_flops(problem.dtype), device.bandwidth,
                                eff_of["direct"], device)

    @classmethod
    def choose_kernel(cls, problem, device, arch, index64):
        return cost.direct_config(cls.name, problem, device, arch, index64)

    def forward(self, problem, x, w, workspace_limit):
        return algorithms.direct(problem, x, w, self.backend.runner, workspace_limit)


class ImplicitGemm(CudaAlgorithm):
    """The implicit GEMM; its gradients as forward problems (:mod:`.implicit_grads`), the
    input gradients that are not convolutions of ``dy`` through the column buffer."""

    name = "implicit_gemm"
    plus_zero_sums = True      # the kernels' accumulators start from +0.0
    native_ops = _ALL_OPS
    compiled_ops = _ALL_OPS

    columns = staticmethod(implicit_grads.needs_columns)
    @staticmethod
    def kernel_applies(problem, device=None):
        """``(ok, reason)`` of the forward kernel, or of the gradient as its forward
        problem (:mod:`.implicit_grads`)."""
        if problem.op != FORWARD:
            return implicit_grads.can_implement(problem)
        return launch.can_implement_implicit_gemm(problem)

    @classmethod
    def device_time(cls, problem, device, eff_of, workspace_limit=None):
        """The price of its record under ``workspace_limit`` (``implicit_choice.record_time``)."""
        return implicit_choice.record_time(
            problem, cls.kernel_config(problem, device, workspace_limit), device, eff_of)

    @classmethod
    def efficiency_key(cls, problem, device):
        return implicit_choice.record_key(problem, cls.kernel_config(problem, device), device)

    choose_kernel = staticmethod(implicit_choice.choose_kernel)

    def own_workspace(self, problem, workspace_limit):
        """The weight gradient's split-K workspaces (``implicit_grads.split_workspace_bytes``)
        of its record under ``workspace_limit`` (:meth:`kernel_config`); the column buffer
        of an input gradient that is not a convolution of ``dy``."""
        if problem.op == GRAD_WEIGHT:
            splits = self.kernel_config(problem, self.backend.device, workspace_limit).splits
            return implicit_grads.split_workspace_bytes(problem, splits) if splits > 1 else 0
        if not self.columns(problem):
            return 0
        return problem.column_bytes(max(algorithms.gemm_batch_chunk(problem, workspace_limit), 1))

    def least_workspace(self, problem):
        """0 (the weight gradient unsplit), or one image's column buffer."""
        return problem.column_bytes(1) if self.columns(problem) else 0

    def rounds_tf32(self, problem):
        """It rounds its float32 operands itself, fused into the re-layout (``.relayout``),
        the forward pass and the gradients that run as forward problems; not the input
        gradients through the column buffer, whose operands the dispatcher rounds."""
        return problem.dtype == np.float32 and not self.columns(problem)

    def prepare_filter(self, problem, w):
        """Frozen weights of the forward pass: re-laid (where re-laying x alone per call
        pays: ``implicit_choice.relayout_pays``) and rounded once (``relayout.freeze_filter``)."""
        if problem.op != FORWARD or w.dtype != problem.dtype:
            return w
        device = self.backend.device
        flags = implicit_choice.tensor_core_flags(problem, device)
        relay_w = (relayout.filter_relays(problem, w, **flags)
                   and implicit_choice.relayout_pays(problem, device, False))
        return relayout.freeze_filter(problem, w, self.backend.runner, **flags, relay_w=relay_w,
                                      round_tf32=relayout.rounds_here(problem))

    def compute(self, problem, operands, workspace_limit):
        """The record :meth:`launch_config` makes on these operands, built as it is."""
        runner = self.backend.runner
        if self.columns(problem):
            return gradients.grad_input(problem, operands.output, operands.filter, runner,
                                        workspace_limit,
                                        implicit_choice.tensor_core_flags(problem, runner.static))
        cfg = self.launch_config(problem, operands, workspace_limit)
        if problem.op == FORWARD:
            return algorithms.implicit_gemm(problem, operands.activation, operands.filter,
                                            runner, workspace_limit, cfg)
        return implicit_grads.run(problem, operands, runner,
                                  implicit_choice.tensor_core_flags(problem, runner.static), cfg)

    def launch_config(self, problem, operands, workspace_limit=None):
        """:meth:`choose_kernel` on these operands: the record priced under
        ``workspace_limit`` (:meth:`kernel_config`) where they are as it assumes them
        (``implicit_choice.as_priced``), else ``implicit_choice.choose_kernel`` on them (the
        weight gradient unsplit where its split-K's workspaces would pass the limit)."""
        device = self.backend.device
        cfg = self.kernel_config(problem, device, workspace_limit)
        if implicit_choice.as_priced(problem, cfg, operands):
            return cfg
        return implicit_choice.choose_kernel(problem, device, evidence.arch_class(device.arch),
                                             None, operands, workspace_limit)


class Gemm(CudaAlgorithm):
    """vol2col and cuBLAS, chunked to the workspace limit; the forward half columns are a
    copy (exact) and the GEMM sums in float32 (native float16 and bfloat16)."""

    name = "gemm"
    native_ops = _FORWARD
    compiled_ops = _ALL_OPS

    def kernel_applies(self, problem, device):
        return algorithms.gemm_applies(problem, device)

    @classmethod
    def device_time(cls, problem, device, eff_of, workspace_limit=None):
        """The columns written and read, cuBLAS's GEMM (float64 on DMMA, float16 on HMMA
        by itself on sm_80+, TF32 as asked; a GEMM a few columns wide runs far under its
        rate), the operands' compulsory traffic, two launches."""
        bw, tc_peak = device.bandwidth, cost.tensor_peak_flops(problem, device)
        cols = problem.column_bytes()
        tiny = min(1.0, problem.gemm_n / 16)
        rate = tc_peak if tc_peak else device.peak_flops(problem.dtype)
        eff = eff_of[cls.efficiency_key(problem, device)]
        return (2 * cols / bw + problem.flops / (rate * eff * max(tiny, 0.05))
                + problem.bytes_moved / bw + 2 * cost.LAUNCH_S)

    @classmethod
    def efficiency_key(cls, problem, device):
        if cost.tensor_peak_flops(problem, device):
            return "gemm_tc_" + cost.tensor_kind(problem)
        return cls.name

    @classmethod
    def choose_kernel(cls, problem, device, arch, index64):
        family = "col2vol" if problem.op == GRAD_INPUT else "vol2col"
        return family_config(cls.name, family, problem.dtype, arch, index64,
                             library=cost.gemm_library(device))

    def own_workspace(self, problem, workspace_limit):
        return problem.column_bytes(max(algorithms.gemm_batch_chunk(problem, workspace_limit), 1))

    def least_workspace(self, problem):
        return problem.column_bytes(1)

    def forward(self, problem, x, w, workspace_limit):
        return algorithms.gemm(problem, x, w, self.backend.runner, workspace_limit)


class Fft(CudaAlgorithm):
    """cuFFT through ``cupyx.scipy.fft`` (:mod:`cupyconv.backends.fft_conv`)."""

    name = "fft"

    def kernel_applies(self, problem, device):
        return algorithms.fft_applies(problem, device)

    @staticmethod
    def mixes(fwd):
        """Whether the FFT of the forward problem ``fwd`` mixes channels (more than one
        input channel per output channel: the ``fft_mix`` term)."""
        return (fwd.in_channels // fwd.groups) * fwd.out_channels > fwd.groups

    @classmethod
    def device_time(cls, problem, device, eff_of, workspace_limit=None):
        """The transforms of x, w and y (``2.5 n log2 n`` each) or their spectra's
        traffic, and the channel mixing: a complex multiply-add per ``(n, k, c)`` and
        frequency."""
        fwd = fft_conv.transposed_forward(problem)
        peak = device.peak_flops(problem.dtype)
        npts = math.prod(fwd.padded_shape())
        cg = fwd.in_channels // fwd.groups
        transforms = (fwd.batch * fwd.in_channels + fwd.out_channels * cg
                      + fwd.batch * fwd.out_channels)
        fft_flops = 2.5 * transforms * npts * math.log2(max(npts, 2))
        spectra = 2 * max(problem.dtype.itemsize, 4) * npts * transforms
        mix_flops = 8 * fwd.batch * fwd.out_channels * cg * npts if cls.mixes(fwd) else 0
        return (max(fft_flops / (peak * eff_of["fft"]), 3 * spectra / device.bandwidth)
                + mix_flops / (peak * eff_of["fft_mix"]) + 6 * cost.LAUNCH_S)

    @classmethod
    def efficiency_key(cls, problem, device):
        return "fft_mix" if cls.mixes(fft_conv.transposed_forward(problem)) else cls.name

    @classmethod
    def choose_kernel(cls, problem, device, arch, index64):
        return family_config(cls.name, "", problem.dtype, arch, index64, math="", layout="",
                             library="cuFFT")

    def own_workspace(self, problem, workspace_limit):
        return fft_conv.workspace_bytes(problem)

    def run(self, problem, operands, workspace_limit, stats=None):
        runner, backend = self.backend.runner, self.backend
        why = self.compile_refusal(problem)
        if why:
            program.refuse(why)
        problem, operands = self.widened(problem, operands)
        cost.warn_if_unverified(self, problem, backend.device)
        need = fft_conv.workspace_bytes(problem)
        if need > min(workspace_limit, backend.available_memory()):
            raise OutOfMemoryError(
                f"fft needs about {need} bytes of spectra; workspace_limit is "
                f"{workspace_limit}, the device has {backend.available_memory()} bytes free")
        try:
            return fft_conv.run(problem, operands, runner.constant)
        except runner.out_of_memory as exc:      # cuFFT plans and spectra from the pool
            raise OutOfMemoryError(f"fft: {exc}") from exc


class Separable(CudaAlgorithm):
    """One direct-kernel launch per axis and term (:mod:`.separable`)."""

    name = "separable"
    plus_zero_sums = True      # the kernels' accumulators start from +0.0

    def kernel_applies(self, problem, device):
        if not separable_applies(problem):          # data-free, before any pass is built
            return False, NOT_APPLICABLE
        return separable.can_implement(problem, device.smem_per_block)

    @classmethod
    def device_time(cls, problem, device, eff_of, workspace_limit=None):
        """One direct launch per pass (its taps, its input read, its output written), at
        ``direct``'s efficiency."""
        peak, bw, seconds = device.peak_flops(problem.dtype), device.bandwidth, 0.0
        for _, p in separable.pass_problems(problem):
            seconds += cost.direct_time(p, peak, bw, eff_of["direct"], device)
        return seconds

    @classmethod
    def host_time(cls, problem):
        """Each pass after the first adds its launch's host time (``cost.PASS_HOST_S``)."""
        return (cost.HOST_S[cls.name]
                + cost.PASS_HOST_S * (len(separable.pass_problems(problem)) - 1))

    @classmethod
    def efficiency_key(cls, problem, device):
        return "direct"

    @classmethod
    def choose_kernel(cls, problem, device, arch, index64):
        return cost.direct_config(cls.name, problem, device, arch, index64)

    def own_workspace(self, problem, workspace_limit):
        return separable.workspace_bytes(problem)

    def data_ok(self, problem, operands, slack=math.inf):
        activation = operands.activation
        problem, operands = self.widened(problem, Operands(filter=operands.filter))
        try:       # a host copy of device weights says why the call cannot compile
            plans = separable.pass_plans(problem, self.backend.runner.host_copy(operands.filter),
                                         term_limit(problem, slack))
        except NotSeparable as exc:
            return False, str(exc)
        if len(plans) > 1 and activation is not None:
            program.host_read("whether a sum of separable terms may run depends on the "
                              "data (an infinity in x)", activation)
        return terms_take(len(plans), activation)

    def forward(self, problem, x, w, workspace_limit):
        return separable.run(problem, x, w, self.backend.runner, workspace_limit)


class Winograd(CudaAlgorithm):
    """Transform kernels around a batched cuBLAS GEMM (:mod:`.winograd`), the stride-1
    input gradient as its forward problem."""

    name = "winograd"

    def kernel_applies(self, problem, device):
        return winograd.can_implement(problem, device)

    @classmethod
    def device_time(cls, problem, device, eff_of, workspace_limit=None):
        w_flops, w_bytes, launches = winograd.work(problem)
        return (w_flops / (device.peak_flops(problem.dtype) * eff_of["winograd"])
                + w_bytes / device.bandwidth + launches * cost.LAUNCH_S)

    @classmethod
    def choose_kernel(cls, problem, device, arch, index64):
        parts = tuple(family_config(cls.name, f, problem.dtype, arch, index64)
                      for f in ("winograd_output", "winograd_weights"))
        return family_config(cls.name, "winograd_input", problem.dtype, arch, index64,
                             companions=parts, library=cost.gemm_library(device))

    def own_workspace(self, problem, workspace_limit):
        return winograd.workspace_bytes(problem, workspace_limit)

    def least_workspace(self, problem):
        return winograd.min_workspace_bytes(problem)

    def data_ok(self, problem, operands, slack=math.inf):
        program.host_read(f"whether {self.name} may run depends on the data",
                          operands.activation, operands.filter, operands.output)
        return winograd_conv.data_ok(operands, self.backend.scan)

    def compute(self, problem, operands, workspace_limit):
        if problem.op == GRAD_INPUT:
            return winograd.grad_input(problem, operands.output, operands.filter,
                                       self.backend.runner, workspace_limit)
        return super().compute(problem, operands, workspace_limit)

    def forward(self, problem, x, w, workspace_limit):
        return winograd.run(problem, x, w, self.backend.runner, workspace_limit)


#: The table, in the vocabulary's order.
TABLE = (Direct, ImplicitGemm, Gemm, Fft, Separable, Winograd)

#: ``(op, algorithm)`` pairs run as one launch program (from the table).
COMPILED = frozenset((op, cls.name) for cls in TABLE for op in cls.compiled_ops)
#: ``(op, algorithm)`` pairs computed natively in float16 (from the table).
NATIVE_HALF = frozenset((op, cls.name) for cls in TABLE for op in cls.native_ops)
#: The same for bfloat16 (cc::bfloat16 storage, the m16n8k16 bf16 atom, cuBLAS's bf16 GEMM).
NATIVE_BFLOAT16 = NATIVE_HALF
