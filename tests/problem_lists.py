"""Named edge-case problem lists (CUTLASS ``conv2d_problems.h`` style) and the
hypothesis strategy of per-axis geometries, shared by every test directory."""
from __future__ import annotations

from helpers import PADDING_MODES

# --------------------------------------------------------------------------
# Named edge-case problem lists, (x_shape, w_shape) channels-first
# --------------------------------------------------------------------------

#: Size-1 axes: a spatial extent of 1 in x, in w, or both; 1x1 kernels.
SIZE_ONE_PROBLEMS = [
    ((1, 1, 1), (1, 1, 1)),            # 1-element input and kernel
    ((2, 3, 1, 7), (4, 3, 1, 3)),      # height 1 in both
    ((1, 2, 5, 1), (2, 2, 1, 1)),      # 1x1 kernel, width-1 input
    ((1, 1, 1, 1, 9), (1, 1, 1, 1, 2)),  # 3-D with two unit axes
]
#: Kernel larger than the input (needs padding; scipy's full/same modes).
KERNEL_LARGER_PROBLEMS = [
    ((1, 1, 3), (1, 1, 5)),
    ((2, 2, 2, 4), (3, 2, 5, 3)),
]
#: Tile non-multiples: channel and spatial extents 7, 13, 17 (not multiples
#: of the 8/16/32-wide tiles the CUDA kernels will use).
TILE_NONMULTIPLE_PROBLEMS = [
    ((1, 7, 13), (17, 7, 3)),
    ((2, 13, 7, 5), (7, 13, 3, 2)),
    ((1, 17, 17), (13, 17, 7)),
]
#: 64-bit-ish offsets: planning only (never allocated): some extent or
#: offset passes 2**31 - 1 although each axis alone is small.
INT64_PROBLEMS = [
    ((1, 1, 2**16, 2**15 + 1), (1, 1, 1, 1)),      # input > 2**31 elements
    ((2**11, 64, 128, 128), (64, 64, 3, 3)),       # N*C*S = 2**31 exactly
    ((16, 64, 512, 512), (64, 64, 3, 3)),          # only vol2col M*K (2.4e9) passes
]
INT32_PROBLEMS = [
    ((1, 1, 2**16, 2**15 - 1), (1, 1, 1, 1)),      # 2**31 - 2**16 elements: fits
    ((4, 16, 64, 64), (16, 16, 3, 3)),
]


# --------------------------------------------------------------------------
# Hypothesis: per-axis convolution geometry (shared by kernel and gradient tests)
# --------------------------------------------------------------------------

def spatial_geometry(rank, smax, modes=PADDING_MODES):
    """Strategy: one padding mode and per-axis ``s, ks, stride, dilation, padding``.

    Every axis yields at least one output (the after-pad grows when the
    dilated kernel would not fit).  Pads of the non-constant modes reach past
    the axis (``2*s+1``) so repeated reflections / wraps are exercised.
    """
    from hypothesis import strategies as st

    @st.composite
    def draw_geometry(draw):
        mode = draw(st.sampled_from(modes))
        geo = dict(mode=mode, s=[], ks=[], stride=[], dilation=[], padding=[])
        for _ in range(rank):
            si = draw(st.integers(1, smax))
            ki = draw(st.integers(1, 3))
            di = draw(st.integers(1, 2))
            pmax = 2 if mode == "constant" else 2 * si + 1
            pb, pa = draw(st.integers(0, pmax)), draw(st.integers(0, pmax))
            pa += max(di * (ki - 1) + 1 - (si + pb + pa), 0)
            for key, v in zip(("s", "ks", "stride", "dilation", "padding"),
                              (si, ki, draw(st.integers(1, 3)), di, (pb, pa))):
                geo[key].append(v)
        return geo
    return draw_geometry()
