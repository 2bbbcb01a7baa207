"""Moved into the package as :mod:`cupyconv._bench.timing`, with the rest of the
``python -m cupyconv bench`` suite (it runs from any directory and from an installed
wheel); this name stays importable for the developer benchmarks."""
from cupyconv._bench.timing import *  # noqa: F401,F403 - the moved module's public names
from cupyconv._bench.timing import __all__  # noqa: F401
