"""Host model of the shared-memory layouts of cuda_src/common/swizzle.cuh, with bank counts.

:class:`Swizzle` is the same arithmetic as ``cc::Swizzle<B, M, S>`` (CuTe's): the stored
offset of linear offset ``o`` is ``o ^ ((o & y_mask) >> S)``.  :func:`wavefronts` counts the
shared-memory wavefronts (passes through the 32 four-byte banks) one warp instruction needs
for a set of per-lane byte addresses, so a test can show a layout conflict-free for the
accesses a kernel makes (cp.async 16-byte writes, ``ldmatrix`` rows, ``LDS.32/64/128``
fragment reads) instead of arguing it by eye.

The bank model (the one NVIDIA documents for sm_80/sm_90, and what Nsight counts as
``l1tex__data_bank_conflicts``): shared memory is 32 banks of 4 bytes, word ``w`` in bank
``w % 32``.  A warp access of ``width`` bytes per lane is served in phases of
``128 // width`` lanes (32 lanes for 4 bytes, 16 for 8, 8 for 16); within a phase each bank
delivers one distinct word per wavefront (lanes reading the same word share it), so the
phase takes as many wavefronts as the most-used bank has distinct words.  An ``ldmatrix``
``.x{n}`` reads each of its n 8x8 matrices as one phase of 8 rows of 16 bytes (the row
addresses lanes ``8m .. 8m + 7`` supply); a 16-byte ``cp.async`` writes as a 16-byte
store.  The ideal is one wavefront per phase.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["BANKS", "BANK_BYTES", "Swizzle", "SWIZZLE_128B", "ldmatrix_wavefronts",
           "phases", "wavefronts", "kcontiguous_swz", "kcontiguous_offset"]

#: Shared-memory banks and their width in bytes (sm_80 / sm_90).
BANKS = 32
BANK_BYTES = 4


@dataclass(frozen=True)
class Swizzle:
    """``cc::Swizzle<bits, base, shift>``: XOR the ``bits`` bits at ``base + shift`` into
    the ``bits`` bits at ``base``.

    Parameters
    ----------
    bits, base, shift : int
        CuTe's B, M, S (``shift >= bits``, all ``>= 0``).
    """

    bits: int
    base: int
    shift: int

    def __post_init__(self):
        if min(self.bits, self.base, self.shift) < 0 or self.shift < self.bits:
            raise ValueError(f"Swizzle needs bits, base >= 0 and shift >= bits, got "
                             f"{(self.bits, self.base, self.shift)}")

    @property
    def y_mask(self) -> int:
        """The row bits (``cc::Swizzle::kYMask``)."""
        return ((1 << self.bits) - 1) << (self.base + self.shift)

    def apply(self, offset):
        """Stored offset(s) of linear offset(s) ``offset`` (int or integer array)."""
        o = np.asarray(offset, dtype=np.int64)
        out = o ^ ((o & self.y_mask) >> self.shift)
        return int(out) if out.ndim == 0 else out


#: The 128-byte-row swizzles of ``cc::Swizzle128B<bytes>`` (offsets in elements).
SWIZZLE_128B = {2: Swizzle(3, 3, 3), 4: Swizzle(3, 2, 3), 8: Swizzle(3, 1, 3)}


def phases(width: int) -> int:
    """Lanes served together by an access of ``width`` bytes per lane (4, 8 or 16)."""
    if width not in (4, 8, 16):
        raise ValueError(f"width must be 4, 8 or 16 bytes, got {width}")
    return 128 // width


def _phase_wavefronts(addresses: np.ndarray, width: int) -> int:
    words = (addresses[:, None] // BANK_BYTES + np.arange(width // BANK_BYTES)[None, :]).ravel()
    words = np.unique(words)
    if words.size == 0:
        return 0
    return int(np.bincount(words % BANKS, minlength=BANKS).max())


def wavefronts(addresses: Sequence[int], width: int) -> int:
    """Shared-memory wavefronts of one warp access of ``width`` bytes per lane.

    Parameters
    ----------
    addresses : sequence of int
        Byte address of each active lane, in lane order (up to 32; each a multiple of
        ``width``).
    width : int
        Bytes per lane: 4, 8 or 16.

    Returns
    -------
    int
        Wavefronts; ``ceil(lanes / phases(width))`` when conflict-free.
    """
    a = np.asarray(addresses, dtype=np.int64)
    if a.ndim != 1 or a.size > 32:
        raise ValueError("addresses must be one byte address per lane, at most 32")
    if (a % width).any():
        raise ValueError(f"every address must be {width}-byte aligned")
    step = phases(width)
    return sum(_phase_wavefronts(a[i:i + step], width) for i in range(0, a.size, step))


def ldmatrix_wavefronts(row_addresses: Sequence[int], num: int) -> int:
    """Wavefronts of ``ldmatrix.x{num}`` whose lanes ``0 .. 8 num - 1`` supply
    ``row_addresses`` (the other lanes' addresses are not read); ``num`` when
    conflict-free."""
    a = np.asarray(row_addresses, dtype=np.int64)[:8 * num]
    if a.size != 8 * num:
        raise ValueError(f"ldmatrix.x{num} needs {8 * num} row addresses")
    return wavefronts(a, 16)


def kcontiguous_swz(row):
    """``cc::KContiguousStageLayout::swz`` (cuda_src/conv/implicit_gemm_fma_dmma.cu): the
    16-byte chunk permutation of a row of the float64 DMMA tiles, ``4 (r & 1) + ((r >> 1) &
    3)`` (int or integer array)."""
    r = np.asarray(row, dtype=np.int64)
    out = ((r & 1) << 2) | ((r >> 1) & 3)
    return int(out) if out.ndim == 0 else out


def kcontiguous_offset(row, k, bk=16, swz=kcontiguous_swz):
    """Element offset of ``(row, k)`` in a stage operand of ``cc::KContiguousStageLayout``:
    rows of ``bk`` = 16 doubles (8 chunks of two), chunk ``k >> 1`` of row ``row`` stored at
    ``(k >> 1) ^ swz(row)`` (``swz``: the row's permutation, the kernel's by default; a test
    plants another)."""
    r, kk = np.asarray(row, dtype=np.int64), np.asarray(k, dtype=np.int64)
    out = r * bk + ((((kk >> 1) ^ swz(r)) << 1) | (kk & 1))
    return int(out) if out.ndim == 0 else out
