"""XOR-swizzled shared-memory layouts: cuda_src/common/swizzle.cuh against its host model
(cupyconv/_kernels/smem_layout.py), and the model's bank count proving the issue-26 layouts
conflict-free for the accesses the tiles make.

The tiles stage K-tiles of 128 bytes per row (TF32 32 floats, f16/bf16 64 halves, f64 16
doubles) in 16-byte units; they write them with 16-byte cp.async and read fragments with
ldmatrix (TF32, f16, bf16) or LDS.64 (f64).  For every access pattern below the count must be
the ideal (one wavefront per phase); the unswizzled layout and a wrong swizzle must not be.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._kernels.smem_layout import (SWIZZLE_128B, Swizzle, ldmatrix_wavefronts, phases,
                                           wavefronts)
from test_emu_mma_k16 import module

ROW_BYTES = 128
NONE = Swizzle(0, 0, 0)
#: The swizzle the f64 tiles' LDS.64 fragment reads need (cc::Swizzle<2, 2, 2>).
F64_LDS64 = Swizzle(2, 2, 2)


def _address(swizzle, elem, row, unit, col=0):
    """Byte address of element `col` of 16-byte unit `unit` in row `row` of a 128-byte-row
    tile (the pipeline kernel's Swz::at(base, row * kRow + unit * kUnit + col))."""
    per_row, per_unit = ROW_BYTES // elem, 16 // elem
    return elem * swizzle.apply(row * per_row + unit * per_unit + col)


# --- the device helper and the model agree -------------------------------------------------

@pytest.mark.parametrize("bms", [(3, 3, 3), (3, 2, 3), (3, 1, 3), (2, 2, 2)])
def test_device_swizzle_equals_the_model(bms):
    n = 4096
    out = np.zeros(n, np.int32)
    module().get_function("swizzle_map<%d, %d, %d>" % bms)((4,), (256,), (out, np.int32(n)))
    swz = Swizzle(*bms)
    np.testing.assert_array_equal(out, swz.apply(np.arange(n)))
    block = 1 << (bms[0] + bms[1] + bms[2])
    o = np.arange(n)
    assert (swz.apply(swz.apply(o)) == o).all()                          # an involution
    assert (np.sort(swz.apply(o).reshape(-1, block), axis=1) == o.reshape(-1, block)).all()
    assert ((swz.apply(o) >> bms[1]) << bms[1] == swz.apply((o >> bms[1]) << bms[1])).all()


def test_swizzle_rejects_overlapping_bits():
    with pytest.raises(ValueError, match="shift >= bits"):
        Swizzle(3, 3, 2)


# --- the bank model on textbook cases ----------------------------------------------------------

BANK_CASES = [  # (byte addresses, width, wavefronts, why)
    (4 * np.arange(32), 4, 1, "consecutive words"),
    (np.zeros(32, int), 4, 1, "one word, broadcast"),
    (128 * np.arange(32), 4, 32, "one column of a 32-word-row matrix: 32-way"),
    (132 * np.arange(32), 4, 1, "rows padded by one word"),
    (8 * np.arange(32), 8, 2, "consecutive doubles: two half-warp phases"),
    (16 * np.arange(32), 16, 4, "consecutive 16-byte units: four quarter-warp phases"),
    (256 * np.arange(32), 16, 32, "16-byte units 256 bytes apart: 8-way per phase"),
]


@pytest.mark.parametrize("addresses, width, expected, why", BANK_CASES,
                         ids=[c[3] for c in BANK_CASES])
def test_bank_model(addresses, width, expected, why):
    assert wavefronts(addresses, width) == expected


def test_bank_model_rejects_misaligned():
    with pytest.raises(ValueError, match="aligned"):
        wavefronts([2], 4)


# --- the issue-26 layouts ------------------------------------------------------------------------

def _cp_async_row_writes(swizzle, elem, rows=128, threads=256):
    """16-byte cp.async of a K-tile: thread u copies unit u % 8 of row u / 8 (as
    swizzled_pipeline and the tiles do); one list of lane addresses per warp instruction."""
    units = [(u // 8, u % 8) for u in range(rows * 8)]
    for start in range(0, len(units), 32):
        yield [_address(swizzle, elem, r, c) for r, c in units[start:start + 32]]


def _cp_async_column_writes(swizzle, elem, rows=128):
    """Unit c of 32 consecutive rows per warp (one lane per output pixel, the
    channels-last activation gather)."""
    for c in range(8):
        for r0 in range(0, rows, 32):
            yield [_address(swizzle, elem, r0 + lane, c) for lane in range(32)]


def _ldmatrix_reads(swizzle, elem, num, rows=128):
    """ldmatrix.x{num}: matrix m = 8 consecutive rows of one 16-byte unit (.x4, an A
    fragment: rows 8 (m & 1) .., unit 2 kk + (m >> 1); .x2 / .x1, a B fragment from [n][k]
    or, with .trans, [k][n]: rows 0 .. 7, unit 2 kk + m), for every 16-row block and k-step."""
    for r0 in range(0, rows, 16):
        for kk in range(4):
            addresses = []
            for m in range(num):
                row, unit = (r0 + 8 * (m & 1), 2 * kk + (m >> 1)) if num == 4 else (r0, 2 * kk + m)
                addresses += [_address(swizzle, elem, row + r, unit) for r in range(8)]
            yield addresses


def _f64_fragment_reads(swizzle, rows=128):
    """LDS.64 of the f64 atoms' fragments from [row][k] tiles of 16 doubles: lane (g, t)
    reads (row g (+ 8), k = t + 4 j) -- m16n8k16 A (a_i) and B (b_i, rows = n) and m8n8k4
    A / B (a0 = (g, t), b0 = (k t, n g) from [n][k])."""
    for r0 in range(0, rows, 16):
        for j in range(4):
            for half in (0, 8):
                yield [_address(swizzle, 8, r0 + (lane >> 2) + half, 0, 4 * j + lane % 4)
                       for lane in range(32)]


LAYOUTS = [  # (name, element bytes, swizzle, accesses -> (addresses, width) pairs)
    ("tf32", 4, SWIZZLE_128B[4]),
    ("f16", 2, SWIZZLE_128B[2]),
    ("bf16", 2, SWIZZLE_128B[2]),
]


def _counts(elem, swizzle):
    """(measured, ideal) wavefronts of every access of a 16-byte-unit tile."""
    out = []
    for lanes in _cp_async_row_writes(swizzle, elem):
        out.append((wavefronts(lanes, 16), 32 // phases(16)))
    for lanes in _cp_async_column_writes(swizzle, elem):
        out.append((wavefronts(lanes, 16), 32 // phases(16)))
    for num in (1, 2, 4):
        for lanes in _ldmatrix_reads(swizzle, elem, num):
            out.append((ldmatrix_wavefronts(lanes, num), num))
    return out


@pytest.mark.parametrize("name, elem, swizzle", LAYOUTS, ids=[l[0] for l in LAYOUTS])
def test_128_byte_swizzle_is_conflict_free(name, elem, swizzle):
    counts = _counts(elem, swizzle)
    assert all(m == ideal for m, ideal in counts), name
    # planted bugs: no swizzle, and a swizzle of 2 row bits (rows r and r + 4 collide)
    assert any(m > ideal for m, ideal in _counts(elem, NONE))
    assert max(m / i for m, i in _counts(elem, NONE)) == 8          # ldmatrix: 8-way
    assert any(m > ideal for m, ideal in _counts(elem, Swizzle(2, swizzle.base, 3)))


def test_f64_layout_is_conflict_free_for_lds64_fragments():
    reads = [wavefronts(lanes, 8) for lanes in _f64_fragment_reads(F64_LDS64)]
    assert reads and all(w == 2 for w in reads)                         # two 16-lane phases
    writes = [wavefronts(lanes, 16) for lanes in _cp_async_row_writes(F64_LDS64, 8)]
    assert all(w == 4 for w in writes)
    assert max(wavefronts(l, 8) for l in _f64_fragment_reads(NONE)) == 8    # 4-way per phase
    # the 128-byte swizzle of 16-byte units (u ^ r % 8) leaves rows g and g ^ 1 colliding
    assert max(wavefronts(l, 8) for l in _f64_fragment_reads(SWIZZLE_128B[8])) == 4
