"""The per-row state sidecar (dqkm.data.row_state): one Zarr array per fit, each
block's chunk overwritten by every pass through a temporary file, stamped with
the pass that wrote it; a chunk of another stamp, torn or of another size is no
state, and removal deletes exactly the files the sidecar names."""

import os
import struct

import numpy as np
import pytest

from dqkm.data import row_state


def _state(n, width, value, dtype=np.float32):
    return (np.arange(n * width, dtype=np.float64).reshape(n, width) + value).astype(dtype)


@pytest.fixture
def array(tmp_path):
    d = row_state.create_state_directory(tmp_path)
    return row_state.create_state_array(d, (5, 0, 3, 7), 3, "float32")


def test_round_trip_of_irregular_blocks_is_a_zarr_array_chunk_aligned_with_x(array):
    import zarr

    chunks = (5, 0, 3, 7)
    for i, n in enumerate(chunks):
        assert row_state.write_block_state(array, i, _state(n, 3, 10 * i), stamp=7)
    for i, n in enumerate(chunks):
        got = row_state.read_block_state(array, i, n, 7)
        np.testing.assert_array_equal(got, _state(n, 3, 10 * i))
        assert got.dtype == np.float32 and not got.flags.writeable
    # Zarr reads it: chunk i = header row, then block i's rows, then the fill value
    z = zarr.open_array(array.path, mode="r")
    assert z.shape == (4, 1 + 7, 3) and z.chunks == (1, 1 + 7, 3)
    assert z.attrs["row_chunks"] == list(chunks) and z.attrs["header_rows"] == 1
    for i, n in enumerate(chunks):
        assert struct.unpack("<QI", z[i, 0].tobytes()) == (7, n)
        np.testing.assert_array_equal(z[i, 1:1 + n], _state(n, 3, 10 * i))
        assert np.isnan(z[i, 1 + n:]).all()
    assert sorted(os.listdir(array.path)) == sorted(
        ["zarr.json"] + [f"c.{i}.0.0" for i in range(4)])


def test_a_chunk_of_another_stamp_is_no_state(array):
    """Write pass g's state, ask for pass g + 1's (or g − 1's): no state."""
    assert row_state.write_block_state(array, 2, _state(3, 3, 1.0), stamp=4)
    assert row_state.read_block_state(array, 2, 3, 5) is None
    assert row_state.read_block_state(array, 2, 3, 3) is None
    np.testing.assert_array_equal(row_state.read_block_state(array, 2, 3, 4), _state(3, 3, 1.0))
    # overwritten by the next pass: the chunk replaced is the spare (a task retried
    # after its write reads the previous pass's state there), then gone
    assert row_state.write_block_state(array, 2, _state(3, 3, 2.0), stamp=5)
    np.testing.assert_array_equal(row_state.read_block_state(array, 2, 3, 5), _state(3, 3, 2.0))
    np.testing.assert_array_equal(row_state.read_block_state(array, 2, 3, 4), _state(3, 3, 1.0))
    assert row_state.write_block_state(array, 2, _state(3, 3, 3.0), stamp=6)
    assert row_state.read_block_state(array, 2, 3, 4) is None
    np.testing.assert_array_equal(row_state.read_block_state(array, 2, 3, 5), _state(3, 3, 2.0))
    assert row_state.read_block_state(array, 2, 3, 7) is None
    # the writes left no temporary file
    assert sorted(os.listdir(array.path)) == ["c.2.0.0", "c.2.0.0.dqkm-spare", "zarr.json"]


def test_a_torn_missing_or_resized_chunk_is_no_state(array):
    assert row_state.write_block_state(array, 3, _state(7, 3, 0.0), stamp=1)
    path = os.path.join(array.path, "c.3.0.0")
    raw = open(path, "rb").read()
    assert row_state.read_block_state(array, 3, 6, 1) is None  # not the block's rows
    assert row_state.read_block_state(array, 0, 5, 1) is None  # never written
    for torn in (raw[:-1], raw[:20], raw[:40] + bytes([raw[40] ^ 1]) + raw[41:], raw + b"x"):
        with open(path, "wb") as f:
            f.write(torn)
        assert row_state.read_block_state(array, 3, 7, 1) is None
    with open(path, "wb") as f:
        f.write(raw)
    np.testing.assert_array_equal(row_state.read_block_state(array, 3, 7, 1), _state(7, 3, 0.0))


def test_the_stamp_is_checksummed_with_the_rows(array):
    """Rewriting the stamp of a chunk (without its checksum) makes it no state."""
    assert row_state.write_block_state(array, 0, _state(5, 3, 0.0), stamp=1)
    path = os.path.join(array.path, "c.0.0.0")
    raw = bytearray(open(path, "rb").read())
    raw[:8] = struct.pack("<Q", 2)
    with open(path, "wb") as f:
        f.write(raw)
    assert row_state.read_block_state(array, 0, 5, 2) is None
    assert row_state.read_block_state(array, 0, 5, 1) is None


def test_removal_deletes_exactly_what_the_sidecar_names(tmp_path, array):
    directory = os.path.dirname(array.path)
    for i, n in enumerate((5, 0, 3, 7)):
        row_state.write_block_state(array, i, _state(n, 3, 0.0), stamp=1)
    # a write cut short (a killed worker) leaves its temporary file: removed too
    open(os.path.join(array.path, "c.1.0.0.dqkm-tmp-0123abcd"), "wb").close()
    # files dqkm did not write: kept, and the directories holding them
    open(os.path.join(array.path, "c.9.0.0"), "wb").close()  # not a block of this X
    open(os.path.join(array.path, "notes.txt"), "wb").close()
    open(os.path.join(directory, "mine.txt"), "wb").close()
    (tmp_path / "beside.txt").write_text("not dqkm's")
    row_state.remove_block_states(array, [2])
    assert row_state.read_block_state(array, 2, 3, 1) is None  # a lost chunk: no state
    row_state.remove_state_array(array, 4)
    row_state.remove_state_directory(directory)
    assert sorted(os.listdir(array.path)) == ["c.9.0.0", "notes.txt"]
    assert sorted(os.listdir(directory)) == ["mine.txt", "state"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["beside.txt", os.path.basename(directory)])
    # once only dqkm's files were there, nothing is left
    for name in ("c.9.0.0", "notes.txt"):
        os.remove(os.path.join(array.path, name))
    os.remove(os.path.join(directory, "mine.txt"))
    row_state.remove_state_array(array, 4)
    row_state.remove_state_directory(directory)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beside.txt"]


def test_an_existing_array_is_not_overwritten_and_a_missing_one_is_not_written(tmp_path, array):
    directory = os.path.dirname(array.path)
    with pytest.raises(FileExistsError):
        row_state.create_state_array(directory, (5, 0, 3, 7), 3, "float32")
    row_state.remove_state_array(array, 4)
    # the array's directory is not there (a worker on another host): nothing written
    assert row_state.write_block_state(array, 0, _state(5, 3, 0.0), stamp=1) is False
    assert not os.path.exists(array.path)


def test_narrow_rows_get_enough_header_rows_and_float64(tmp_path):
    d = row_state.create_state_directory(tmp_path)
    a = row_state.create_state_array(d, (4, 4, 2), 1, "float64")
    assert a.header == 2 and a.dtype == "<f8"
    for i, n in enumerate((4, 4, 2)):
        assert row_state.write_block_state(a, i, _state(n, 1, i, np.float64), stamp=2 ** 40)
    for i, n in enumerate((4, 4, 2)):
        np.testing.assert_array_equal(row_state.read_block_state(a, i, n, 2 ** 40),
                                      _state(n, 1, i, np.float64))
    with pytest.raises(ValueError, match="shape"):
        row_state.write_block_state(a, 0, np.zeros((5, 1)), stamp=1)  # more rows than a chunk
    with pytest.raises(ValueError, match="dtype"):
        row_state.create_state_array(tmp_path / "other", (4,), 3, "int32")


def test_a_write_reuses_the_file_of_the_pass_before_last(array):
    """The chunk a write replaces is kept as the block's spare, and the write after
    it fills that file (its disk blocks rewritten, not freed and allocated again);
    a spare made longer by someone else is cut to the chunk's length."""
    path = os.path.join(array.path, "c.0.0.0")
    inodes = []
    for stamp in range(1, 6):
        assert row_state.write_block_state(array, 0, _state(5, 3, stamp), stamp)
        inodes.append(os.stat(path).st_ino)
        np.testing.assert_array_equal(row_state.read_block_state(array, 0, 5, stamp),
                                      _state(5, 3, stamp))
    assert inodes[2] == inodes[0] and inodes[3] == inodes[1] and inodes[4] == inodes[2]
    assert inodes[0] != inodes[1]
    with open(path + ".dqkm-spare", "ab") as f:
        f.write(b"longer")
    assert row_state.write_block_state(array, 0, _state(5, 3, 6.0), 6)
    assert os.stat(path).st_ino == inodes[3]
    np.testing.assert_array_equal(row_state.read_block_state(array, 0, 5, 6), _state(5, 3, 6.0))


def test_a_chunk_changed_while_it_is_read_is_no_state(monkeypatch, array):
    """A file rewritten while it is read (a task run twice, one rewriting the file
    the other reads) is no state, even when the bytes read pass the checksum (here
    the same bytes are written again): its change time moved."""
    import time

    assert row_state.write_block_state(array, 3, _state(7, 3, 0.0), stamp=1)
    path = os.path.join(array.path, "c.3.0.0")
    raw = open(path, "rb").read()
    read = os.read
    calls = []

    def read_then_rewrite(fd, n):
        out = read(fd, n)
        if not calls:
            time.sleep(0.05)  # past a coarse clock's tick
            with open(path, "r+b") as f:
                f.write(raw)
        calls.append(n)
        return out

    monkeypatch.setattr(row_state.os, "read", read_then_rewrite)
    assert row_state.read_block_state(array, 3, 7, 1) is None
    monkeypatch.setattr(row_state.os, "read", read)
    np.testing.assert_array_equal(row_state.read_block_state(array, 3, 7, 1), _state(7, 3, 0.0))


def test_short_reads_are_continued(monkeypatch, array):
    """A read call may return fewer bytes than asked (at most about 2 GiB each): the
    chunk is read on, not taken for a torn one."""
    assert row_state.write_block_state(array, 3, _state(7, 3, 0.0), stamp=1)
    read = os.read
    monkeypatch.setattr(row_state.os, "read", lambda fd, n: read(fd, min(n, 10)))
    np.testing.assert_array_equal(row_state.read_block_state(array, 3, 7, 1), _state(7, 3, 0.0))


def test_chunks_are_written_where_the_os_has_no_pwritev(monkeypatch, array):
    """Without ``os.pwritev`` (Windows) the pieces are written one by one, the same bytes."""
    assert row_state.write_block_state(array, 0, _state(5, 3, 1.0), stamp=1)
    with open(os.path.join(array.path, "c.0.0.0"), "rb") as f:
        expect = f.read()
    monkeypatch.delattr(row_state.os, "pwritev")
    for _ in range(2):  # into a new file, then into the spare's file
        assert row_state.write_block_state(array, 0, _state(5, 3, 1.0), stamp=1)
    with open(os.path.join(array.path, "c.0.0.0"), "rb") as f:
        assert f.read() == expect
    np.testing.assert_array_equal(row_state.read_block_state(array, 0, 5, 1), _state(5, 3, 1.0))
