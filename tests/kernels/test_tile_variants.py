"""The tile variants' descriptors (``_kernels/tile_variants.TileVariant``) against what is
compiled: the families' tiles, their template arguments and their index widths."""
from __future__ import annotations

import re

import pytest

from cupyconv._dtypes import BFLOAT16
from cupyconv._kernels import registry

DTYPES = ["float32", "float64", "float16", "complex64", "int64"] + (
    ["bfloat16"] if BFLOAT16 is not None else [])


def _tiles(dtype):
    return registry.gemm_tiles(dtype) + registry.wgmma_tiles(dtype)


def _template_args(name):
    return [a.strip() for a in re.search(r"<(.*)>", name).group(1).split(",")]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_tile_is_declared_by_its_variants_family(dtype):
    """Each tile's variant names the family whose instances hold it, and a twin is a
    compiled channels-last variant of the same family."""
    for tile in _tiles(dtype):
        variant = registry.tile_variant(tile)
        assert tile in registry.tiles_for(variant.family, dtype, 2), (tile, variant)
        if variant.twin is not None:
            twin = registry.TILE_VARIANTS[variant.twin]
            assert twin.channels_last and twin.family == variant.family
            assert tile[:3] + (variant.twin,) in _tiles(dtype)


def test_descriptors_match_the_compiled_instances():
    """Family, math, stages, index widths and the channels-last flag of each variant are
    those of its instantiations (the FMA/DMMA template's table and its ``STAGES``,
    ``Math`` and ``cl`` arguments, the ``long long`` builds)."""
    names = {(i.family, i.dtype.name, i.tile, i.index64): i.name
             for i in registry.instantiations(ranks=(2,))}
    seen = set()
    for family, dtype, tile, wide in names:
        if not family.startswith("implicit_gemm"):
            continue
        variant = registry.tile_variant(tile)
        seen.add(variant.number)
        assert variant.family == family
        assert (family, dtype, tile, True) in names or not variant.index64
        assert not (wide and not variant.index64)
        args = _template_args(names[family, dtype, tile, wide])
        if family != "implicit_gemm_fprop":       # T, Acc, R, I, BM, BN, BK, STAGES, ...
            assert int(args[7]) == registry.tile_stages(tile)
        dmma = registry.FMA_DMMA_VARIANTS.get(variant.number)    # the template's table
        assert (family == "implicit_gemm_fma_dmma") == (dmma is not None)
        if dmma is not None:
            assert args[-1] == ("true" if variant.channels_last else "false")
            assert args[-2] == dmma[3] and (dmma[3] == "cc::SimtFma") == (variant.math == "fma")
    assert seen == set(registry.TILE_VARIANTS)
