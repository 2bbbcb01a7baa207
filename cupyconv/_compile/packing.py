"""Packing kernels into a wheel (the build side of :mod:`cupyconv._compile.prebuilt`).

A release wheel build (``CUPYCONV_PREBUILT=1 python -m build --wheel``) calls
:func:`pack` from the ``build_py`` step of ``setup.py``, and only for a
wheel: a default wheel build (the setting unset), an editable install and an
sdist compile nothing.  It compiles the
groups users meet first with NVRTC (the build's progress bar shows kernels
done / total and the time left) and writes them, with ``index.json``, into
``cupyconv/_prebuilt/`` of the wheel.  What is packed is a
:class:`PackSpec`, read by :func:`spec_from_settings` from the
``CUPYCONV_PREBUILT*`` environment variables or ``--config-settings``
(:func:`settings_from_env`; docs/install.md).  Without NVRTC the build
writes an index with no entries and the reason, and says so: the wheel
works, every group is then compiled on first use.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .._kernels import registry
from .._version import __version__
from . import compat
from ._nvrtc import NvrtcUnavailable, nvrtc_version
from .build import compile_groups, group_work, parse_archs, parse_ranks
from .prebuilt import FORMAT, INDEX_NAME

__all__ = ["DEFAULT_ARCHS", "DEFAULT_RANKS", "DEFAULT_DTYPES", "SETTINGS", "NO_NVRTC_MESSAGE",
           "PackSpec", "settings_from_env", "spec_from_settings", "pack"]

#: Cubins packed by default (A100, A10/RTX 30xx, L4/L40/RTX 40xx, H100/H200; ``sm_90a``:
#: the families that declare it, for the H100/H200 only).
DEFAULT_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
#: Ranks packed by default.
DEFAULT_RANKS = (1, 2, 3, 4)
#: Element types packed by default: every dtype the kernels have (int64 serves integer
#: and bool inputs; float16 and bfloat16 kernels are the 16-bit-storage ones; bfloat16
#: where ``ml_dtypes`` is installed, which a release build asks for; found without
#: importing it, as the packer imports nothing of the package beyond the toolchain).
DEFAULT_DTYPES = ("float32", "float64", "float16", "complex64", "complex128", "int64") + (
    ("bfloat16",) if importlib.util.find_spec("ml_dtypes") is not None else ())
#: Build settings: ``--config-settings`` key -> environment variable.
SETTINGS = {
    "prebuilt": "CUPYCONV_PREBUILT",
    "archs": "CUPYCONV_PREBUILT_ARCHS",
    "ptx": "CUPYCONV_PREBUILT_PTX",
    "ranks": "CUPYCONV_PREBUILT_RANKS",
    "dtypes": "CUPYCONV_PREBUILT_DTYPES",
    "families": "CUPYCONV_PREBUILT_FAMILIES",
    "jobs": "CUPYCONV_PREBUILT_JOBS",
}
#: What a wheel build without NVRTC says.
NO_NVRTC_MESSAGE = (
    "cupyconv: NVRTC is not available to this build ({reason}); building a wheel WITHOUT "
    "prebuilt kernels. It works: each kernel group is compiled by NVRTC on first use. To "
    "package kernels, build where NVRTC loads (pip install nvidia-cuda-nvrtc-cu12, or build "
    "from a source checkout, whose wheel build asks for it).")

_OFF = {"0", "off", "no", "false", "none"}
_ON = {"1", "on", "yes", "true", "require", "required"}


@dataclasses.dataclass(frozen=True)
class PackSpec:
    """What a wheel build packs: cubins for ``archs``, PTX for ``ptx``, per rank and dtype.

    ``require`` makes a build without NVRTC an error instead of a wheel
    without kernels.
    """

    archs: Tuple[str, ...] = DEFAULT_ARCHS
    ptx: Tuple[str, ...] = ("compute_90",)
    ranks: Tuple[int, ...] = DEFAULT_RANKS
    dtypes: Tuple[str, ...] = DEFAULT_DTYPES
    families: Optional[Tuple[str, ...]] = None
    require: bool = False
    jobs: Optional[int] = None

    def describe(self) -> str:
        """One line: ``sm_80,sm_90 + PTX compute_90; ranks 1-4; float32,float64``."""
        ranks = ",".join(str(r) for r in self.ranks)
        ptx = f" + PTX {','.join(self.ptx)}" if self.ptx else ""
        fams = f"; families {','.join(self.families)}" if self.families else ""
        return f"{','.join(self.archs)}{ptx}; ranks {ranks}; {','.join(self.dtypes)}{fams}"


def settings_from_env(environ: Optional[Mapping[str, str]] = None,
                      config_settings: Optional[Mapping[str, object]] = None) -> Dict[str, str]:
    """The build settings: ``--config-settings`` keys over ``CUPYCONV_PREBUILT*`` variables.

    ``config_settings`` keys may be the bare names of :data:`SETTINGS`
    (``archs``) or carry a ``cupyconv-`` prefix (``cupyconv-archs``).
    """
    environ = os.environ if environ is None else environ
    out = {key: environ[var] for key, var in SETTINGS.items() if environ.get(var, "").strip()}
    for key, value in (config_settings or {}).items():
        bare = key[len("cupyconv-"):] if key.startswith("cupyconv-") else key
        if bare in SETTINGS and value is not None:
            out[bare] = value if isinstance(value, str) else ",".join(map(str, value))
    return out


def _csv(text: str) -> List[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _subset(text: str, known, key: str) -> Tuple[str, ...]:
    """The comma-separated names of ``text``, each in ``known`` (order kept, no repeats)."""
    names = _csv(text)
    if not names or any(n not in known for n in names):
        raise ValueError(f"CUPYCONV_PREBUILT_{key.upper()} must be a subset of "
                         f"{sorted(known)}; got {text!r}")
    return tuple(dict.fromkeys(names))


def spec_from_settings(settings: Mapping[str, str]) -> Optional[PackSpec]:
    """The :class:`PackSpec` of :func:`settings_from_env`'s result; ``None`` when packing is off.

    Raises
    ------
    ValueError
        Naming the setting, for an arch that is not ``sm_NN``, a PTX arch
        that is not ``compute_NN`` (or ``none``), a rank outside
        ``1..MAX_RANK``, an unknown dtype or family.
    """
    mode = settings.get("prebuilt", "auto").strip().lower()
    if mode in _OFF:
        return None
    if mode not in _ON | {"auto", ""}:
        raise ValueError(f"CUPYCONV_PREBUILT must be auto, 0/off or 1/require; got {mode!r}")
    spec = PackSpec(require=mode in _ON)
    fields: Dict[str, object] = {}
    try:
        if "archs" in settings:
            fields["archs"] = tuple(parse_archs(settings["archs"]))
        if "ranks" in settings:
            fields["ranks"] = tuple(parse_ranks(settings["ranks"]))
    except Exception as exc:  # argparse.ArgumentTypeError from the shared parsers
        raise ValueError(f"bad cupyconv prebuilt setting: {exc}") from None
    archs = fields.get("archs", spec.archs)
    if "ptx" in settings:
        ptx = _csv(settings["ptx"])
        ptx = [] if [p.lower() for p in ptx] in ([], ["none"]) else ptx
        bad = [p for p in ptx if not re.fullmatch(r"compute_\d{2,3}", p)]
        if bad:
            raise ValueError(f"CUPYCONV_PREBUILT_PTX must be compute_NN values or none; got {bad}")
        fields["ptx"] = tuple(dict.fromkeys(ptx))
    else:
        portable = [compat.arch_parts(a)[1] for a in archs if not compat.arch_parts(a)[2]]
        fields["ptx"] = (f"compute_{max(portable)}",) if portable else ()
    for key, known in (("dtypes", registry.DTYPES), ("families", registry.FAMILIES)):
        if key in settings:
            fields[key] = _subset(settings[key], known, key)
    if "jobs" in settings:
        try:
            jobs = int(settings["jobs"])
        except ValueError:
            jobs = 0
        if jobs < 1:
            raise ValueError(f"CUPYCONV_PREBUILT_JOBS must be a positive integer; "
                             f"got {settings['jobs']!r}")
        fields["jobs"] = jobs
    return dataclasses.replace(spec, **fields)


def _write_index(dest: Path, index: dict) -> None:
    (dest / INDEX_NAME).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


def _base_index(spec: Optional[PackSpec]) -> dict:
    return {"format": FORMAT, "package_version": __version__,
            "built": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "archs": list(spec.archs) if spec else [], "ptx": list(spec.ptx) if spec else [],
            "ranks": list(spec.ranks) if spec else [], "dtypes": list(spec.dtypes) if spec else [],
            "families": list(spec.families or registry.FAMILIES) if spec else [],
            "nvrtc": None, "reason": None, "groups": 0, "kernels": 0, "bytes": 0, "entries": []}


def pack(dest, spec: Optional[PackSpec] = None, *, progress: bool = True,
         log: Callable[[str], None] = print, reason_off: str = "") -> dict:
    """Compile ``spec`` with NVRTC and write the binaries and ``index.json`` into ``dest``.

    Parameters
    ----------
    dest : path-like
        The prebuilt directory of the wheel being built (created).
    spec : PackSpec, optional
        ``None``: packing is switched off; only an index saying so (and
        ``reason_off``) is written.
    progress : bool
        Draw the build's progress bar (kernels done / total, time left).
    log : callable
        Where the one-line messages go.

    Returns
    -------
    dict
        The index written.

    Raises
    ------
    NvrtcUnavailable
        Only when ``spec.require`` and NVRTC cannot be loaded.
    cupyconv._compile.KernelCompileError
        When NVRTC rejects a kernel (the build fails: never a partial pack).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    index = _base_index(spec)
    if spec is None:
        index["reason"] = reason_off or "prebuilt kernels switched off (CUPYCONV_PREBUILT=0)"
        _write_index(dest, index)
        log(f"cupyconv: {index['reason']}; building a wheel WITHOUT prebuilt kernels "
            "(each kernel group is compiled by NVRTC on first use)")
        return index
    try:
        version = tuple(nvrtc_version())
    except (NvrtcUnavailable, OSError, RuntimeError) as exc:
        if spec.require:
            raise NvrtcUnavailable(f"CUPYCONV_PREBUILT=require but NVRTC is not available: {exc}") from exc
        index["reason"] = f"built without NVRTC: {exc}"
        _write_index(dest, index)
        log(NO_NVRTC_MESSAGE.format(reason=exc))
        return index
    work = group_work(spec.archs + spec.ptx, spec.ranks, spec.families, spec.dtypes)
    total = sum(len(m) for _, _, m in work)
    log(f"cupyconv: compiling {total} kernels in {len(work)} NVRTC programs with NVRTC "
        f"{compat.format_version(version)} for the wheel ({spec.describe()})")
    entries = []
    with tempfile.TemporaryDirectory(prefix="cupyconv-pack-") as tmp:
        results = compile_groups(work, root=Path(tmp), progress=progress, jobs=spec.jobs,
                                        desc="cupyconv wheel kernels")
        for res in sorted(results, key=lambda r: (r.arch, r.source, r.dtype, r.rank)):
            rel = f"{res.arch}/{res.path.name}"
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(res.path, target)
            os.chmod(target, 0o644)
            meta = res.meta
            entries.append({
                "arch": res.arch, "source": res.source, "dtype": res.dtype, "rank": res.rank,
                "families": sorted({m.family for m in res.members}),
                "names": sorted(m.name for m in res.members), "file": rel,
                "key": meta["key"], "lowered": meta["lowered"], "sha256": meta["sha256"],
                "size": meta["size"], "nvrtc": list(version), "options": meta.get("options", []),
                "entry_digest": meta["entry_digest"]})
    index.update(nvrtc=list(version), entries=entries, groups=len(entries),
                 kernels=sum(len(e["names"]) for e in entries),
                 bytes=sum(e["size"] for e in entries))
    _write_index(dest, index)
    log(f"cupyconv: packed {index['kernels']} kernels ({len(entries)} files, "
        f"{index['bytes'] / 2**20:.1f} MiB before compression) into {dest}")
    return index
