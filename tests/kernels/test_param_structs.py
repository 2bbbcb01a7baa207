"""The kernels' parameter structs: each :class:`~cupyconv._kernels.families.ParamSpec`
generates the NumPy dtype the launchers pack, and that dtype has the compiled C struct's
layout (every field's offset and size, the struct's size: ``offsetof``/``sizeof`` from
the emulator's host build of the same headers); the launchers pack exactly that dtype."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cupyconv._emulation import _build
from cupyconv._kernels import (families, params, registry, relayout_launch, scan_launch,
                               splitk_launch, winograd_launch)
from emulation_support import require_emulation

#: The ranks whose instances are compared (the extremes and the common ones).
RANKS = (1, 2, 3, 8)


def _instances():
    for spec in families.PARAM_SPECS:
        for rank in (RANKS if spec.ranked else (None,)):
            yield spec, rank


def _member_size(ctype, name):
    return f"sizeof(static_cast<{ctype}*>(nullptr)->{name})"


def _member_kind(ctype, name):
    """0: an integer, 1: a floating-point number, 2: a struct (of the element type)."""
    element = f"std::remove_all_extents_t<decltype({ctype}::{name})>"
    return f"(std::is_class<{element}>::value ? 2 : std::is_floating_point<{element}>::value)"


def _layout_source():
    """One translation unit: the platform header (the emulator's CUDA layer), every
    struct's header, and per struct instance an exported
    ``layout_<i>(long long* out)`` writing sizeof, then (offsetof, sizeof, kind) per
    field (:func:`_member_kind`)."""
    headers = ["platform.cuh"] + sorted({spec.header for spec in families.PARAM_SPECS})
    lines = [f'#include "{_build.cuda_src_dir() / h}"' for h in headers]
    lines += ["#include <cstddef>", "#include <type_traits>"]
    for i, (spec, rank) in enumerate(_instances()):
        ctype = spec.c_type(rank)
        body = [f"sizeof({ctype})"]
        for f in spec.fields:
            body += [f"offsetof({ctype}, {f.name})", _member_size(ctype, f.name),
                     _member_kind(ctype, f.name)]
        lines.append(f'extern "C" __attribute__((visibility("default"))) '
                     f"void layout_{i}(long long* out) {{")
        lines += [f"  out[{k}] = static_cast<long long>({expr});" for k, expr in enumerate(body)]
        lines.append("}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def compiled_layouts():
    require_emulation()
    lib = ctypes.CDLL(str(_build.build_library(_layout_source(), None)))
    out = {}
    for i, (spec, rank) in enumerate(_instances()):
        buf = (ctypes.c_longlong * (1 + 3 * len(spec.fields)))()
        getattr(lib, f"layout_{i}")(buf)
        names = [f.name for f in spec.fields]
        out[spec.c_type(rank)] = (buf[0], {n: tuple(buf[1 + 3 * k:4 + 3 * k])
                                           for k, n in enumerate(names)})
    return out


_KINDS = {"i": 0, "f": 1, "V": 2}


def _dtype_layout(dt):
    """``(itemsize, {field: (offset, bytes, kind)})``, as the C side writes them."""
    return dt.itemsize, {n: (dt.fields[n][1], dt.fields[n][0].itemsize,
                             _KINDS[dt.fields[n][0].base.kind]) for n in dt.names}


@pytest.mark.parametrize("spec,rank", list(_instances()),
                         ids=[s.c_type(r) for s, r in _instances()])
def test_generated_dtype_has_the_compiled_struct_layout(spec, rank, compiled_layouts):
    dt = spec.dtype(rank)
    assert dt.names == tuple(f.name for f in spec.fields)
    assert _dtype_layout(dt) == compiled_layouts[spec.c_type(rank)]
    assert dt.itemsize % 8 == 0 and dt.itemsize <= 4096      # the kernel-parameter limit


#: The dtype each launcher packs, per spec (ranked ones called with the rank).
LAUNCHER_DTYPES = {
    "cc::FastDivmodParams": lambda r: params.FAST_DIVMOD_DTYPE,
    "cc::ConvParams": params.conv_params_dtype,
    "cc::SplitkReduceParams": lambda r: splitk_launch.reduce_params_dtype,
    "cc::ScanParams": scan_launch.scan_params_dtype,
    "cc::RelayoutParams": relayout_launch.relayout_params_dtype,
    "cc::WinogradPiece": winograd_launch.piece_dtype,
    "cc::WinogradWeights": winograd_launch.weights_params_dtype,
}


@pytest.mark.parametrize("spec,rank", list(_instances()),
                         ids=[s.c_type(r) for s, r in _instances()])
def test_launchers_pack_the_generated_dtype(spec, rank):
    """Field names, offsets, shapes and types: the packed bytes of every launch are laid
    out as the spec says."""
    assert LAUNCHER_DTYPES[spec.c_name](rank) == spec.dtype(rank)


def test_every_family_names_the_structs_its_kernels_take():
    """Each family's parameter structs are declared in its source or a header it
    includes (the first by-value argument of its kernel)."""
    for fam in registry.FAMILIES.values():
        assert fam.params, fam.name
        text = (_build.cuda_src_dir() / fam.source).read_text()
        signature = text[text.index(f"\n{fam.name}("):]
        first = signature[:signature.index(",")]
        assert fam.params[0].c_name in first, (fam.name, first)


def test_ranked_spec_refuses_a_rank_outside_the_limits():
    with pytest.raises(ValueError, match="rank"):
        families.CONV_PARAMS.dtype(0)
    assert families.SPLITK_REDUCE_PARAMS.dtype(5) is families.SPLITK_REDUCE_PARAMS.dtype()


def test_packed_conv_params_match_the_fields():
    """A packed scalar reads back through the spec's field names at the spec's offsets."""
    from kernel_reference import make_problem
    prob = make_problem(n=2, c=4, k=6, g=2, s=(5, 7), ks=(3, 2), stride=(2, 1), dilation=(1, 2),
                        padding=((1, 0), (2, 3)), dtype=np.float32)
    p = params.pack_conv_params(prob, x_strides=(140, 35, (7, 1)))
    raw = np.frombuffer(p.tobytes(), np.int64)
    dt = families.CONV_PARAMS.dtype(2)
    assert raw[dt.fields["stride"][1] // 8:][:2].tolist() == [2, 1]
    assert raw[dt.fields["div_taps"][1] // 8] == 6


def test_pack_sets_the_named_fields_and_refuses_others():
    p = families.SPLITK_REDUCE_PARAMS.pack(outer=3, parts=2, inner=5, total=15)
    assert np.frombuffer(p.tobytes(), np.int64).tolist() == [3, 2, 5, 15]
    assert splitk_launch.pack_reduce_params(3, 2, 5).tobytes() == p.tobytes()
    with pytest.raises(KeyError, match="no field 'outerr'"):
        families.SPLITK_REDUCE_PARAMS.pack(outerr=3)
