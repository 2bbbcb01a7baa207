"""The package metadata a registry would show: license file, classifiers, keywords.

The metadata is produced by the project's own build backend
(``prepare_metadata_for_build_wheel``, as pip does before a build), not read
back from ``pyproject.toml`` alone, so a key setuptools ignores shows up here.
"""
from __future__ import annotations

import email
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def metadata(tmp_path_factory):
    out = tmp_path_factory.mktemp("metadata")
    code = ("import sys; sys.path.insert(0, 'build_backend'); import cupyconv_build as b; "
            f"print(b.prepare_metadata_for_build_wheel({str(out)!r}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dist_info = out / proc.stdout.strip().splitlines()[-1]
    return email.message_from_string((dist_info / "METADATA").read_text()), dist_info


def test_license_file_is_bsd_3_clause_and_shipped(metadata):
    meta, dist_info = metadata
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    text = (dist_info / "licenses" / "LICENSE").read_text()
    assert text == (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License")
    assert "Copyright (c) 2026, the cupyconv developers" in text
    assert "Neither the name of the copyright holder" in text        # clause 3


def test_classifiers_are_valid_trove_classifiers(metadata):
    trove = pytest.importorskip("trove_classifiers")
    meta, _ = metadata
    classifiers = meta.get_all("Classifier")
    assert "Environment :: GPU :: NVIDIA CUDA :: 12" in classifiers
    assert [c for c in classifiers if c not in trove.classifiers] == []
    # PEP 639: the SPDX expression replaces License :: classifiers (uploads refuse both)
    assert not [c for c in classifiers if c.startswith("License ::")]


def test_keywords_and_no_made_up_urls(metadata):
    meta, _ = metadata
    keywords = meta["Keywords"].split(",")
    assert {"convolution", "cuda", "cupy", "n-dimensional"} <= set(keywords)
    assert meta.get_all("Project-URL") is None        # none until the project has a public one
