"""Issue 24's kernels compile with NVRTC 12 and 13: the one-flag data scan
(cuda_src/conv/data_scan.cu: half, bfloat16, float, double, both complex, int64) and the
Winograd weight transform (cuda_src/conv/winograd_weights.cu: the float and complex
dtypes), both index types, at rank 8 (the largest parameter structs) for sm_90, no
register spills and at most four words of shared memory.  (Ranks 1-4 in float32/float64 for sm_80 and sm_90 are
``test_kernels_nvrtc``'s, rank 3 in every dtype under NVRTC 13 ``test_nvrtc13``'s: every
family of the registry.)"""
from __future__ import annotations

import textwrap

import pytest
from toolchain_support import run_with_nvrtc

FAMILIES = ("data_scan", "winograd_weights")
_BODY = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from cupyconv._compile import nvrtc_version
    from cupyconv._compile.build import build
    reports = build(archs=("sm_90",), ranks=(8,), families=("data_scan", "winograd_weights"),
                    progress=False, root=Path(sys.argv[1]))
    print(json.dumps({"version": list(nvrtc_version()),
                      "kernels": [[r.name, r.spills, r.registers, r.smem_bytes]
                                  for r in reports]}))
""")


@pytest.mark.parametrize("major", [12, 13])
def test_scan_compiles_with_nvrtc(major, tmp_path):
    from cupyconv._kernels import registry
    out = run_with_nvrtc(major, _BODY, str(tmp_path))
    expected = {i.name for i in registry.instantiations(FAMILIES, ranks=(8,))}
    assert len(expected) >= 2 * (6 + 5)                # two index types, 6 + 5 dtypes at least
    names = [k[0] for k in out["kernels"]]
    assert sorted(names) == sorted(expected)
    assert all(spills == 0 and regs > 0 and smem <= 64 for _, spills, regs, smem in out["kernels"])
