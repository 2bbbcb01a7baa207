"""PEP 517 build backend of cupyconv: setuptools' own, plus NVRTC for a wheel build.

Every hook is :mod:`setuptools.build_meta`'s, except:

* ``get_requires_for_build_wheel`` also asks for NumPy and NVRTC
  (``nvidia-cuda-nvrtc-cu12``) for a **release build**: a wheel built from a
  source checkout with the prebuilt kernels asked for
  (``CUPYCONV_PREBUILT=1 python -m build --wheel``, ``-C prebuilt=1``, or
  ``auto``/``require``), so that the isolated build environment can compile
  them (setup.py, on every usable core).  Any other wheel build asks for
  nothing more and compiles nothing: ``pip install .``, ``pip wheel .`` and
  ``python -m build --wheel`` without the setting, and a wheel built from an
  sdist (``pip install cupyconv-*.tar.gz``), take seconds; their kernels are
  compiled by NVRTC on first use.
* ``build_wheel`` turns the ``--config-settings`` keys ``prebuilt``,
  ``archs``, ``ptx``, ``ranks``, ``dtypes``, ``families`` and ``jobs``
  (optionally ``cupyconv-`` prefixed) into the ``CUPYCONV_PREBUILT*``
  environment variables setup.py reads.

Editable installs and sdists are setuptools' hooks unchanged.
"""
from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (build_editable, build_sdist,  # noqa: F401 - re-exported hooks
                                   get_requires_for_build_editable, get_requires_for_build_sdist,
                                   prepare_metadata_for_build_editable,
                                   prepare_metadata_for_build_wheel)

__all__ = ["build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable",
           "get_requires_for_build_sdist", "get_requires_for_build_wheel",
           "prepare_metadata_for_build_editable", "prepare_metadata_for_build_wheel",
           "SETTINGS", "KERNEL_BUILD_REQUIRES", "from_checkout", "release_build"]

#: ``--config-settings`` key -> environment variable read by setup.py.
SETTINGS = {
    "prebuilt": "CUPYCONV_PREBUILT",
    "archs": "CUPYCONV_PREBUILT_ARCHS",
    "ptx": "CUPYCONV_PREBUILT_PTX",
    "ranks": "CUPYCONV_PREBUILT_RANKS",
    "dtypes": "CUPYCONV_PREBUILT_DTYPES",
    "families": "CUPYCONV_PREBUILT_FAMILIES",
    "jobs": "CUPYCONV_PREBUILT_JOBS",
}
#: What the isolated environment of a wheel build from a checkout gets on top of setuptools.
KERNEL_BUILD_REQUIRES = ["numpy>=1.24", "nvidia-cuda-nvrtc-cu12",
                         "ml_dtypes>=0.4"]     # the bfloat16 kernels (packing.DEFAULT_DTYPES)
_OFF = {"0", "off", "no", "false", "none"}


def _ours(config_settings):
    """Split ``config_settings`` into (our settings, the rest for setuptools)."""
    mine, rest = {}, {}
    for key, value in (config_settings or {}).items():
        bare = key[len("cupyconv-"):] if key.startswith("cupyconv-") else key
        (mine if bare in SETTINGS else rest)[key if bare not in SETTINGS else bare] = value
    return mine, rest


def release_build(config_settings=None) -> bool:
    """Whether the prebuilt kernels are asked for (``prebuilt`` set, and not off).

    Unset is a default build: no kernels, seconds (setup.py says so in the wheel).
    """
    mine, _ = _ours(config_settings)
    mode = str(mine.get("prebuilt", os.environ.get("CUPYCONV_PREBUILT", ""))).strip().lower()
    return bool(mode) and mode not in _OFF


def from_checkout() -> bool:
    """Whether this build runs in a source checkout (an sdist has ``PKG-INFO`` at its root)."""
    return not os.path.exists("PKG-INFO")


def get_requires_for_build_wheel(config_settings=None):
    """setuptools' requirements, plus NumPy and NVRTC for a release build from a checkout."""
    extra = KERNEL_BUILD_REQUIRES if release_build(config_settings) and from_checkout() else []
    return list(_setuptools.get_requires_for_build_wheel(config_settings)) + extra


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """setuptools' wheel build with our ``--config-settings`` as environment variables."""
    mine, rest = _ours(config_settings)
    saved = {var: os.environ.get(var) for var in SETTINGS.values()}
    try:
        for key, value in mine.items():
            os.environ[SETTINGS[key]] = value if isinstance(value, str) else ",".join(map(str, value))
        return _setuptools.build_wheel(wheel_directory, rest or None, metadata_directory)
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
