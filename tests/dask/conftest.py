"""Fixtures for the cupyconv.dask tests (not collected when Dask is missing)."""
import pytest

try:
    import dask
except ImportError:          # the 'dask' extra is not installed
    dask = None
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True)
def synchronous_scheduler():
    """Run graphs in the test's thread: deterministic and cheap on 2 cores."""
    if dask is None:
        yield
        return
    with dask.config.set(scheduler="synchronous"):
        yield
