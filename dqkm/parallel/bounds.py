"""Bound-pruned Lloyd passes on Dask: Hamerly's or Elkan's per-row bounds kept beside X.

:class:`BoundedPasses` runs the iterations of ``KMeans(algorithm='hamerly' |
'elkan')``.  Every pass is one blockwise map and one tree reduction, as a
Lloyd pass (:func:`dqkm.parallel.lloyd.lloyd_step`); in addition each row
block carries its rows' labels and bounds (:mod:`dqkm.kernels.bounds`) from
one pass to the next:

- X persisted (held in the workers' memory): the state of block ``i`` is a
  persisted task result on the worker that computed it, next to the block;
- X re-read every pass (``persist=False``): the state of block ``i`` is chunk
  ``i`` of a Zarr sidecar chunk-aligned with X (:mod:`dqkm.data.row_state`),
  one array per fit in a directory this module creates and removes (under
  the fit's checkpoint directory when it has one, else under the temporary
  directory), so memory stays bounded by a few chunks per worker.  Every
  pass rewrites the chunk of each block, stamped with a number no pass had
  before (:attr:`BoundedPasses.stamp`), and reads the chunks stamped by the
  last pass that completed (:attr:`BoundedPasses.holds`); a pass that fails
  gives its number up, so a chunk it (or a retried or outlived task) wrote is
  no state to a later pass, whose task scans that block in full.

Exactness does not depend on the state surviving.  The bounds of a block are
valid for the centers they were last updated with (:attr:`BoundedPasses.valid_for`)
and are moved by the exact center shifts, whatever the centers did in
between; a block without state (the first pass, a run's start, a resume from
a checkpoint, a file or a worker lost) is assigned by a full scan, which is a
plain Lloyd step.  The labels, float64 sums, counts and objective equal
those of :func:`~dqkm.parallel.lloyd.lloyd_step`, so the centers, inertia and
number of iterations do too.

Pruning is for dense blocks; CSR-chunked X, and float32 X above the Lloyd
kernel's direct-distance dimension, run the Lloyd pass (the caller dispatches,
see :func:`choose_algorithm`).  The bounds are checked against exact float64
distances, and the Lloyd kernels decide their near-ties by the same exact
distances (:func:`dqkm.kernels.lloyd.exact_sq_dist`), so the labels are the
Lloyd pass's on float32 and float64 data alike.  State per row in memory:
Hamerly 20 bytes (label, upper, one lower bound), Elkan ``12 + 8 K`` bytes
(one lower bound per center); in files every number is a float32, rounded
outward (12 and ``8 + 4 K`` bytes).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from ..data.row_state import (create_state_array, create_state_directory, read_block_state,
                              remove_block_states, remove_state_array, remove_state_directory,
                              write_block_state)
from ..kernels.bounds import (center_geometry, center_separations, elkan_partials,
                              hamerly_partials, pack_state)
from ..kernels.lloyd import certified_pass
from .engine import (PerBlock, active_client, blocks_held_in_memory, broadcast, compute,
                     compute_with_states, map_blocks_reduce, map_blocks_with_state)
from .finite import describe_bad, raise_bad
from .lloyd import (_block_inertia, _inertia_combine, _labels_array, _lloyd_combine, _moments,
                    check_lloyd_memory, tolerance_from_moments)

__all__ = ["BoundedPasses", "choose_algorithm", "held_in_memory", "BOUNDED_ALGORITHMS",
           "AUTO_MAX_FEATURES", "AUTO_MIN_CLUSTERS", "AUTO_MIN_CLUSTERS_MID", "AUTO_MIN_FEATURES",
           "AUTO_MIN_CLUSTERS_LOW", "AUTO_MIN_FEATURES_LOW"]

BOUNDED_ALGORITHMS = ("hamerly", "elkan")


def held_in_memory(X) -> bool:
    """Whether X's blocks are held in memory (a persisted array: its graph is its
    blocks' values or futures, no task that reads a store)."""
    return blocks_held_in_memory(X)


# 'auto' prunes with AUTO_MIN_CLUSTERS clusters or more at any dimension, from
# AUTO_MIN_CLUSTERS_MID clusters on from AUTO_MIN_FEATURES features, and from
# AUTO_MIN_CLUSTERS_LOW clusters on from AUTO_MIN_FEATURES_LOW features, up to
# AUTO_MAX_FEATURES features; see choose_algorithm.
AUTO_MIN_CLUSTERS = 128
AUTO_MIN_CLUSTERS_MID = 32
AUTO_MIN_FEATURES = 4
AUTO_MIN_CLUSTERS_LOW = 16
AUTO_MIN_FEATURES_LOW = 24
AUTO_MAX_FEATURES = 64


def choose_algorithm(algorithm, X, n_clusters) -> str:
    """The pass ``KMeans(algorithm=...)`` runs on X: 'lloyd', 'hamerly' or 'elkan'.

    - CSR-chunked X runs 'lloyd' (pruning is for dense blocks).
    - float32 X with more than ``dqkm.kernels.lloyd._DIRECT_MAX_D`` features runs
      'lloyd': there the Lloyd pass assigns by a float32 GEMM whose labels are
      not certified exact (every other dense Lloyd kernel's are), so the bounds
      could not promise its labels.
    - 'auto' is 'hamerly' for at most :data:`AUTO_MAX_FEATURES` features and
      at least :data:`AUTO_MIN_CLUSTERS` clusters, or at least
      :data:`AUTO_MIN_CLUSTERS_MID` clusters and :data:`AUTO_MIN_FEATURES`
      features, or at least :data:`AUTO_MIN_CLUSTERS_LOW` clusters and
      :data:`AUTO_MIN_FEATURES_LOW` features; else 'lloyd'.  Whole fits to
      convergence on 1M rows (benchmarks/bench_kmeans.py ``--converge --cases
      grid``): 'hamerly' took half of 'lloyd''s time or less at K = 256 from
      D = 2 on, and less at K = 64 from D = 8 on (a tie at D = 3, a loss at
      D = 2); at K = 16 below 24 features the Lloyd pass's direct kernel costs
      as little per row as the bounds' bookkeeping, while from 24 features
      'hamerly' took 0.69–0.89 × 'lloyd''s time with the GEMM kernel (runs of
      the grid); float32 X with fewer than 64 centers keeps the direct kernel
      up to 32 features, where 'hamerly' took as long as 'lloyd' at 24–28
      features and 0.77 × at 32 (K = 16, 1M rows).  'elkan' (n × K bounds) is
      never chosen by 'auto'.
    """
    if algorithm == "lloyd" or sp.issparse(getattr(X, "_meta", None)):
        return "lloyd"
    if not certified_pass(X.dtype, X.shape[1]):
        return "lloyd"
    if algorithm != "auto":
        return algorithm
    d = X.shape[1]
    if d <= AUTO_MAX_FEATURES and (
            n_clusters >= AUTO_MIN_CLUSTERS
            or (n_clusters >= AUTO_MIN_CLUSTERS_MID and d >= AUTO_MIN_FEATURES)
            or (n_clusters >= AUTO_MIN_CLUSTERS_LOW and d >= AUTO_MIN_FEATURES_LOW)):
        return "hamerly"
    return "lloyd"


# --------------------------------------------------------------------------- chunk level
def _unpack(state, n, k, kind):
    """(labels, upper, lower) from the 2-D float32 array a sidecar chunk holds:
    read-only views of its columns (the kernels convert their state as they copy
    it; Elkan's in-place update works on its float64 copy)."""
    if state is None:
        return None
    return state[:, 0], state[:, 1], (state[:, 2] if kind == "hamerly" else state[:, 2:])


def _fresh(n, k, kind):
    lower = np.zeros(n) if kind == "hamerly" else np.zeros((n, k))
    return np.full(n, -1, dtype=np.int32), np.zeros(n), lower


def _weighted(block, labels, mind, w, k):
    """Weighted sums and weight sums per cluster, and the weighted objective (float64)."""
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    n = block.shape[0]
    onehot = sp.csr_matrix((w, (labels, np.arange(n))), shape=(k, n))
    sums = np.asarray(onehot @ np.asarray(block, dtype=np.float64))
    counts = np.bincount(labels, weights=w, minlength=k)
    return sums, counts, float(w @ mind)


def _bounded_kernel(block, state, geom, spec, index, with_sums=True):
    """The kernel's result on one block from its state (read from the sidecar chunk
    stamped ``spec['read']`` when there is one, ``spec['array']``) and whether the
    block had none (``(result, fresh)``)."""
    kind, centers = spec["kind"], geom["centers"]
    n, k = block.shape[0], centers.shape[0]
    lower_shape = (n,) if kind == "hamerly" else (n, k)
    if spec["array"] is not None:
        state = None
        if spec["read"] is not None:
            state = _unpack(read_block_state(spec["array"], index, n, spec["read"]), n, k, kind)
    fresh = state is None or state[0].shape != (n,) or state[2].shape != lower_shape
    if fresh:
        state = _fresh(n, k, kind)  # no bounds yet: the kernel scans every center (Lloyd)
    # in place: the state is this pass's own (a re-run on it stays exact, see the kernels)
    if kind == "hamerly":
        return hamerly_partials(block, centers, *state, geom["shift"], geom["half_sep"],
                                with_sums=with_sums, copy=False), fresh
    return elkan_partials(block, centers, *state, geom["shift"], geom["half_sep"],
                          geom["separations"], copy=False, with_sums=with_sums), fresh


def _bounded_chunk(block, state, geom, weights, spec, index, offset):
    """One block's bounded step: ``(new_state, partial)``; with a sidecar
    (``spec['array']``) the state is read from the block's chunk if it holds the
    stamp ``spec['read']``, the new state is written there with the stamp
    ``spec['write']`` and ``new_state`` is None."""
    centers = geom["centers"]
    n, k = block.shape[0], centers.shape[0]
    res, fresh = _bounded_kernel(block, state, geom, spec, index)
    sums, counts, obj, labels, mind, upper, lower, skipped = res
    bad = None if np.isfinite(obj) else describe_bad(block, offset, mind, centers)
    if weights is not None and bad is None:
        sums, counts, obj = _weighted(block, labels, mind, weights, k)
    part = {"sums": sums, "counts": counts, "objective": obj, "bad": bad,
            "skipped": int(skipped), "distances": int(n) * int(k),
            "fresh_blocks": int(fresh and n > 0)}
    if spec["with_moments"]:
        part["moments"] = _moments(block)
    new_state = (labels, upper, lower)
    if spec["array"] is not None:
        write_block_state(spec["array"], index, pack_state(*new_state), spec["write"])
        new_state = None
    return new_state, part


def _final_chunk(block, state, geom, weights, spec, index, offset):
    """A fit's last pass on one block: ``(labels, (inertia, None))`` as
    :func:`~dqkm.parallel.lloyd.labels_and_inertia`'s block gives them (the same
    labels and distances, summed alike), the rows whose bounds hold not scanned."""
    res, _ = _bounded_kernel(block, state, geom, spec, index, with_sums=False)
    labels, mind = res[3], res[4]
    if not np.isfinite(mind).all():
        raise_bad(describe_bad(block, offset, mind, geom["centers"]))
    return labels, (_block_inertia(mind, weights), None)


def _sidecar_chunk(block, geom, weights, spec, index, offset):
    """:func:`_bounded_chunk` of a block whose state is in the sidecar: its partial."""
    return _bounded_chunk(block, None, geom, weights, spec, index, offset)[1]


def _combine(parts):
    out = _lloyd_combine(parts)
    out["skipped"] = sum(p["skipped"] for p in parts)
    out["distances"] = sum(p["distances"] for p in parts)
    out["fresh_blocks"] = sum(p["fresh_blocks"] for p in parts)
    return out


def _alive(block_state):
    """The persisted state of a block, or None if a worker lost it (the block is
    then recomputed by a full scan rather than by re-running earlier passes)."""
    if block_state is None:
        return None
    client = active_client()
    if client is None:
        return block_state
    from distributed import futures_of

    futures = futures_of(block_state)
    return block_state if all(f.status == "finished" for f in futures) else None


# --------------------------------------------------------------------------- driver level
class BoundedPasses:
    """Bound-pruned Lloyd steps over X, with each row block's bounds kept beside it.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features), dense, chunked along rows
    kind : {'hamerly', 'elkan'}
    split_every : int or None
        Fan-in of the tree reduction (None: 8).
    sample_weight : dask.array.Array of shape (n_samples,) or None
        Float weights with X's row chunks: the sums, counts (weight sums) and
        objective are weighted by them.
    in_memory : bool or None
        Keep the state in the workers' memory (True) or in files beside the data
        (False); None: in memory when X is persisted (:func:`held_in_memory`).
    directory : str or None
        Where the state directory is created with ``in_memory=False``
        (``KMeans.fit`` passes its checkpoint directory; None: Dask's
        ``temporary-directory``, else the system's temporary directory).  Only
        the state directory this object created is removed, by :meth:`close`.

    Attributes
    ----------
    valid_for : ndarray or None
        The centers the kept bounds are valid for (None: no bounds).
    stamp : int
        The number the last sidecar pass wrote its chunks with (each pass a new one).
    holds : int or None
        The stamp of the chunks that hold the bounds of ``valid_for`` (None: none).
    """

    def __init__(self, X, kind, *, split_every=None, sample_weight=None, in_memory=None,
                 directory=None):
        if kind not in BOUNDED_ALGORITHMS:
            raise ValueError(f"kind must be one of {BOUNDED_ALGORITHMS}; got {kind!r}.")
        self.X, self.kind, self.split_every = X, kind, split_every or 8
        self.xblocks = list(np.asarray(X.to_delayed(optimize_graph=True)).reshape(-1))
        self.wblocks = [None] * len(self.xblocks)
        if sample_weight is not None:
            self.wblocks = list(np.asarray(sample_weight.to_delayed()).reshape(-1))
        self.offsets = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
        self.in_memory = held_in_memory(X) if in_memory is None else bool(in_memory)
        self.base, self.directory, self.array = directory, None, None
        self.stamp = 0  # the last stamp handed to a pass (each pass gets a new one)
        self.reset()

    def reset(self):
        """Forget every block's bounds (the next pass scans all centers)."""
        self.blocks = [None] * len(self.xblocks)
        self.valid_for = None
        self.holds = None  # the stamp of the pass whose bounds the sidecar holds

    def drop_block(self, index):
        """Forget block ``index``'s bounds, as a lost worker or file would."""
        self.blocks[index] = None
        if self.array is not None:
            remove_block_states(self.array, [index])

    def step(self, centers, iteration, *, tol, tol_abs, relocate=None):
        """One Lloyd iteration with pruning: ``(new_centers, record, tol_abs)`` as
        :func:`~dqkm.parallel.lloyd.lloyd_step`; the record also holds
        ``skipped``, the share of row-center distances not computed, and
        ``blocks_without_bounds``, the number of non-empty blocks that had no
        state (the first pass, or state lost) and were scanned in full."""
        t0 = time.perf_counter()
        X = self.X
        centers = np.asarray(centers, dtype=X.dtype)
        geom = self._geometry(centers)
        res = self._pass(broadcast(geom, "bounds-geometry"), tol_abs is None, centers.shape[0])
        self.valid_for = centers
        if res["bad"]:
            self.reset()
            raise_bad(res["bad"])
        if tol_abs is None:
            tol_abs = tolerance_from_moments(res["moments"], tol)
        counts = res["counts"]
        empty = np.flatnonzero(counts == 0)
        new = centers.astype(np.float64, copy=True)
        nz = counts > 0
        new[nz] = res["sums"][nz] / counts[nz, None]
        info = {}
        if relocate is not None and empty.size:
            new, info = relocate(centers, res["sums"], counts)
        new = new.astype(X.dtype)
        moved = float(((new.astype(np.float64) - centers) ** 2).sum())
        rec = {"iteration": iteration, "objective": float(res["objective"]), "shift": moved,
               "seconds": time.perf_counter() - t0, "empty_clusters": empty.tolist(),
               "skipped": res["skipped"] / max(res["distances"], 1),
               "blocks_without_bounds": res["fresh_blocks"], **info}
        return new, rec, tol_abs

    def _geometry(self, centers):
        """What a pass's blocks need of ``centers`` and of their move since ``valid_for``."""
        half_sep, shift = center_geometry(centers, self.valid_for)
        geom = {"centers": np.ascontiguousarray(centers), "shift": shift, "half_sep": half_sep}
        if self.kind == "elkan":
            geom["separations"] = center_separations(centers)
        return geom

    def _pass(self, geom, with_moments, n_clusters):
        if not self.in_memory:
            return self._sidecar_pass(geom, with_moments, n_clusters)
        spec = {"kind": self.kind, "with_moments": with_moments, "array": None}
        prev = [_alive(p) for p in self.blocks]  # on the workers: None where one was lost
        # not a pure function of its inputs (Elkan updates its state in place): fresh keys
        bp = map_blocks_with_state(self.X, _bounded_chunk, _combine, split_every=self.split_every,
                                   args=(PerBlock(prev), geom, PerBlock(self.wblocks), spec),
                                   with_offsets=True, name="bounds", pure=False)
        # local threads: the blocks' states stay in this process; on a cluster they stay
        # on the workers (futures), next to the blocks that computed them; one compute
        res, self.blocks = compute_with_states(bp)
        return res

    def labels_and_inertia(self, centers):
        """A fit's last pass: :func:`~dqkm.parallel.lloyd.labels_and_inertia` of
        ``centers`` (the same labels and value, bit for bit), with the rows whose
        bounds prove their label not scanned; from a full scan where there are no
        bounds.  The bounds are used up (forgotten)."""
        X = self.X
        centers = np.ascontiguousarray(centers, dtype=X.dtype)
        check_lloyd_memory("KMeans final pass (labels and inertia)", X, len(centers),
                           weighted=self.wblocks[0] is not None)
        geom = self._geometry(centers)
        # in memory as the steps keep it; in files, each block reads its own chunk
        prev = [None if self.array is not None else _alive(b) for b in self.blocks]
        spec = {"kind": self.kind, "array": self.array, "read": self.holds}
        bp = map_blocks_with_state(X, _final_chunk, _inertia_combine, split_every=self.split_every,
                                   args=(PerBlock(prev), broadcast(geom, "bounds-geometry"),
                                         PerBlock(self.wblocks), spec),
                                   with_offsets=True, name="bounds-final", pure=False)
        (value, _), blocks = compute_with_states(bp)
        self.reset()
        return _labels_array(X, blocks, centers), float(value)

    def _sidecar_pass(self, geom, with_moments, n_clusters):
        """A pass whose blocks read their bounds from the sidecar chunks stamped
        ``self.holds`` and write the new ones stamped with a number no pass had:
        if it fails, its stamp is given up and ``self.holds`` still names the
        bounds of ``self.valid_for`` (a chunk it rewrote is no state for the next
        pass, which scans that block in full)."""
        width = 3 if self.kind == "hamerly" else 2 + int(n_clusters)
        if self.array is None or self.array.width != width:
            self._new_array(width)
        self.stamp += 1
        spec = {"kind": self.kind, "with_moments": with_moments, "array": self.array,
                "read": self.holds, "write": self.stamp}
        # the stamp makes the keys new every pass (the tasks read and write files)
        (res,) = compute(map_blocks_reduce(self.X, _sidecar_chunk, _combine,
                                           args=(geom, PerBlock(self.wblocks), spec),
                                           split_every=self.split_every, with_offsets=True,
                                           name="bounds-files"))
        self.holds = self.stamp
        return res

    def _new_array(self, width):
        """The sidecar array of ``width`` values per row, in a new state directory
        (an array of another width is removed with its directory, first)."""
        self._remove_files()
        self.holds = None
        self.directory = create_state_directory(self.base)
        self.array = create_state_array(self.directory, self.X.chunks[0], width, "float32")

    def _remove_files(self):
        if self.array is not None:
            remove_state_array(self.array, len(self.xblocks))
            self.array = None
        if self.directory is not None:
            remove_state_directory(self.directory)
            self.directory = None

    def close(self):
        """Drop the state: release the workers' copies and remove the state files
        (only those the sidecar names, then the directories left empty)."""
        self.reset()
        self._remove_files()
