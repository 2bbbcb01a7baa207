"""The API reference (Sphinx + numpydoc, ``docs/conf.py``) builds without a warning.

It renders the docstrings of the public API (``cupyconv``, ``cupyconv.ndimage``,
``cupyconv.grad``, ``cupyconv.dask``, ``cupyconv.config``, ``cupyconv.torch``) and shows the committed
benchmark plots; a broken numpydoc section, a missing image or a duplicated object
fails here (``-W``: warnings are errors).  ~10 s on the 2-core VM.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytest.importorskip("sphinx", reason="the test extra installs sphinx")
pytest.importorskip("numpydoc", reason="the test extra installs numpydoc")


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q",
                           "-b", "html", str(DOCS), str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert not proc.stderr.strip(), proc.stderr[-5000:]
    return out


#: page -> objects it must document (one per public name; the lists are the modules' own).
def _expected():
    import cupyconv
    import cupyconv.dask
    import cupyconv.ndimage
    top = [n for n in cupyconv.__all__ if n not in ("config", "grad", "ndimage", "__version__")]
    return {"cupyconv": ["cupyconv." + n for n in top],
            "ndimage": ["cupyconv.ndimage." + n for n in cupyconv.ndimage.__all__],
            "dask": ["cupyconv.dask." + n for n in cupyconv.dask.__all__],
            "grad": ["cupyconv.grad.convolve_vjp", "cupyconv.grad.correlate_vjp"],
            **_torch_page()}


def _torch_page():
    """The ``cupyconv.torch`` page's names where torch is installed (the page is empty
    without it)."""
    try:
        import cupyconv.torch
    except ImportError:
        return {}
    return {"torch": ["cupyconv.torch." + n for n in cupyconv.torch.__all__]}


def test_every_public_name_is_documented(html):
    for page, names in _expected().items():
        text = (html / "api" / f"{page}.html").read_text()
        ids = set(re.findall(r'id="([^"]+)"', text))
        assert [n for n in names if n not in ids] == [], page


def test_numpydoc_sections_are_rendered(html):
    text = (html / "api" / "cupyconv.html").read_text()
    assert "Parameters" in text and "Returns" in text
    assert "jax.lax.padtype_to_pads" in text               # conv's padding="same" rule
    config = (html / "api" / "config.html").read_text()
    assert "workspace_limit" in config and "autotune" in config


def test_benchmark_plots_are_embedded(html):
    text = (html / "api" / "benchmarks.html").read_text()
    images = re.findall(r'<img[^>]+src="([^"]+)"', text)
    assert len(images) == 4, images
    for src in images:
        assert (html / "api" / src).resolve().is_file(), src
