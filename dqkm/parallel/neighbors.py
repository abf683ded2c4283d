"""Blockwise passes for the applications: cluster-index search and Nyström features.

* :class:`InvertedIndex` — the rows of X grouped by cluster (``offsets``), with
  their original row ids and squared norms, in memory or in a Zarr v3 group.
* :func:`build_index` — labels of X (one pass), then the rows reordered by
  cluster (one shuffle of X, through spill files when written to a local
  Zarr store), in memory or written to Zarr.
* :func:`search` — exact k-NN of every query inside its probed clusters, one
  task per block of queries (the index is broadcast once, or each task reads
  only the clusters it probes from Zarr).
* :func:`nystroem_map` — the Nyström feature map ``k(X, U)·N`` per block, with
  ``U·x`` computed by the landmark operator (dense, sparse factors or
  Hadamard).

The block functions below are plain NumPy on one block; the graph builders
are the only Dask code.
"""

from __future__ import annotations

import itertools
import uuid

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from ..data.index_store import (INDEX_FORMAT_VERSION, open_index_arrays, read_index_meta,
                                write_index_store)
from ..kernels.cluster_search import pruning_gammas, tile_topk
from .engine import broadcast, compute, cpu_count, map_rows
from .finite import check_block, map_rows_at
from .memory import check_shuffle_memory
from .shuffle import permute_rows, remove_spill, spill_directory

__all__ = ["InvertedIndex", "build_index", "search", "probe_clusters", "nystroem_map",
           "landmark_products", "kernel_from_products", "center_sq_distances", "query_block_rows",
           "INDEX_FORMAT_VERSION"]

_TILE_ROWS = 4096          # rows of one cluster compared with the queries at once
_ZARR_CHUNK_BYTES = 1 << 20  # ~1 MB Zarr chunks: a probed cluster reads little more than itself


# ============================================================================ the index
class InvertedIndex:
    """Rows of X grouped by cluster: cluster ``c`` is rows ``offsets[c]:offsets[c+1]``.

    Either in memory (``X``, ``ids``, ``sq_norms``) or in the Zarr group at
    ``path`` (arrays ``X``, ``ids``, ``sq_norms``, ``offsets``); ``offsets`` is
    always held in memory (K + 1 integers).  Pickles small when Zarr-backed:
    a task opens the store itself, at its absolute ``path``.  Its Dask token
    is its ``uid`` (a store's: written once by :func:`build_index`; an
    in-memory index's: its own), so broadcasting it never hashes its rows.
    """

    def __init__(self, offsets, *, X=None, ids=None, sq_norms=None, path=None, uid=None):
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.X, self.ids, self.sq_norms = X, ids, sq_norms
        self.path = None if path is None else str(path)
        # the identity that tokenizes the index; an in-memory one gets its own (unique per
        # object: hashing its rows for a deterministic token would cost a pass over them)
        self.uid = uid if uid is not None else uuid.uuid4().hex
        self._group = None

    def __dask_tokenize__(self):
        return ("dqkm.InvertedIndex", self.path, self.uid)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_group"] = None
        return state

    @property
    def n_clusters(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def n_samples(self) -> int:
        return int(self.offsets[-1])

    @property
    def in_memory(self) -> bool:
        return self.path is None

    def _open(self):
        """The Zarr arrays ``(X, ids, sq_norms)``, opened once per process/task."""
        if self._group is None:
            self._group = open_index_arrays(self.path)
        return self._group

    def cluster(self, c):
        """``(rows, ids, sq_norms)`` of cluster ``c``."""
        lo, hi = int(self.offsets[c]), int(self.offsets[c + 1])
        if self.in_memory:
            return self.X[lo:hi], self.ids[lo:hi], self.sq_norms[lo:hi]
        X, ids, sq = self._open()
        return X[lo:hi], ids[lo:hi], sq[lo:hi]

    @classmethod
    def open(cls, path):
        """Open an index written by :func:`build_index` (checks the format version).

        A local ``path`` is kept absolute, so that tasks on workers started in
        another directory open the same group.
        """
        path, offsets, uid = read_index_meta(path)
        return cls(offsets, path=path, uid=uid)


def _sq_norms_block(block):
    return np.einsum("ij,ij->i", block, block, dtype=np.float64)


def shuffles_through_files(path) -> bool:
    """Whether :func:`build_index` writes to ``path`` through the spill-file shuffle."""
    return path is not None and "://" not in str(path)


def build_index(Xd, labels, n_clusters, *, path=None, overwrite=False, extra=None):
    """Group the rows of ``Xd`` by ``labels``.

    Parameters
    ----------
    Xd : dask array of shape (n_samples, n_features)
    labels : ndarray of shape (n_samples,), int
        Cluster of every row (computed by the caller: one pass over X).
    n_clusters : int
    path : str or PathLike, optional
        Write the index as a Zarr v3 group there (atomic); otherwise it is
        computed into memory.
    extra : dict of name -> ndarray of shape (n_samples,), optional
        Per-row arrays stored in cluster order too (e.g. encoded targets).

    Returns
    -------
    index : InvertedIndex
    extra_sorted : dict of name -> ndarray, the ``extra`` arrays in index order

    Notes
    -----
    Passes over X: one shuffle plus the squared norms, fused with the write.
    Written to a local path, the shuffle goes through spill files beside it
    (:func:`dqkm.parallel.shuffle.permute_rows`), so that no task holds more
    than about two blocks of X; in memory or to a URL it is dask's ``take``.
    Before it, a shuffle task that cannot fit a worker is refused
    (:func:`~dqkm.parallel.memory.check_shuffle_memory`).  The driver holds
    ``n_samples`` integers (the row ids, which it writes itself).
    """
    labels = np.asarray(labels).astype(np.int64, copy=False)
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=n_clusters)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    extra_sorted = {k: np.asarray(v)[order] for k, v in (extra or {}).items()}
    if path is None:
        Xs = np.ascontiguousarray(compute(_take_rows(Xd, order))[0])
        index = InvertedIndex(offsets, X=Xs, ids=order, sq_norms=_sq_norms_block(Xs))
        return index, extra_sorted
    rows = int(max(1, min(Xd.shape[0], _ZARR_CHUNK_BYTES // max(1, Xd.shape[1] * Xd.itemsize))))
    local = shuffles_through_files(path)
    if local:  # measured again now: the labels pass ran since the caller's check
        check_shuffle_memory(Xd)
    spill = spill_directory(path) if local else None
    try:
        if local:  # bounded task memory: X may be larger than the workers' memory
            Xs, sq = permute_rows(Xd.rechunk({1: -1}), order, spill, out_rows=rows,
                                  sq_norms=True)
        else:
            Xs = _take_rows(Xd, order).rechunk({0: rows, 1: -1})
            sq = map_rows(Xs, _sq_norms_block, dtype=np.float64, name="sq-norms")
        # ids (n_samples int64, on the driver already) are written from here: as a Dask
        # array they would be chunks of data in the graph, shipped to and held by workers
        arrays = {"X": Xs, "sq_norms": sq, "ids": order, "offsets": offsets}
        for k, v in extra_sorted.items():
            arrays[f"extra_{k}"] = v
        path = write_index_store(arrays, path, overwrite=overwrite, n_clusters=n_clusters,
                                 n_samples=Xd.shape[0], n_features=Xd.shape[1],
                                 dtype=Xd.dtype)
    finally:
        if spill is not None:
            remove_spill(spill, Xd.numblocks[0])
    return InvertedIndex.open(path), extra_sorted


def _take_rows(Xd, order):
    with dask.config.set({"array.slicing.split_large_chunks": False}):
        return Xd[order]


# ============================================================================ search
def _merge_topk(best_d, best_i, cand_d, cand_i, k):
    """Keep the k smallest of the union of two candidate sets, per row."""
    d = np.concatenate([best_d, cand_d], axis=1)
    i = np.concatenate([best_i, cand_i], axis=1)
    if d.shape[1] > k:
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        d = np.take_along_axis(d, part, axis=1)
        i = np.take_along_axis(i, part, axis=1)
    return d, i


def _complete_probes(Q, probes, counts, centers, k):
    """Per query: the probed clusters, extended by the next-nearest ones (by
    distance to ``centers``) while they hold fewer than ``k`` rows."""
    lists = [list(p) for p in probes]
    held = counts[probes].sum(axis=1)
    short = np.flatnonzero(held < k)
    if short.size:
        C = np.asarray(centers, dtype=np.float64)
        q = Q[short].astype(np.float64)
        d2 = (C * C).sum(1)[None, :] - 2.0 * q @ C.T
        ranks = np.argsort(d2, axis=1, kind="stable")
        for r, qi in enumerate(short):
            have = set(lists[qi])
            total = held[qi]
            for c in ranks[r]:
                if total >= k:
                    break
                if c not in have and counts[c]:
                    lists[qi].append(int(c))
                    total += counts[c]
    return lists


def _exact_sq_distances(Q64, grp_q, Xt, cand):
    """``‖q − x‖²`` in float64 for the candidate pairs, by batches of queries
    so that the (batch × kk × D) difference stays around 32 MB."""
    m, kk = cand.shape
    out = np.empty((m, kk), dtype=np.float64)
    step = max(1, (1 << 22) // max(1, kk * Xt.shape[1]))
    for a in range(0, m, step):
        diff = Q64[grp_q[a:a + step]][:, None, :] - Xt[cand[a:a + step]]
        out[a:a + step] = np.einsum("ijk,ijk->ij", diff, diff)
    return out


def _search_block_numpy(Q, probes, index, n_neighbors, centers):
    """:func:`search_block` in NumPy, as it was before the numba kernel.

    The reference for the tests and ``benchmarks/bench_cluster_search.py``, and
    the path for dtypes other than float32/float64.  Candidates per tile: the
    ``min(k, rows)`` smallest scores (``np.argpartition``: ties at the boundary
    are cut arbitrarily), then the same exact float64 distances and a top-k
    merge by distance (ties at the k-th place cut arbitrarily too).
    """
    m = Q.shape[0]
    k = int(n_neighbors)
    out = np.empty((m, 2 * k), dtype=np.float64)
    if m == 0:
        return out
    probes = np.asarray(probes, dtype=np.int64).reshape(m, -1)
    counts = np.diff(index.offsets)
    lists = _complete_probes(Q, probes, counts, centers, k)
    pairs_q = np.concatenate([np.full(len(lst), qi, dtype=np.int64)
                              for qi, lst in enumerate(lists)])
    pairs_c = np.concatenate([np.asarray(lst, dtype=np.int64) for lst in lists])
    order = np.argsort(pairs_c, kind="stable")
    pairs_q, pairs_c = pairs_q[order], pairs_c[order]
    bounds = np.flatnonzero(np.diff(pairs_c)) + 1
    best_d = np.full((m, k), np.inf)
    best_i = np.full((m, k), -1, dtype=np.int64)
    Q64 = Q.astype(np.float64, copy=False)
    for grp_q, grp_c in zip(np.split(pairs_q, bounds), np.split(pairs_c, bounds)):
        c = int(grp_c[0])
        if counts[c] == 0:
            continue
        rows, ids, sqn = index.cluster(c)
        Qc = Q[grp_q]
        for lo in range(0, rows.shape[0], _TILE_ROWS):
            Xt = np.asarray(rows[lo:lo + _TILE_ROWS])
            scores = sqn[lo:lo + _TILE_ROWS][None, :] - 2.0 * (Qc @ Xt.T)
            kk = min(k, Xt.shape[0])
            if kk < Xt.shape[0]:
                cand = np.argpartition(scores, kk - 1, axis=1)[:, :kk]
            else:
                cand = np.broadcast_to(np.arange(kk), (len(grp_q), kk))
            cand_d = _exact_sq_distances(Q64, grp_q, Xt, cand)
            cand_i = np.asarray(ids[lo:lo + _TILE_ROWS], dtype=np.int64)[cand]
            best_d[grp_q], best_i[grp_q] = _merge_topk(best_d[grp_q], best_i[grp_q],
                                                       cand_d, cand_i, k)
    srt = np.lexsort((best_i, best_d), axis=1)  # ascending distance, ties by lower id
    out[:, :k] = np.sqrt(np.take_along_axis(best_d, srt, axis=1))
    out[:, k:] = np.take_along_axis(best_i, srt, axis=1)
    return out


def search_block(Q, probes, index, n_neighbors, centers):
    """Exact k-NN of the queries ``Q`` among the rows of their probed clusters.

    Parameters
    ----------
    Q : ndarray of shape (m, n_features)
    probes : ndarray of shape (m, n_probe), int — clusters to search per query
    index : InvertedIndex
    n_neighbors : int (at most the number of indexed rows)
    centers : ndarray of shape (n_clusters, n_features)
        Used only when a query's probed clusters hold fewer than
        ``n_neighbors`` rows: the next-nearest clusters are added.

    Returns
    -------
    ndarray of shape (m, 2·n_neighbors), float64
        Distances (ascending; ties by the lower id) in the first half, the
        original row ids in the second (exact as float64 below 2^53).

    Per tile of a cluster (up to 4096 rows; a Zarr-backed index is read one
    cluster at a time) and the group of queries probing it: one GEMM in the
    data's dtype gives the scores ``‖x‖² − 2q·x`` (a float32 tile where a query
    finds more than ``8·k + 64`` candidates is scored again in float64, see
    ``_WIDEN_FACTOR``); then one numba kernel
    (:func:`dqkm.kernels.cluster_search.tile_topk`) takes per query every row
    that may, within the GEMM's rounding-error bound, be among the tile's
    ``min(k, rows)`` nearest, skips those whose distance provably exceeds the
    query's current k-th best, recomputes the others' distances exactly as
    ``‖q − x‖`` in float64 and merges them into the query's running top-k.
    The result is exact (ties by the lower id) and does not depend on the
    query blocks, the BLAS or the threads.  Dtypes other than float32/float64
    take the NumPy path (:func:`_search_block_numpy`), which picks exactly
    ``min(k, rows)`` candidates per tile by the computed scores and cuts ties
    arbitrarily.
    """
    m = Q.shape[0]
    k = int(n_neighbors)
    out = np.empty((m, 2 * k), dtype=np.float64)
    if m == 0:
        return out
    if not _kernel_dtypes(Q, index):
        return _search_block_numpy(Q, probes, index, n_neighbors, centers)
    Q = np.ascontiguousarray(Q)
    probes = np.asarray(probes, dtype=np.int64).reshape(m, -1)
    counts = np.diff(index.offsets)
    if (counts[probes].sum(axis=1) >= k).all():  # no short probes: the pairs as they are
        pairs_q = np.repeat(np.arange(m, dtype=np.int64), probes.shape[1])
        pairs_c = probes.ravel()
    else:
        lists = _complete_probes(Q, probes, counts, centers, k)
        lens = [len(lst) for lst in lists]
        pairs_q = np.repeat(np.arange(m, dtype=np.int64), lens)
        pairs_c = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64,
                              count=sum(lens))
    order = np.argsort(pairs_c, kind="stable")
    pairs_q, pairs_c = pairs_q[order], pairs_c[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(pairs_c)) + 1, [pairs_c.size]])
    best_d = np.full((m, k), np.inf)
    best_i = np.full((m, k), -1, dtype=np.int64)
    q_sq = np.einsum("ij,ij->i", Q, Q, dtype=np.float64)
    gammas = {}
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()):
        c = int(pairs_c[a]) if b > a else -1
        if c < 0 or counts[c] == 0:
            continue
        grp_q = pairs_q[a:b]
        rows, ids, sqn = index.cluster(c)
        Qc = Q[grp_q]  # the GEMM operand as in the NumPy path: same call, same bits
        Qc64 = None    # set once a tile of this cluster needed a float64 GEMM
        for lo in range(0, rows.shape[0], _TILE_ROWS):
            Xt = np.ascontiguousarray(rows[lo:lo + _TILE_ROWS])
            ids_t = np.ascontiguousarray(ids[lo:lo + _TILE_ROWS], dtype=np.int64)
            sq_t = np.ascontiguousarray(sqn[lo:lo + _TILE_ROWS])
            kk = min(k, Xt.shape[0])
            while True:  # at most twice: a float32 tile given up is scored in float64
                G = Qc @ Xt.T if Qc64 is None else Qc64 @ Xt.astype(np.float64).T
                limit = (_WIDEN_FACTOR * kk + _WIDEN_SLACK if G.dtype == np.float32
                         else Xt.shape[0])
                if G.dtype not in gammas:
                    gammas[G.dtype] = pruning_gammas(Q.shape[1], G.dtype, sq_t.dtype)
                if tile_topk(G, sq_t, Q, grp_q, q_sq, Xt, ids_t, kk, *gammas[G.dtype],
                             best_d, best_i, limit) >= 0:
                    break
                Qc64 = Qc.astype(np.float64)  # too many candidates: this tile again
    out[:, :k] = np.sqrt(best_d)  # already sorted by (distance, id)
    out[:, k:] = best_i
    return out


# A float32 tile is scored again by a float64 GEMM when one of its queries has more
# candidates than _WIDEN_FACTOR·kk + _WIDEN_SLACK: rows far from the origin relative to
# their spread (large feature offsets) make q·x large against the gaps between rows, and
# the float32 rounding bound then admits many rows and prunes few.
_WIDEN_FACTOR = 8
_WIDEN_SLACK = 64


def _kernel_dtypes(Q, index):
    """Whether :func:`search_block` can use the numba kernel (float32/float64
    queries, rows and squared norms)."""
    ok = (np.float32, np.float64)
    if index.in_memory:
        X, sq = index.X, index.sq_norms
    else:
        X, _, sq = index._open()
    return Q.dtype in ok and X.dtype in ok and sq.dtype in ok


def _top_probes_block(dist, n_probe):
    if dist.shape[0] == 0:
        return np.empty((0, n_probe), dtype=np.int64)
    part = np.argpartition(dist, n_probe - 1, axis=1)[:, :n_probe]
    d = np.take_along_axis(dist, part, axis=1)
    return np.take_along_axis(part, np.argsort(d, axis=1, kind="stable"), axis=1)


def _center_sq_dist_block(block, C):
    c_sq = np.einsum("ij,ij->i", C, C, dtype=np.float64)
    return c_sq[None, :] - 2.0 * (block @ C.T)  # + ‖x‖², constant per row: same ranking


def center_sq_distances(Qd, centers):
    """Lazy ``‖c‖² − 2q·c`` (squared distance up to ‖q‖², which does not change
    the ranking of the centers), shape (n, K)."""
    C = broadcast(np.asarray(centers, dtype=Qd.dtype), "centers")
    return Qd.map_blocks(_center_sq_dist_block, C, chunks=(Qd.chunks[0], (centers.shape[0],)),
                         dtype=np.float64)


def probe_clusters(assign, n_probe):
    """Lazy ``(n, n_probe)`` probes from either labels ``(n,)`` or distances ``(n, K)``."""
    if assign.ndim == 1:
        return assign.astype(np.int64)[:, None]
    return assign.map_blocks(_top_probes_block, n_probe, chunks=(assign.chunks[0], (n_probe,)),
                             dtype=np.int64)


def query_block_rows(n_queries):
    """Rows per block of in-memory queries: one block per core, 1024–65536 rows.

    Every block reads each cluster it probes once from memory, so large
    blocks (many queries per cluster: larger GEMMs) amortise that read; one
    block per core keeps the cores busy.  (100k queries at K = 512, D = 2000,
    one thread, the search alone: blocks of 50,000 in 1.18 s, of 16,384 in
    1.46 s, of 4096 in 2.6 s — ``benchmarks/bench_cluster_search.py --block-rows``.)
    """
    return int(min(max(1024, -(-n_queries // cpu_count())), 65536, max(1, n_queries)))


def search(Qd, probes, index, n_neighbors, centers):
    """Lazy k-NN of the rows of ``Qd`` through ``index``.

    Parameters
    ----------
    Qd : dask array of shape (n_queries, n_features), chunked along rows only
    probes : dask array of shape (n_queries, n_probe), int, aligned with Qd
    index : InvertedIndex
    n_neighbors : int
    centers : ndarray of shape (n_clusters, n_features)

    Returns
    -------
    distances : dask array of shape (n_queries, n_neighbors), float64
    indices : dask array of shape (n_queries, n_neighbors), int64

    One task per block of queries; the index (or, Zarr-backed, its path) and
    the centers are broadcast once.  Memory per task: the query block, one
    tile of one cluster and the (block × n_neighbors) running best.
    """
    k = int(n_neighbors)
    idx = broadcast(index, "cluster-index")
    cen = broadcast(np.asarray(centers), "centers")
    probes = probes.rechunk({0: Qd.chunks[0], 1: -1})
    out = da.blockwise(search_block, "io", Qd, "if", probes, "ip", idx, None, k, None,
                       cen, None, new_axes={"o": 2 * k}, concatenate=True, dtype=np.float64,
                       name="dqkm-search-" + tokenize(Qd.name, probes.name, idx.key, k,
                                                      cen.key))
    return out[:, :k], out[:, k:].astype(np.int64)


def drop_self(dist, ind, ids, k):
    """Remove each query row's own id from its ``k + 1`` neighbours.

    Parameters
    ----------
    dist, ind : ndarray of shape (m, k + 1)
        Neighbours of indexed rows searched among all indexed rows.
    ids : ndarray of shape (m,) or (m, 1)
        The id of each query row.
    k : int

    Returns
    -------
    ndarray of shape (m, 2·k), float64: distances then ids, as :func:`search_block`.

    A row whose own id is not among its ``k + 1`` (duplicates with lower ids
    fill them all, or the row's cluster was not probed) drops its last
    neighbour instead: the result is the ``k`` nearest other rows found.
    """
    ind = np.asarray(ind)
    keep = ind != np.asarray(ids).reshape(-1, 1)
    absent = keep.all(axis=1)
    keep[absent, -1] = False
    out = np.empty((ind.shape[0], 2 * k), dtype=np.float64)
    out[:, :k] = np.asarray(dist)[keep].reshape(-1, k)
    out[:, k:] = ind[keep].reshape(-1, k)
    return out


# ============================================================================ Nyström
def landmark_products(X, op):
    """``X·Uᵀ`` for a landmark operator: a dense (K, D) ndarray, or any object
    with ``apply_rows`` (sparse factors, Hadamard landmarks).  Always a new
    array (:func:`nystroem_block` overwrites it)."""
    if isinstance(op, np.ndarray):
        return X @ op.T
    return op.apply_rows(X)


def kernel_from_products(P, x_sq, u_sq, kernel, gamma, overwrite=False):
    """Kernel values from inner products: ``P[i, k] = x_i·u_k``.

    'linear': ``P``; 'rbf': ``exp(min(2γP − γ‖x‖² − γ‖u‖², 0))`` =
    ``exp(−γ·max(‖x‖² − 2P + ‖u‖², 0))``, computed in ``P``'s dtype in place
    of ``P`` when ``overwrite`` (no temporary of P's size), else in a copy.
    """
    if kernel == "linear":
        return P
    d = P if overwrite else P.copy()
    d *= 2.0 * gamma
    d -= (gamma * np.asarray(x_sq, dtype=np.float64)).astype(d.dtype)[:, None]
    d -= (gamma * np.asarray(u_sq, dtype=np.float64)).astype(d.dtype)[None, :]
    np.minimum(d, 0, out=d)
    return np.exp(d, out=d)


# rows per piece of a Nyström block: its (rows × K) products stay in cache
# through the kernel's elementwise passes and the K × K product
_NYSTROEM_ROWS = 1024


def nystroem_block(block, state):
    """Nyström features of one block: ``k(block, U) · Nᵀ``, in the block's dtype.

    Computed ``_NYSTROEM_ROWS`` rows at a time, the kernel values in place of
    the products: on 50,000 × 2000 float32 rows, K = 512, one thread, 1.67 →
    1.13 s with dense landmarks and 0.55 → 0.46 s with sparse factors, against
    the whole block at once with temporaries.
    """
    op, u_sq, normalization, kernel, gamma = state
    m = block.shape[0]
    out = np.empty((m, normalization.shape[0]), dtype=block.dtype)
    norm_t = None
    for a in range(0, m, _NYSTROEM_ROWS):
        piece = block[a:a + _NYSTROEM_ROWS]
        P = landmark_products(piece, op)
        if norm_t is None:
            norm_t = np.ascontiguousarray(normalization.T, dtype=P.dtype)
        x_sq = np.einsum("ij,ij->i", piece, piece, dtype=np.float64)
        C = kernel_from_products(P, x_sq, u_sq, kernel, gamma, overwrite=True)
        out[a:a + piece.shape[0]] = C @ norm_t
    return out


def nystroem_map(Xd, op, u_sq, normalization, kernel, gamma):
    """Lazy Nyström feature map of the rows of ``Xd``, shape (n, n_components).

    The landmark state (operator, ‖u‖², the K×K normalisation) is broadcast
    once; one task per block; memory per task: the block and n_block × K.  A
    block whose features come out non-finite (NaN or infinity in X) raises
    :class:`~dqkm.exceptions.DataError` when it is computed.
    """
    st = broadcast((op, np.asarray(u_sq), np.asarray(normalization), kernel, gamma),
                   "nystroem")
    n_out = normalization.shape[0]
    return map_rows_at(Xd, _nystroem_checked, st, dtype=Xd.dtype, n_columns=n_out,
                       name="nystroem")


def _nystroem_checked(block, state, offset):
    # NaN or infinity in a row makes its features NaN: refused here, in the same task
    with np.errstate(invalid="ignore", over="ignore"):
        out = nystroem_block(block, state)
    return check_block(block, offset, out)
