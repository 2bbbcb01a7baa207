"""``python -m cupyconv sass``: the kernels' hot loops, instruction mix and occupancy.

Compiles the registry's instantiations with NVRTC (:func:`build.compile_group`,
through the cubin cache), disassembles every kernel and reports per kernel
(:class:`SassReport`): the instructions of its hot loop
(:func:`cupyconv._compile.sass.hot_loop`, by math for the compute families
marked ``hot`` in the registry, by global-memory instructions for vol2col and
col2vol), the math instructions (floating-point FMA and MMA) in it and their
share, math per shared-memory load, the widths of its global and shared loads,
its local loads and stores, registers, static shared memory, spills and stack
(``ptxas -v``, :func:`build.parse_ptxas_log`), and the resident CTAs per SM it
allows on each arch of :data:`cupyconv._compile.occupancy.ARCH_LIMITS` with the
registers ptxas gives it on *that* arch.  ``--markdown docs/kernels_sass.md``
writes the committed page; ``--resources`` prints the ptxas resource tables of
``docs/kernels.md`` section 6 (:func:`format_resource_tables`).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .._kernels import registry
from ._nvrtc import KernelCompileError, nvrtc_version
from .build import (DEFAULT_ARCHS, KernelReport, build, compile_group, parse_archs,
                    parse_ptxas_log, parse_ranks)
from .occupancy import ARCH_LIMITS, ctas_per_sm
from .sass import DisassemblerUnavailable, LoopStats, disassemble, disassembler_reason, hot_loop, loop_stats

__all__ = ["REFERENCE_KERNEL_EXTENT", "SassReport", "reference_dynamic_smem", "analyze",
           "format_table", "format_markdown", "format_resource_tables", "main"]


#: Kernel extent of the reference launch on the inner axes (see :func:`reference_dynamic_smem`).
REFERENCE_KERNEL_EXTENT = 3


def reference_dynamic_smem(inst: registry.Instantiation) -> int:
    """Dynamic shared bytes of the reference launch of a kernel (0 for families without).

    The multistage implicit GEMM's is fixed by its tile
    (:func:`cupyconv._kernels.registry.multistage_smem_bytes`).

    The direct kernel's shared memory is chosen per launch
    (``cupyconv._kernels.launch.direct_smem_layout``, which the toolchain does
    not import; a test pins the two equal).  The reference is its tile with a
    kernel of extent 3 on the inner axes (one at rank 1), stride 1, dilation 1:
    ``rows`` = TILE_H + 2 input rows (1 at rank 1) of ``pitch`` elements, the
    TILE_W + 2 columns plus ``registry.DIRECT_TAP_BLOCK`` rounded up to 16
    bytes, then the 3 x 3 (3 at rank 1) weights, in accumulator elements.
    """
    if inst.family in ("implicit_gemm_fma_dmma", "implicit_gemm_multistage", "implicit_gemm_wgmma"):
        return registry.gemm_dynamic_smem(inst.tile, inst.dtype)
    if inst.family != "direct_conv":
        return 0
    th, tw = inst.tile
    k = REFERENCE_KERNEL_EXTENT
    item = registry.dtype_spec(inst.dtype).accum_itemsize
    kch = k if inst.rank >= 2 else 1
    rows, cols = th - 1 + kch, tw - 1 + k
    vec = max(16 // item, 1)
    pitch = -(-(cols + registry.DIRECT_TAP_BLOCK) // vec) * vec
    return (rows * pitch + kch * k) * item


@dataclasses.dataclass(frozen=True)
class SassReport:
    """The SASS figures of one kernel on one arch."""

    family: str
    name: str
    arch: str
    dtype: str
    rank: int
    index64: bool
    tile: Tuple[int, ...]
    #: None when the kernel has no loop.
    loop: Optional[LoopStats]
    registers: int
    smem_bytes: int
    dynamic_smem_bytes: int
    spill_bytes: int
    stack_bytes: int
    #: arch -> resident CTAs per SM (registers of that arch's build).
    ctas: Dict[str, int]


def occupancy_build(family: str, arch: str) -> Optional[str]:
    """The build whose registers set ``family``'s occupancy on ``arch`` (a key of
    :data:`ARCH_LIMITS`): ``arch`` itself, or for an arch-specific family its target on the
    same SM (``sm_90a`` for ``sm_90``), or ``None`` where the family does not run."""
    fam = registry.FAMILIES[family]
    if fam.builds_for(arch):
        return arch
    return next((a for a in fam.arch_specific if a[:-1] == arch), None)


def _group_meta(source, members, arch, root):
    path, meta, _, _ = compile_group(source, [m.name for m in members], arch, root=root)
    return path, meta


def analyze(arch: str = "sm_90", families: Optional[Iterable[str]] = None,
            ranks: Iterable[int] = (3,), dtypes: Optional[Iterable] = ("float32", "float64"),
            occupancy_archs: Sequence[str] = ("sm_80", "sm_90"), *,
            root: Optional[Path] = None) -> List[SassReport]:
    """Compile, disassemble and measure the selected instantiations on ``arch``.

    Parameters
    ----------
    arch : str
        The arch whose SASS is read.
    families, ranks, dtypes :
        Selection as in :func:`cupyconv._kernels.registry.instantiations`.
    occupancy_archs : sequence of str
        Keys of :data:`ARCH_LIMITS` to report CTAs per SM for; each is compiled
        (ptxas -v only) for its own register counts.
    root : Path, optional
        Cubin cache root.

    Returns
    -------
    list of SassReport
        Sorted by dtype, rank, family, name.

    Raises
    ------
    DisassemblerUnavailable, KernelCompileError
    """
    bad = [a for a in occupancy_archs if a not in ARCH_LIMITS]
    if bad:
        raise ValueError(f"no limits table for {bad}; known: {sorted(ARCH_LIMITS)}")
    why = disassembler_reason()
    if why is not None:
        raise DisassemblerUnavailable(why)
    insts = [i for i in registry.instantiations(families, ranks=ranks, dtypes=dtypes)
             if registry.FAMILIES[i.family].builds_for(arch)]
    groups: Dict[Tuple[str, str, int], list] = {}
    for inst in insts:
        groups.setdefault(inst.group, []).append(inst)
    reports = []
    for (source, _, _), members in groups.items():
        path, meta = _group_meta(source, members, arch, root)
        usage = {arch: parse_ptxas_log(meta.get("log", ""))}
        lowered = {arch: meta["lowered"]}
        built = {other: occupancy_build(members[0].family, other) for other in occupancy_archs}
        for other in set(built.values()) - {None}:
            if other not in usage:
                _, ometa = _group_meta(source, members, other, root)
                usage[other], lowered[other] = parse_ptxas_log(ometa.get("log", "")), ometa["lowered"]
        funcs = disassemble(path)
        for inst in members:
            symbol = meta["lowered"][inst.name]
            instrs = funcs.get(symbol, [])
            lp = hot_loop(instrs, "math" if registry.FAMILIES[inst.family].hot else "memory")
            u = usage[arch].get(symbol, {})
            dyn = reference_dynamic_smem(inst)
            ctas = {}
            for other in occupancy_archs:
                if built[other] is None:      # an arch-specific kernel does not run there
                    ctas[other] = 0
                    continue
                ou = usage[built[other]].get(lowered[built[other]][inst.name], {})
                ctas[other] = ctas_per_sm(other, ou.get("registers", 0), ou.get("smem_bytes", 0) + dyn,
                                          registry.block_threads(inst.family, inst.tile))
            reports.append(SassReport(
                inst.family, inst.name, arch, inst.dtype.name, inst.rank, inst.index64, inst.tile,
                loop_stats(lp.instructions(instrs)) if lp is not None else None,
                u.get("registers", -1), u.get("smem_bytes", -1), dyn,
                u.get("spill_stores", 0) + u.get("spill_loads", 0), u.get("stack_bytes", 0), ctas))
    reports.sort(key=lambda r: (r.dtype, r.rank, r.family, r.name))
    return reports


def _bits(widths: Tuple[int, ...]) -> str:
    return "/".join(str(w) for w in widths) if widths else "-"


def format_table(reports: Sequence[SassReport]) -> str:
    """Markdown table, one row per kernel."""
    archs = sorted({a for r in reports for a in r.ctas})
    head = ["kernel", "loop", "math", "math share", "math/LDS", "LDG bits", "LDS bits",
            "LDL/STL", "regs", "smem B", "spill B"] + [f"CTAs/SM {a}" for a in archs]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in reports:
        s = r.loop
        smem = f"{r.smem_bytes}" + (f" + {r.dynamic_smem_bytes} dyn" if r.dynamic_smem_bytes else "")
        if s is None:
            cells = ["no loop"] + ["-"] * 6
        else:
            mpl = s.math_per_shared_load
            cells = [str(s.instructions), str(s.math), f"{s.math_share:.2f}",
                     "-" if mpl is None else f"{mpl:.2f}", _bits(s.global_load_bits),
                     _bits(s.shared_load_bits), f"{s.local_loads}/{s.local_stores}"]
        row = [f"`{r.name}`"] + cells + [str(r.registers), smem, str(r.spill_bytes)]
        row += [str(r.ctas[a]) for a in archs]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


_DOC_HEAD = """# Kernel machine code (SASS), measured without a GPU

Generated by `cupyconv/_compile/sass_report.py` from the NVRTC {nvrtc} build of the current
`cuda_src/`, disassembled with `cuobjdump -sass`:

```bash
{command}
```

**Regenerate this page whenever a kernel changes** (after `pip install -e ".[dev]"`, which
brings `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm`; no GPU needed), with the command
above.  `python -m cupyconv sass --help` lists the other selections (archs, ranks,
families, dtypes).

Columns, per kernel (the definitions are in the docstrings of `cupyconv/_compile/sass.py`
and `sass_report.py`):

* **loop**: instructions in the kernel's hot loop, a static count. The hot loop is the
  innermost loop (a backward `BRA` and its natural-loop body, out-of-line blocks that jump
  back in included, code reached through `CALL` not) that holds the most math; for the
  data-movement kernels without math (vol2col, col2vol) the innermost loop with the most
  global-memory instructions.
* **math**: floating-point FMA and MMA instructions in the loop (FFMA, FFMA2, DFMA, HFMA2,
  HMMA, HGMMA, DMMA; not the `HFMA2.MMA Rd, -RZ, RZ` move idiom); **math share** = math /
  loop; **math/LDS** = math per shared-memory load instruction (`LDS*`, `LDSM*`).
* **LDG bits / LDS bits**: the distinct widths of the global (`LDG*`, `LDGSTS*`) and shared
  loads in the loop: 32 is a scalar float, 64 a double or a float2, 128 a float4.
* **LDL/STL**: local-memory loads / stores in the loop.
* **regs**, **smem B** (static shared bytes; the direct kernel's is dynamic, shown for a
  reference launch: kernel extent 3 on the inner axes, stride 1; the multistage implicit
  GEMM's dynamic bytes are fixed by its tile), **spill B**: from `ptxas -v`.
* **CTAs/SM**: resident CTAs of {threads} threads ({ms_threads} for the multistage implicit
  GEMM and the float64 DMMA tiles: `registry.block_threads(family, tile)`) per SM that the registers (as ptxas
  allocates them for that arch), shared memory and threads allow, by the occupancy
  calculator's rules against `ARCH_LIMITS` in `occupancy.py` (CUDA C++ Programming Guide,
  "Technical Specifications per Compute Capability"; allocation units from
  `cuda_occupancy.h`).

"""


_DOC_TAIL = """
## Floors the tests pin

`tests/toolchain/test_sass.py` builds every family's rank-3 float32 kernels for sm_90 with
NVRTC 12.x and fails when one of these regresses: every kernel has a hot loop; **zero
spill bytes**; **no LDL/STL in any hot loop** (col2vol had them until its odometer was
unrolled); the implicit GEMM's hot loop is its K-loop (BM*BN*BK/256 FFMA per thread);
**LDS.128** where the design has 16-byte shared loads: the direct kernel's 2-D tiles (input
windows) and the implicit GEMM (A/B fragments); and on the tiles the launchers prefer
(32-bit indices) the implicit GEMM's hot-loop **math share >= 0.60** and the direct
kernel's **math per shared load >= 4**, each with **>= 2 CTAs per SM** on sm_90.  The
multistage implicit GEMM (float32/TF32, float16 and bfloat16, issue 26) has its own floors: per
K-tile its HMMA, LDSM and 16-byte LDGSTS counts and one barrier in the hot loop (one
K-tile in the 128x128 tiles' loop, four in the 64x64 tiles'), **<= 4 instructions per
HMMA** on every tile, zero spills and >= 2 CTAs per SM on sm_90 with its dynamic shared
memory.  The other families' global loads are scalar gathers (the
float64/TF32 tensor-core tiles copy them with 4/8-byte cp.async, the channels-last
variants 3 and 4 with 16-byte cp.async), so no global-width floor is pinned; vol2col and
col2vol gather scalars by design.  The parser and the hot-loop finder
are unit-tested on fixed SASS listings in the same file.
"""


def format_markdown(reports: Sequence[SassReport], command: str) -> str:
    """The ``docs/kernels_sass.md`` page: definitions, then one table per (arch, dtype, rank)."""
    ver = ".".join(str(v) for v in nvrtc_version())
    out = [_DOC_HEAD.format(command=command, nvrtc=ver, threads=registry.THREADS,
                            ms_threads=registry.MULTISTAGE_THREADS)]
    keys = sorted({(r.arch, r.dtype, r.rank) for r in reports})
    for arch, dtype, rank in keys:
        out.append(f"## {arch}, {dtype}, rank {rank}\n")
        out.append(format_table([r for r in reports if (r.arch, r.dtype, r.rank) == (arch, dtype, rank)]))
        out.append("")
    out.append(_DOC_TAIL)
    return "\n".join(out)


def _hot_selection(inst: registry.Instantiation) -> bool:
    """The representative hot kernels of :func:`format_resource_tables`."""
    if inst.family == "direct_conv":
        return (inst.rank in (1, 3) and not inst.index64
                and inst.tile == registry.direct_tiles(inst.rank)[0])
    if inst.family in ("implicit_gemm_fprop", "implicit_gemm_fma_dmma"):
        return (inst.rank, inst.index64) in ((3, False), (registry.MAX_RANK, True))
    return False


def format_resource_tables(reports: Sequence[KernelReport]) -> str:
    """The ptxas resource tables of ``docs/kernels.md`` section 6 from a :func:`build.build`.

    A totals line; per family and arch the worst case over the build (registers,
    static shared memory, stack, spills); then registers / static smem / spill
    bytes per arch of the representative hot kernels (the direct kernel's
    preferred tile at ranks 1 and 3, the implicit GEMM's tiles at rank 3 with
    ``int`` and at the top rank with ``long long`` indices; 32-bit indexing
    unless noted).
    """
    archs = sorted({r.arch for r in reports})
    lines = [f"Totals: {len(reports):,} kernels; spill bytes over all kernels = "
             f"{sum(max(r.spills, 0) for r in reports)}; max static smem = "
             f"{max((r.smem_bytes for r in reports), default=0)} B; max registers = "
             f"{max((r.registers for r in reports), default=0)}.", "",
             "Per family, worst case over every rank, dtype and index type built:", "",
             "| family | arch | max regs | max static smem (B) | max stack (B) | spill bytes |",
             "|---|---|---:|---:|---:|---:|"]
    for fam in sorted({r.family for r in reports}):
        for arch in archs:
            rs = [r for r in reports if r.family == fam and r.arch == arch]
            if rs:
                lines.append(f"| {fam} | {arch} | {max(r.registers for r in rs)} | "
                             f"{max(r.smem_bytes for r in rs)} | {max(r.stack_bytes for r in rs)} | "
                             f"{sum(max(r.spills, 0) for r in rs)} |")
    lines += ["", "Hot kernels (regs / static smem bytes / spill bytes):", "",
              "| kernel | " + " | ".join(archs) + " |", "|---|" + "---|" * len(archs)]
    by_name: Dict[str, Dict[str, KernelReport]] = {}
    for r in reports:
        inst = registry.lookup(r.name)
        if inst is not None and _hot_selection(inst):
            by_name.setdefault(r.name, {})[r.arch] = r
    for name in sorted(by_name):
        cells = [f"{x.registers} / {x.smem_bytes} / {x.spills}" if x is not None else "-"
                 for x in (by_name[name].get(a) for a in archs)]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m cupyconv sass [--arch sm_90] [--ranks 3] [--families ...] [--dtypes ...]``."""
    ap = argparse.ArgumentParser(
        prog="python -m cupyconv sass",
        description="Hot loops, instruction mix and occupancy of the kernels' machine code, "
                    "read from NVRTC cubins with cuobjdump (no GPU needed; the cupyconv[dev] "
                    "extra installs the disassembler). --resources prints the ptxas resource "
                    "tables of docs/kernels.md instead.")
    ap.add_argument("--arch", type=parse_archs, default=None,
                    help="comma-separated sm_NN whose SASS is read (default sm_90; "
                         "with --resources sm_80,sm_90)")
    ap.add_argument("--ranks", type=parse_ranks, default=None,
                    help=f"e.g. 3 or 1-{registry.MAX_RANK} (default 3; with --resources 1-{registry.MAX_RANK})")
    ap.add_argument("--families", default=None, help=f"comma-separated subset of {sorted(registry.FAMILIES)}")
    ap.add_argument("--dtypes", default=None,
                    help=f"comma-separated subset of {sorted(registry.DTYPES)} "
                         "(default float32,float64; with --resources all)")
    ap.add_argument("--occupancy", default="sm_80,sm_90",
                    help=f"archs to report CTAs/SM for, from {sorted(ARCH_LIMITS)} (default sm_80,sm_90)")
    ap.add_argument("--markdown", metavar="PATH", default=None,
                    help="write the page (docs/kernels_sass.md) instead of printing the tables")
    ap.add_argument("--resources", action="store_true",
                    help="build every selected kernel and print the ptxas resource tables "
                         "(docs/kernels.md section 6); no disassembler needed")
    args = ap.parse_args(argv)
    families = args.families.split(",") if args.families else None
    occ = [a.strip() for a in args.occupancy.split(",") if a.strip()]
    try:
        if args.resources:
            reports = build(archs=args.arch or list(DEFAULT_ARCHS),
                            ranks=args.ranks or range(1, registry.MAX_RANK + 1), families=families,
                            dtypes=args.dtypes.split(",") if args.dtypes else None)
            print(format_resource_tables(reports))
            return 0
        archs, ranks = args.arch or ["sm_90"], args.ranks or [3]
        dtypes = args.dtypes or "float32,float64"
        reports = []
        for arch in archs:
            reports += analyze(arch, families=families, ranks=ranks, dtypes=dtypes.split(","),
                               occupancy_archs=occ)
    except (ValueError, TypeError) as exc:
        ap.error(str(exc))
    except (DisassemblerUnavailable, KernelCompileError, RuntimeError) as exc:
        print(f"cupyconv sass: {exc}", file=sys.stderr)
        return 1
    command = "python -m cupyconv sass " + " ".join(
        [f"--arch {','.join(archs)}", f"--ranks {','.join(map(str, ranks))}", f"--dtypes {dtypes}"]
        + ([f"--families {args.families}"] if args.families else [])
        + [f"--occupancy {','.join(occ)}"] + ([f"--markdown {args.markdown}"] if args.markdown else []))
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(reports, command))
        print(f"wrote {args.markdown} ({len(reports)} kernels)")
    else:
        for arch, dtype, rank in sorted({(r.arch, r.dtype, r.rank) for r in reports}):
            print(f"\n{arch}, {dtype}, rank {rank}")
            print(format_table([r for r in reports if (r.arch, r.dtype, r.rank) == (arch, dtype, rank)]))
    return 0
