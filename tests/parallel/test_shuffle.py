"""The out-of-core row shuffle behind the ClusterIndex build (dqkm.parallel.shuffle)."""

import os

import dask
import dask.array as da
import numpy as np
import pytest

from dqkm.parallel import shuffle
from dqkm.parallel.neighbors import build_index


@pytest.mark.parametrize("out_rows", [1, 7, 64, 1000])
def test_permute_rows_equals_take_on_uneven_chunks(tmp_path, out_rows):
    rng = np.random.default_rng(0)
    X = rng.random((257, 5)).astype(np.float32)
    Xd = da.from_array(X, chunks=((100, 1, 0, 56, 100), 5))
    order = np.argsort(rng.integers(0, 9, 257), kind="stable")
    spill = shuffle.spill_directory(tmp_path / "index.zarr")
    out = shuffle.permute_rows(Xd, order, spill, out_rows=out_rows)
    assert out.chunks[0][0] == min(out_rows, 257)
    np.testing.assert_array_equal(out.compute(scheduler="threads"), X[order])
    shuffle.remove_spill(spill, Xd.numblocks[0])
    assert not os.path.exists(spill)


def test_output_blocks_read_no_block_of_x(tmp_path):
    """Bounded memory by construction: phase 2 reads the spill files, never X's
    blocks, so no task waits for pieces of every input block in memory."""
    X = da.random.random((400, 3), chunks=50)
    spill = shuffle.spill_directory(tmp_path / "i.zarr")
    out = shuffle.permute_rows(X, np.random.default_rng(1).permutation(400), spill,
                               out_rows=64)
    x_keys = {k for k in dict(X.__dask_graph__()) if isinstance(k, tuple) and k[0] == X.name}
    assert not x_keys & set(dict(out.__dask_graph__()))
    shuffle.remove_spill(spill, X.numblocks[0])


def test_missing_spill_files_raise_instead_of_unset_rows(tmp_path):
    X = da.from_array(np.arange(40.0).reshape(20, 2), chunks=5)
    spill = shuffle.spill_directory(tmp_path / "i.zarr")
    out = shuffle.permute_rows(X, np.arange(20)[::-1], spill, out_rows=4)
    shuffle.remove_spill(spill, X.numblocks[0])
    with pytest.raises(OSError, match="spill directory"):
        out.compute(scheduler="sync")


def test_remove_spill_deletes_only_its_own_files(tmp_path):
    spill = shuffle.spill_directory(tmp_path / "i.zarr")
    open(os.path.join(spill, "part-000000.npy"), "w").close()
    open(os.path.join(spill, "user.txt"), "w").close()
    shuffle.remove_spill(spill, 1)
    assert sorted(os.listdir(spill)) == ["user.txt"]


def test_build_index_to_zarr_leaves_no_spill_and_matches_memory(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.random((300, 4))
    labels = rng.integers(0, 6, 300)
    Xd = da.from_array(X, chunks=70)
    mem, _ = build_index(Xd, labels, 6)
    with dask.config.set(scheduler="threads"):
        disk, _ = build_index(Xd, labels, 6, path=tmp_path / "idx.zarr")
    assert sorted(os.listdir(tmp_path)) == ["idx.zarr"]
    for c in range(6):
        for a, b in zip(mem.cluster(c), disk.cluster(c)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_phase_one_without_its_destinations_file_raises_and_remove_spill_takes_it(tmp_path):
    """A phase-1 task whose destinations file is missing (a spill directory removed, or
    not shared with its worker) or shorter than its rows raises StoreError naming the
    directory, never spills rows to made-up places; remove_spill deletes that file
    with the others and nothing else."""
    from dqkm.data.spill import block_destinations, save_destinations
    from dqkm.exceptions import StoreError

    spill = shuffle.spill_directory(tmp_path / "i.zarr")
    with pytest.raises(StoreError, match="lacks the rows' destinations"):
        block_destinations(spill, 0, 4)
    save_destinations(spill, np.arange(6)[::-1])
    np.testing.assert_array_equal(block_destinations(spill, 2, 5), [3, 2, 1])
    with pytest.raises(StoreError, match="holds 6 rows; input rows 4..8"):
        block_destinations(spill, 4, 8)
    open(os.path.join(spill, "user.txt"), "w").close()
    shuffle.remove_spill(spill, 1)
    assert sorted(os.listdir(spill)) == ["user.txt"]
