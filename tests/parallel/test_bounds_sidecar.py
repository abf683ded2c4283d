"""The bounds kept in files (BoundedPasses with X re-read): each pass rewrites one
Zarr array's chunks with a stamp no pass had; a chunk of another stamp (written
by a retried task of the same pass, by a pass that failed, or late by a worker
that outlived its pass) is no state: the block is scanned in full, and every
step stays Lloyd's."""

import os

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs

from dqkm.data import row_state
from dqkm.kernels.bounds import center_geometry
from dqkm.kernels.lloyd import lloyd_partials
from dqkm.parallel import bounds as pbounds
from dqkm.parallel.bounds import BoundedPasses, _bounded_chunk
from dqkm.parallel.lloyd import lloyd_step


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(4000, 6, centers=10, cluster_std=2.0, random_state=0)
    return X.astype(np.float32)


def _spec(array, read, write):
    return {"kind": "hamerly", "with_moments": False, "array": array, "read": read,
            "write": write}


def test_a_task_retried_after_it_wrote_reads_the_spare_or_scans_in_full(tmp_path, blobs):
    """A task retried after it rewrote its chunk finds its own pass's stamp there,
    where it expects the previous pass's: that is no state.  The chunk it replaced
    (the spare) still holds the previous pass's, which it uses; retried once more
    (the spare now rewritten too), it scans the block in full.  Every try gives
    the same partials (Lloyd's)."""
    block, C = blobs[:700], blobs[:8].copy()
    array = row_state.create_state_array(row_state.create_state_directory(tmp_path), [700], 3)
    half, shift = center_geometry(C)
    _, first = _bounded_chunk(block, None, {"centers": C, "shift": shift, "half_sep": half},
                              None, _spec(array, None, 1), 0, 0)
    assert first["fresh_blocks"] == 1
    C2 = (C + 0.01).astype(np.float32)
    half, shift = center_geometry(C2, C)
    geom = {"centers": C2, "shift": shift, "half_sep": half}
    tries = [_bounded_chunk(block, None, geom, None, _spec(array, 1, 2), 0, 0)[1]
             for _ in range(3)]
    # the bounds of pass 1: from the chunk, then from the spare; then none is left
    assert [t["fresh_blocks"] for t in tries] == [0, 0, 1]
    assert tries[0]["skipped"] == tries[1]["skipped"] > 0 and tries[2]["skipped"] == 0
    sums, counts, obj = lloyd_partials(block, C2)[:3]
    for part in tries:
        np.testing.assert_array_equal(part["sums"], sums)
        np.testing.assert_array_equal(part["counts"], counts)
        assert part["objective"] == obj
    # what the retries wrote is pass 2's state
    assert row_state.read_block_state(array, 0, 700, 2) is not None
    assert row_state.read_block_state(array, 0, 700, 1) is None


def _failing_after(n_blocks):
    """A block task that does the real work for ``n_blocks`` blocks, then raises."""
    real, done = pbounds._sidecar_chunk, []

    def chunk(*args):
        if len(done) == n_blocks:
            raise RuntimeError("injected failure")
        done.append(args[-2])
        return real(*args)
    return chunk


def _chunk_bytes(array, i):
    with open(os.path.join(array.path, f"c.{i}.0.0"), "rb") as f:
        return f.read()


def _put_chunk(array, i, raw):
    tmp = os.path.join(array.path, f"late-write-{i}")
    with open(tmp, "wb") as f:
        f.write(raw)
    os.replace(tmp, os.path.join(array.path, f"c.{i}.0.0"))


def test_a_failed_pass_gives_its_stamp_up(monkeypatch, tmp_path, blobs):
    """A pass that fails after some blocks wrote their chunks (for other centers)
    leaves the bounds of the last completed pass in use: the blocks it rewrote
    are scanned in full by the next pass, which writes with a new stamp, so the
    failed pass's chunks, written again late (a worker that outlived its pass),
    are no state either; every step equals Lloyd's."""
    X = base = da.from_array(blobs, chunks=700)
    passes = BoundedPasses(X, "hamerly", in_memory=False, directory=str(tmp_path))
    kw = dict(tol=1e-4)
    C = blobs[np.random.default_rng(0).choice(len(blobs), 8, replace=False)]
    with dask.config.set(scheduler="synchronous"):
        new, rec, tol_abs = passes.step(C, 1, tol_abs=None, **kw)
        ref, ref_rec, _ = lloyd_step(base, C, 1, tol_abs=None, **kw)
        np.testing.assert_array_equal(new, ref)
        with monkeypatch.context() as m:
            m.setattr(pbounds, "_sidecar_chunk", _failing_after(2))
            with pytest.raises(RuntimeError, match="injected"):
                passes.step((new + 5.0).astype(np.float32), 2, tol_abs=tol_abs, **kw)
        sizes = X.chunks[0]
        late = {i: _chunk_bytes(passes.array, i) for i in range(6)
                if row_state.read_block_state(passes.array, i, sizes[i], 2) is not None}
        assert len(late) == 2  # the blocks the failed pass rewrote (for its centers)
        centers = new
        # pass 2 (stamp 3) finds pass 1's state of the rewritten blocks in their spares
        for it, lost in [(2, 0), (3, len(late))]:
            new, rec, _ = passes.step(centers, it, tol_abs=tol_abs, **kw)
            ref, ref_rec, _ = lloyd_step(base, centers, it, tol_abs=tol_abs, **kw)
            np.testing.assert_array_equal(new, ref)
            assert rec["objective"] == ref_rec["objective"]
            assert rec["blocks_without_bounds"] == lost
            for i, raw in late.items():  # the failed pass's workers write again, late
                _put_chunk(passes.array, i, raw)
            centers = new
        new, rec, _ = passes.step(centers, 4, tol_abs=tol_abs, **kw)
        assert rec["blocks_without_bounds"] == len(late)
        np.testing.assert_array_equal(new, lloyd_step(base, centers, 4, tol_abs=tol_abs, **kw)[0])
    passes.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_one_array_per_fit_rewritten_in_place(tmp_path, blobs):
    """The passes rewrite the chunks of one array (no array per pass): between
    passes the state directory holds it alone, its chunks stamped by the last
    pass, and close() leaves nothing."""
    X = da.from_array(blobs, chunks=1000)
    passes = BoundedPasses(X, "elkan", in_memory=False, directory=str(tmp_path))
    centers, tol_abs = blobs[:8], None
    for it in range(1, 5):
        centers, rec, tol_abs = passes.step(centers, it, tol=1e-4, tol_abs=tol_abs)
        (state_dir,) = tmp_path.iterdir()
        assert os.listdir(state_dir) == ["state"]
        assert passes.holds == passes.stamp == it
        assert rec["blocks_without_bounds"] == (4 if it == 1 else 0)
        for i in range(4):
            state = row_state.read_block_state(passes.array, i, 1000, it)
            assert state is not None and state.shape == (1000, 2 + 8)
    passes.close()
    assert list(tmp_path.iterdir()) == []
