"""Counted work of the algorithm a case ran, for its FLOP/s and roofline figures.

The direct algorithms (direct, gemm, implicit_gemm, winograd: the same products, or fewer
that the roofline should not credit) are counted as the problem's multiply-adds
(``problem.flops``).  The FFT performs other work: the transforms of the inputs, the
filters and the outputs, and the pointwise products of their spectra.  Counting it as
the direct multiply-adds would credit a large kernel's FFT with work it never did (a
"687% of peak"), so :func:`counted_flops` counts the FFT's own.
"""
from __future__ import annotations

import math

from ..backends.fft import fast_len

__all__ = ["counted_flops", "fft_flops"]


def fft_flops(problem):
    """Floating-point operations of the FFT algorithm on ``problem``: ``5 n log2 n`` per
    complex transform of ``n`` points (a real one half of that), one transform per
    input image and channel, per filter and per output image and channel, padded to the
    library's fast lengths; plus 8 per complex multiply-add of the spectra's channel
    contraction over the transform's frequencies."""
    lengths = [fast_len(s + pb + pa) for s, (pb, pa) in zip(problem.in_shape, problem.padding)]
    n = math.prod(lengths)
    real = not problem.is_complex
    per_transform = 5 * n * math.log2(max(n, 2)) * (0.5 if real else 1.0)
    freqs = math.prod(lengths[:-1]) * (lengths[-1] // 2 + 1) if real else n
    cg, kg = problem.in_channels // problem.groups, problem.out_channels // problem.groups
    transforms = (problem.batch * problem.in_channels + problem.out_channels * cg
                  + problem.batch * problem.out_channels)
    products = problem.batch * problem.groups * kg * cg * freqs
    return float(transforms * per_transform + 8 * products)


def counted_flops(problem, algorithm):
    """``(flops, how)``: the work credited to ``algorithm`` on ``problem`` (the FFT's
    own for ``fft``, else the problem's multiply-adds) and its name for the reports."""
    if algorithm == "fft":
        return fft_flops(problem), "fft"
    return float(problem.flops), "direct"
