"""Address model of the multistage implicit GEMM's shared and global accesses.

The accesses are the kernel's own (cuda_src/conv/implicit_gemm_multistage.cu): the
copier's 16-byte cp.async writes (thread t: chunks of A row t % BM and B row t % BN) and
the warps' ldmatrix.x4 row addresses, each through the swizzle the kernel uses,
``cc::Swizzle128B<sizeof(T)>`` of cuda_src/common/swizzle.cuh, in its host model
(``SWIZZLE_128B`` of cupyconv/_kernels/smem_layout.py, whose agreement with the header
tests/emulation/test_emu_swizzle.py checks).  The bank counts are that module's
(:func:`~cupyconv._kernels.smem_layout.wavefronts`, the sm_80/sm_90 model).  Two planted
bugs must fail the check: the unswizzled layout (8-way conflicts on the ldmatrix reads)
and a wrong swizzle that XORs too few row bits (2-way).

Global memory: every K-tile row the copier reads is 128 consecutive bytes of one pixel's
(or output channel's) channels, so the L2 sectors fetched per sector used is 1; the
channels-first tensor-core tiles (variant 2) read weights one element per channel,
``taps`` elements apart: 8x (TF32) and 16x (float16) at 3x3 and 3x3x3.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from cupyconv._kernels import registry
from cupyconv._kernels.smem_layout import SWIZZLE_128B, Swizzle, ldmatrix_wavefronts, wavefronts

THREADS = registry.MULTISTAGE_THREADS
ROW = 128          # bytes per swizzled row (one K-tile of one GEMM row)
TILES = [(dt, t) for dt in (np.float32, np.float16) for t in registry.gemm_tiles(dt)
         if t[3] == registry.MULTISTAGE]


def layout_of(swizzle, item):
    """Byte offset of logical 16-byte chunk ``c`` of row ``r`` under ``swizzle`` (offsets in
    elements of ``item`` bytes), as ``cc::swizzle128_chunk_offset<item>``."""
    return lambda r, c: item * swizzle.apply(r * (ROW // item) + c * (16 // item))


def swizzled(item):
    """The kernel's layout: ``Swizzle128B<item>``."""
    return layout_of(SWIZZLE_128B[item], item)


#: planted bugs: no swizzle, and one row bit too few (rows r and r + 4 collide)
PLANTED = {"plain": (Swizzle(0, 0, 0), 8), "two_row_bits": ({2: Swizzle(2, 3, 3), 4: Swizzle(2, 2, 3)}, 2)}


def planted(name, item):
    """A planted wrong layout and the ldmatrix conflict degree it must show."""
    sw, degree = PLANTED[name]
    return layout_of(sw if isinstance(sw, Swizzle) else sw[item], item), degree


def copy_writes(tile, layout):
    """Per (warp, instruction): the 32 lanes' byte offsets of the copier's cp.async writes
    into one stage (A rows, then B rows after A's BM rows)."""
    bm, bn = tile[:2]
    out = []
    for rows, base in ((bm, 0), (bn, bm * ROW)):
        chunks = 8 * rows // THREADS           # kAChunks / kBChunks
        for warp, j in itertools.product(range(THREADS // 32), range(chunks)):
            lanes = range(32 * warp, 32 * warp + 32)
            out.append([base + layout(t % rows, (t // rows) * chunks + j) for t in lanes])
    return out


def ldmatrix_reads(tile, layout):
    """Per (warp, k-step, x4 load): the 32 lanes' row addresses (A's 16x2-chunk loads and
    B's two-atom loads), as the kernel's a_ld / b_ld."""
    bm, bn, bk = tile[:3]
    wm, wn = bm // 2, bn // 2
    atom_m, atom_n = 16, 8
    ksteps = bk // (16 if bk == 64 else 8)
    out = []
    for warp, ks in itertools.product(range(THREADS // 32), range(ksteps)):
        wm0, wn0 = (warp % 2) * wm, (warp // 2) * wn
        for i in range(wm // atom_m):
            out.append([layout(wm0 + i * atom_m + 8 * ((l >> 3) & 1) + (l & 7), 2 * ks + (l >> 4))
                        for l in range(32)])
        for j in range(0, wn // atom_n, 2):
            out.append([bm * ROW + layout(wn0 + j * atom_n + 8 * (l >> 4) + (l & 7),
                                          2 * ks + ((l >> 3) & 1)) for l in range(32)])
    return out


@pytest.mark.parametrize("dtype,tile", TILES, ids=str)
def test_swizzled_accesses_are_conflict_free(dtype, tile):
    """Every copy write (one 16-byte store per lane) and every ldmatrix.x4 read of a stage
    takes 4 wavefronts (32 lanes x 16 bytes, the minimum)."""
    layout = swizzled(np.dtype(dtype).itemsize)
    for addrs in copy_writes(tile, layout):
        assert wavefronts(addrs, 16) == 4
    for addrs in ldmatrix_reads(tile, layout):
        assert ldmatrix_wavefronts(addrs, 4) == 4


@pytest.mark.parametrize("bug", sorted(PLANTED))
@pytest.mark.parametrize("dtype,tile", TILES, ids=str)
def test_planted_wrong_swizzles_conflict(dtype, tile, bug):
    """The same reads through a planted wrong layout conflict (the plain layout 8-way, a
    swizzle of two row bits 2-way), so the check above can fail."""
    layout, degree = planted(bug, np.dtype(dtype).itemsize)
    reads = [ldmatrix_wavefronts(a, 4) for a in ldmatrix_reads(tile, layout)]
    assert max(reads) == 4 * degree


@pytest.mark.parametrize("dtype,tile", TILES, ids=str)
def test_every_chunk_of_a_stage_is_written_once_and_read(dtype, tile):
    """The copier covers every chunk of the stage exactly once (no lost or doubled copy),
    and the reads stay inside the stage (16-byte aligned)."""
    bm, bn = tile[:2]
    layout = swizzled(np.dtype(dtype).itemsize)
    writes = [a for w in copy_writes(tile, layout) for a in w]
    assert sorted(writes) == list(range(0, (bm + bn) * ROW, 16))
    reads = {a for r in ldmatrix_reads(tile, layout) for a in r}
    assert reads == set(writes)


def _sectors_per_sector_used(addresses, width):
    """L2 sectors (32 bytes) touched by the accesses over the sectors their bytes fill."""
    used = len(addresses) * width
    touched = {a // 32 for a in addresses} | {(a + width - 1) // 32 for a in addresses}
    return len(touched) * 32 / used


@pytest.mark.parametrize("dtype,tile", TILES, ids=str)
def test_l2_over_fetch_is_one_sector_per_sector_used(dtype, tile):
    """Static count of one K-tile's global reads: channels-last rows of C = 4 K-tiles
    (128-byte aligned rows, the pixel stride a multiple of 128 bytes): 1 sector fetched
    per sector used, for A and B; the variant-2 weight reads on KCRS (one element per
    channel, ``taps`` elements apart) fetch 32 / itemsize sectors per sector used: 8 for
    TF32, 16 for float16."""
    bm, bn, bk = tile[:3]
    item = np.dtype(dtype).itemsize
    c = 4 * bk
    for rows in (bm, bn):
        chunks = 8 * rows // THREADS
        addrs = [(t % rows) * c * item + bk * item + 16 * ((t // rows) * chunks + j)
                 for t in range(THREADS) for j in range(chunks)]
        assert _sectors_per_sector_used(addrs, 16) == 1.0
    taps = 27
    kcrs = [ch * taps * item for ch in range(bk)]       # one output channel's K-tile
    assert _sectors_per_sector_used(kcrs, item) == 32 / item
