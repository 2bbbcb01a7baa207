"""Resident CTAs per SM from registers, shared memory and threads (no GPU needed).

:data:`ARCH_LIMITS` keeps the per-SM limits of each compute capability with
their source; :func:`ctas_per_sm` applies the CUDA occupancy calculator's
rules to them.  Used by :mod:`cupyconv._compile.sass_report`.
"""
from __future__ import annotations

import dataclasses
from typing import Dict

__all__ = ["ArchLimits", "ARCH_LIMITS", "ctas_per_sm"]


@dataclasses.dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability that bound resident CTAs."""

    max_threads_per_sm: int
    max_warps_per_sm: int
    max_ctas_per_sm: int
    #: 32-bit registers per SM and per CTA.
    registers_per_sm: int
    registers_per_cta: int
    max_registers_per_thread: int
    #: registers are allocated per warp in units of this many (cuda_occupancy.h).
    register_allocation_unit: int
    #: SM sub-partitions; each holds a quarter of the register file (cuda_occupancy.h).
    sub_partitions: int
    #: largest shared-memory carveout per SM, and the largest a CTA may opt in to.
    shared_bytes_per_sm: int
    max_shared_bytes_per_cta: int
    #: shared memory the system reserves per CTA (CUDA 11+, cc >= 8.0).
    reserved_shared_bytes_per_cta: int
    shared_allocation_unit: int


#: Limits per arch.  Source: CUDA C++ Programming Guide, "Compute Capabilities",
#: table "Technical Specifications per Compute Capability" (threads, warps and
#: CTAs per SM, 64 K registers per SM and per CTA, 255 per thread, shared memory
#: per SM / per CTA: 164 / 163 KB on 8.0, 100 / 99 KB on 8.6 and 8.9, 228 / 227 KB
#: on 9.0, 1 KB reserved per CTA), and the CUDA occupancy calculator
#: ``cuda_occupancy.h`` (register allocation per warp in units of 256, four
#: sub-partitions per SM, shared memory allocated in units of 128 bytes).
ARCH_LIMITS: Dict[str, ArchLimits] = {
    "sm_80": ArchLimits(2048, 64, 32, 65536, 65536, 255, 256, 4, 164 * 1024, 163 * 1024, 1024, 128),
    "sm_86": ArchLimits(1536, 48, 16, 65536, 65536, 255, 256, 4, 100 * 1024, 99 * 1024, 1024, 128),
    "sm_89": ArchLimits(1536, 48, 24, 65536, 65536, 255, 256, 4, 100 * 1024, 99 * 1024, 1024, 128),
    "sm_90": ArchLimits(2048, 64, 32, 65536, 65536, 255, 256, 4, 228 * 1024, 227 * 1024, 1024, 128),
}


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def ctas_per_sm(arch: str, registers: int, shared_bytes: int,
                threads: int) -> int:
    """Resident CTAs per SM that registers, shared memory and threads allow.

    The occupancy calculator's rules (``cudaOccMaxActiveBlocksPerMultiprocessor``
    in ``cuda_occupancy.h``, partitioned global caching off): registers are
    allocated per warp, rounded up to :attr:`ArchLimits.register_allocation_unit`,
    and each sub-partition holds whole warps; shared memory per CTA is the
    static plus dynamic bytes plus the reserved 1 KB, rounded up to 128 bytes,
    against the largest carveout.

    Parameters
    ----------
    arch : str
        A key of :data:`ARCH_LIMITS`.
    registers : int
        Registers per thread.
    shared_bytes : int
        Static plus dynamic shared memory per CTA.
    threads : int
        Threads per CTA.

    Returns
    -------
    int
        0 when the CTA does not fit at all.
    """
    lim = ARCH_LIMITS[arch]
    warps = -(-threads // 32)
    by_warps = lim.max_warps_per_sm // warps if threads <= 1024 else 0
    regs_per_warp = _round_up(max(registers, 1) * 32, lim.register_allocation_unit)
    if (registers > lim.max_registers_per_thread
            or regs_per_warp * warps > lim.registers_per_cta
            or regs_per_warp * _round_up(warps, lim.sub_partitions) > lim.registers_per_cta):
        by_regs = 0
    else:
        per_partition = lim.registers_per_sm // lim.sub_partitions // regs_per_warp
        by_regs = per_partition * lim.sub_partitions // warps
    smem = _round_up(shared_bytes + lim.reserved_shared_bytes_per_cta, lim.shared_allocation_unit)
    by_smem = 0 if shared_bytes > lim.max_shared_bytes_per_cta else lim.shared_bytes_per_sm // smem
    return min(by_warps, by_regs, by_smem, lim.max_ctas_per_sm)
