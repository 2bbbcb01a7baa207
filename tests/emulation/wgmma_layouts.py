"""Host side of the warpgroup-MMA tests: shared-memory images of A and B in each canonical
layout, the descriptors' fields, the RS register fragments and the element types.

The layouts are written here in their natural form -- rows of 16 W bytes stored one after
another and the swizzle as an XOR of the absolute address's bits, as CUTLASS's
``Layout_K_SW128_Atom`` and friends build them -- independently of the emulator's
core-matrix formulas (cuda_src/emu/emu_wgmma.cuh), so a slip in either shows up as a wrong
product.  The register fragments follow the PTX ISA's figures.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import numpy as np

#: Swizzle name -> (descriptor code, 16-byte chunks per row W).
SWIZZLES = {"none": (0, 1), "32B": (3, 2), "64B": (2, 4), "128B": (1, 8)}
#: Element type -> (template code, bytes, K per instruction).
TYPES = {"f16": (1, 2, 16), "bf16": (2, 2, 16), "tf32": (3, 4, 8)}
BUGS = {"none": 0, "no_proxy_fence": 1, "early_read": 2, "swap_regs": 3, "overwrite": 4,
        "no_wgmma_fence": 5, "no_wait": 6, "cp_async_late": 7, "cp_async": 8,
        "group_per_step": 9}


def swizzle(addr: np.ndarray, mode: str, pattern_start: int = 0) -> np.ndarray:
    """XOR the 16-byte chunk bits with the row bits of the pattern that starts at
    ``pattern_start``: 128 B: bits 4-6 ^= bits 7-9; 64 B: 4-5 ^= 7-8; 32 B: 4 ^= 7."""
    code, width = SWIZZLES[mode]
    if width == 1:
        return addr
    bits = {2: 1, 4: 2, 8: 3}[width]
    row = ((addr - pattern_start) >> 7) & ((1 << bits) - 1)
    return addr ^ (row << 4)


@dataclasses.dataclass
class Tile:
    """Byte offset (from the image start) of every element (r, k) and the descriptor."""

    offsets: np.ndarray            # [rows, K] int
    lbo: int
    sbo: int
    swizzle: int
    kstep: int                     # bytes the descriptor's start moves per K step
    base_offset: int = 0
    start: int = 0


def tile(rows: int, ktot: int, itemsize: int, mode: str, mn_major: bool, at: int,
         base_offset: int = 0) -> Tile:
    """The natural layout of a ``rows x ktot`` operand at image offset ``at``, where its
    swizzle pattern starts; ``base_offset`` is the descriptor's (the image lies on a
    1024-byte boundary, so ``(at >> 7) & 7`` for a pattern off its boundary)."""
    code, width = SWIZZLES[mode]
    r = np.arange(rows)[:, None]
    k = np.arange(ktot)[None, :]
    per = 16 // itemsize                            # elements per 16-byte chunk
    if not mn_major:
        if width == 1:                              # 8 x 16-byte core matrices, K chunks adjacent
            lbo, sbo = 128, 128 * (ktot // per)
            off = (r // 8) * sbo + (k // per) * lbo + (r % 8) * 16 + (k % per) * itemsize
            kstep = 2 * lbo
        else:                                       # rows of 16 W bytes, K contiguous
            rowbytes = 16 * width
            if ktot * itemsize > rowbytes:
                raise ValueError("one swizzle row per K extent in these tests")
            lbo, sbo, kstep = 16, 8 * rowbytes, 32
            off = r * rowbytes + k * itemsize
    else:
        if width == 1:                              # core matrices: 8 K rows x 16 bytes of M/N
            lbo, sbo = 128, 128 * (ktot // 8)
            off = (r // per) * sbo + (k // 8) * lbo + (k % 8) * 16 + (r % per) * itemsize
            kstep = 2 * lbo
        else:                                       # K rows of 16 W bytes, M/N contiguous
            rowbytes = 16 * width
            block = rowbytes // itemsize
            lbo, sbo, kstep = ktot * rowbytes, 8 * rowbytes, 16 * rowbytes
            off = (r // block) * lbo + k * rowbytes + (r % block) * itemsize
    addr = swizzle(at + off, mode, pattern_start=at)   # the tile starts its own pattern
    return Tile(addr, lbo, sbo, code, kstep, base_offset, at)


def to_bits(values: np.ndarray, kind: str, rng: Optional[np.random.Generator] = None):
    """``(stored bits, the value the tensor core reads)`` of float values in an element type.

    tf32 elements are float32 with random low 13 bits (which the hardware ignores); bf16 is
    rounded to nearest even from float32."""
    if kind == "f16":
        h = values.astype(np.float16)
        return h.view(np.uint16), h.astype(np.float64)
    if kind == "bf16":
        u = values.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return u, (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    f = values.astype(np.float32).view(np.uint32)
    noise = (rng or np.random.default_rng(0)).integers(0, 1 << 13, f.shape, dtype=np.uint32)
    stored = (f & np.uint32(0xFFFFE000)) | noise
    return stored, (stored & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def image(parts, nbytes: int) -> np.ndarray:
    """The image (uint8, a multiple of 16 bytes) with each ``(Tile, bits)`` written in."""
    img = np.zeros(-(-nbytes // 16) * 16, np.uint8)
    for t, bits in parts:
        raw = bits.view(np.uint8).reshape(bits.shape + (bits.itemsize,))
        for b in range(bits.itemsize):
            img[t.offsets + b] = raw[..., b]
    return img


def meta(a: Optional[Tile], b: Tile, steps: int, scale_d: int, bug: str, nbytes: int,
         swizzle_a: Optional[int] = None) -> np.ndarray:
    """The kernels' int32 meta array (kernels/wgmma.cu)."""
    def fields(t):
        if t is None:
            return [0] * 6
        return [t.start, t.lbo, t.sbo, t.swizzle, t.base_offset, t.kstep]
    fa = fields(a)
    if swizzle_a is not None:
        fa[3] = swizzle_a
    return np.array(fa + fields(b) + [steps, scale_d, BUGS[bug], nbytes], np.int32)


def fragment_d(x: int, i: int) -> Tuple[int, int]:
    """(row, col) of accumulator register i of warpgroup thread x (PTX ISA's figure for
    wgmma .m64nNk16/.m64nNk8 D)."""
    w, g, t = x // 32, (x % 32) // 4, x % 4
    return 16 * w + g + 8 * ((i >> 1) & 1), 8 * (i // 4) + 2 * t + (i & 1)


def fragment_a(x: int, i: int, kind: str) -> Tuple[int, int]:
    """(row, col) of RS A element i: half i (f16, bf16) or register i (tf32)."""
    w, g, t = x // 32, (x % 32) // 4, x % 4
    if kind == "tf32":
        return 16 * w + g + 8 * (i & 1), t + 4 * (i >> 1)
    return 16 * w + g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def rs_registers(a_bits: np.ndarray, kind: str, steps: int) -> np.ndarray:
    """Each thread's 4 A registers per K step: uint32 [steps, 128, 4]."""
    kper = TYPES[kind][2]
    regs = np.zeros((steps, 128, 4), np.uint32)
    for s in range(steps):
        for x in range(128):
            if kind == "tf32":
                for i in range(4):
                    r, c = fragment_a(x, i, kind)
                    regs[s, x, i] = a_bits[r, s * kper + c]
            else:
                for i in range(8):
                    r, c = fragment_a(x, i, kind)
                    regs[s, x, i // 2] |= np.uint32(a_bits[r, s * kper + c]) << (16 * (i & 1))
    return regs


def cutlass_clayout(x: int, i: int) -> Tuple[int, int]:
    """(row, col) of D register i from CUTLASS's CLayout_64xN, a column-major 64 x N index
    ((4, 8, 4), (2, 2, N/8)) : ((128, 1, 16), (64, 8, 512)) -- a second source for the map."""
    t, g, w = x % 4, (x % 32) // 4, x // 32
    v0, v1, v2 = i & 1, (i >> 1) & 1, i >> 2
    idx = 128 * t + g + 16 * w + 64 * v0 + 8 * v1 + 512 * v2
    return idx % 64, idx // 64


def tolerance(a: np.ndarray, b: np.ndarray, c: np.ndarray, steps: int) -> np.ndarray:
    """Per-output bound for float32 accumulation: each instruction adds K exact products and
    C in the multi-term adder (terms truncated at 2^-25 of the largest, the sum rounded
    toward zero: under 2^-21 of the sum of magnitudes per instruction), ``steps`` times."""
    mag = np.abs(a) @ np.abs(b).T + np.abs(c)
    return (steps + 1) * 2.0 ** -21 * mag + 1e-30


def results(kind: str, n: int, steps: int, rng: np.random.Generator, integers: bool = False):
    """Random A (64 x K), B (n x K), C (64 x n) rounded to the type: (bits, values) pairs."""
    ktot = steps * TYPES[kind][2]
    if integers:
        draw = lambda shape: rng.integers(-4, 5, shape).astype(np.float64)  # noqa: E731
    else:
        draw = lambda shape: rng.standard_normal(shape)  # noqa: E731
    a_bits, a = to_bits(draw((64, ktot)), kind, rng)
    b_bits, b = to_bits(draw((n, ktot)), kind, rng)
    c = draw((64, n)).astype(np.float32)
    return a_bits, a, b_bits, b, c


def layout_case(kind: str, n: int, mode_a: str, mode_b: str, trans_a: bool, trans_b: bool,
                steps: int, a_at: int = 0, base_offset: int = 0) -> Dict[str, object]:
    """Everything one SS run of ``steps`` K steps needs, A at ``a_at`` and B on the next
    1024-byte boundary."""
    _, size, kper = TYPES[kind]
    ktot = steps * kper
    ta = tile(64, ktot, size, mode_a, trans_a, a_at, base_offset)
    b_at = -(-(int(ta.offsets.max()) + 1) // 1024) * 1024
    tb = tile(n, ktot, size, mode_b, trans_b, b_at)
    return {"a": ta, "b": tb, "steps": steps, "ktot": ktot,
            "nbytes": int(tb.offsets.max()) + size}
