"""cupyconv.dask under worker loss and out-of-memory blocks, on a 2-process cluster.

A ``LocalCluster`` of two worker processes, each under a ``Nanny``:

- a worker killed (SIGKILL) while it runs a cupyconv block: the Nanny restarts it, the
  scheduler reruns the lost blocks, and the result equals the in-memory one, every
  block present (docs/dask.md "Worker loss");
- a block that raises ``MemoryError``: the error names the block and the remedy, and
  a new computation on the same cluster, once memory is back, completes.

Workers are made slow or short of memory from inside (``Client.run`` patches the worker
processes), so the timing is deterministic; every wait has a limit.
"""
from __future__ import annotations

import logging
import os
import signal
import time

import numpy as np
import pytest

from cupyconv import ndimage as ndi
from limits import child_limit

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dndi = pytest.importorskip("cupyconv.dask.ndimage")

#: 21 taps: longer than the passes the CPU path runs as a tap loop without the memory
#: check of the automatic choice (cupyconv.ndimage.common.LINE_TAPS)
SIGMA = 2.5


@pytest.fixture(scope="module")
def client():
    limit = child_limit()
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None, silence_logs=logging.CRITICAL,
                                  timeout=limit) as cluster, \
            distributed.Client(cluster, timeout=limit) as c:
        assert all(isinstance(n, distributed.Nanny) for n in cluster.workers.values())
        yield c


def _image():
    return np.random.default_rng(7).standard_normal((8, 48, 40))


def _lazy(x, chunks=(1, 24, 40)):
    return dndi.gaussian_filter(da.from_array(x, chunks=chunks), SIGMA)


def _executing_cupyconv_block(client):
    """``{worker address: pid}`` of the workers now inside a (slowed) cupyconv block."""
    def running():
        import cupyconv.ndimage as nd
        return os.getpid() if getattr(nd, "blocks_running", 0) else None
    return {a: pid for a, pid in client.run(running).items() if pid}


def test_worker_killed_mid_block_recomputes_everything(client):
    x = _image()
    ref = ndi.gaussian_filter(x, SIGMA)

    def slow_blocks():                    # in each worker process: every block takes 1 s
        import cupyconv.ndimage as nd
        fast = nd.gaussian_filter

        def slow(*args, **kwargs):
            nd.blocks_running = getattr(nd, "blocks_running", 0) + 1
            try:
                time.sleep(1.0)
                return fast(*args, **kwargs)
            finally:
                nd.blocks_running -= 1
        nd.gaussian_filter = slow

    client.run(slow_blocks)
    before = set(client.run(os.getpid).values())
    future = client.compute(_lazy(x))
    deadline = time.monotonic() + child_limit(start_s=10)
    victims = {}
    while not victims and time.monotonic() < deadline:
        victims = _executing_cupyconv_block(client)
        time.sleep(0.05)
    assert victims, "no cupyconv block ever ran"
    address, pid = next(iter(victims.items()))
    os.kill(pid, signal.SIGKILL)          # mid-block: the block sleeps inside cupyconv
    got = future.result(timeout=child_limit())
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    client.wait_for_workers(2, timeout=child_limit())
    after = set(client.run(os.getpid).values())
    assert pid in before and pid not in after       # the Nanny started a new process


def test_memory_error_names_the_block_and_the_cluster_stays_usable(client):
    x = _image()
    client.wait_for_workers(2, timeout=child_limit())

    def short_of_memory():                # cupyconv's own check refuses every algorithm
        import cupyconv
        from cupyconv.backends.numpy import NumpyBackend
        NumpyBackend._saved_available = NumpyBackend.available_memory
        NumpyBackend.available_memory = lambda self: 1024
        cupyconv.clear_caches()           # no choice or compiled call of the other test

    def memory_back():
        import cupyconv
        from cupyconv.backends.numpy import NumpyBackend
        NumpyBackend.available_memory = NumpyBackend._saved_available
        cupyconv.clear_caches()

    client.run(short_of_memory)
    # keys of their own: the scheduler may still hold the other test's results
    future = client.compute(_lazy(x, chunks=(4, 24, 40)))
    try:
        with pytest.raises(MemoryError) as info:
            future.result(timeout=child_limit())
    finally:
        client.run(memory_back)
    text = str(info.value)
    assert "cupyconv.ndimage.gaussian_filter" in text and "on block (" in text
    assert "rechunk" in text and "shape (" in text
    # the scheduler keeps the failed keys' error while they are referenced: a new graph
    got = client.compute(_lazy(x, chunks=(2, 16, 40))).result(timeout=child_limit())
    np.testing.assert_allclose(got, ndi.gaussian_filter(x, SIGMA), rtol=0, atol=1e-12)
    assert len(client.scheduler_info()["workers"]) == 2
