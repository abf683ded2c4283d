"""Per-row state written beside re-read data: a Zarr sidecar chunk-aligned with X.

A bound-pruned K-means pass (:mod:`dqkm.parallel.bounds`) over data that is
re-read from its store every pass keeps each row block's labels and bounds on
disk, so that the workers' memory stays bounded by a few chunks.  A fit has
one Zarr array, ``state`` in its state directory, of float32 (or float64)
rows ``(label, upper, lower…)``, with one chunk per row block of X: shape
``(n_blocks, h + max_rows, width)``, chunks ``(1, h + max_rows, width)``;
chunk ``i`` is a header of ``h`` rows (the *stamp* of the pass that wrote it,
a uint64, and the block's number of rows, a uint32, as raw little-endian
bytes; ``h`` is 1 unless a row is narrower than those 12 bytes), then block
``i``'s rows, then the fill value (NaN) up to ``max_rows``.

Every pass overwrites the chunk of each block it assigns: the chunk is
encoded here as Zarr's codecs encode it (bytes, little-endian, then a CRC32C
checksum) into a file of a name of its own, which is then renamed into place,
so the chunk file is never torn, and Zarr reads it as any chunk.  A reader
names the stamp it expects (the pass whose state it wants) and looks in the
block's chunk, then in its spare (below): a chunk that is missing, torn,
unreadable, of another length or number of rows, changed while it was read
(its change time moved) or of another stamp is no state, and where neither
holds the state the caller recomputes the block (for the bounds, with a
plain Lloyd step, which is exact).  The stamp is inside the checksummed
bytes, so it does not depend on the file system's timestamps.  The caller
hands every pass a stamp never used before, also after a pass that failed:
a chunk rewritten by a task of a failed pass or by a worker that outlived
its pass then carries a stamp nobody asks for.

The chunk a write replaces is kept as the block's spare,
``c.i.0.0.dqkm-spare``: a task retried after it rewrote its chunk finds the
state it read the first time there.  The next write fills the spare's file
(renamed to the write's own name first): its disk blocks are rewritten, not
freed and allocated again (a new file per write, or a rename over the
existing chunk, cost the writer several times the bytes written on ext4).
A pass's tasks read the chunks of the pass before and rewrite those of the
pass before that; only a task that runs twice in a pass, or outlives it,
can be reading a file while it is rewritten, and that read is torn: the
checksum, the length and the change time tell it.

Per pass, a block costs one open, read and checksum of its chunk, and one
write and three renames; nothing is created, listed or removed on the
caller's side (the array is created once per fit by
:func:`create_state_array`, with Zarr's own ``zarr.json``; the chunk files
are Zarr's default keys with ``.`` as separator, ``c.i.0.0``, all in the
array's directory, so no directory is made per block).  The workers need no
``zarr.json``: the :class:`StateArray` handed to them says where and how
large every chunk is.

The directory is created by :func:`create_state_directory`;
:func:`remove_state_array` removes only the files named here (the array's
``zarr.json``, the chunks of the blocks, their spares and the temporary
files of their writes) and :func:`remove_state_directory` only directories left empty:
nothing else is deleted, and a directory that holds anything else stays.
"""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
from typing import NamedTuple

import google_crc32c
import numpy as np

__all__ = ["StateArray", "create_state_directory", "create_state_array", "write_block_state",
           "read_block_state", "remove_block_states", "remove_state_array",
           "remove_state_directory"]

_ARRAY = "state"
_TMP = ".dqkm-tmp-"  # a chunk being written: <chunk file>.dqkm-tmp-<random hex>
_SPARE = ".dqkm-spare"  # a block's chunk before its latest: <chunk file>.dqkm-spare
_HEADER = struct.Struct("<QI")  # the stamp, the block's number of rows


class StateArray(NamedTuple):
    """Where a fit's state array is and the shape of its chunks (what the workers
    need to read and write a block's chunk; small, sent with every task).

    Attributes
    ----------
    path : str
        The array's directory.
    rows : int
        Rows of state per chunk (the largest row block; shorter blocks are padded).
    width : int
        Values per row.
    dtype : str
        ``'<f4'`` or ``'<f8'``.
    header : int
        Header rows at the start of every chunk (the stamp and the row count).
    """

    path: str
    rows: int
    width: int
    dtype: str
    header: int

    @property
    def chunk_bytes(self) -> int:
        """Bytes of a chunk before its checksum."""
        return (self.header + self.rows) * self.width * np.dtype(self.dtype).itemsize


def create_state_directory(base=None) -> str:
    """Create a new, empty directory for per-row state under ``base``.

    ``base`` None: Dask's ``temporary-directory`` setting, else the system's
    temporary directory.  It must be visible to every worker (as the data is).
    """
    if base is None:
        import dask

        base = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="dqkm-row-state-", dir=os.fspath(base))


def create_state_array(directory, row_chunks, width, dtype="float32") -> StateArray:
    """Create the (empty) state array of a fit in ``directory``: one chunk per row
    block of X (``row_chunks``: the blocks' numbers of rows), ``width`` values of
    ``dtype`` (float32 or float64) per row.  An existing array is an error
    (``FileExistsError``): nothing is overwritten."""
    import zarr
    from zarr.codecs import Crc32cCodec

    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64; got {dtype}.")
    width = int(width)
    if width < 1:
        raise ValueError(f"width must be a positive number of values per row; got {width}.")
    rows = [int(c) for c in row_chunks]
    top = max([1, *rows])
    header = -(-_HEADER.size // (width * dtype.itemsize))
    path = os.path.join(os.fspath(directory), _ARRAY)
    if os.path.lexists(path):
        raise FileExistsError(f"{path} exists: a state array is never overwritten.")
    zarr.create_array(store=path, shape=(len(rows), header + top, width),
                      chunks=(1, header + top, width), dtype=dtype.name, fill_value=np.nan,
                      compressors=[Crc32cCodec()],
                      chunk_key_encoding={"name": "default", "separator": "."},
                      attributes={"row_chunks": rows, "header_rows": header}, overwrite=False)
    return StateArray(path, top, width, dtype.newbyteorder("<").str, header)


def _chunk_name(index):
    """Zarr v3's default key (separator ``.``) of chunk ``index``."""
    return f"c.{int(index)}.0.0"


def write_block_state(array: StateArray, index, state, stamp) -> bool:
    """Write block ``index``'s state (2-D, ``array.width`` columns, converted to the
    array's dtype: the caller rounds it) with the stamp ``stamp`` (a non-negative
    integer): one whole chunk, into the block's spare (or a new file) under a
    name of its own, renamed into place; the chunk it replaces is the next spare.

    Returns False, writing nothing, when the array's directory does not exist on
    this worker (e.g. a worker on another host): the block then has no state.
    """
    state = np.ascontiguousarray(state, dtype=array.dtype)
    n = state.shape[0]
    if state.ndim != 2 or state.shape[1] != array.width or n > array.rows:
        raise ValueError(f"state must have shape (n_rows ≤ {array.rows}, {array.width}); "
                         f"got {state.shape}.")
    itemsize = state.dtype.itemsize
    head = _HEADER.pack(int(stamp), n)
    pieces = [head + bytes(array.header * array.width * itemsize - len(head)), state.tobytes()]
    if n < array.rows:  # the fill value up to the chunk's shape
        pieces.append(np.full((array.rows - n) * array.width, np.nan, array.dtype).tobytes())
    crc = 0
    for piece in pieces:
        crc = google_crc32c.extend(crc, piece)
    pieces.append(struct.pack("<I", crc))
    target = os.path.join(array.path, _chunk_name(index))
    tmp = f"{target}{_TMP}{os.urandom(8).hex()}"  # one name per write
    fd = _take(target + _SPARE, tmp)
    if fd is None:
        return False
    try:
        try:
            _write_all(fd, pieces)
        finally:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, target + _SPARE)  # the block's previous chunk: the next spare
        os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return True


def _take(spare, tmp):
    """A file named ``tmp``, open for writing: the block's spare chunk renamed
    (a new file cost several times its bytes, and renaming a new file over an
    existing one made ext4 write it out at once), else a new file; None when
    the array's directory does not exist."""
    try:
        os.rename(spare, tmp)
        return os.open(tmp, os.O_WRONLY)
    except FileNotFoundError:
        pass
    try:
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileNotFoundError:
        return None


def _write_all(fd, pieces):
    """Write ``pieces`` from the file's start, all of them, and cut the file there
    if it is longer (a spare is as long as the chunk, unless changed by others)."""
    views = [memoryview(p) for p in pieces]
    at = 0
    while views:
        if hasattr(os, "pwritev"):
            done = os.pwritev(fd, views, at)
        else:  # e.g. Windows: one piece at a time
            os.lseek(fd, at, os.SEEK_SET)
            done = os.write(fd, views[0])
        at += done
        while views and done >= len(views[0]):
            done -= len(views[0])
            views.pop(0)
        if views and done:
            views[0] = views[0][done:]
    if os.fstat(fd).st_size != at:
        os.ftruncate(fd, at)


def read_block_state(array: StateArray, index, n_rows, stamp):
    """The state :func:`write_block_state` wrote for block ``index`` with the stamp
    ``stamp``: a read-only ``(n_rows, width)`` array of the array's (little-endian)
    dtype, from the block's chunk or, if that holds another stamp, from its spare
    (where a task retried after it rewrote the chunk finds the state it read the
    first time); None if neither holds it whole: missing, torn (its CRC32C does
    not match), unreadable, of another length, number of rows or stamp, or
    changed while it was read (then the caller recomputes it)."""
    path = os.path.join(array.path, _chunk_name(index))
    state = _read_chunk(array, path, n_rows, stamp)
    return _read_chunk(array, path + _SPARE, n_rows, stamp) if state is None else state


def _read_chunk(array, path, n_rows, stamp):
    size = array.chunk_bytes
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        body = _read(fd, size)  # two reads: no copy of the body to split off its checksum
        tail = _read(fd, 5)
        after = os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(body) != size or len(tail) != 4 or after.st_size != size + 4 or \
            after.st_ctime_ns != before.st_ctime_ns or \
            int.from_bytes(tail, "little") != google_crc32c.value(body):
        return None
    got_stamp, got_rows = _HEADER.unpack_from(body)
    if got_stamp != stamp or got_rows != n_rows:
        return None
    skip = array.header * array.width * np.dtype(array.dtype).itemsize
    return np.frombuffer(body, dtype=array.dtype, count=n_rows * array.width,
                         offset=skip).reshape(n_rows, array.width)


def _read(fd, n):
    """Up to ``n`` bytes from ``fd``: fewer only at the end of the file (one read
    call returns at most about 2 GiB)."""
    data = os.read(fd, n)
    if len(data) in (0, n):
        return data
    parts = [data]
    while n > sum(map(len, parts)):
        more = os.read(fd, n - sum(map(len, parts)))
        if not more:
            break
        parts.append(more)
    return b"".join(parts)


def _remove_files(path, names):
    """Remove the files ``names`` of directory ``path`` and the temporary files of
    their writes (a write cut short by a killed worker leaves one:
    ``<name>.dqkm-tmp-<random hex>``); the directory is listed once."""
    want = set(names)
    try:
        present = os.listdir(path)
    except OSError:
        return
    for n in present:
        if n in want or (_TMP in n and n.split(_TMP, 1)[0] in want):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(path, n))


def _block_files(blocks):
    """The chunk files of ``blocks`` and their spares."""
    return [name + tail for name in map(_chunk_name, blocks) for tail in ("", _SPARE)]


def remove_block_states(array: StateArray, blocks) -> None:
    """Remove the chunks of the block indices ``blocks`` (with their spares and
    the temporary files of their writes)."""
    _remove_files(array.path, _block_files(blocks))


def remove_state_array(array: StateArray, n_blocks) -> None:
    """Remove the state array: its ``zarr.json``, the chunks of blocks
    ``0 … n_blocks − 1`` and their temporary files, then its directory if that
    leaves it empty (nothing else is deleted)."""
    _remove_files(array.path, ["zarr.json", *_block_files(range(int(n_blocks)))])
    with contextlib.suppress(OSError):
        os.rmdir(array.path)


def remove_state_directory(directory) -> None:
    """Remove the state directory if it is empty (its array removed first by
    :func:`remove_state_array`); one that holds anything else stays."""
    with contextlib.suppress(OSError):
        os.rmdir(directory)
