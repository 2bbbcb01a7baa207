"""Sphinx configuration of cupyconv's API reference (``docs/``).

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (the ``docs``
extra: ``pip install -e ".[docs]"``).  The test suite builds it with
warnings as errors (``tests/docs/test_api_reference.py``).  The pages are
reStructuredText (``index.rst``, ``api/``) and the user guide (``guide.md``, through
MyST); the other Markdown guides beside them are read on their own (GitHub renders
them) and linked from the index.
"""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import cupyconv  # noqa: E402

project = "cupyconv"
author = "the cupyconv developers"
copyright = "2026, the cupyconv developers"
release = version = cupyconv.__version__

extensions = ["sphinx.ext.autodoc", "numpydoc", "myst_parser"]
root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
# The user guide is the one Markdown page rendered here (MyST); the other guides are read
# on their own, so its links to them stay file links.
include_patterns = ["index.rst", "api/*.rst", "guide.md"]
suppress_warnings = ["myst.xref_missing"]
html_theme = "alabaster"

autodoc_default_options = {"members": True}   # automodule: the module's __all__
autodoc_typehints = "none"                 # the numpydoc sections say the types
numpydoc_show_class_members = False        # methods are documented by :members:
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
nitpicky = False
