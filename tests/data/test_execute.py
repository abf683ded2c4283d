"""A failed or interrupted write stops its tasks and waits for the running ones before
its temporary store is removed (:func:`dqkm.data.execute.compute_settled`)."""

import os
import subprocess
import sys
import textwrap
import threading

import dask.array as da
import numpy as np
import pytest
import zarr

from dqkm.data.atomic import AtomicTarget
from dqkm.data.execute import compute_settled


class _WaitingTarget:
    """A Zarr array as the target of ``da.store``: the write of block 0 signals that it
    runs, waits until the driver has cancelled the write (at most 5 s: a driver that
    does not cancel has removed its temporary store by then), writes, and sets the
    distributed Event ``written``."""

    def __init__(self, z):
        self.z = z

    def __setitem__(self, index, value):
        from distributed import Event

        if index[0].start == 0:
            Event("started").set()
            Event("cancelled").wait(5)
        self.z[index] = value
        if index[0].start == 0:
            Event("written").set()


def _block(b, block_info=None):
    """Block 1 fails once the write of block 0 runs."""
    from distributed import Event

    if block_info[0]["chunk-location"][0] == 1:
        Event("started").wait(60)
        raise ValueError("block 1 cannot be computed")
    return b


def test_failed_distributed_write_waits_for_running_tasks(tmp_path, monkeypatch):
    """A task fails while another one writes its block: the driver cancels the
    write and removes its temporary store only after the running write has written
    and ended — no hidden ``.name.tmp-*`` is recreated behind it."""
    from distributed import Client, Event, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        cancel = client.cancel

        def spy(futures, *args, **kwargs):
            cancel(futures, *args, **kwargs)
            Event("cancelled").set()

        monkeypatch.setattr(client, "cancel", spy)
        x = da.from_array(np.arange(8.0).reshape(4, 2), chunks=(2, 2))
        x = x.map_blocks(_block, dtype=x.dtype)
        with pytest.raises(ValueError, match="block 1 cannot be computed"):
            with AtomicTarget(tmp_path / "x.zarr", overwrite=False) as t:
                z = zarr.create_array(t.tmp, shape=x.shape, chunks=(2, 2), dtype=x.dtype)
                compute_settled(da.store(x, _WaitingTarget(z), lock=False, compute=False))
        assert Event("written").wait(60)  # the running write did write, then ended
        assert os.listdir(tmp_path) == []


def test_failed_threaded_write_waits_for_running_tasks(tmp_path):
    """With the threaded scheduler, a task fails while another one writes its
    block: the running write ends before the temporary store is
    removed, and nothing is left."""
    started, failed = threading.Event(), threading.Event()

    def block(b, block_info=None):
        if block_info[0]["chunk-location"][0] == 0:
            started.wait(20)
            failed.set()
            raise ValueError("block 0 cannot be computed")
        return b

    written = []

    class Target:
        def __setitem__(self, index, value):
            if index[0].start == 2:  # block 1's write runs when block 0 fails
                started.set()
                failed.wait(20)
            z[index] = value
            written.append(index[0].start)

    x = da.from_array(np.zeros((8, 2)), chunks=(2, 2)).map_blocks(block, dtype=float)
    with pytest.raises(ValueError, match="block 0 cannot be computed"):
        with AtomicTarget(tmp_path / "x.zarr", overwrite=False) as t:
            z = zarr.create_array(t.tmp, shape=x.shape, chunks=(2, 2), dtype=x.dtype)
            compute_settled(da.store(x, Target(), lock=False, compute=False))
    assert 2 in written  # block 1 (rows 2:4), running at the failure
    assert os.listdir(tmp_path) == []


_ZARR_THREAD_INTERRUPTED = textwrap.dedent("""
    import os, sys
    import dask.array as da
    import zarr.storage
    from dqkm.data.stores import save_array

    set_ = zarr.storage.LocalStore.set

    async def interrupted(self, key, value, *args, **kwargs):
        if key.endswith("c/3/0"):  # raised in Zarr's I/O thread, which it ends
            raise KeyboardInterrupt
        return await set_(self, key, value, *args, **kwargs)

    zarr.storage.LocalStore.set = interrupted
    try:
        save_array(da.ones((100, 4), chunks=(10, 4)), os.path.join(sys.argv[1], "x.zarr"))
    except KeyboardInterrupt:
        print("interrupted:", os.listdir(sys.argv[1]))
""")


def test_interrupt_in_a_thread_of_a_threaded_write_ends_it(tmp_path):
    """A KeyboardInterrupt that ends a thread the write's tasks wait on (Zarr's I/O
    thread) ends ``save_array`` with that interrupt and leaves nothing; before, the
    tasks waited for that thread forever.  Run in a subprocess: Zarr's I/O thread
    stays dead in the process that lost it."""
    env = {**os.environ, "DASK_DQKM__SETTLE_TIMEOUT": "1"}
    p = subprocess.run([sys.executable, "-c", _ZARR_THREAD_INTERRUPTED, str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "interrupted: []" in p.stdout, p.stdout + p.stderr
    assert os.listdir(tmp_path) == []
