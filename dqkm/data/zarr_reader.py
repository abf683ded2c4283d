"""Reading local Zarr arrays into Dask: a direct chunk-file reader, and checks
that every task sees the store the driver saw.

This is the one module where dqkm looks below Zarr's array API (the project's
only such uses of zarr-python: an array's ``metadata``, ``store`` and codec
classes, and ``zarr.storage.LocalStore``), and only at what the Zarr v3
specification fixes: the chunk key encoding, the ``bytes`` codec and one
compressor (zstd, gzip or blosc, whose frame headers are read as RFC 8878,
RFC 1952 and the Blosc format define them).

Why a reader of its own: zarr-python's synchronous ``arr[...]`` runs every
read through its asyncio event loop and a ``bytes`` object per chunk, and did
not decode zstd in parallel across Dask's threads.  Reading a chunk file
straight into a NumPy array (``np.fromfile``) and decoding it with numcodecs
(which releases the GIL) is several times faster.  Each Dask task reads
exactly one stored chunk, so the pass over a store stays one task per chunk.

What is checked:

* Every decoded chunk has exactly the chunk's number of bytes (a 0-byte or
  short chunk file, or a valid compressed stream of fewer values, is a
  :class:`~dqkm.exceptions.StoreError` naming the store and the chunk, as
  zarr-python refuses it too); a chunk that fails to decode is the same
  error — never re-read some other way.
* Paths in a graph are absolute, so a worker started in another directory
  reads the same files.  A missing chunk *file* is legitimate Zarr (the chunk
  holds the fill value); a missing *array* (its ``zarr.json``, or ``.zarray``
  for Zarr v2) means the task cannot see the store, and is a ``StoreError``
  naming the store and the worker.
* What a read holds beside its block, for the memory checks before a pass:
  the compressed chunk file for this reader (:func:`compressed_read_bytes`),
  the fetched bytes and decoded copy for a read through zarr-python
  (:func:`zarr_python_read_bytes`, found in the Dask graph).

Anything the fast reader does not handle — other stores (fsspec URLs), Zarr
v2, sharding, filters, transposes, a non-native byte order, chunks along
features, Dask chunks that do not match the stored ones, or any exception
while deciding — goes through zarr-python (:func:`from_zarr` does both).
``dask.config.set({"dqkm.fast-zarr-read": False})`` turns the fast path off.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import socket
import sys
from dataclasses import dataclass

import dask
import dask.array as da
import numcodecs
import numpy as np
import zarr
from dask.base import tokenize
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec
from zarr.storage import LocalStore

from ..exceptions import StoreError

__all__ = ["LocalChunkReader", "local_chunk_reader", "from_zarr", "local_array_dir",
           "require_store", "compressed_read_bytes", "zarr_python_read_bytes"]

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def worker_description() -> str:
    """Where this task runs: the Dask worker's address (if any) and the host name."""
    host = socket.gethostname()
    try:
        from distributed import get_worker

        return f"worker {get_worker().address} (host {host!r})"
    except (ImportError, ValueError):
        return f"host {host!r} (no Dask worker: the local scheduler)"


def require_store(directory, meta_names=("zarr.json",), what="Zarr array"):
    """Raise :class:`StoreError` unless ``directory`` holds one of ``meta_names``.

    Called by a task before it trusts a missing chunk file to mean "fill value".
    """
    if any(os.path.exists(os.path.join(directory, m)) for m in meta_names):
        return
    raise StoreError(
        f"The {what} {directory!r} is not visible on {worker_description()}: no "
        f"{' or '.join(meta_names)} there. Every worker must see the store at the same "
        "absolute path: put it on a filesystem all workers mount there, or use a URL "
        "(e.g. s3://...); if it was removed or moved after the computation was set up, "
        "open it again.")


def store_version(directory, meta_names=("zarr.json", ".zarray")):
    """What tells one write of the array at ``directory`` from another: the inode and
    modification time of its metadata file (a store rewritten, atomically renamed into
    place, has a new one); None if there is none.

    Part of the Dask name of a read, so that two reads of one unchanged store share
    their keys while a rewritten store is never taken for the one it replaced.
    """
    for m in meta_names:
        try:
            st = os.stat(os.path.join(directory, m))
        except OSError:
            continue
        return (m, st.st_ino, st.st_mtime_ns, st.st_size)
    return None


# ----------------------------------------------------------------------------- decoding
class _ChunkSizeError(ValueError):
    """A chunk decodes (or would decode) to the wrong number of bytes."""


def _zstd_content_size(raw):
    """The first zstd frame's Frame_Content_Size (RFC 8878, 3.1.1.1), or None if absent."""
    head = raw[:18].tobytes()
    if len(head) < 5 or head[:4] != _ZSTD_MAGIC:
        raise _ChunkSizeError(f"{raw.nbytes} bytes that do not start a zstd frame")
    descriptor = head[4]
    single_segment = (descriptor >> 5) & 1
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    if size == 0:
        return None
    if len(head) < pos + size:
        raise _ChunkSizeError(f"a zstd frame header cut short ({raw.nbytes} bytes)")
    value = int.from_bytes(head[pos:pos + size], "little")
    return value + 256 if size == 2 else value


def _decode_zstd(raw, out):
    nbytes = out.nbytes
    size = _zstd_content_size(raw)
    if size is None:  # a frame without its size: decode, then count
        dec = np.frombuffer(numcodecs.Zstd().decode(raw), dtype=np.uint8)
        if dec.nbytes != nbytes:
            raise _ChunkSizeError(f"zstd data decoding to {dec.nbytes} bytes")
        out.view(np.uint8)[...] = dec
        return
    if size != nbytes:
        raise _ChunkSizeError(f"a zstd frame of {size} bytes")
    numcodecs.Zstd().decode(raw, out=out)  # a frame shorter than it says raises


def _decode_gzip(raw, out):
    view = memoryview(out).cast("B")
    with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as f:
        n = 0
        while n < len(view):
            got = f.readinto(view[n:])
            if not got:
                break
            n += got
        if n < len(view):
            raise _ChunkSizeError(f"gzip data decoding to {n} bytes")
        if f.read(1):
            raise _ChunkSizeError("gzip data decoding to more bytes")


def _decode_blosc(raw, out):
    head = raw[:16].tobytes()
    if len(head) < 16:
        raise _ChunkSizeError(f"{raw.nbytes} bytes, shorter than a blosc header")
    nbytes = int.from_bytes(head[4:8], "little")
    cbytes = int.from_bytes(head[12:16], "little")
    if cbytes != raw.nbytes:
        raise _ChunkSizeError(f"a blosc frame of {cbytes} compressed bytes cut to "
                              f"{raw.nbytes}")
    if nbytes != out.nbytes:
        raise _ChunkSizeError(f"a blosc frame of {nbytes} bytes")
    numcodecs.Blosc().decode(raw, out=out)


def _decoder(codec):
    """The decode function for a Zarr v3 compressor codec, or None if unsupported."""
    if isinstance(codec, ZstdCodec):
        return _decode_zstd
    if isinstance(codec, GzipCodec):
        return _decode_gzip
    if isinstance(codec, BloscCodec):  # blosc frames carry their own parameters
        return _decode_blosc
    return None


# ----------------------------------------------------------------------------- the reader
@dataclass(frozen=True)
class LocalChunkReader:
    """Reads stored chunk ``i`` (along the first axis) of a local Zarr v3 array.

    ``directory`` is absolute, so the reader means the same files on every
    worker.
    """

    directory: str
    keys: tuple
    shape: tuple
    chunk_shape: tuple
    dtype: np.dtype
    fill_value: object
    decoder: object  # a _decode_* function, or None (uncompressed)

    def _damaged(self, i, path, detail):
        return StoreError(
            f"Chunk {i} of the Zarr array {self.directory!r} (file {path!r}) is damaged: "
            f"{detail}; expected {math.prod(self.chunk_shape)} values of {self.dtype} "
            f"({math.prod(self.chunk_shape) * self.dtype.itemsize} bytes, chunk shape "
            f"{self.chunk_shape}). zarr-python cannot read it either; write the "
            "store again from its source.")

    def read(self, i):
        """Chunk ``i`` as an ndarray.

        A missing chunk file is the fill value (if the array itself is there);
        a damaged one is a :class:`StoreError`.
        """
        start = i * self.chunk_shape[0]
        rows = min(self.chunk_shape[0], self.shape[0] - start)
        path = os.path.join(self.directory, *self.keys[i].split("/"))
        try:
            raw = np.fromfile(path, dtype=np.uint8)
        except FileNotFoundError:
            require_store(self.directory)
            return np.full((rows,) + tuple(self.shape[1:]), self.fill_value, dtype=self.dtype)
        except OSError as e:
            raise StoreError(f"Chunk {i} of the Zarr array {self.directory!r} cannot be read "
                             f"on {worker_description()}: {e}") from e
        size = math.prod(self.chunk_shape)
        nbytes = size * self.dtype.itemsize
        if self.decoder is None:
            if raw.nbytes != nbytes:
                values = raw.nbytes / self.dtype.itemsize
                raise self._damaged(i, path, f"it holds {values:g} values; expected {size}")
            flat = raw.view(self.dtype)
        else:
            flat = np.empty(size, dtype=self.dtype)
            try:
                self.decoder(raw, flat)
            except Exception as e:  # noqa: BLE001 - any decoding failure is a damaged chunk
                detail = str(e) if isinstance(e, _ChunkSizeError) else \
                    f"{type(e).__name__}: {e}"
                raise self._damaged(i, path, detail) from e
        return flat.reshape(self.chunk_shape)[:rows]

    def to_dask(self):
        """A Dask array with one task per stored chunk."""
        n = self.shape[0]
        if n == 0:
            return da.from_array(np.empty(self.shape, dtype=self.dtype))
        c = self.chunk_shape[0]
        row_chunks = tuple(min(c, n - s) for s in range(0, n, c))
        chunks = (row_chunks,) + tuple((s,) for s in self.shape[1:])
        token = tokenize(self.directory, self.keys, self.shape, self.chunk_shape,
                         self.dtype.str, self.fill_value,
                         getattr(self.decoder, "__name__", None), store_version(self.directory))
        name = f"zarr-read-{token}"
        if self.decoder is not None:
            _COMPRESSED_READS[name] = self
            _CHUNK_FILE_BYTES.pop(name, None)  # the store may have been rewritten
            while len(_COMPRESSED_READS) > _KEEP_READERS:  # the oldest first
                oldest = next(iter(_COMPRESSED_READS))
                del _COMPRESSED_READS[oldest]
                _CHUNK_FILE_BYTES.pop(oldest, None)
        return da.map_blocks(self._block, chunks=chunks, dtype=self.dtype,
                             meta=np.empty((0,) * len(self.shape), dtype=self.dtype),
                             name=name)

    def largest_chunk_file(self):
        """Bytes of the largest stored chunk file (0 where none is there)."""
        size = 0
        for key in self.keys:
            try:
                size = max(size, os.stat(os.path.join(self.directory, *key.split("/"))).st_size)
            except OSError:
                pass
        return size

    def _block(self, block_id=None):
        return self.read(block_id[0])


#: Dask array names of the compressed arrays :meth:`LocalChunkReader.to_dask` made (the
#: latest ``_KEEP_READERS``), for :func:`compressed_read_bytes`.
_COMPRESSED_READS: dict = {}
_CHUNK_FILE_BYTES: dict = {}  # their largest chunk file, by name, once measured
_KEEP_READERS = 256


def compressed_read_bytes(X) -> int:
    """Bytes a task reading a block of ``X`` holds beside the decoded block while it
    decodes it: the largest compressed chunk file of a compressed local Zarr array
    that ``X`` is read from by :class:`LocalChunkReader` (0 otherwise: uncompressed
    chunks are read without a copy; other readers are not known here).  The file
    is read whole (the decoders take one frame), so for poorly compressible
    float data a task briefly holds about twice its chunk."""
    layers = getattr(getattr(X, "dask", None), "layers", None) or {}
    size = 0
    for name in layers:
        reader = _COMPRESSED_READS.get(name)
        if reader is not None:
            if name not in _CHUNK_FILE_BYTES:  # one stat per chunk file, once per array
                _CHUNK_FILE_BYTES[name] = reader.largest_chunk_file()
            size = max(size, _CHUNK_FILE_BYTES[name])
    return size


def zarr_python_read_bytes(X) -> int:
    """Bytes a task reading a block of ``X`` through zarr-python holds beside the
    block it returns, for the largest such read in X's graph (0 where X reads no
    Zarr array through zarr-python).

    zarr-python fetches each stored chunk's bytes and, for an encoded chunk,
    decodes them into a buffer of its own before copying into the block: about
    one more block for an uncompressed array, two for a compressed, sharded or
    filtered one (its fetched bytes, at most about the decoded ones, and the
    decoded chunk).  Found by the reads :func:`from_zarr` and ``dask.array.from_zarr``
    make: a layer that depends on a layer holding just a zarr.Array (Dask's
    ``from_array``); a ``dask.array.from_zarr`` read whose array is inlined in its
    tasks (a ``from-zarr-…`` layer with no such dependency) is counted as
    compressed.  The block's bytes come from the read layer's own chunks."""
    graph = getattr(X, "dask", None)
    layers = getattr(graph, "layers", None) or {}
    depends = getattr(graph, "dependencies", None) or {}
    size = 0
    for name, layer in layers.items():
        sources = [_layer_source(layers.get(dep)) for dep in depends.get(name, ())]
        sources = [getattr(a, "arr", a) for a in sources if a is not None]
        if sources:
            factor = 2 if any(_encoded(a) for a in sources) else 1
        elif name.startswith("from-zarr-"):
            factor = 2
        else:
            continue
        info = getattr(layer, "collection_annotations", None) or {}
        try:
            block = math.prod(int(c) for c in info["chunksize"]) * np.dtype(info["dtype"]).itemsize
        except (KeyError, TypeError, ValueError):
            continue
        size = max(size, factor * block)
    return size


def _layer_source(layer):
    """The zarr.Array (or :class:`_CheckedLocalArray`) a materialized Dask graph layer
    (its ``mapping`` a dict) holds as its one value, or None (other layers are not
    materialized to look)."""
    mapping = getattr(layer, "mapping", None)
    if not isinstance(mapping, dict) or len(mapping) != 1:
        return None
    for value in mapping.values():
        for v in (value, getattr(value, "value", None)):  # a bare value or a data node
            if isinstance(v, (zarr.Array, _CheckedLocalArray)):
                return v
    return None


def _encoded(arr):
    """Whether zarr-python decodes ``arr``'s chunks through a buffer of its own
    (a compressor, a filter or sharding); True when that cannot be told."""
    try:
        return bool(arr.compressors) or bool(arr.filters) or arr.shards is not None
    except Exception:  # noqa: BLE001 - an unusual array: count the larger need
        return True


def local_array_dir(arr):
    """The absolute directory of a zarr.Array in a local store, or None for other stores."""
    if not isinstance(arr.store, LocalStore):
        return None
    root = os.path.abspath(os.fspath(arr.store.root))
    return os.path.join(root, *[p for p in arr.path.split("/") if p])


def local_chunk_reader(arr, chunks=None):
    """A :class:`LocalChunkReader` for ``arr`` if the fast path applies, else None.

    Any exception while deciding (another zarr-python layout, unusual
    metadata) means None: zarr-python reads the array instead.

    Parameters
    ----------
    arr : zarr.Array
    chunks : int, tuple or None
        The rows per Dask chunk asked for; the fast path needs the stored
        chunking (None, or the same number of rows).
    """
    if not dask.config.get("dqkm.fast-zarr-read", True):
        return None
    try:
        return _local_chunk_reader(arr, chunks)
    except Exception:  # noqa: BLE001 - deciding only; zarr-python reads what we cannot
        return None


def _local_chunk_reader(arr, chunks):
    meta = arr.metadata
    if getattr(meta, "zarr_format", None) != 3:
        return None
    directory = local_array_dir(arr)
    if directory is None:
        return None
    shape = tuple(int(s) for s in arr.shape)
    chunk_shape = tuple(int(s) for s in arr.chunks)
    if len(shape) == 0 or chunk_shape[1:] != shape[1:]:
        return None
    if chunks is not None:
        rows = chunks[0] if isinstance(chunks, (tuple, list)) else chunks
        if not isinstance(rows, (int, np.integer)) or int(rows) != chunk_shape[0]:
            return None
    codecs = tuple(meta.codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2:
        return None
    dtype = np.dtype(arr.dtype)
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)
    if dtype.itemsize > 1 and endian != sys.byteorder:
        return None
    if dtype.kind not in "biuf":
        return None
    decoder = None
    if len(codecs) == 2:
        decoder = _decoder(codecs[1])
        if decoder is None:
            return None
    n_chunks = math.ceil(shape[0] / chunk_shape[0]) if shape[0] else 0
    zeros = (0,) * (len(shape) - 1)
    keys = tuple(meta.chunk_key_encoding.encode_chunk_key((i,) + zeros)
                 for i in range(n_chunks))
    return LocalChunkReader(directory=directory, keys=keys, shape=shape,
                            chunk_shape=chunk_shape, dtype=dtype,
                            fill_value=meta.fill_value, decoder=decoder)


# ----------------------------------------------------------------------------- zarr-python
class _CheckedLocalArray:
    """A local zarr.Array (absolute root) whose every read first checks, where
    it runs, that the array is there (zarr-python reads a missing array's
    chunks as the fill value); a chunk zarr-python refuses is a StoreError.

    Dask reads it with ``key`` a tuple of slices (``fancy=False``).
    """

    def __init__(self, arr, directory):
        self.arr = arr
        self.directory = directory
        self.shape = tuple(arr.shape)
        self.ndim = len(self.shape)
        self.dtype = np.dtype(arr.dtype)
        fmt = getattr(arr.metadata, "zarr_format", 3)
        self.meta_names = ("zarr.json",) if fmt == 3 else (".zarray",)

    def __getitem__(self, key):
        require_store(self.directory, self.meta_names)
        try:
            return self.arr[key]
        except (ValueError, RuntimeError, OSError) as e:  # zarr-python refuses a chunk
            raise StoreError(
                f"Rows {key[0].start}:{key[0].stop} of the Zarr array {self.directory!r} "
                f"cannot be read on {worker_description()}: a chunk there is damaged "
                f"({type(e).__name__}: {e}). Write the store again from its source.") from e


def _absolute(arr):
    """``arr`` reopened on an absolute store root if its local root is relative."""
    root = os.fspath(arr.store.root)
    if os.path.isabs(root):
        return arr
    return zarr.open_array(store=LocalStore(os.path.abspath(root), read_only=True),
                           path=arr.path, mode="r")


def from_zarr(arr, chunks=None) -> da.Array:
    """A zarr.Array as a Dask array chunked along rows only (whole rows per chunk).

    A local, row-chunked Zarr v3 array: one task per stored chunk, each
    reading its file directly (:class:`LocalChunkReader`).  Anything else
    goes through zarr-python, reading whole rows per Dask chunk even if the
    store is also chunked along features; for a local store every task first
    checks that it sees the array (:func:`require_store`).  Local paths in
    the graph are absolute.

    Parameters
    ----------
    arr : zarr.Array
    chunks : int or tuple, optional
        Rows per Dask chunk; default the stored row chunks.
    """
    reader = local_chunk_reader(arr, chunks)
    if reader is not None:
        return reader.to_dask()
    rows = chunks if chunks is not None else arr.chunks[0]
    dchunks = (rows,) + tuple(-1 for _ in arr.shape[1:])
    try:
        directory = local_array_dir(arr)
        checked = None if directory is None else _CheckedLocalArray(_absolute(arr), directory)
    except (AttributeError, TypeError):  # not a store with a root, or not a NumPy dtype
        checked = None
    if checked is None:
        return da.from_zarr(arr, chunks=dchunks)
    token = tokenize(directory, checked.shape, checked.dtype.str, dchunks,
                     tuple(int(c) for c in arr.chunks), store_version(directory))
    return da.from_array(checked, chunks=dchunks, lock=False, fancy=False,
                         meta=np.empty((0,) * checked.ndim, dtype=checked.dtype),
                         name=f"zarr-python-read-{token}")
