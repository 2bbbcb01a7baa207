"""SASS of the compiled kernels, read without a GPU: parsing, loops, the hot loop.

:func:`disassemble` runs ``cuobjdump -sass`` (the ``nvidia-cuda-cuobjdump`` +
``nvidia-cuda-nvdisasm`` wheels of the ``dev``/``test`` extras, or a CUDA
toolkit on ``PATH``) on a cubin; :func:`parse_sass` turns its listing into
:class:`Instruction` lists; :func:`hot_loop` finds a kernel's hot loop and
:func:`loop_stats` counts its instruction mix.  The report built on them is
:mod:`cupyconv._compile.sass_report` (``python -m cupyconv sass``).

Math: floating-point FMA and MMA instructions (:data:`MATH_OPCODES`: FFMA,
FFMA2, DFMA, HFMA2, HMMA, HGMMA, DMMA; ``HFMA2.MMA Rd, -RZ, RZ, ...`` is
ptxas' register-move idiom and is not math).  Shared loads are ``LDS*`` and
``LDSM*``, global loads ``LDG*`` and ``LDGSTS*`` (cp.async); a load's width is
32 bits unless a size modifier says otherwise (``LDG.E.128`` is 128).

Hot loop heuristic (:func:`hot_loop`).  A loop is a backward branch: a
``BRA`` from address ``u`` to a header ``h <= u``.  Its body is the natural
loop of that edge, every instruction that reaches ``u`` without passing
through ``h`` (so out-of-line blocks that jump back in are counted; code
reached only through ``CALL`` is not); back edges to one header are one
loop.  A backward branch whose target does not dominate it (the entry reaches
it without passing the target: a cold block placed after the loop that jumps
back into its middle) is not a loop of its own; its block belongs to the
loop around it.  Loops in subroutines (code not reachable from the entry
without a ``CALL``) are ignored.  The hot loop is, among the loops that hold
math and contain no other loop holding math (innermost with math), the one
with the most math instructions; ties go to the smaller body.  With the
``memory`` criterion (the data-movement families, whose only math is an
epilogue FMA) loops are ranked the same way by their global-memory
instructions (``LDG``, ``STG``, ``LDGSTS``, ``ATOMG``, ``RED``).  Counts are
static: an instruction in a branch of the body counts once whether or not it
executes, a nested loop's body once, not once per trip.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

__all__ = [
    "MATH_OPCODES", "CRITERIA", "Instruction", "Loop", "LoopStats", "DisassemblerUnavailable",
    "find_tool", "disassembler_reason", "parse_sass", "disassemble", "find_loops", "hot_loop",
    "loop_stats",
]

#: Floating-point FMA and MMA opcodes ("math" in the report).
MATH_OPCODES = frozenset({"FFMA", "FFMA2", "DFMA", "HFMA2", "HMMA", "HGMMA", "DMMA"})
_SHARED_LOADS = frozenset({"LDS", "LDSM"})
_GLOBAL_LOADS = frozenset({"LDG", "LDGSTS"})
_GLOBAL_MEMORY = frozenset({"LDG", "STG", "LDGSTS", "ATOMG", "RED"})
_TERMINATORS = frozenset({"EXIT", "RET", "BRX", "JMX", "KILL"})
_WIDTH_MODIFIERS = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "32": 32, "64": 64, "128": 128}


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Instruction:
    """One SASS instruction as printed by ``cuobjdump -sass``."""

    #: byte address within the function.
    address: int
    #: guard predicate without the ``@`` (``"P0"``, ``"!P1"``), ``""`` if none.
    predicate: str
    #: opcode with its modifiers, e.g. ``"LDG.E.128.CONSTANT"``.
    opcode: str
    operands: Tuple[str, ...]

    @property
    def base(self) -> str:
        """Opcode without modifiers (``"LDG"``)."""
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> Tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])

    @property
    def is_math(self) -> bool:
        """A floating-point FMA or MMA (not the ``HFMA2.MMA Rd, -RZ, RZ, ...`` move idiom)."""
        if self.base not in MATH_OPCODES:
            return False
        if self.base == "HFMA2" and len(self.operands) >= 3 and all(
                op.strip("-|") in ("RZ", "URZ") for op in self.operands[1:3]):
            return False
        return True

    @property
    def width_bits(self) -> int:
        """Access width in bits of a load/store (32 unless a size modifier says otherwise).

        ``LDSM`` (ldmatrix) counts 32 bits per matrix (``.4`` is 128).
        """
        if self.base == "LDSM":
            for m in self.modifiers:
                if m in ("2", "4"):
                    return 32 * int(m)
            return 32
        for m in self.modifiers:
            if m in _WIDTH_MODIFIERS:
                return _WIDTH_MODIFIERS[m]
        return 32

    @property
    def branch_target(self) -> Optional[int]:
        """Target address of a ``BRA``/``JMP``, else None."""
        if self.base not in ("BRA", "JMP"):
            return None
        for op in reversed(self.operands):
            if re.fullmatch(r"0x[0-9a-fA-F]+", op):
                return int(op, 16)
        return None

    @property
    def unconditional(self) -> bool:
        """No guard predicate (or ``@PT``) and no predicate operand."""
        if self.predicate not in ("", "PT"):
            return False
        if self.base == "BRA" and any(m in ("DIV", "CONV") for m in self.modifiers):
            return False
        return not any(re.fullmatch(r"!?U?P[0-6T]", op) and op not in ("PT", "UPT")
                       for op in self.operands)


_INSTR_RE = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+(.*?)\s*;")
_FUNC_RE = re.compile(r"Function\s*:\s*(\S+)")


def _split_operands(text: str) -> Tuple[str, ...]:
    if not text.strip():
        return ()
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return tuple(o for o in out if o)


def parse_sass(text: str) -> Dict[str, List[Instruction]]:
    """``cuobjdump -sass`` output -> mangled function name -> instructions.

    Text before the first ``Function :`` line is attributed to ``""`` (a bare
    listing, as in the unit-test fixtures).  ``NOP`` padding is dropped.
    """
    funcs: Dict[str, List[Instruction]] = {}
    current = ""
    for line in text.splitlines():
        m = _FUNC_RE.search(line)
        if m:
            current = m.group(1)
            funcs.setdefault(current, [])
            continue
        m = _INSTR_RE.match(line)
        if not m:
            continue
        body = m.group(2).strip()
        pred = ""
        if body.startswith("@"):
            pred, _, body = body.partition(" ")
            pred, body = pred[1:], body.strip()
        opcode, _, rest = body.partition(" ")
        if opcode == "NOP":
            continue
        funcs.setdefault(current, []).append(
            Instruction(int(m.group(1), 16), pred, opcode, _split_operands(rest)))
    return funcs


# ---------------------------------------------------------------------------
# Loops
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Loop:
    """A loop of one function: header address, back-edge sources and body."""

    header: int
    latches: Tuple[int, ...]
    #: indices (into the function's instruction list) of the body.
    body: FrozenSet[int]

    def instructions(self, instrs: Sequence[Instruction]) -> List[Instruction]:
        return [instrs[i] for i in sorted(self.body)]


def _successors(instrs: Sequence[Instruction]) -> List[List[int]]:
    index = {ins.address: i for i, ins in enumerate(instrs)}
    succ: List[List[int]] = []
    for i, ins in enumerate(instrs):
        out = []
        target = ins.branch_target
        if target is not None and target in index:
            out.append(index[target])
        ends = (target is not None or ins.base in _TERMINATORS) and ins.unconditional
        if not ends and i + 1 < len(instrs):
            out.append(i + 1)
        succ.append(out)
    return succ


def _reachable(succ: List[List[int]], start: int) -> set:
    seen, stack = {start}, [start]
    while stack:
        for j in succ[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def find_loops(instrs: Sequence[Instruction]) -> List[Loop]:
    """Every loop (backward ``BRA``) of a function reachable from its entry, by header."""
    if not instrs:
        return []
    succ = _successors(instrs)
    pred: List[List[int]] = [[] for _ in instrs]
    for i, out in enumerate(succ):
        for j in out:
            pred[j].append(i)
    live = _reachable(succ, 0)
    bodies: Dict[int, set] = {}
    latches: Dict[int, List[int]] = {}
    for u in sorted(live):
        target = instrs[u].branch_target
        if target is None or target > instrs[u].address:
            continue
        h = next((j for j in succ[u] if instrs[j].address == target), None)
        if h is None or h not in live:
            continue
        body, stack = {h, u}, [u]
        while stack:
            for j in pred[stack.pop()]:
                if j not in body:
                    body.add(j)
                    stack.append(j)
        if 0 in body and h != 0:
            continue    # h does not dominate u: a block jumping back into a loop, not a loop
        bodies.setdefault(h, set()).update(body)
        latches.setdefault(h, []).append(instrs[u].address)
    return [Loop(instrs[h].address, tuple(latches[h]), frozenset(b)) for h, b in sorted(bodies.items())]


def _count(instrs: Sequence[Instruction], loop: Loop, pick) -> int:
    return sum(1 for i in loop.body if pick(instrs[i]))


#: Hot-loop criteria of :func:`hot_loop`.
CRITERIA = ("auto", "math", "memory")


def hot_loop(instrs: Sequence[Instruction], criterion: str = "auto") -> Optional[Loop]:
    """The innermost loop with the most math (see the module docstring), or None.

    Parameters
    ----------
    instrs : sequence of Instruction
        One function.
    criterion : {"auto", "math", "memory"}
        What a loop is ranked by: floating-point FMA/MMA instructions
        (``"math"``), global-memory instructions (``"memory"``), or math when
        any loop holds math, else memory (``"auto"``).
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}; got {criterion!r}")
    loops = find_loops(instrs)
    math = {lp.header: _count(instrs, lp, lambda s: s.is_math) for lp in loops}
    memory = {lp.header: _count(instrs, lp, lambda s: s.base in _GLOBAL_MEMORY) for lp in loops}
    use_math = criterion == "math" or (criterion == "auto" and any(math.values()))
    score = math if use_math else memory
    holding = [lp for lp in loops if score[lp.header] > 0]
    innermost = [lp for lp in holding
                 if not any(o is not lp and o.body < lp.body for o in holding)]
    if not innermost:
        return None
    return max(innermost, key=lambda lp: (score[lp.header], -len(lp.body), -lp.header))


@dataclasses.dataclass(frozen=True)
class LoopStats:
    """Instruction mix of one loop body."""

    instructions: int
    math: int
    shared_loads: int
    global_loads: int
    #: distinct widths in bits, ascending.
    global_load_bits: Tuple[int, ...]
    shared_load_bits: Tuple[int, ...]
    local_loads: int
    local_stores: int

    @property
    def math_share(self) -> float:
        return self.math / self.instructions if self.instructions else 0.0

    @property
    def math_per_shared_load(self) -> Optional[float]:
        return self.math / self.shared_loads if self.shared_loads else None


def loop_stats(instructions: Iterable[Instruction]) -> LoopStats:
    """Counts over the given instructions (a loop body).  Instructions predicated on
    ``!PT`` (never true) are left out: ptxas pads an ``LDGSTS`` with such ``LDS RZ, [RZ]``
    placeholders, which never issue."""
    ins = [s for s in instructions if s.predicate != "!PT"]
    lds = [s for s in ins if s.base in _SHARED_LOADS]
    ldg = [s for s in ins if s.base in _GLOBAL_LOADS]
    return LoopStats(
        instructions=len(ins), math=sum(s.is_math for s in ins), shared_loads=len(lds),
        global_loads=len(ldg), global_load_bits=tuple(sorted({s.width_bits for s in ldg})),
        shared_load_bits=tuple(sorted({s.width_bits for s in lds})),
        local_loads=sum(s.base == "LDL" for s in ins), local_stores=sum(s.base == "STL" for s in ins))


# ---------------------------------------------------------------------------
# Disassembler
# ---------------------------------------------------------------------------

class DisassemblerUnavailable(RuntimeError):
    """``cuobjdump`` (with ``nvdisasm``) was not found."""


def _wheel_bins() -> List[str]:
    out = []
    try:
        import nvidia                       # the namespace package of NVIDIA's wheels
        for base in nvidia.__path__:
            out += sorted(glob.glob(os.path.join(base, "*", "bin")))
            out += sorted(glob.glob(os.path.join(base, "*", "*", "bin")))
    except ImportError:
        pass
    return out


def find_tool(name: str) -> Optional[str]:
    """Path of ``cuobjdump``/``nvdisasm``: ``$CUPYCONV_<NAME>``, ``PATH``, ``$CUDA_HOME/bin``, the wheels."""
    env = os.environ.get(f"CUPYCONV_{name.upper()}")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    dirs = [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    for d in dirs + _wheel_bins():
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def disassembler_reason() -> Optional[str]:
    """None when ``cuobjdump -sass`` can run, else why not."""
    missing = [t for t in ("cuobjdump", "nvdisasm") if find_tool(t) is None]
    if missing:
        return (f"{' and '.join(missing)} not found: pip install nvidia-cuda-cuobjdump "
                "nvidia-cuda-nvdisasm (the cupyconv[dev] extra) or put a CUDA toolkit on PATH")
    return None


def disassemble(cubin: Path) -> Dict[str, List[Instruction]]:
    """``cuobjdump -sass`` of a cubin, parsed by :func:`parse_sass`.

    Raises
    ------
    DisassemblerUnavailable
    RuntimeError
        If cuobjdump fails.
    """
    why = disassembler_reason()
    if why is not None:
        raise DisassemblerUnavailable(why)
    tool = find_tool("cuobjdump")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(find_tool("nvdisasm")), env.get("PATH", "")])
    proc = subprocess.run([tool, "-sass", str(cubin)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=600, check=False)
    if proc.returncode != 0 or "Function" not in proc.stdout:
        raise RuntimeError(f"cuobjdump -sass {cubin} failed ({proc.returncode}): {proc.stderr.strip()}")
    return parse_sass(proc.stdout)
