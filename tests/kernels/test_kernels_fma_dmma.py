"""The multistage implicit-GEMM tiles (issue 26 items 3, 4): float32 FMA 128x128x16 and
float64 DMMA 128x64x16, three cp.async stages (cuda_src/conv/implicit_gemm_fma_dmma.cu).

The emulated tests run small integers (exact in float32 FMA and in the DMMA atom) against
the NumPy reference, as the other tiles' tests do.  The address model mirrors the shared
layouts of the kernel (``FmaStageLayout``, ``KContiguousStageLayout``) and counts the
wavefronts of every fragment read and loader store of one warp: the FMA tile's A
fragment reads take 2 (the 128x128x8 tile's take 4), and no access is bank-conflicted
(the DMMA tiles in the bank model of cupyconv/_kernels/smem_layout.py, where planted wrong
layouts conflict).
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._emulation import emulation_available
from cupyconv._kernels import launch, registry, smem_layout

from kernel_reference import (LEAN_SHAPES, MODES, check_forward, emu_loader, make_problem,
                              mode_case)

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
#: every compiled multistage tile, with its dtype
MS_TILES = [(dt, t) for dt in (F32, F64) for t in registry.gemm_tiles(dt)
            if t[3] in registry.FMA_DMMA_VARIANTS]
#: the channels-last float64 DMMA tiles (variants 9 and 10: 16-byte channel copies)
CL_TILES = [t for _, t in MS_TILES if t[3] in registry.FMA_DMMA_CHANNELS_LAST]
#: (dtype, tile, mode): every mode on every tile but the sm_90 atom's channels-last twin
#: (10), which shares 9's loaders and 7's fragments: two modes (constant: the cval chunks;
#: symmetric at rank 3)
MODE_CASES = [(dt, t, m) for dt, t in MS_TILES
              for m in (("constant", "symmetric") if t[3] == 10 else MODES)]
emulated = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")


def _views(tile, mode):
    """``(layout, check_forward views)`` of a tile's case: the channels-first tiles both
    layouts across the modes through flipped/strided x and w; the channels-last tiles
    channels-last x (batch flipped where the mode's index is odd: a negative image stride)
    and w, a strided y (the epilogue writes the caller's layout)."""
    odd = MODES.index(mode) % 2
    if tile[3] in registry.FMA_DMMA_CHANNELS_LAST:
        return "channels_last", dict(x_view="flipped_batch" if odd else "contig",
                                     y_layout_view="strided")
    return ("channels_first", "channels_last")[odd], dict(x_view="flipped", w_view="strided")


@emulated
@pytest.mark.parametrize("dtype,tile,mode", MODE_CASES, ids=lambda v: str(v))
def test_fma_dmma_tiles_match_reference(dtype, tile, mode):
    """Every padding mode; ranks 1-4 and both layouts across the modes; groups, two taps'
    worth of channel slices, views (:func:`_views`), bias, beta and cval, on the
    :data:`LEAN_SHAPES`."""
    layout, views = _views(tile, mode)
    rank, problem = mode_case(mode, 2 * 32, dtype, layout, shapes=LEAN_SHAPES)
    check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(rank),
                  bias=True, beta=1, tile=tile, **views)


@emulated
@pytest.mark.parametrize("dtype,tile", MS_TILES, ids=lambda v: str(v))
def test_fma_dmma_reverse_schedule_matches_normal(dtype, tile):
    """A missing wait or barrier around the stages would change the result."""
    layout = "channels_last" if tile in CL_TILES else "channels_first"
    problem = make_problem(n=2, c=2 * 16, k=10, g=2, s=(7, 9), ks=(3, 2), stride=(2, 1),
                           dilation=(1, 2), padding=((3, 1), (2, 2)), mode="wrap", dtype=dtype,
                           layout=layout)
    outs = [check_forward("implicit_gemm_fprop", problem, emu_loader(mode),
                          np.random.default_rng(11), bias=True, tile=tile)
            for mode in ("normal", "reverse")]
    np.testing.assert_array_equal(outs[0], outs[1])


#: (op, padding mode, whether the re-layout pays): the gradients on the DMMA tile read as
#: it is (channels-first) and on its channels-last twin after the re-layout
GRAD_CASES = [("grad_input", "constant", True), ("grad_weight", "reflect", True),
              ("grad_input", "constant", False)]


@emulated
@pytest.mark.parametrize("op,mode,pays", GRAD_CASES, ids=str)
def test_dmma_tile_runs_the_gradients(monkeypatch, op, mode, pays):
    """The gradients run as forward problems on the DMMA tile (forced: these are too small
    for the chooser), exact on small integers against the NumPy backend; the input
    gradient's forward has K/G = 8 columns of the tile's 64 (the rest zero-filled).  Where
    the re-layout pays (forced), their programs re-lay the role-swapped operands and the
    channels-last twin (9) runs them; else tile 6 reads them as they are."""
    import cupyconv
    from cupyconv.backends.cuda import CudaBackend, EmulatedRunner, implicit_choice
    from cupyconv.core.problem import ConvProblem, Operands
    from helpers import fresh_kernel_choices, small_ints, spy_kernels
    tile = DMMA_TILES[0]
    monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *args, **kwargs: pays)
    real = launch.implicit_gemm_tile
    monkeypatch.setattr(launch, "implicit_gemm_tile", lambda problem, mma=False, tf32=False:
                        tile if problem.dtype == F64 else real(problem, mma, tf32))
    fresh_kernel_choices(monkeypatch)
    n, c, k = (1, 8, 16) if op == "grad_input" else (16, 2, 8)     # forward C/G: 16
    geo = dict(padding=1, padding_mode=mode)
    problem = ConvProblem.create(x_shape=(n, c, 5, 4), w_shape=(k, c, 3, 3), op=op, dtype=F64, **geo)
    rng = np.random.default_rng(5)
    x, w, dy = (small_ints(rng, s, F64, scale=3) for s in (problem.x_shape, problem.w_shape, problem.y_shape))
    with cupyconv.use_backend("numpy"):
        want = (cupyconv.conv_grad_input(dy, w, x.shape, **geo) if op == "grad_input"
                else cupyconv.conv_grad_weight(x, dy, w.shape, **geo))
    backend = CudaBackend(EmulatedRunner())
    problem, ops = backend.prepare(problem, Operands(activation=x, filter=w, output=dy))
    taken = spy_kernels(monkeypatch)
    got = backend.run(problem, "implicit_gemm", ops, 2**30)
    ran = registry.channels_last_twin(tile) if pays else tile
    assert ("implicit_gemm_fma_dmma", ran) in taken, taken
    assert any(f == "relayout_channels_last" for f, _ in taken) == pays, taken
    np.testing.assert_array_equal(got, want)


def test_fma_dmma_tiles_are_chosen_where_they_fit(monkeypatch):
    """Many rows and C/G % 16 == 0: the multistage tile (float64 only on a device with the
    DMMA atom; float32 without TF32); otherwise the present tiles.  float64 on
    channels-last operands: the launcher takes the tile's channels-last twin (9)."""
    big = dict(n=16, k=128, g=1, s=(24, 24), ks=(3, 3), stride=(1, 1), dilation=(1, 1),
               padding=((1, 1), (1, 1)))
    f64 = make_problem(c=32, dtype=F64, **big)
    f32 = make_problem(c=32, dtype=F32, **big)
    assert launch.implicit_gemm_tile(f64, mma=True) == (128, 64, 16, 6)
    from cupyconv.backends.cuda import (  # its estimate, not the 64x64's
        EmulatedRunner, cost, implicit_choice, pricing)
    dev = EmulatedRunner.NOMINAL
    # the channels-first operands re-laid for the twin where the model says it pays (here:
    # a 2.4 MB x against 340 MFLOP), else read as they are
    assert implicit_choice.relayout_pays(f64, dev)
    assert pricing.efficiency_key(f64, dev, "implicit_gemm") == "implicit_gemm_cl_float64"
    slow = dict(cost.efficiencies(dev.name), implicit_gemm_cl_float64=0.3)
    assert not implicit_choice.relayout_pays(f64, dev, efficiency=slow)
    assert launch.implicit_gemm_tile(f64, mma=False)[3] != 6
    assert launch.implicit_gemm_tile(f32) == (128, 128, 16, 5)
    assert launch.implicit_gemm_tile(f32, mma=True, tf32=True)[3] == 2
    odd = make_problem(c=24, dtype=F64, **big)            # C/G % 16 != 0
    assert launch.implicit_gemm_tile(odd, mma=True)[3] != 6
    small = make_problem(c=32, dtype=F32, **dict(big, s=(6, 6)))
    assert launch.implicit_gemm_tile(small)[3] != 5
    # the m16n8k16 tile (sm_90 only) is never the automatic choice, and has no 64-bit build
    assert all(launch.implicit_gemm_tile(make_problem(c=c, dtype=F64, **dict(big, n=n)),
                                         mma=True)[3] != 7 for c in (16, 32) for n in (1, 16))
    assert not registry.tile_index64((128, 64, 16, 7)) and registry.tile_index64((128, 64, 16, 6))
    assert not registry.tile_index64((128, 64, 16, 10)) and registry.tile_index64((128, 64, 16, 9))
    # the channels-last twins are never the chooser's: the launcher swaps 6 for 9 on
    # channels-last operands (and keeps 6 on channels-first ones)
    cl = make_problem(c=32, dtype=F64, layout="channels_last", **big)
    assert all(launch.implicit_gemm_tile(p, mma=True)[3] not in registry.FMA_DMMA_CHANNELS_LAST
               for p in (f64, cl))
    from helpers import spy_kernels
    taken = spy_kernels(monkeypatch)
    for prob in (cl, f64):
        launch.implicit_gemm_program(emu_loader(), prob, np.zeros(prob.x_shape),
                                     np.zeros(prob.w_shape), mma=True)
    assert [t for _, t in taken] == [(128, 64, 16, 9), (128, 64, 16, 6)]
    with pytest.raises(ValueError, match="channels-last tensor-core variant"):
        launch.implicit_gemm_program(emu_loader(), f64, np.zeros(f64.x_shape),
                                     np.zeros(f64.w_shape), tile=(128, 64, 16, 9))
    x = np.zeros(f64.x_shape)
    w = np.zeros(f64.w_shape)
    with pytest.raises(ValueError, match="32-bit indices only"):
        launch.run_implicit_gemm_fprop(emu_loader(), f64, x, w, np.zeros(f64.y_shape),
                                       tile=(128, 64, 16, 7), index64=True)


def test_fma_dmma_names_and_shared_bytes():
    """The name spells stages, warp/thread tile and math; the host's dynamic shared size is
    the kernel's (it traps on another, p.aux[1]); the DMMA tiles run a warp per warp tile
    (128 threads: two CTAs of 72 KiB and 255 registers fit an sm_80/sm_90 SM)."""
    name = registry.name_expression("implicit_gemm_fma_dmma", F64, 3, False, (128, 64, 16, 6))
    assert name == ("implicit_gemm_fma_dmma<double, double, 3, int, 128, 64, 16, 3, 32, 64, "
                    "cc::MmaF64_m8n8k4, false>")
    assert registry.name_expression("implicit_gemm_fma_dmma", F64, 3, True, (128, 64, 16, 9)) == (
        "implicit_gemm_fma_dmma<double, double, 3, long long, 128, 64, 16, 3, 32, 64, "
        "cc::MmaF64_m8n8k4, true>")
    assert [registry.block_threads("implicit_gemm_fma_dmma", t) for t in
            ((128, 64, 16, 6), (128, 64, 16, 7), (128, 128, 16, 5))] == [128, 128, 256]
    assert registry.gemm_family((128, 128, 16, 5)) == "implicit_gemm_fma_dmma"
    assert registry.gemm_family((128, 128, 8, 1)) == "implicit_gemm_fprop"
    assert registry.gemm_dynamic_smem((128, 128, 16, 5), F32) == 48 * 1024
    assert registry.gemm_dynamic_smem((128, 64, 16, 6), F64) == 72 * 1024
    assert registry.name_expression("implicit_gemm_fma_dmma", F64, 2, False,
                                    (128, 64, 16, 7)).endswith("cc::MmaF64_m16n8k16, false>")
    assert registry.gemm_dynamic_smem((128, 64, 16, 9), F64) == 72 * 1024
    twins = [registry.channels_last_twin(t) for t in ((128, 64, 16, 6), (128, 64, 16, 7), (64, 64, 8, 2))]
    assert twins == [(128, 64, 16, 9), (128, 64, 16, 10), None]
    assert registry.gemm_dynamic_smem((128, 128, 8, 1), F32) == 0


# ---------------------------------------------------------------------------
# Address model of the shared layouts (banks of 4 bytes, 32 banks)
# ---------------------------------------------------------------------------

def fma_a(k, m, bm=128):
    """FmaStageLayout::a, element offset."""
    return k * bm + m


def fma_b(k, n, bn=128):
    """FmaStageLayout::b: n's bits 2-4 XOR (k & 7)."""
    return k * bn + (n ^ ((k & 7) << 2))


def kc_swz(r):
    """KContiguousStageLayout::swz."""
    return ((r & 1) << 2) | ((r >> 1) & 3)


def kc_row(r, k, bk=16):
    """KContiguousStageLayout::row (a(k, m) = row(m, k), b(k, n) = row(n, k))."""
    return r * bk + ((((k >> 1) ^ kc_swz(r)) << 1) | (k & 1))


def wavefronts(byte_addresses, width):
    """Shared-memory wavefronts of one warp access: lanes' ``width``-byte accesses at
    ``byte_addresses``; the largest number of distinct 4-byte words any bank serves, at
    least the access's bytes over 128 (lanes reading the same word share it)."""
    words = {a // 4 + i for a in byte_addresses for i in range(width // 4)}
    per_bank = {}
    for wd in words:
        per_bank.setdefault(wd % 32, set()).add(wd)
    return max(max(len(v) for v in per_bank.values()), -(-len(words) * 4 // 128))


def test_fma_fragment_reads_take_two_wavefronts():
    """The multistage FMA tile's A fragment reads (rows 4 tm.. and 64 + 4 tm..): 2 wavefronts
    per LDS.128; the 128x128x8 tile's (8 contiguous rows per thread, 32-byte lane stride): 4.
    B's (columns 4 tn.. and 64 + 4 tn.., swizzled): at most 2, for every k and warp."""
    for warp in range(8):
        lanes = range(32 * warp, 32 * warp + 32)
        for kk in range(16):
            for half in (0, 64):
                a = [4 * fma_a(kk, half + 4 * (t % 16)) for t in lanes]
                b = [4 * fma_b(kk, half + 4 * (t // 16)) for t in lanes]
                assert wavefronts(a, 16) == 2
                assert wavefronts(b, 16) <= 2
            old = [4 * (kk * 128 + 8 * (t % 16)) for t in lanes]   # 128x128x8: TM = 8 rows
            assert wavefronts(old, 16) == 4


def test_fma_loader_stores_are_conflict_free():
    """A: lane = row; B: lanes (k0 = lane % 8, n = lane // 8 + 4 warp), 4-byte cp.async."""
    for warp in range(8):
        lanes = range(32 * warp, 32 * warp + 32)
        for j in range(8):
            a = [4 * fma_a(t // 128 + 2 * j, t % 128) for t in lanes]
            assert wavefronts(a, 4) == 1
            r, q = j % 2, j // 2
            b = [4 * fma_b(t % 8 + 8 * r, t // 8 + 32 * q) for t in lanes]
            assert wavefronts(b, 4) == 1


#: every compiled DMMA tile (float64)
DMMA_TILES = [t for dt, t in MS_TILES if dt == F64]
#: planted wrong row permutations of the DMMA layout and what they break: none at all, and
#: one without the (r & 1) term (rows r, r + 1 share chunks)
DMMA_PLANTED = {"plain": lambda r: 0 * r, "no_low_bit": lambda r: (r >> 1) & 3}


def dmma_accesses(tile, swz=smem_layout.kcontiguous_swz):
    """The DMMA tile's shared accesses of one stage, as the kernel makes them, per warp
    instruction: ``(reads, a_stores, b_stores)``, byte addresses of 32 lanes each.  Reads:
    the LDS.128 of A (lane (g, t): row wm0 + 8 i + g, k pair 2 t of half h) and of B (B after
    A's BM rows); A stores: row a_m = t // (threads // BM), copy q is k = a_k ^ (lpr q) (lpr
    lanes per row; a_k = t % 2 for 2, (a_m >> 3) & 1 for 1); B stores: k = t % 16, column
    t // 16 + (threads // 16) q."""
    bm, bn, bk = tile[:3]
    _, tile_m, tile_n, _ = registry.FMA_DMMA_VARIANTS[tile[3]]
    threads = registry.block_threads("implicit_gemm_fma_dmma", tile)
    off = lambda r, k: 8 * smem_layout.kcontiguous_offset(r, k, bk, swz)
    warps_m, lpr = bm // tile_m, threads // bm
    reads, a_st, b_st = [], [], []
    for warp in range(threads // 32):
        wm0, wn0 = (warp % warps_m) * tile_m, (warp // warps_m) * tile_n
        lanes = range(32 * warp, 32 * warp + 32)
        for h in range(2):
            reads += [[off(wm0 + 8 * i + (ln >> 2), 8 * h + 2 * (ln & 3)) for ln in range(32)]
                      for i in range(tile_m // 8)]
            reads += [[off(bm + wn0 + 8 * j + (ln >> 2), 8 * h + 2 * (ln & 3)) for ln in range(32)]
                      for j in range(tile_n // 8)]
        if tile[3] in registry.FMA_DMMA_CHANNELS_LAST:
            # 16-byte copies: A a lane per row, chunk q (k 2 q, 2 q + 1); B output channel
            # t % BN, chunks t // BN + 2 q
            a_st += [[off(t, 2 * q) for t in lanes] for q in range(bk // 2)]
            b_st += [[off(bm + t % bn, 2 * (t // bn + 2 * q)) for t in lanes]
                     for q in range(bk // 4)]
            continue
        a_k = [t % 2 if lpr == 2 else ((t // lpr) >> 3) & 1 for t in range(threads)]
        a_st += [[off(t // lpr, a_k[t] ^ (lpr * q)) for t in lanes] for q in range(bk // lpr)]
        b_st += [[off(bm + t // 16 + (threads // 16) * q, t % 16) for t in lanes]
                 for q in range(bn * bk // threads)]
    return reads, a_st, b_st


def _store_width(tile):
    """Bytes of one loader copy: 16 for the channels-last tiles, else 8."""
    return 16 if tile[3] in registry.FMA_DMMA_CHANNELS_LAST else 8


@pytest.mark.parametrize("tile", DMMA_TILES, ids=str)
def test_dmma_fragment_reads_and_stores_are_conflict_free(tile):
    """Every LDS.128 fragment read takes 4 wavefronts (512 bytes, the minimum) and every
    8-byte loader store 2 (256 bytes, the minimum; the channels-last tiles' 16-byte
    stores 4), in the sm_80/sm_90 bank model of cupyconv/_kernels/smem_layout.py; the
    loaders write every (row, k) of a stage exactly once, and the kernel's A destinations
    are row(m, a_k) ^ mask."""
    reads, a_st, b_st = dmma_accesses(tile)
    width = _store_width(tile)
    assert {smem_layout.wavefronts(r, 16) for r in reads} == {4}
    assert {smem_layout.wavefronts(st, width) for st in a_st + b_st} == {width // 4}
    bm, bn, bk = tile[:3]
    assert sorted(a for st in a_st + b_st for a in st) == list(range(0, 8 * (bm + bn) * bk, width))
    row = lambda m, k: smem_layout.kcontiguous_offset(m, k)
    assert all(row(m, a_k ^ mask) == row(m, a_k) ^ mask
               for m in range(bm) for a_k in (0, 1) for mask in range(16))
    assert all(smem_layout.kcontiguous_swz(r) == row(r, 0) % 16 // 2 for r in range(bm))
    # the fragment bases: half h is the base of half 0 ^ 8 h, atom rows 8 apart 8 BK apart
    assert all(row(r + 8 * i, 8 * h + 2 * t) == (row(r, 2 * t) ^ (8 * h)) + 8 * bk * i
               for r in range(8) for i in range(bm // 8) for h in (0, 1) for t in range(4))


@pytest.mark.parametrize("bug", sorted(DMMA_PLANTED))
@pytest.mark.parametrize("tile", DMMA_TILES, ids=str)
def test_dmma_planted_wrong_layouts_conflict(tile, bug):
    """The same accesses through a planted wrong row permutation conflict (the unswizzled
    rows: 8-way loader stores and 2-way reads; without the (r & 1) term: 2-way reads and,
    for the channels-last 16-byte stores, 2-way stores), so the check above can fail."""
    reads, a_st, b_st = dmma_accesses(tile, DMMA_PLANTED[bug])
    assert max(smem_layout.wavefronts(r, 16) for r in reads) == 8
    width = _store_width(tile)
    worst = max(smem_layout.wavefronts(st, width) for st in a_st + b_st)
    if bug == "plain":
        assert worst == 16 if width == 8 else worst == 32
    elif width == 16:
        assert worst == 8


@pytest.mark.parametrize("tile", DMMA_TILES, ids=str)
def test_dmma_l2_sectors_per_sector_used(tile):
    """Static count of one slice's global reads (x with the slice's 128 rows consecutive
    positions of one row of W >= 128, C = 64, w at 3x3x3, the slice's channels 16-31).
    Channels-first tiles 6, 7 (x NCDHW, w KCRS): the A copies (lane per row, k = a_k ^ q)
    read 1 sector per sector used; the B copies (16 lanes on k, taps = 27 elements apart)
    32 / 8 = 4.  Channels-last tiles 9, 10 (x NDHWC, w KRSC): A's 16-byte chunks of a row
    (128 consecutive bytes of channels) and B's alike read 1 for both: the layout the
    chooser takes for float64 (its twin, on channels-last or re-laid operands)."""
    from test_multistage_layout import _sectors_per_sector_used
    bm, bn, bk = tile[:3]
    item, taps, c, plane, c0, tap = 8, 27, 64, 4096, 16, 13   # plane: x's channel stride
    if tile in CL_TILES:
        a = [(r * c + c0 + 2 * q) * item for r in range(bm) for q in range(bk // 2)]
        b = [((n * taps + tap) * c + c0 + 2 * (t + 2 * q)) * item
             for n in range(bn) for t in range(2) for q in range(bk // 4)]
        assert _sectors_per_sector_used(a, 16) == 1.0
        assert _sectors_per_sector_used(b, 16) == 1.0
        return
    a_k = [(r >> 3) & 1 for r in range(bm)]
    a = [(plane * (a_k[r] ^ q) + r) * item for r in range(bm) for q in range(bk)]
    b = [((n * c + c0 + k) * taps + tap) * item for n in range(bn) for k in range(bk)]
    assert _sectors_per_sector_used(a, item) == 1.0
    assert _sectors_per_sector_used(b, item) == 32 / item
