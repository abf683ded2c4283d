"""Distributed Lloyd iterations: passes, steps, assignment and the objective.

Every function here makes a known number of passes over X (stated in its
docstring); each pass is one blockwise map, one tree reduction and one
``compute`` (see :mod:`dqkm.parallel.engine`).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from dask.base import tokenize

from ..kernels._finish import column_moments
from ..kernels.lloyd import assign_labels, lloyd_partials, weighted_cluster_sums
from ..kernels.lloyd_sparse import as_csr, assign_labels_csr, csr_row_norms, lloyd_partials_csr
from .engine import (PerBlock, array_from_blocks, broadcast, compute, compute_with_states,
                     map_blocks_reduce, map_blocks_with_state)
from .finite import describe_bad, first_bad, map_rows_at, raise_bad
from .memory import check_pass_memory


__all__ = ["lloyd_step", "lloyd_pass", "tolerance_from_moments", "assign", "min_sq_distances",
           "center_distances", "inertia", "labels_and_inertia", "map_reduce_weighted"]


# --------------------------------------------------------------------------- chunk level
# Blocks may be dense or scipy.sparse (CSR, COO converted): these dispatch.
def _partials(block, centers, weights=None):
    if weights is None:
        if sp.issparse(block):
            return lloyd_partials_csr(as_csr(block, "KMeans"), centers)
        return lloyd_partials(block, centers)
    labels, mind = _assign(block, centers)
    x = as_csr(block, "KMeans") if sp.issparse(block) else block
    sums, totals = weighted_cluster_sums(x, labels, weights, centers.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        obj = float(np.dot(np.asarray(weights, dtype=np.float64), mind))
    return sums, totals, obj if np.isfinite(mind).all() else np.inf, labels, mind


def _assign(block, centers):
    if sp.issparse(block):
        return assign_labels_csr(as_csr(block, "KMeans"), centers)
    return assign_labels(block, centers)


def _dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def _weighted_moments(block, w):
    """(total weight, weighted mean, weighted sum of squared deviations) of a block."""
    w = np.asarray(w, dtype=np.float64)
    n = float(w.sum())
    if n == 0:
        return (0.0, np.zeros(block.shape[1]), np.zeros(block.shape[1]))
    with np.errstate(invalid="ignore", over="ignore"):
        if sp.issparse(block):
            b = as_csr(block, "KMeans").astype(np.float64)
            mean = np.asarray(b.T @ w).ravel() / n
            sq = np.asarray(b.multiply(b).T @ w).ravel()
        else:
            b = np.asarray(block)
            mean = np.einsum("i,ij->j", w, b, dtype=np.float64) / n
            sq = np.einsum("i,ij,ij->j", w, b, b, dtype=np.float64)
        return (n, mean, np.maximum(sq - n * mean**2, 0.0))


def _moments(block, weights=None):
    """(count, mean, sum of squared deviations) per feature of a block; with
    ``weights``, the count is the total weight and the moments are weighted."""
    if weights is not None:
        return _weighted_moments(block, weights)
    if sp.issparse(block):
        b = as_csr(block, "KMeans").astype(np.float64)
        n = b.shape[0]
        if n == 0:
            return (0, np.zeros(b.shape[1]), np.zeros(b.shape[1]))
        mean = np.asarray(b.sum(axis=0)).ravel() / n
        sq = np.asarray(b.multiply(b).sum(axis=0)).ravel()
        return (n, mean, np.maximum(sq - n * mean**2, 0.0))
    b = np.asarray(block)
    n = b.shape[0]
    if n == 0:
        return (0, np.zeros(b.shape[1]), np.zeros(b.shape[1]))
    # float64 sums in one pass (no float64 copy of a float32 chunk, no chunk-sized
    # temporaries; numpy's buffered float64 reductions of a float32 chunk took 4–7 × as
    # long); the moments only set sklearn's relative tolerance, so Σx² − n·mean² is
    # precise enough; chunks are merged with Chan's formula
    if b.dtype not in (np.float32, np.float64):
        b = b.astype(np.float64)
    total, sq = column_moments(np.ascontiguousarray(b))
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite X is reported elsewhere
        mean = total / n
        m2 = np.maximum(sq - n * mean**2, 0.0)
    return (n, mean, m2)


def _merge_moments(a, b):
    """Chan et al.'s pairwise update of (count, mean, sum of squared deviations)."""
    na, ma, sa = a
    nb, mb, sb = b
    if na == 0:
        return b
    if nb == 0:
        return a
    n = na + nb
    with np.errstate(invalid="ignore", over="ignore"):
        delta = mb - ma
        return (n, ma + delta * (nb / n), sa + sb + delta ** 2 * (na * nb / n))


def _lloyd_chunk(block, weights, centers, with_moments, index, offset):
    return _lloyd_labels_chunk(block, weights, centers, with_moments, index, offset)[1]


def _lloyd_labels_chunk(block, weights, centers, with_moments, index, offset):
    sums, counts, obj, labels, mind = _partials(block, centers, weights)
    # A non-finite value in X, or one whose squared distances overflow float64,
    # makes its row's exact distance non-finite, so the objective doubles as
    # the check: no extra pass over X.
    bad = None if np.isfinite(obj) else describe_bad(block, offset, mind, centers)
    out = {"sums": sums, "counts": counts, "objective": obj, "bad": bad}
    if with_moments:
        out["moments"] = _moments(block, weights)
    return labels, out


def _lloyd_combine(parts):
    out = {
        "sums": parts[0]["sums"].copy(),
        "counts": parts[0]["counts"].copy(),
        "objective": parts[0]["objective"],
        "bad": parts[0]["bad"],
    }
    if "moments" in parts[0]:
        out["moments"] = parts[0]["moments"]
    for p in parts[1:]:
        out["sums"] += p["sums"]
        out["counts"] += p["counts"]
        out["objective"] += p["objective"]
        out["bad"] = first_bad(out["bad"], p["bad"])
        if "moments" in p:
            out["moments"] = _merge_moments(out["moments"], p["moments"])
    return out


def map_reduce_weighted(X, weights, chunk, combine, *, args=(), split_every=None,
                        name="pass"):
    """One pass over X and its row weights: :func:`~dqkm.parallel.engine.map_blocks_reduce`
    whose ``chunk(block, weight_block, *args, block_index, row_offset)`` also
    gets the weights of its rows.

    ``weights`` is None (``chunk`` gets None) or a 1-D Dask array with X's row
    chunks.  Both build the same graph, as ``map_blocks_reduce`` does: one
    task per row block (reading its weight block by reference when there are
    weights) and a tree reduction of fan-in ``split_every``.
    """
    wblocks = _weight_blocks(X, weights)
    return map_blocks_reduce(X, chunk, combine, args=(wblocks, *args), split_every=split_every,
                             with_offsets=True, name=name if weights is None else f"{name}-weighted")


def _weight_blocks(X, weights):
    """None, or the :class:`~dqkm.parallel.engine.PerBlock` weights of X's row blocks."""
    if weights is None:
        return None
    if weights.chunks[0] != X.chunks[0]:
        raise ValueError(f"the weights' chunks {weights.chunks[0]} are not X's row chunks "
                         f"{X.chunks[0]}; rechunk them with weights.rechunk((X.chunks[0],)).")
    return PerBlock(np.asarray(weights.to_delayed(optimize_graph=True)).reshape(-1))


def lloyd_pass(X, centers, *, split_every=None, with_moments=False, sample_weight=None,
               keep_labels=False):
    """One pass: per-cluster sums (float64), counts, objective w.r.t. ``centers``.

    With ``sample_weight`` (a float Dask array with X's row chunks) the sums,
    counts (float64 total weights), objective and moments are weighted.  With
    ``keep_labels`` the result's ``"labels"`` are the pass's int32 labels as a
    Dask array with X's row chunks, its blocks kept where they were computed
    (as :func:`labels_and_inertia`'s).

    Raises :class:`~dqkm.exceptions.DataError` (a ``ValueError``) if X holds
    NaN or infinity, or values whose squared distances overflow float64
    (detected in the same pass), naming the first row concerned.
    """
    check_lloyd_memory("KMeans (Lloyd) pass", X, len(centers),
                       weighted=sample_weight is not None)
    c = broadcast(np.ascontiguousarray(centers, dtype=X.dtype), "centers")
    if keep_labels:
        bp = map_blocks_with_state(X, _lloyd_labels_chunk, _lloyd_combine,
                                   args=(_weight_blocks(X, sample_weight), c, with_moments),
                                   split_every=split_every, with_offsets=True,
                                   name="lloyd-labels")
        res, blocks = compute_with_states(bp)
        res["labels"] = _labels_array(X, blocks, centers)
    else:
        d = map_reduce_weighted(X, sample_weight, _lloyd_chunk, _lloyd_combine,
                                args=(c, with_moments), split_every=split_every, name="lloyd")
        (res,) = compute(d)
    if res["bad"]:
        raise_bad(res["bad"])
    return res


def check_lloyd_memory(what, X, n_clusters, *, weighted=False):
    """Refuse a pass assigning X's chunks to ``n_clusters`` centers whose task cannot
    fit a worker (:func:`~dqkm.parallel.memory.check_pass_memory`): its chunk, the
    chunk's labels (int32) and distances (float64), its weights when weighted, and
    the centers with the float64 per-cluster sums (the kernels' tiles stay in cache)."""
    K, d = int(n_clusters), int(X.shape[1])
    per_row = 4 + 8 + (8 if weighted else 0)
    return check_pass_memory(what, X, per_row=per_row,
                             fixed=K * d * (X.dtype.itemsize + 8) + 16 * K)


# --------------------------------------------------------------------------- one step
def tolerance_from_moments(moments, tol):
    """sklearn's absolute tolerance: ``tol × mean(var(X, axis=0))``."""
    if tol == 0:
        return 0.0
    n, _, m2 = moments
    return float(np.mean(m2 / max(n, 1)) * tol)


def lloyd_step(X, centers, iteration, *, tol=1e-4, tol_abs=None, split_every=None,
               update=None, sample_weight=None, relocate=None, on_labels=None):
    """One Lloyd iteration (one pass over X): ``(new_centers, record, tol_abs)``.

    ``tol`` is relative to the mean feature variance of X (sklearn's meaning);
    with ``tol_abs`` None the variance is computed in this pass and turned into
    the absolute tolerance returned.  Memory per worker: a few chunks plus K×D
    float64 partials.  With ``sample_weight`` (a float Dask array with X's
    row chunks) the centers are weighted means, the objective and the
    variance are weighted.

    Empty clusters (or clusters of total weight 0) keep their previous center and are listed in the record
    under ``empty_clusters``.  ``update``, if given, maps the new centers
    (float64) to the centers actually used (e.g. a projection, for K-means-ℓ1).
    The record holds ``iteration``, ``objective`` (w.r.t. ``centers``),
    ``shift`` (squared center moves), ``seconds`` and ``empty_clusters``; the
    fit driver (:mod:`dqkm.cluster._driver`) runs the iterations.

    ``relocate``, if given, is called as ``relocate(centers, sums, weights)``
    when the pass left a cluster empty and returns ``(new_centers, info)``
    in place of the rule above (``info`` is added to the record; see
    :func:`dqkm.parallel.relocate.relocate_empty_clusters`).

    ``on_labels``, if given, is called as ``on_labels(centers, labels)`` with
    the pass's labels (a Dask array, see :func:`lloyd_pass`): a fit whose
    last step moves no center has the final labels without another pass.
    """
    t0 = time.perf_counter()
    centers = np.asarray(centers, dtype=X.dtype)
    res = lloyd_pass(X, centers, split_every=split_every, with_moments=tol_abs is None,
                     sample_weight=sample_weight, keep_labels=on_labels is not None)
    if on_labels is not None:
        on_labels(centers, res["labels"])
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
    if update is not None:
        new = update(new)
    new = new.astype(X.dtype)
    shift = float(((new.astype(np.float64) - centers) ** 2).sum())
    rec = {"iteration": iteration, "objective": float(res["objective"]), "shift": shift,
           "seconds": time.perf_counter() - t0, "empty_clusters": empty.tolist(), **info}
    return new, rec, tol_abs


# --------------------------------------------------------------------------- assignment
def _checked_assign(block, centers, offset):
    """Labels and squared distances of a block; raises for NaN/inf or overflow."""
    labels, mind = _assign(block, centers)
    if not np.isfinite(mind).all():
        raise_bad(describe_bad(block, offset, mind, centers))
    return labels, mind


def _assign_block(block, centers, offset):
    return _checked_assign(block, centers, offset)[0]


def assign(X, centers):
    """Lazy labels of X's rows (int32 Dask array aligned with X's row chunks).

    A block holding NaN or infinity, or values whose squared distances
    overflow float64, raises :class:`~dqkm.exceptions.DataError` when computed.
    """
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    check_lloyd_memory("KMeans labels pass", X, len(centers))
    return map_rows_at(X, _assign_block, centers, dtype=np.int32, name="assign")


def _mind_block(block, centers, offset):
    return _checked_assign(block, centers, offset)[1]


def min_sq_distances(X, centers):
    """Lazy squared distance of every row to its nearest center (float64);
    refuses blocks as :func:`assign`."""
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    return map_rows_at(X, _mind_block, centers, dtype=np.float64, name="min-sq-dist")


def _exact_where_cancelled(d2, x, c):
    """Recompute ‖x − c‖² directly where the expanded form lost its digits to
    cancellation (x within 1e-3 relative distance of c): a row equal to a
    center gets exactly 0 instead of a rounding residue."""
    x_norms = csr_row_norms(x) if sp.issparse(x) else np.einsum("ij,ij->i", x, x)
    scale = x_norms[:, None] + np.einsum("ij,ij->i", c, c)[None, :]
    rows, cols = np.nonzero(d2 <= 1e-6 * scale)
    if rows.size:
        xr = x[rows].toarray() if sp.issparse(x) else x[rows]
        d2[rows, cols] = np.einsum("ij,ij->i", xr - c[cols], xr - c[cols])


def _distances_block(block, centers, offset):
    # ‖x‖² − 2x·c + ‖c‖² in float64 (as scikit-learn's euclidean_distances upcasts
    # float32), without its input check: NaN/inf and overflow are reported here
    c = np.asarray(centers, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if sp.issparse(block):
            x = as_csr(block, "KMeans").astype(np.float64)
            d2 = csr_row_norms(x)[:, None] - 2.0 * np.asarray(x @ c.T)
        else:
            x = np.asarray(block, dtype=np.float64)
            d2 = np.einsum("ij,ij->i", x, x)[:, None] - 2.0 * (x @ c.T)
        d2 += np.einsum("ij,ij->i", c, c)[None, :]
        _exact_where_cancelled(d2, x, c)
        out = np.sqrt(np.maximum(d2, 0.0, out=d2), out=d2).astype(block.dtype, copy=False)
    if not np.isfinite(out).all():
        raise_bad(describe_bad(block, offset, out, centers))
    return out


def center_distances(X, centers):
    """Lazy Euclidean distances of X's rows to every center, (n, K) in X's dtype;
    refuses blocks as :func:`assign`."""
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    return map_rows_at(X, _distances_block, centers, dtype=X.dtype,
                       n_columns=centers.shape[0], name="center-distances")


def _block_inertia(mind, weights):
    """A block's share of the inertia from its rows' squared distances: the one
    sum every final pass uses (Lloyd's, and the bounded one of
    :mod:`dqkm.parallel.bounds`), so that they agree bit for bit."""
    with np.errstate(invalid="ignore", over="ignore"):
        return float(mind.sum()) if weights is None else float(np.dot(weights, mind))


def _inertia_chunk(block, weights, centers, index, offset):
    _, mind = _assign(block, centers)
    s = _block_inertia(mind, weights)
    if not np.isfinite(mind).all():
        s = np.inf
    return (s, None if np.isfinite(s) else describe_bad(block, offset, mind, centers))


def _inertia_combine(parts):
    return (sum(p[0] for p in parts), first_bad(*(p[1] for p in parts)))


def inertia(X, centers, *, split_every=None, sample_weight=None):
    """Σ w·‖x − nearest center‖² over X (w = 1 without ``sample_weight``), in
    float64 (one pass); refuses X as :func:`lloyd_pass`."""
    c = broadcast(np.ascontiguousarray(centers, dtype=X.dtype), "centers")
    d = map_reduce_weighted(X, sample_weight, _inertia_chunk, _inertia_combine, args=(c,),
                            split_every=split_every, name="inertia")
    ((value, bad),) = compute(d)
    if bad:
        raise_bad(bad)
    return float(value)


def _labels_inertia_chunk(block, weights, centers, index, offset):
    labels, mind = _checked_assign(block, centers, offset)
    return labels, (_block_inertia(mind, weights), None)


def labels_and_inertia(X, centers, *, split_every=None, sample_weight=None):
    """``(labels, inertia)`` in one pass, where :func:`inertia` and :func:`assign` take two:
    int32 labels aligned with X's row chunks, computed (held here with local threads,
    on the workers with a client), and :func:`inertia`'s value (same sums, same order).
    Blocks with NaN or infinity raise as :func:`assign`."""
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    check_lloyd_memory("KMeans final pass (labels and inertia)", X, len(centers),
                       weighted=sample_weight is not None)
    bp = map_blocks_with_state(
        X, _labels_inertia_chunk, _inertia_combine,
        args=(_weight_blocks(X, sample_weight), broadcast(centers, "centers")),
        split_every=split_every, with_offsets=True, name="labels-inertia")
    (value, _), blocks = compute_with_states(bp)
    return _labels_array(X, blocks, centers), float(value)


def _labels_array(X, blocks, centers):
    """The int32 labels of X's row blocks (computed ``blocks``) as one Dask array."""
    return array_from_blocks(blocks, (X.chunks[0],), np.int32,
                             name=f"dqkm-labels-{tokenize(X.name, centers)}",
                             meta=np.empty((0,), dtype=np.int32))
