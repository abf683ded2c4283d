"""K-Multiple-Means and F-KMM on Dask: the iteration driver.

Every step is one pass over X.  The driver's small state (prototypes, their
rank-d′ projections, β, the prototype side of F or of the components) is
broadcast once; each chunk finds its rows' l+1 nearest prototypes, their CAN
weights (the rows of S, kept on the workers as persisted blocks of shape
n_b × l), and returns its partial ``SᵀS`` (sparse m × m), column sums and
``SᵀX``; the partials are tree-reduced and come back in the step's single
``compute``.  The driver then finds the components, updates β and, when
b < c, computes the prototype side of F (Algorithm 2, or the reference SVD).
The data side of F is never gathered by F-KMM: a chunk rebuilds its rows as
``u_i = Σ_j s̃_ij q_j / √λ`` (Lemma 4.1) from its own stored rows of S.

Memory per worker: a few chunks of X plus, per chunk, l·(int32 + float64)
per row for S and (F-KMM) d′ + 2 floats per row for the projections and
K = l + 6 int32 + 1 float per row for the prototypes kept for the next pass.
A chunk task runs its rows in tiles of bounded bytes, so its temporaries are
one tile's; before the first pass the memory one task needs is checked
against the workers' (:mod:`dqkm.parallel.kmm_tiles`,
:func:`dqkm.parallel.memory.check_task_memory`).

Checkpoints: ``kmm(..., on_iteration=...)`` hands over a :class:`KMMState`
after every outer iteration (the driver state and the persisted per-chunk
rows, which :func:`write_rows` stores from the workers), and
``kmm(..., start=state)`` continues from one (rows from :func:`read_rows`).

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024,
Algorithms 1–4 and 7.
"""

from __future__ import annotations

import logging
import operator
import os
import time
import uuid
import warnings
from dataclasses import dataclass, field

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr
from dask.delayed import delayed
from dask.highlevelgraph import HighLevelGraph
from sklearn.exceptions import ConvergenceWarning

from ..kernels.kmm import (MODE_COMPONENTS, MODE_EXTRA, MODE_FULL, MODE_NONE, SpectralTerm,
                           can_weights, nearest_prototypes, project, spectral_rows)
from ..kernels.kmm_init import outlier_mask, outlier_threshold
from ..kernels.kmm_spectral import (ChunkStatistics, block_eigen, chunk_statistics, components,
                                    SVD_ALGORITHMS, merge_statistics, prototype_matrix,
                                    reference_svd)
from ..kernels.lloyd import assign_labels
from ..kernels.tiles import row_tiles
from .engine import broadcast, compute, map_rows, one_blas_thread, tree_reduce
from .finite import raise_nonfinite
from .kmm_tiles import concat_rows, kmm_memory, slice_rows
from .memory import check_resident_memory, check_task_memory

logger = logging.getLogger(__name__)

__all__ = ["KMMResult", "KMMState", "describe_row_chunks", "kmm", "predict_labels",
           "prototype_distances", "read_rows", "write_rows"]

_SQRT_HALF = np.sqrt(0.5)
#: F-KMM keeps the K = l + 1 + this many nearest prototypes of every row for the next
#: pass (its seeds, and the rows whose scan the bound on D_E outside them can skip)
_EXTRA_KEPT = 5


# --------------------------------------------------------------------------- chunk level
def _spectral_term(state, prev, U_block, n_rows):
    mode = state["mode"]
    m = state["A"].shape[0]
    if mode == MODE_NONE:
        return SpectralTerm.none(n_rows, m)
    qcomp = state["proto_comp"]
    inv_n = state["inv_n"]
    qinv = np.where(qcomp >= 0, inv_n[np.maximum(qcomp, 0)], 0.0)
    idx, w = prev["idx"], prev["w"]
    first = idx[:, 0]
    pcomp = np.where(first >= 0, qcomp[np.maximum(first, 0)], -1)
    pinv = np.where(pcomp >= 0, inv_n[np.maximum(pcomp, 0)], 0.0)
    if mode == MODE_COMPONENTS:
        F = np.zeros((n_rows, 0))
        G = np.zeros((m, 0))
    elif mode == MODE_EXTRA:  # f_i = Σ_j s_ij·(√2/2)·q_j/(√d[n+j]·√λ)  (Lemma 4.1, eq. 8)
        F = spectral_rows(np.ascontiguousarray(idx), np.ascontiguousarray(w, dtype=np.float64),
                          np.ascontiguousarray(state["Wmap"], dtype=np.float64))
        G = state["Gmap"]
    else:  # MODE_FULL: the reference's U rows, f_i/√d[i]
        rowsum = w.sum(axis=1)
        F = np.zeros_like(U_block)
        ok = rowsum > 0
        F[ok] = _SQRT_HALF * U_block[ok] / np.sqrt(rowsum[ok])[:, None]
        G = state["Gmap"]
    return SpectralTerm(mode, state["beta"], pcomp, pinv, qcomp, qinv, F, G)


def _kmm_chunk(block, prev, U_block, state):
    """One chunk's pass, row tile by row tile (temporaries of one tile at a time)."""
    X = np.asarray(block)
    tiles = row_tiles(X.shape[0], state["tile_row_bytes"])
    if len(tiles) <= 1:
        return _kmm_tile(X, prev, U_block, state)
    rows, part = [], None
    for lo, hi in tiles:
        new, p = _kmm_tile(X[lo:hi], slice_rows(prev, lo, hi), None if U_block is None
                           else U_block[lo:hi], state)
        rows.append(new)
        part = p if part is None else _combine([part, p])
    return concat_rows(rows), part


def _kmm_tile(X, prev, U_block, state):
    n_rows = X.shape[0]
    ell = state["n_neighbors"]
    pruned = state["pruned"]
    bad = None
    if prev is None:  # first pass: finiteness, projections, outliers
        if not np.isfinite(X).all():
            bad = "NaN" if np.isnan(X).any() else "infinity"
            X = np.where(np.isfinite(X), X, 0)  # the pass still runs; fit raises after it
        lb_rows = project(X, state["mu"], state["V"]) if pruned else None
        skip = np.zeros(n_rows, bool)
    else:
        lb_rows = prev["lb"]
        skip = prev["skip"]
    term = _spectral_term(state, prev, U_block, n_rows)
    lb = (lb_rows + state["lb_protos"]) if pruned else None
    # the previous pass's K nearest seed the pruned search, and its bound on D_E
    # outside them lets a row skip the scan (same result, less work)
    m = state["A"].shape[0]
    n_keep = min(ell + 1 + _EXTRA_KEPT, m) if pruned else None
    seeds = bound = None
    if pruned and prev is not None and prev.get("keep") is not None \
            and prev["keep"].shape[1] == n_keep:
        seeds, bound = prev["keep"], prev["low"]
    nb = nearest_prototypes(X, state["A"], ell, term, skip=skip, pruned=pruned, lb=lb,
                            seeds=seeds, n_keep=n_keep, bound=bound, moves=state["moves"])
    dist, de, idx_all = nb.distances, nb.exact_de, nb.indices
    if prev is None and state["theta"] is not None:  # Algorithm 7
        skip = outlier_mask(de, state["theta"], ell)
        idx_all = np.where(skip[:, None], -1, idx_all)
        dist = np.where(skip[:, None], np.inf, dist)
    W, alpha = can_weights(dist)
    idx = np.ascontiguousarray(idx_all[:, :ell])
    stats = chunk_statistics(X, idx, W, state["A"].shape[0])
    nearest = idx[:, 0]
    if prev is None:
        ref = nearest.copy()
    elif state["new_ref"]:
        ref = prev["idx"][:, 0]
    else:
        ref = prev["ref"]
    live = ~skip
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite X is reported below
        Dl = np.where(live[:, None], dist[:, :ell], 0.0)
        sum_wd = float((W * Dl).sum())
    part = {
        "stats": stats,
        "alpha": float(alpha[live].sum()),
        "n_in": int(live.sum()),
        "n_out": int(skip.sum()),
        "sum_wd": sum_wd,
        "sum_w2": float((W * W).sum()),
        "n_exact": nb.n_exact,
        "n_pairs": nb.n_pairs,
        "changed": int((nearest[live] != ref[live]).sum()),
        "bad": bad,
    }
    new = {"idx": idx, "w": W, "ref": ref, "skip": skip, "lb": lb_rows,
           "nxt": np.ascontiguousarray(idx_all[:, ell]),
           "keep": nb.keep if pruned else np.zeros((n_rows, 0), np.int32),
           "low": nb.low if pruned else np.zeros(n_rows)}
    return new, part


def _combine(parts):
    out = dict(parts[0])
    out["stats"] = merge_statistics([p["stats"] for p in parts])
    for key in ("alpha", "n_in", "n_out", "sum_wd", "sum_w2", "n_exact", "n_pairs", "changed"):
        out[key] = sum(p[key] for p in parts)
    out["bad"] = next((p["bad"] for p in parts if p["bad"]), None)
    return out


def _theta_chunk(block, state):
    """Σ‖x − a‖, Σ D_E and count over every row's l nearest prototypes (Alg. 7, line 3)."""
    X = np.asarray(block)
    return _theta_combine([_theta_tile(X[lo:hi], state)
                           for lo, hi in row_tiles(X.shape[0], state["tile_row_bytes"])]
                          or [(0.0, 0.0, 0, None)])


def _theta_tile(X, state):
    ell = state["n_neighbors"]
    pruned = state["pruned"]
    lb = (project(X, state["mu"], state["V"]) + state["lb_protos"]) if pruned else None
    nb = nearest_prototypes(X, state["A"], ell, SpectralTerm.none(X.shape[0], state["A"].shape[0]),
                            pruned=pruned, lb=lb)
    de = nb.exact_de[:, :ell]
    ok = np.isfinite(de)
    bad = None if np.isfinite(X).all() else "NaN or infinity"
    return (float(np.sqrt(de[ok]).sum()), float(de[ok].sum()), int(ok.sum()), bad)


def _theta_combine(parts):
    return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts),
            next((p[3] for p in parts if p[3]), None))


def _field(st, name):
    return st[name]


def _labels_block(st, proto_comp):
    first = st["idx"][:, 0]
    return np.where(first >= 0, proto_comp[np.maximum(first, 0)], -1).astype(np.int64)


# nxt: the (l+1)-th neighbour; keep, low: the K nearest kept for the next pass and the
# bound on D_E outside them (fast; empty for the reference)
_ROW_FIELDS = ("idx", "w", "ref", "skip", "nxt", "keep", "low")
_LB_FIELDS = ("lb_t", "lb_perp", "lb_norm2")  # the rows' rank-d′ projections (fast only)


def _write_rows_block(st, path):
    """Store one chunk's per-row state as the Zarr v3 group ``path`` (on a worker)."""
    arrays = {k: st[k] for k in _ROW_FIELDS}
    if st["lb"] is not None:
        arrays.update(zip(_LB_FIELDS, st["lb"]))
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for k, v in arrays.items():
        v = np.ascontiguousarray(v)
        group.create_array(k, data=v, chunks=tuple(max(s, 1) for s in v.shape),
                           compressors=None)
    return int(st["idx"].shape[0])


def _read_rows_block(path):
    """One chunk's per-row state back from :func:`_write_rows_block`'s group."""
    group = zarr.open_group(path, mode="r")
    st = {k: np.asarray(group[k][...]) for k in _ROW_FIELDS if k in group}
    if "keep" not in st or "nxt" not in st:  # written before these fields existed
        st["keep"], st["low"] = None, None  # (keep came after nxt): the search seeds itself
    if "nxt" not in st:
        st["nxt"] = np.full(st["idx"].shape[0], -1, np.int32)
    st["lb"] = (tuple(np.asarray(group[k][...]) for k in _LB_FIELDS)
                if _LB_FIELDS[0] in group else None)
    return st


def describe_row_chunks(sizes):
    """``'6 row chunks of 500'`` or ``'3 row chunks (500, 500, 200)'`` (shortened)."""
    sizes = [int(x) for x in sizes]
    n = f"{len(sizes)} row chunk{'s' if len(sizes) != 1 else ''}"
    if sizes and len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0]:
        tail = "" if sizes[-1] == sizes[0] else f", the last {sizes[-1]}"
        return f"{n} of {sizes[0]}{tail}"
    shown = ", ".join(map(str, sizes[:6])) + (", ..." if len(sizes) > 6 else "")
    return f"{n} ({shown})"


def _rows_path(directory, i):
    return os.path.join(directory, "rows", f"{i:06d}")


def write_rows(rows, directory):
    """Write the persisted per-chunk rows of S under ``directory/rows/NNNNNN/``.

    Each chunk's neighbours ``idx``, weights ``w``, (l+1)-th neighbours
    ``nxt``, reference nearest prototypes ``ref``, outlier flags ``skip`` and
    (fast) projections
    ``lb_t``/``lb_perp``/``lb_norm2`` become one Zarr v3 group, written by the
    worker that holds the chunk (one task per chunk, one compute for all):
    on a multi-machine cluster ``directory`` must be on a filesystem every
    worker and the driver share, like the Zarr data itself.

    Parameters
    ----------
    rows : list of Delayed
        ``KMMState.rows``.
    directory : str
        An existing local directory (a checkpoint's new ``iter-*`` group).

    Returns
    -------
    list of int
        The number of rows of each chunk.
    """
    directory = os.path.abspath(str(directory))
    zarr.open_group(os.path.join(directory, "rows"), mode="w", zarr_format=3)
    token = uuid.uuid4().hex[:12]
    tasks = [delayed(_write_rows_block, pure=False)(b, _rows_path(directory, i),
                                                    dask_key_name=f"dqkm-kmm-save-{token}-{i}")
             for i, b in enumerate(rows)]
    return [int(n) for n in compute(*tasks)]


def read_rows(directory, n_blocks):
    """The rows written by :func:`write_rows` as ``n_blocks`` delayed load tasks
    (run by the workers, one per chunk), persisted: the ``rows`` of a
    :class:`KMMState`.  ``directory`` must be readable by every worker."""
    directory = os.path.abspath(str(directory))
    token = uuid.uuid4().hex[:12]
    tasks = [delayed(_read_rows_block, pure=False)(_rows_path(directory, i),
                                                   dask_key_name=f"dqkm-kmm-load-{token}-{i}")
             for i in range(n_blocks)]
    return list(dask.persist(*tasks))


# --------------------------------------------------------------------------- graph level
class _Passes:
    """Runs one pass over X and keeps the rows of S persisted on the workers."""

    def __init__(self, X, split_every):
        self.X = X
        self.split_every = split_every
        self.xblocks = list(np.asarray(X.to_delayed(optimize_graph=True)).reshape(-1))
        self.sizes = [int(s) for s in X.chunks[0]]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.blocks = [None] * len(self.xblocks)

    def run(self, state, U=None):
        token = uuid.uuid4().hex[:12]
        bstate = broadcast(state, "kmm-state")
        outs, parts = [], []
        for i, xb in enumerate(self.xblocks):
            ub = None if U is None else U[self.offsets[i]:self.offsets[i + 1]]
            o = delayed(_kmm_chunk, pure=True)(xb, self.blocks[i], ub, bstate,
                                               dask_key_name=f"dqkm-kmm-{token}-{i}")
            outs.append(delayed(operator.getitem, pure=True)(
                o, 0, dask_key_name=f"dqkm-kmm-rows-{token}-{i}"))
            parts.append(delayed(operator.getitem, pure=True)(
                o, 1, dask_key_name=f"dqkm-kmm-part-{token}-{i}"))
        red = tree_reduce(parts, _combine, self.split_every or 8, name="kmm-combine")
        persisted = dask.persist(*outs, red)
        self.blocks = list(persisted[:-1])
        (res,) = compute(persisted[-1])
        if res["bad"]:
            raise_nonfinite(res["bad"])
        return res

    def theta(self, state):
        bstate = broadcast(state, "kmm-theta")
        token = uuid.uuid4().hex[:12]
        parts = [delayed(_theta_chunk, pure=True)(xb, bstate, dask_key_name=f"dqkm-kmm-theta-{token}-{i}")
                 for i, xb in enumerate(self.xblocks)]
        red = tree_reduce(parts, _theta_combine, self.split_every or 8, name="kmm-theta-combine")
        (res,) = compute(red)
        if res[3]:
            raise_nonfinite(res[3])
        return outlier_threshold(res[0], res[1], res[2])

    def gather_S(self, m):
        """The whole n × m matrix S on the driver (the reference solver only)."""
        rows = compute(*[delayed(_field)(b, "idx") for b in self.blocks],
                       *[delayed(_field)(b, "w") for b in self.blocks])
        idx = np.concatenate(rows[:len(self.blocks)])
        w = np.concatenate(rows[len(self.blocks):])
        n = idx.shape[0]
        keep = (idx >= 0) & (w > 0)
        return sp.csr_matrix((w[keep], (np.nonzero(keep)[0], idx[keep])), shape=(n, m))

    def rows(self, fn, *args, dtype, ncols=None):
        """A lazy Dask array built blockwise from the persisted rows of S
        (one block per block of X, empty blocks included)."""
        name = f"dqkm-kmm-rows-{uuid.uuid4().hex}"
        dsk = {}
        for i, b in enumerate(self.blocks):
            key = (name, i) if ncols is None else (name, i, 0)
            dsk[key] = (fn, b.key, *args)
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=self.blocks)
        chunks = (tuple(self.sizes),) if ncols is None else (tuple(self.sizes), (ncols,))
        return da.Array(graph, name, chunks, dtype=dtype)


# --------------------------------------------------------------------------- the loop
@dataclass(frozen=True)
class KMMResult:
    """What :func:`kmm` returns.

    Attributes
    ----------
    prototypes : ndarray of shape (m, d), float64
        The prototypes that produced the final S.
    proto_comp : ndarray of shape (m,)
        Component (cluster) of each prototype; −1 for prototypes with no point.
    n_components : int
        b of the final S.
    labels : dask array of shape (n,), int64
        Component of every row (−1: outlier).
    neighbors, weights : dask arrays of shape (n, l)
        The rows of S (indices −1 and weights 0 for outliers).
    beta, alpha : float
    n_iter : int
    converged : bool
    n_outliers : int
    theta : float or None
    history : list of dict
    """

    prototypes: np.ndarray
    proto_comp: np.ndarray
    n_components: int
    labels: da.Array
    neighbors: da.Array
    weights: da.Array
    beta: float
    alpha: float
    n_iter: int
    converged: bool
    n_outliers: int
    theta: float | None
    history: list = field(default_factory=list)


@dataclass(frozen=True)
class KMMState:
    """The state of :func:`kmm` after an outer iteration: what a checkpoint holds.

    Continuing from it (``kmm(..., start=state)``) gives the same result, bit
    for bit, as the uninterrupted loop.  The components, the prototype side
    of D_F and F are recomputed from ``stats`` (deterministically).

    Attributes
    ----------
    iteration : int
        t, the outer iterations done.
    prototypes : ndarray of shape (m, d), float64
        The prototypes that produced the current S.
    beta, alpha : float
    theta : float or None
        θ of Algorithm 7 (``detect_outliers``).
    n_outliers : int
    stats : ChunkStatistics
        SᵀS, column sums and SᵀX of the current S (what eq. 14 and the next
        F need).
    scalars : dict
        The other sums of the last pass (``sum_wd``, ``changed``, …).
    history : list of dict
    unmet : list of int
        Outer iterations that ended with b ≠ c.
    converged : bool
    rng_state : dict
        ``rng.bit_generator.state`` at the end of the iteration.
    rows : list of Delayed
        The per-chunk rows of S (and their per-row companions), persisted on
        the workers; see :func:`write_rows` and :func:`read_rows`.
    row_chunks : tuple of int
        The row chunks of X the rows belong to.
    """

    iteration: int
    prototypes: np.ndarray
    beta: float
    alpha: float
    theta: float | None
    n_outliers: int
    stats: ChunkStatistics
    scalars: dict
    history: list
    unmet: list
    converged: bool
    rng_state: dict
    rows: list
    row_chunks: tuple

    def pack(self):
        """``(arrays, meta)`` for a checkpoint (``rows`` excepted: :func:`write_rows`)."""
        sts = sp.csr_matrix(self.stats.sts)
        arrays = {"prototypes": self.prototypes, "sts_data": sts.data,
                  "sts_indices": sts.indices, "sts_indptr": sts.indptr,
                  "colsum": self.stats.colsum, "stx": self.stats.stx}
        meta = {"iteration": int(self.iteration), "beta": float(self.beta),
                "alpha": float(self.alpha), "theta": self.theta,
                "n_outliers": int(self.n_outliers), "scalars": self.scalars,
                "history": self.history, "unmet": list(self.unmet),
                "converged": bool(self.converged), "rng": self.rng_state,
                "row_chunks": [int(x) for x in self.row_chunks]}
        return arrays, meta

    @classmethod
    def unpack(cls, arrays, meta, rows):
        """The state from :meth:`pack`'s ``(arrays, meta)`` and the rows of
        :func:`read_rows`."""
        m = arrays["colsum"].shape[0]
        sts = sp.csr_matrix((arrays["sts_data"], arrays["sts_indices"], arrays["sts_indptr"]),
                            shape=(m, m))
        stats = ChunkStatistics(sts, arrays["colsum"], arrays["stx"])
        return cls(iteration=int(meta["iteration"]), prototypes=arrays["prototypes"],
                   beta=float(meta["beta"]), alpha=float(meta["alpha"]),
                   theta=None if meta["theta"] is None else float(meta["theta"]),
                   n_outliers=int(meta["n_outliers"]), stats=stats,
                   scalars=dict(meta["scalars"]), history=list(meta["history"]),
                   unmet=list(meta["unmet"]), converged=bool(meta["converged"]),
                   rng_state=meta["rng"], rows=list(rows),
                   row_chunks=tuple(int(x) for x in meta["row_chunks"]))


def _proto_side(A, mu, V, pruned):
    if not pruned:
        return None
    at, aperp, an2 = project(A, mu, V)
    return (at, aperp, an2)


def kmm(X, prototypes, *, n_clusters, n_neighbors=5, solver="fast", mu=None, V=None,
        max_iter=30, max_inner_iter=30, detect_outliers=False, split_every=None, rng=None,
        dense_svd_max=40_000_000, svd_algorithm="auto", callback=None, on_iteration=None,
        start=None):
    """K-Multiple-Means (``solver='svd'``) or F-KMM (``solver='fast'``) on a Dask array.

    Passes over X: one (β = 0, Algorithm 4 line 8), one more with
    ``detect_outliers`` (θ of Algorithm 7), then one per inner step (β update)
    and one per prototype update.  Each outer iteration ends with b = c (or
    ``max_inner_iter`` steps, with a ``ConvergenceWarning``); the loop stops
    after an outer iteration (≥ 2) in which no row changed its nearest
    prototype, or at ``max_iter``.

    Parameters
    ----------
    X : dask array of shape (n, d), chunked along rows
    prototypes : ndarray of shape (m, d)
        Initial prototypes (ignored with ``start``).
    n_clusters : int
    n_neighbors : int
    solver : {'fast', 'svd'}
    mu, V : centre and rank-d′ basis (required by 'fast')
    max_iter, max_inner_iter : int
    detect_outliers : bool
    split_every : int or None
    rng : numpy.random.Generator
        Start vectors of the Lanczos / ARPACK solvers.
    dense_svd_max : int
        With ``svd_algorithm='auto'`` the reference uses a dense SVD of S̃
        while n·m is at most this, ARPACK above.
    svd_algorithm : {'auto', 'dense', 'arpack'}
        The reference's SVD of S̃ (:func:`~dqkm.kernels.kmm_spectral.reference_svd`);
        unused by 'fast'.
    callback : callable, optional
        ``callback(record)`` after every outer iteration.
    on_iteration : callable, optional
        ``on_iteration(state)`` with the :class:`KMMState` after every outer
        iteration, before ``callback`` (checkpointing).
    start : KMMState, optional
        Continue from this state (``prototypes``, ``detect_outliers``' θ and
        the first pass are taken from it; ``rng`` is set to its state); the
        result is the same as the uninterrupted loop's.  A state that has
        converged or reached ``max_iter`` only gives its result.

    Returns
    -------
    KMMResult
    """
    if svd_algorithm not in SVD_ALGORITHMS:
        raise ValueError(f"svd_algorithm must be one of {list(SVD_ALGORITHMS)}. "
                         f"Got {svd_algorithm!r} instead.")
    rng = np.random.default_rng(0) if rng is None else rng
    c = int(n_clusters)
    ell = int(n_neighbors)
    pruned = solver == "fast"
    A = np.array(prototypes if start is None else start.prototypes, dtype=np.float64, copy=True)
    m = A.shape[0]
    passes = _Passes(X, split_every)
    mem = kmm_memory(X, m, ell, c, V.shape[1] if pruned else 0, pruned, _EXTRA_KEPT)
    check_task_memory("KMultipleMeans pass", mem.parts(max(passes.sizes, default=0)),
                      mem.knobs(X))
    check_resident_memory("KMultipleMeans", mem.resident(X.shape[0]), mem.resident_knobs())

    def base_state(A, beta, mode, **kw):
        st = {"A": A, "n_neighbors": ell, "pruned": pruned, "mu": mu, "V": V, "moves": None,
              "tile_row_bytes": mem.tile_row_bytes,
              "lb_protos": _proto_side(A, mu, V, pruned), "beta": float(beta), "mode": mode,
              "theta": None, "new_ref": False, "proto_comp": None, "inv_n": None,
              "Wmap": None, "Gmap": None}
        st.update(kw)
        return st

    if start is None:
        theta = None
        if detect_outliers:
            theta = passes.theta(base_state(A, 0.0, MODE_NONE))
        t0 = time.perf_counter()
        res = passes.run(base_state(A, 0.0, MODE_NONE, theta=theta))
        n_out = res["n_out"]
        if res["n_in"] == 0:
            raise ValueError("Every sample was marked as an outlier; nothing left to cluster.")
        alpha = res["alpha"] / res["n_in"]
        beta = alpha  # Algorithm 4, line 9: set once, never reset
        comps = components(res["stats"].sts, res["stats"].colsum)
        step = {"beta": [0.0], "n_components": [comps.n_components],
                "seconds": [time.perf_counter() - t0], "exact": res["n_exact"],
                "pairs": res["n_pairs"], "eig_computed": 0, "eig_naive": 0, "eig_lemma": 0,
                "spectral_seconds": 0.0, "f_updates": 0}
        history, unmet, converged, t_done = [], [], False, 0
    else:
        if tuple(start.row_chunks) != tuple(passes.sizes) or len(start.rows) != len(passes.sizes):
            raise ValueError(f"The state to continue from holds the rows of S of X in "
                             f"{describe_row_chunks(start.row_chunks)}, but X is in "
                             f"{describe_row_chunks(passes.sizes)}; rechunk X as it was.")
        beta, alpha, theta, n_out = start.beta, start.alpha, start.theta, start.n_outliers
        res = dict(start.scalars, stats=start.stats)
        comps = components(res["stats"].sts, res["stats"].colsum)
        passes.blocks = list(start.rows)
        rng.bit_generator.state = start.rng_state
        step = None  # every iteration after the first starts a new one
        history, unmet = list(start.history), list(start.unmet)
        converged, t_done = start.converged, start.iteration

    def spectral_state(res, comps):
        """D_F's prototype side from the current S: eq. (56) if b ≥ c, else F."""
        b = comps.n_components
        inv_n = 1.0 / comps.sizes
        kw = {"proto_comp": comps.proto_comp, "inv_n": inv_n}
        if b >= c:
            return dict(kw, mode=MODE_COMPONENTS), None, None
        colsum = res["stats"].colsum
        inv_sqrt = np.zeros(m)
        inv_sqrt[colsum > 0] = 1.0 / np.sqrt(colsum[colsum > 0])
        if pruned:
            M = prototype_matrix(res["stats"].sts, colsum)
            with one_blas_thread():  # small blocks: 1 thread is best
                eig = block_eigen(M, comps, colsum, c, rng)
            keep = (~eig.is_lemma) & (eig.values > 0)
            Q = eig.vectors[:, keep]
            G = _SQRT_HALF * Q * inv_sqrt[:, None]
            Wmap = G / np.sqrt(eig.values[keep])[None, :]
            return dict(kw, mode=MODE_EXTRA, Gmap=G, Wmap=Wmap), None, eig
        S = passes.gather_S(m)
        rowsum = np.asarray(S.sum(axis=1)).ravel()
        inv_r = np.zeros_like(rowsum)
        inv_r[rowsum > 0] = 1.0 / np.sqrt(rowsum[rowsum > 0])
        S_t = sp.diags(inv_r) @ S @ sp.diags(inv_sqrt)
        U, _, Vc = reference_svd(S_t, c, dense_max=dense_svd_max, rng=rng,
                                 algorithm=svd_algorithm)
        G = _SQRT_HALF * Vc * inv_sqrt[:, None]
        return dict(kw, mode=MODE_FULL, Gmap=G), U, None

    def do_pass(A, beta, res, comps, new_ref, moves=None):
        t1 = time.perf_counter()
        kw, U, eig = spectral_state(res, comps)
        step["spectral_seconds"] += time.perf_counter() - t1
        step["f_updates"] += int(kw["mode"] != MODE_COMPONENTS)
        new = passes.run(base_state(A, beta, kw.pop("mode"), new_ref=new_ref, moves=moves, **kw),
                         U=U)
        cc = components(new["stats"].sts, new["stats"].colsum)
        step["beta"].append(float(beta))
        step["n_components"].append(cc.n_components)
        step["seconds"].append(time.perf_counter() - t1)
        step["exact"] += new["n_exact"]
        step["pairs"] += new["n_pairs"]
        if eig is not None:
            step["eig_computed"] += eig.n_computed
            step["eig_naive"] += eig.n_naive
            step["eig_lemma"] += eig.n_lemma
        return new, cc

    t = t_done
    last = t_done if converged else max_iter
    for t in range(t_done + 1, last + 1):
        t_it = time.perf_counter()
        shift = 0.0
        if t > 1:
            step = {"beta": [], "n_components": [], "seconds": [], "exact": 0, "pairs": 0,
                    "eig_computed": 0, "eig_naive": 0, "eig_lemma": 0, "spectral_seconds": 0.0,
            "f_updates": 0}
            st = res["stats"]
            new_A = A.copy()
            nz = st.colsum > 0
            new_A[nz] = st.stx[nz] / st.colsum[nz, None]  # eq. (14)
            shift = float(((new_A - A) ** 2).sum())
            moves = np.sqrt(((new_A - A) ** 2).sum(axis=1))
            A = new_A
            res, comps = do_pass(A, beta, res, comps, True, moves)
        inner = 0
        while comps.n_components != c and inner < max_inner_iter:
            beta = 2.0 * beta if comps.n_components < c else 0.5 * beta
            res, comps = do_pass(A, beta, res, comps, False)
            inner += 1
        if comps.n_components != c:
            unmet.append(t)
        objective = res["sum_wd"] + alpha * res["sum_w2"]
        rec = {"iteration": t, "objective": float(objective), "shift": shift,
               "seconds": time.perf_counter() - t_it,
               "empty_clusters": comps.empty.tolist(), "beta": float(beta),
               "n_components": int(comps.n_components), "beta_steps": step["beta"],
               "n_components_steps": step["n_components"], "step_seconds": step["seconds"],
               "n_changed": int(res["changed"]), "inner_steps": inner,
               "distances_exact": int(step["exact"]), "distances_total": int(step["pairs"]),
               "eig_lemma": int(step["eig_lemma"]), "eig_computed": int(step["eig_computed"]),
               "eig_naive": int(step["eig_naive"]),
               "eig_pruned": int(step["eig_naive"] - step["eig_computed"]),
               "spectral_seconds": float(step["spectral_seconds"]),
               "f_updates": int(step["f_updates"])}
        history.append(rec)
        logger.info("KMM iteration %d: b=%d, beta=%.4g, objective %.6g, %d changed, %.3fs", t,
                    comps.n_components, beta, objective, rec["n_changed"], rec["seconds"])
        done = t > 1 and res["changed"] == 0
        if on_iteration is not None:
            on_iteration(KMMState(
                iteration=t, prototypes=A, beta=float(beta), alpha=float(alpha), theta=theta,
                n_outliers=int(n_out), stats=res["stats"],
                scalars={k: v for k, v in res.items() if k != "stats"},
                history=list(history), unmet=list(unmet), converged=done,
                rng_state=rng.bit_generator.state, rows=list(passes.blocks),
                row_chunks=tuple(passes.sizes)))
        if callback is not None:
            callback(rec)
        if done:
            converged = True
            break
    if unmet:
        warnings.warn(f"KMultipleMeans: the bipartite graph did not reach n_clusters={c} "
                      f"connected components within max_inner_iter={max_inner_iter} updates of "
                      f"beta in {len(unmet)} of {t} outer iterations (the last has "
                      f"{comps.n_components}). Increase max_inner_iter or n_neighbors, or check "
                      "for groups of points far from the rest.", ConvergenceWarning, stacklevel=3)
    pc = comps.proto_comp.copy()
    labels = passes.rows(_labels_block, pc, dtype=np.int64)
    neighbors = passes.rows(_field, "idx", dtype=np.int32, ncols=ell)
    weights = passes.rows(_field, "w", dtype=np.float64, ncols=ell)
    return KMMResult(prototypes=A, proto_comp=pc, n_components=comps.n_components,
                     labels=labels, neighbors=neighbors, weights=weights, beta=float(beta),
                     alpha=float(alpha), n_iter=t, converged=converged, n_outliers=int(n_out),
                     theta=theta, history=history)


# --------------------------------------------------------------------------- inference
def _predict_block(block, protos, plabels):
    lab, _ = assign_labels(np.asarray(block), protos)
    return plabels[lab]


def predict_labels(X, prototypes, proto_labels):
    """Lazy cluster of each row's nearest (non-empty) prototype."""
    keep = np.asarray(proto_labels) >= 0
    protos = np.ascontiguousarray(np.asarray(prototypes)[keep], dtype=X.dtype)
    plabels = np.asarray(proto_labels)[keep].astype(np.int64)
    return map_rows(X, _predict_block, protos, plabels, dtype=np.int64, name="kmm-predict")


def _distances_block(block, protos):
    b = np.asarray(block, dtype=np.float64)
    d2 = (np.einsum("ij,ij->i", b, b)[:, None] + np.einsum("ij,ij->i", protos, protos)[None, :]
          - 2.0 * (b @ protos.T))
    return np.sqrt(np.maximum(d2, 0.0))


def prototype_distances(X, prototypes):
    """Lazy Euclidean distances of every row to every prototype, shape (n, m)."""
    protos = np.ascontiguousarray(prototypes, dtype=np.float64)
    return X.map_blocks(_distances_block, protos, chunks=(X.chunks[0], (protos.shape[0],)),
                        dtype=np.float64, meta=np.empty((0, 0), dtype=np.float64))
