"""setuptools hooks of cupyconv; every piece of metadata lives in pyproject.toml.

The ``build_py`` step of a wheel build (``python -m build --wheel``,
``pip wheel .``, and the wheel pip builds for ``pip install .`` or an sdist)
also

* copies ``cuda_src/`` into the package as ``cupyconv/cuda_src/``: the
  kernel registry reads ``common/launch_config.cuh`` at import, NVRTC and
  the CPU emulator compile the ``.cu`` files;
* for a release build only (``CUPYCONV_PREBUILT=1`` or ``-C prebuilt=1``; also
  ``auto``/``require``), compiles the prebuilt kernels with NVRTC into
  ``cupyconv/_prebuilt/`` (:func:`cupyconv._compile.packing.pack`), as the
  ``CUPYCONV_PREBUILT*`` environment variables or ``--config-settings`` say,
  running one NVRTC program per usable core unless ``CUPYCONV_PREBUILT_JOBS``
  says otherwise (docs/install.md).  A default build (``pip install .``,
  ``python -m build --wheel`` without the setting) packs nothing and says so in
  the wheel's index; without NVRTC the wheel has no kernels and the build says so.

An editable install (``pip install -e .``) does neither: it reads
``cuda_src/`` of the checkout and compiles nothing.  The build backend
(``build_backend/cupyconv_build.py``) asks for NVRTC in the isolated build
environment of a wheel built from a source checkout.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import sys
import types
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
#: The reason a default wheel build packs no kernels (the wheel's index and ``info`` say it).
DEFAULT_BUILD = ("a default build packs no kernels; a release build does: "
                 "CUPYCONV_PREBUILT=1 python -m build --wheel (docs/install.md)")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; the CPU count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:                      # not on Linux
        return os.cpu_count() or 1


def _packing_module():
    """``cupyconv._compile.packing`` of this source tree, without ``cupyconv/__init__``.

    The package's ``__init__`` imports the whole library (SciPy included);
    the kernel toolchain needs only NumPy and NVRTC.  An installed
    ``cupyconv`` is never used: the kernels must come from these sources.
    """
    for name in [n for n in sys.modules if n == "cupyconv" or n.startswith("cupyconv.")]:
        del sys.modules[name]
    stub = types.ModuleType("cupyconv")
    stub.__path__ = [str(HERE / "cupyconv")]
    stub.__file__ = str(HERE / "cupyconv" / "__init__.py")
    sys.modules["cupyconv"] = stub
    return importlib.import_module("cupyconv._compile.packing")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class BuildPy(build_py):
    """``build_py`` that ships ``cuda_src/`` and packs prebuilt kernels (wheel builds only)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return                              # pip install -e .: the checkout is used as is
        package = Path(self.build_lib) / "cupyconv"
        sources = package / "cuda_src"
        shutil.rmtree(sources, ignore_errors=True)
        shutil.copytree(HERE / "cuda_src", sources,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o"))
        if "bdist_wheel" in self.distribution.commands:
            self._pack(package / "_prebuilt")

    @staticmethod
    def _no_kernels(dest: Path, reason: str) -> None:
        """An index without entries that says why (``python -m cupyconv info`` prints it)."""
        dest.mkdir(parents=True)
        (dest / "index.json").write_text(json.dumps(
            {"format": 1, "reason": reason, "entries": [], "groups": 0, "kernels": 0}))
        _log(f"cupyconv: {reason}; building a wheel WITHOUT prebuilt kernels (each "
             "kernel group is compiled by NVRTC on first use)")

    def _pack(self, dest: Path) -> None:
        shutil.rmtree(dest, ignore_errors=True)
        if not os.environ.get("CUPYCONV_PREBUILT", "").strip():   # a default build: seconds
            BuildPy._no_kernels(dest, DEFAULT_BUILD)
            return
        try:
            packing = _packing_module()
        except ImportError as exc:              # no NumPy in an isolated sdist build
            BuildPy._no_kernels(dest, "built without NVRTC: the kernel toolchain did not import "
                                   f"({exc})")
            return
        spec = packing.spec_from_settings(packing.settings_from_env())
        if spec is not None and spec.jobs is None:
            spec = dataclasses.replace(spec, jobs=usable_cores())
            _log(f"cupyconv: {spec.jobs} NVRTC programs at a time (one per usable core; "
                 "CUPYCONV_PREBUILT_JOBS to change)")
        packing.pack(dest, spec, progress=True, log=_log)


if __name__ == "__main__":          # setuptools runs this file as __main__; tests import it
    setup(cmdclass={"build_py": BuildPy})
