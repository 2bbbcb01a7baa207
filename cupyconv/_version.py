"""The package version (one place; the cache paths and ``__version__`` read it)."""
__version__ = "0.1.0"
