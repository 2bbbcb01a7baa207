"""Every ```python block of docs/*.md runs as printed (docs/benchmarks/ excepted).

Each block runs on its own, in a fresh namespace (a reader copies one block at a
time: every block imports what it uses), and the blocks of one page also run in
order in one namespace (a page reads like one session); both in an empty
temporary working directory and with ``CUPYCONV_CACHE_DIR`` pointing at a
temporary directory, so a block cannot lean on files or compiled kernels left
behind by something else.  The README's blocks are run one by one by
``tests/cli/test_readme.py``.

Fence info strings (the words after the opening ```):

``python``
    Runs everywhere (the CPU emulator, g++, counts as everywhere).
``python gpu``
    Needs CuPy with a CUDA device.  Such blocks are left out of
    ``test_doc_blocks`` and run, with the rest of their page, by
    ``test_doc_gpu_blocks``, which is skipped (with the reason) where CuPy
    cannot get a device.
``python gpu requires=mod1,mod2``
    Also skipped when one of the named optional modules is not installed.
``python requires=mod1``
    A CPU block that needs an optional module (Dask): skipped, with the reason,
    where it is not installed.

A block that needs CuPy or an optional module says so in its first line, a
comment (``# needs CuPy with a CUDA device ...``, ``# needs Dask ...``), so a
reader knows before running it.

Any other block (shell commands, output, diagrams) must name another
language (``bash``, ``text``, ``console``): a bare ``` fence is an error,
so nothing meant as Python silently escapes the test.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md"))
NON_PYTHON = {"bash", "console", "text"}
_FENCE = re.compile(r"^```(.*)$")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int                      # line of the opening fence (1-based)
    lang: str
    flags: Tuple[str, ...]
    source: str

    @property
    def gpu(self) -> bool:
        return "gpu" in self.flags

    @property
    def requires(self) -> Tuple[str, ...]:
        mods: List[str] = []
        for flag in self.flags:
            if flag.startswith("requires="):
                mods += [m for m in flag.split("=", 1)[1].split(",") if m]
        return tuple(mods)


def blocks(page: str) -> List[Block]:
    """Fenced blocks of a page, in order (fences must start at column 0)."""
    out: List[Block] = []
    open_at: Optional[Tuple[int, str]] = None
    body: List[str] = []
    for number, text in enumerate((DOCS / page).read_text().splitlines(), 1):
        m = _FENCE.match(text)
        if open_at is None:
            if m:
                open_at, body = (number, m.group(1).strip()), []
        elif m and not m.group(1).strip():
            words = open_at[1].split()
            out.append(Block(page, open_at[0], words[0] if words else "",
                             tuple(words[1:]), "\n".join(body) + "\n"))
            open_at = None
        else:
            body.append(text)
    assert open_at is None, f"{page}:{open_at[0]}: unclosed ``` fence"
    return out


def _python(page: str) -> List[Block]:
    return [b for b in blocks(page) if b.lang == "python"]


def _gpu_unavailable_reason() -> Optional[str]:
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:                                  # noqa: BLE001
        return f"CuPy cannot get a CUDA device ({type(exc).__name__}: {exc})"
    return None if count > 0 else "CuPy sees no CUDA device"


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Empty cwd and kernel cache; cupyconv's process-wide state restored after."""
    import cupyconv
    work, cache = tmp_path / "cwd", tmp_path / "cache"
    work.mkdir()
    cache.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(cache))
    saved = cupyconv.config.in_force._asdict()
    backend = cupyconv.get_backend()
    try:
        yield work
    finally:
        for k, v in saved.items():
            setattr(cupyconv.config, k, v)
        assert cupyconv.get_backend() == backend, "a doc block left another backend in force"
        cupyconv.clear_caches()


def _run(page_blocks: List[Block]) -> None:
    namespace = {"__name__": "__main__"}
    for b in page_blocks:
        # padded so that tracebacks give the line numbers of the .md file
        code = compile("\n" * b.line + b.source, str(DOCS / b.page), "exec")
        exec(code, namespace)


def test_pages_found():
    assert {"semantics.md", "emulation.md", "kernels.md", "dask.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_fences_name_a_language(page):
    """Every fence names its language, so Python is never left untested by accident."""
    for b in blocks(page):
        assert b.lang == "python" or b.lang in NON_PYTHON, (
            f"docs/{page}:{b.line}: fence info {b.lang!r}: use ```python for code that runs, "
            f"or one of {sorted(NON_PYTHON)}")


def _missing(block: Block) -> List[str]:
    return [m for m in block.requires if importlib.util.find_spec(m) is None]


@pytest.mark.parametrize("page", PAGES)
def test_doc_blocks(page, sandbox):
    """The page's CPU blocks, in order, in one namespace (blocks whose optional modules
    are missing are left out: each one is skipped with its reason by the test below)."""
    _run([b for b in _python(page) if not b.gpu and not _missing(b)])


CPU_BLOCKS = [b for p in PAGES for b in _python(p) if not b.gpu]


@pytest.mark.parametrize("block", CPU_BLOCKS, ids=[f"{b.page}:{b.line}" for b in CPU_BLOCKS])
def test_doc_block_alone(block, sandbox):
    """Each CPU block on its own, as a reader copies it: it imports what it uses."""
    missing = _missing(block)
    if missing:
        pytest.skip(f"docs/{block.page}:{block.line} needs {', '.join(missing)} "
                    "(not installed)")
    _run([block])


ALL_BLOCKS = [b for p in PAGES for b in _python(p)]


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.gpu or b.requires],
                         ids=[f"{b.page}:{b.line}" for b in ALL_BLOCKS if b.gpu or b.requires])
def test_blocks_say_what_they_need(block):
    """A block for CuPy or an optional module says so in its first line."""
    first = block.source.splitlines()[0].lower().replace("-", "_")
    assert first.startswith("# needs"), (
        f"docs/{block.page}:{block.line}: start the block with a '# needs ...' comment")
    needs = (["cupy"] if block.gpu else []) + [m.lower() for m in block.requires]
    assert all(m.replace("-", "_") in first for m in needs), (
        f"docs/{block.page}:{block.line}: the first line should name {needs}: {first!r}")


GPU_PAGES = [p for p in PAGES if any(b.gpu for b in _python(p))]


@pytest.mark.parametrize("page", GPU_PAGES)
def test_doc_gpu_blocks(page, sandbox):
    """The whole page, GPU blocks included, where CuPy has a device."""
    reason = _gpu_unavailable_reason()
    if reason:
        pytest.skip(f"docs/{page}: GPU blocks not run: {reason}")
    page_blocks = _python(page)
    missing = sorted({m for b in page_blocks if b.gpu for m in b.requires
                      if importlib.util.find_spec(m) is None})
    if missing:
        pytest.skip(f"docs/{page}: GPU blocks need {', '.join(missing)} (not installed)")
    _run(page_blocks)
