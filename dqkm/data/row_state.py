"""Per-row state written beside re-read data: a Zarr sidecar chunk-aligned with X.

A bound-pruned K-means pass (:mod:`dqkm.parallel.bounds`) over data that is
re-read from its store every pass keeps each row block's labels and bounds on
disk, so that the workers' memory stays bounded by a few chunks.  Pass ``g``
has a Zarr array of its own, ``g{g:08d}`` in the state directory, of float32
(or float64) rows ``(label, upper, lower…)``; its chunk ``i`` holds exactly X's row block
``i``: shape ``(n_rows, width)`` with chunks ``(c, width)`` when X's row
chunks are regular (all ``c`` but a shorter last one), else shape
``(n_blocks, max_rows, width)`` with one chunk per block.  Pass ``g`` reads
the array of pass ``g − 1`` and writes its own, one whole chunk per block, so
a task run twice (a retried task, a killed worker) reads the same input.

Every chunk is one key of a local Zarr store, written here as Zarr's codecs
encode it (bytes, then a CRC32C checksum) to a temporary file renamed into
place, and read back the same way (Zarr reads the arrays as any other); the
checksum guards the chunk, so a chunk that is missing, torn or unreadable is
no state: its caller recomputes the block (for the bounds, with a plain Lloyd
step, which is exact).

A pass's files cost little beside the pass over X: the tasks read an
array's layout from its ``zarr.json`` (Zarr's own open waits on its event
loop, as long as reading a block's state), a fit's later generations get the
first one's ``zarr.json`` as written by Zarr (it is the same for every pass),
a whole chunk is written from the block's rows without a padded copy, and
the directories of a pass's array are those of the pass before last, emptied
(:func:`retire_generation` keeps them inside the next array as
``.dqkm-spare``; removing a directory cost milliseconds on a file system
mounted with ``discard``).

The directory is created by :func:`create_state_directory` and removed by
:func:`remove_state_directory` with only the files named here (each array's
``zarr.json`` and the chunks of the blocks): nothing else is deleted, and a
directory that holds anything else is left in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid

import google_crc32c
import numpy as np

__all__ = ["create_state_directory", "create_generation", "write_block_state",
           "read_block_state", "remove_block_states", "remove_generation",
           "retire_generation", "remove_state_directory"]

_NAME = "g{:08d}"
_TMP = ".dqkm-tmp-"  # a chunk being written: <chunk file>.dqkm-tmp-<uuid>
_SPARE = ".dqkm-spare"  # an emptied earlier array's directories, for the next array


def create_state_directory(base=None) -> str:
    """Create a new, empty directory for per-row state under ``base``.

    ``base`` None: Dask's ``temporary-directory`` setting, else the system's
    temporary directory.  It must be visible to every worker (as the data is).
    """
    if base is None:
        import dask

        base = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="dqkm-row-state-", dir=os.fspath(base))


def _path(directory, generation):
    return os.path.join(directory, _NAME.format(int(generation)))


def _layout(row_chunks, width):
    """(shape, chunks) of a generation's array: chunk i is X's row block i."""
    rows = [int(c) for c in row_chunks]
    first = rows[0] if rows else 0
    if first > 0 and all(c == first for c in rows[:-1]) and 0 < rows[-1] <= first:
        return (sum(rows), width), (first, width)
    top = max([1, *rows])
    return (len(rows), top, width), (1, top, width)


def _region(row_chunks, index):
    rows = [int(c) for c in row_chunks]
    shape, _ = _layout(rows, 1)
    if len(shape) == 2:
        start = sum(rows[:index])
        return (slice(start, start + rows[index]), slice(None))
    return (index, slice(0, rows[index]), slice(None))


# zarr.json of the arrays this process created with Zarr, by layout: a later pass's
# array of the same layout gets these bytes (Zarr's create cost a few ms per pass).
_CREATED = {}


def create_generation(directory, generation, row_chunks, width, dtype="float64") -> str:
    """Create the (empty) Zarr array of pass ``generation``: ``dtype`` (float64
    or float32), ``width`` columns, chunk-aligned with the row chunks
    ``row_chunks``; its path.  An existing array of that pass is an error
    (``FileExistsError``): nothing is overwritten."""
    shape, chunks = _layout(row_chunks, int(width))
    rows = [int(c) for c in row_chunks]
    path = _path(directory, generation)
    key = (tuple(shape), tuple(chunks), np.dtype(dtype).name, tuple(rows))
    meta = _CREATED.get(key)
    if meta is None:
        import zarr
        from zarr.codecs import Crc32cCodec

        zarr.create_array(store=path, shape=shape, chunks=chunks, dtype=np.dtype(dtype).name,
                          fill_value=np.nan, compressors=[Crc32cCodec()],
                          chunk_key_encoding={"name": "default", "separator": "/"},
                          attributes={"row_chunks": rows}, overwrite=False)
        with open(os.path.join(path, "zarr.json"), "rb") as f:
            _CREATED[key] = f.read()
        return path
    if os.path.lexists(path):  # as Zarr's overwrite=False
        raise FileExistsError(f"{path} exists: a pass's array is never overwritten.")
    try:  # the directories retire_generation kept in the previous array, if any
        os.rename(os.path.join(_path(directory, int(generation) - 1), _SPARE), path)
    except OSError:
        os.mkdir(path)
    _write_file(os.path.join(path, "zarr.json"), (meta,))
    return path


def _write_file(target, pieces):
    """Write ``pieces`` (bytes) to a temporary file renamed to ``target``."""
    tmp = f"{target}{_TMP}{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as f:
            for piece in pieces:
                f.write(piece)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


class _Meta:
    """What the chunk I/O needs of an array's ``zarr.json``."""

    __slots__ = ("ndim", "chunks", "dtype", "row_chunks")

    def __init__(self, doc):
        self.chunks = tuple(int(c) for c in doc["chunk_grid"]["configuration"]["chunk_shape"])
        self.ndim = len(self.chunks)
        self.dtype = np.dtype(doc["data_type"])
        self.row_chunks = [int(c) for c in doc["attributes"]["row_chunks"]]


# Layouts read in this process, by array path (a pass's tasks on one worker share them).
_OPENED = {}
_OPENED_MAX = 8


def _open(directory, generation):
    """The layout of pass ``generation``'s array (OSError/ValueError: none readable)."""
    path = _path(directory, generation)
    meta = _OPENED.get(path)
    if meta is None:
        with open(os.path.join(path, "zarr.json"), "rb") as f:
            meta = _Meta(json.loads(f.read()))
        if len(_OPENED) >= _OPENED_MAX:
            _OPENED.pop(next(iter(_OPENED)))
        _OPENED[path] = meta
    return meta


def _forget(directory, generation):
    _OPENED.pop(_path(directory, generation), None)


def _chunk_file(z, directory, generation, index):
    return _chunk_files(directory, generation, [index], z.ndim)[0]


def _encode(z, state):
    """The pieces of a chunk of ``z`` holding ``state`` as Zarr v3 stores it with
    the array's codecs (bytes, little-endian, C order; then CRC32C): the block's
    rows padded with the fill value to the chunk's shape."""
    dtype = z.dtype.newbyteorder("<")
    rows = state.shape[0]
    if rows == z.chunks[-2]:  # a whole chunk: no padding, no copy
        chunk = np.ascontiguousarray(state, dtype=dtype)
    else:
        chunk = np.full(z.chunks[-2:], np.nan, dtype=dtype)
        chunk[:rows] = state
    raw = chunk.tobytes()  # google_crc32c takes bytes
    return raw, np.uint32(google_crc32c.value(raw)).astype("<u4").tobytes()


def write_block_state(directory, generation, index, state) -> bool:
    """Write block ``index``'s state (a 2-D array, converted to the array's
    dtype: the caller rounds it) into pass ``generation``'s array (one whole chunk).

    The chunk is encoded here as the array's Zarr codecs encode it and written
    to a temporary file renamed into place (the Zarr call's event-loop round
    trip cost as much as a Lloyd pass over the block's rows); Zarr reads it as
    any chunk.  Returns False, writing nothing, when the array does not exist
    on this worker (e.g. a worker on another host): the block then has no state.
    """
    if not os.path.isdir(_path(directory, generation)):
        return False
    z = _open(directory, generation)
    state = np.asarray(state, dtype=z.dtype)
    target = _chunk_file(z, directory, generation, index)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    _write_file(target, _encode(z, state))
    return True


def read_block_state(directory, generation, index, shape):
    """The state :func:`write_block_state` wrote, or None if it is missing,
    torn (its CRC32C does not match), unreadable or not of ``shape`` (then the
    caller recomputes it)."""
    try:
        z = _open(directory, generation)
        dtype = z.dtype.newbyteorder("<")
        size = int(np.prod(z.chunks)) * dtype.itemsize
        with open(_chunk_file(z, directory, generation, index), "rb") as f:
            body = f.read(size)  # two reads: no copy of the body to split off its checksum
            tail = f.read()
        if len(body) != size or len(tail) != 4 or \
                np.frombuffer(tail, "<u4")[0] != google_crc32c.value(body):
            return None
        chunk = np.frombuffer(body, dtype=dtype).reshape(z.chunks)
        rows = z.row_chunks[index]
    except Exception:  # noqa: BLE001 - any unreadable chunk is no state (recomputed)
        return None
    state = (chunk if z.ndim == 2 else chunk[0])[:rows]
    state = state.astype(z.dtype)  # native order, writable
    if state.shape != tuple(shape) or (state.size and np.isnan(state[:, 0]).any()):
        return None
    return state


def _chunk_files(directory, generation, blocks, ndim):
    """The chunk files of ``blocks`` (Zarr v3's default chunk keys ``c/i/0[/0]``)."""
    tail = ("0",) if ndim == 2 else ("0", "0")
    return [os.path.join(_path(directory, generation), "c", str(int(i)), *tail)
            for i in blocks]


def _ndim(directory, generation):
    try:
        return _open(directory, generation).ndim
    except Exception:  # noqa: BLE001 - no array: no chunk of it to remove
        return None


def remove_block_states(directory, generation, blocks) -> None:
    """Remove the chunks of pass ``generation`` for the block indices ``blocks``."""
    ndim = _ndim(directory, generation)
    if ndim is None:
        return
    for name in _chunk_files(directory, generation, blocks, ndim):
        _remove_files(*os.path.split(name))


def _remove_files(path, *names):
    """Remove the files ``names`` of directory ``path`` and the temporary files of
    their writes (a write cut short by a killed worker leaves one:
    ``<name>.dqkm-tmp-<uuid>``); the directory is listed once."""
    want = set(names)
    try:
        present = os.listdir(path)
    except OSError:
        return
    for n in present:
        if n in want or (_TMP in n and n.split(_TMP, 1)[0] in want):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(path, n))


def _rmdir(path):
    try:
        os.rmdir(path)
    except OSError:
        pass


def _remove_array_files(directory, generation, n_blocks):
    """Remove the chunks (and their temporary files) and ``zarr.json`` of pass
    ``generation``'s array; its chunks' layout (2 or 3 dimensions) or None."""
    ndim = _ndim(directory, generation)
    _forget(directory, generation)
    path = _path(directory, generation)
    # no zarr.json (ndim None): a creation cut short, no chunk yet
    for name in [] if ndim is None else _chunk_files(directory, generation, range(n_blocks), ndim):
        _remove_files(*os.path.split(name))
    _remove_files(path, "zarr.json")
    return ndim


def _remove_directories(root, n_blocks):
    """Remove the (empty) directories of an array at ``root``: ``c/i`` (``c/i/0``),
    ``c``, a spare kept inside it, then ``root``; a directory still holding
    anything stays."""
    for i in range(n_blocks):
        _rmdir(os.path.join(root, "c", str(i), "0"))
        _rmdir(os.path.join(root, "c", str(i)))
    _rmdir(os.path.join(root, "c"))
    spare = os.path.join(root, _SPARE)
    if os.path.isdir(spare):
        _remove_directories(spare, n_blocks)
    _rmdir(root)


def remove_generation(directory, generation, n_blocks) -> None:
    """Remove pass ``generation``'s array (its block chunks and ``zarr.json``)
    and the directories this leaves empty."""
    _remove_array_files(directory, generation, n_blocks)
    _remove_directories(_path(directory, generation), n_blocks)


def retire_generation(directory, generation, n_blocks) -> None:
    """Remove pass ``generation``'s array once pass ``generation + 1``'s holds the
    state: its files are removed and its directories, empty, are moved into the
    next array as ``.dqkm-spare``, where :func:`create_generation` of pass
    ``generation + 2`` takes them (else, as :func:`remove_generation`)."""
    _remove_array_files(directory, generation, n_blocks)
    path = _path(directory, generation)
    target = os.path.join(_path(directory, int(generation) + 1), _SPARE)
    inner = os.path.join(path, _SPARE)
    if os.path.isdir(inner):  # a spare nobody took: not carried along
        _remove_directories(inner, n_blocks)
    if os.path.isdir(path) and os.path.isdir(os.path.dirname(target)) \
            and not os.path.lexists(target):
        with contextlib.suppress(OSError):
            os.rename(path, target)
            return
    _remove_directories(path, n_blocks)


def remove_state_directory(directory, generations, n_blocks) -> None:
    """Remove the arrays of the passes ``generations`` (:func:`remove_generation`),
    then the directory if that leaves it empty (nothing else is deleted)."""
    for g in generations:
        remove_generation(directory, g, n_blocks)
    _rmdir(directory)
