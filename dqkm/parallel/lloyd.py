"""Distributed Lloyd iterations, k-means++ on a sample, and k-means‖.

Every function here makes a known number of passes over X (stated in its
docstring); each pass is one blockwise map, one tree reduction and one
``compute`` (see :mod:`dqkm.parallel.engine`).
"""

from __future__ import annotations

import logging
import time
from functools import partial

import numpy as np
import scipy.sparse as sp
from dask.base import tokenize

from ..kernels.lloyd import assign_labels, lloyd_partials, weighted_cluster_sums
from ..kernels.lloyd_sparse import as_csr, assign_labels_csr, csr_row_norms, lloyd_partials_csr
from .engine import (PerBlock, array_from_blocks, block_offsets, broadcast, compute,
                     compute_with_states, driver_blas, map_blocks_reduce, map_blocks_with_state)
from .finite import describe_bad, first_bad, map_rows_at, raise_bad
from .memory import check_pass_memory

logger = logging.getLogger(__name__)

__all__ = ["lloyd_step", "lloyd_pass", "tolerance_from_moments", "assign", "min_sq_distances",
           "center_distances", "inertia", "labels_and_inertia", "sample_rows", "weighted_sample_rows",
           "kmeans_parallel_init", "map_reduce_weighted"]


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
    # float64 accumulation by buffered reductions: no float64 copy of the chunk and no
    # chunk-sized temporaries (the moments only set sklearn's relative tolerance, so
    # Σx² − n·mean² is precise enough; chunks are merged with Chan's formula)
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite X is reported elsewhere
        mean = np.add.reduce(b, axis=0, dtype=np.float64) / n
        sq = np.einsum("ij,ij->j", b, b, dtype=np.float64)
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
    sums, counts, obj, _, mind = _partials(block, centers, weights)
    # A non-finite value in X, or one whose squared distances overflow float64,
    # makes its row's exact distance non-finite, so the objective doubles as
    # the check: no extra pass over X.
    bad = None if np.isfinite(obj) else describe_bad(block, offset, mind, centers)
    out = {"sums": sums, "counts": counts, "objective": obj, "bad": bad}
    if with_moments:
        out["moments"] = _moments(block, weights)
    return out


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


def lloyd_pass(X, centers, *, split_every=None, with_moments=False, sample_weight=None):
    """One pass: per-cluster sums (float64), counts, objective w.r.t. ``centers``.

    With ``sample_weight`` (a float Dask array with X's row chunks) the sums,
    counts (float64 total weights), objective and moments are weighted.

    Raises :class:`~dqkm.exceptions.DataError` (a ``ValueError``) if X holds
    NaN or infinity, or values whose squared distances overflow float64
    (detected in the same pass), naming the first row concerned.
    """
    check_lloyd_memory("KMeans (Lloyd) pass", X, len(centers),
                       weighted=sample_weight is not None)
    c = broadcast(np.ascontiguousarray(centers, dtype=X.dtype), "centers")
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
               update=None, sample_weight=None, relocate=None):
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
    """
    t0 = time.perf_counter()
    centers = np.asarray(centers, dtype=X.dtype)
    res = lloyd_pass(X, centers, split_every=split_every, with_moments=tol_abs is None,
                     sample_weight=sample_weight)
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


def _inertia_chunk(block, weights, centers, index, offset):
    _, mind = _assign(block, centers)
    with np.errstate(invalid="ignore", over="ignore"):
        s = float(mind.sum()) if weights is None else float(np.dot(weights, mind))
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
    s = float(mind.sum()) if weights is None else float(np.dot(weights, mind))
    return labels, (s, None)


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
    labels = array_from_blocks(blocks, (X.chunks[0],), np.int32,
                               name=f"dqkm-labels-{tokenize(X.name, centers)}",
                               meta=np.empty((0,), dtype=np.int32))
    return labels, float(value)


# --------------------------------------------------------------------------- sampling
def sample_rows(X, n, rng, *, dense=True, sample_weight=None):
    """``n`` distinct rows of X drawn uniformly (one pass over the chunks touched).

    Rows of CSR-chunked X come back as a dense array, or as a CSR matrix
    with ``dense=False``.  With ``sample_weight`` (a Dask array with X's row
    chunks) returns ``(rows, their weights)``.
    """
    N = X.shape[0]
    as_out = _dense if dense else (lambda a: a)
    if n >= N:
        if sample_weight is None:
            return as_out(compute(X)[0])
        rows, w = compute(X, sample_weight)
        return as_out(rows), np.asarray(w, dtype=np.float64)
    idx = np.sort(rng.choice(N, size=n, replace=False))
    if sample_weight is None:
        return as_out(_take_sorted_rows(X, idx))
    (w,) = compute(sample_weight[idx])
    return as_out(_take_sorted_rows(X, idx)), np.asarray(w, dtype=np.float64)


def _rows_of_block(block, idx, index, offset):
    """The rows ``idx`` (sorted, in the sub-array's coordinates) that lie in this block."""
    lo, hi = np.searchsorted(idx, [offset, offset + block.shape[0]])
    return {int(index): block[idx[lo:hi] - offset]}


def _merge_dicts(parts):
    out = {}
    for p in parts:
        out.update(p)
    return out


def _take_sorted_rows(X, idx):
    """``X[idx]`` (``idx`` sorted, distinct) by one task per chunk holding rows of it, each
    reading its chunk itself (:func:`~dqkm.parallel.engine.map_blocks_reduce`): dask's
    ``X[idx]`` read chunks as tasks of their own, which a worker read ahead of their
    use (several chunks of X held at once)."""
    offsets = block_offsets(X.chunks[0])
    which = np.searchsorted(offsets, idx, side="right") - 1
    touched = np.unique(which)
    sub = X.blocks[touched.tolist()] if len(touched) < X.numblocks[0] else X
    sub_offsets = block_offsets(sub.chunks[0])
    pos = np.searchsorted(touched, which)
    local = idx - offsets[which] + sub_offsets[pos]  # idx in sub's rows, still sorted
    d = map_blocks_reduce(sub, _rows_of_block, _merge_dicts,
                          args=(broadcast(local, "sample-rows"),), with_offsets=True,
                          name="sample-rows")
    (parts,) = compute(d)
    parts = [parts[i] for i in sorted(parts)]
    if any(sp.issparse(p) for p in parts):
        return sp.vstack(parts, format="csr")
    return np.concatenate(parts)


def _es_chunk(weights, n, seed, index, offset):
    """The ``n`` largest keys log(u)/w of a block's rows (Efraimidis & Spirakis)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    u = rng.random(weights.shape[0])
    with np.errstate(divide="ignore"):
        keys = np.where(weights > 0, np.log(np.maximum(u, 1e-300)) / weights, -np.inf)
    sel = np.argsort(-keys, kind="stable")[:n]
    sel = sel[np.isfinite(keys[sel])]
    return keys[sel], sel + offset


def _es_combine(parts, n=None):
    keys = np.concatenate([p[0] for p in parts])
    rows = np.concatenate([p[1] for p in parts])
    sel = np.argsort(-keys, kind="stable")[:n]
    return keys[sel], rows[sel]


def weighted_sample_rows(X, sample_weight, n, rng, *, dense=True):
    """``n`` distinct rows of X drawn with probability proportional to their
    weight, without replacement (successive sampling, as
    ``numpy.random.Generator.choice(p=w/Σw, replace=False)``): one pass over
    the weights by the keys of Efraimidis & Spirakis, "Weighted random sampling
    with a reservoir", Information Processing Letters, 2006, then one read of
    the chunks touched.  Rows of weight 0 are never drawn; fewer than ``n``
    rows come back when fewer have a positive weight.
    """
    seed = int(rng.integers(2**63 - 1))
    d = map_blocks_reduce(sample_weight, _es_chunk, partial(_es_combine, n=n), args=(n, seed),
                          with_offsets=True, name="weighted-sample")
    ((_, idx),) = compute(d)
    idx = np.sort(idx)
    out = compute(X[idx])[0]
    return _dense(out) if dense else out


# --------------------------------------------------------------------------- k-means||
def _sum_arrays(parts):
    return sum(parts[1:], parts[0].copy())


def _kmp_round_chunk(block, weights, candidates, ell, top, seed, rnd, index, offset):
    """d² to the candidate set, its sum φ, and the ``top`` largest sampling keys.

    A row is kept with probability min(1, ℓ·d²/φ) ⇔ u < ℓ·d²/φ ⇔ d²/u > φ/ℓ for
    u ~ U(0, 1) (with weights, w·d² in place of d²).  φ is only known after the reduction, so every chunk returns
    its ``top`` largest keys d²/u with their rows; the driver keeps those above
    φ/ℓ.  If a chunk's whole top list passes the threshold it may have more
    rows to give; the driver then re-reads that chunk alone.
    """
    _, mind = _assign(block, candidates)
    wmind = _weighted(mind, weights)
    phi = float(wmind.sum())
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(rnd, index)))
    u = rng.random(block.shape[0])
    keys = wmind / np.maximum(u, 1e-300)
    if keys.size > top:
        sel = np.argpartition(-keys, top - 1)[:top]
    else:
        sel = np.arange(keys.size)
    return {"phi": phi, "parts": [(index, keys[sel], _dense(block[sel]), mind[sel].sum())],
            "bad": None if np.isfinite(phi) else describe_bad(block, offset, mind, candidates)}


def _kmp_combine(parts):
    return {"phi": sum(p["phi"] for p in parts),
            "parts": [x for p in parts for x in p["parts"]],
            "bad": first_bad(*(p["bad"] for p in parts))}


def _weighted(mind, weights):
    """``w·d²`` (``d²`` without weights); a non-finite d² stays non-finite."""
    if weights is None:
        return mind
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.asarray(weights, dtype=np.float64) * mind
    out[~np.isfinite(mind)] = np.inf
    return out


def _count_nearest_chunk(block, weights, candidates, index, offset):
    labels, _ = _assign(block, candidates)
    return np.bincount(labels, weights=weights, minlength=candidates.shape[0]) \
        .astype(np.float64)


def kmeans_parallel_init(X, n_clusters, *, rng, oversampling_factor=2.0, n_rounds=5,
                         split_every=None, sample_weight=None):
    """k-means‖ (Bahmani et al., 2012): ``n_rounds`` + 2 passes over X.

    Round 0 picks one uniform row.  Each round keeps every row independently
    with probability min(1, ℓ·d²(x, C)/φ_X(C)), ℓ = ``oversampling_factor``·K.
    The candidates are weighted by the number of rows nearest to them (one
    more pass) and reduced to K centers by weighted k-means++ then weighted
    Lloyd on the driver.  With ``sample_weight`` (a Dask array with X's row
    chunks), round 0 draws its row by weight, d² becomes w·d² and the
    candidates' weights are the total weights of their nearest rows.
    """
    from sklearn.cluster import KMeans as _SkKMeans

    ell = oversampling_factor * n_clusters
    seed = int(rng.integers(2**63 - 1))
    N = X.shape[0]
    if sample_weight is None:
        first = int(rng.integers(N))
        cand = _dense(compute(X[first:first + 1])[0]).astype(X.dtype)
    else:
        cand = weighted_sample_rows(X, sample_weight, 1, rng).astype(X.dtype)
    top = int(np.ceil(2 * ell)) + 16
    for rnd in range(n_rounds):
        c = broadcast(np.ascontiguousarray(cand), "candidates")
        d = map_reduce_weighted(X, sample_weight, _kmp_round_chunk, _kmp_combine,
                                args=(c, ell, top, seed, rnd), split_every=split_every,
                                name="kmeans-parallel")
        (res,) = compute(d)
        if res["bad"]:
            raise_bad(res["bad"])
        phi = res["phi"]
        if phi <= 0:
            break
        thresh = phi / ell
        new = []
        for index, keys, rows, _ in res["parts"]:
            keep = keys > thresh
            if keep.all() and keys.size == top:
                # the chunk may hold more rows above the threshold: take them all
                block = compute(X.blocks[index])[0]
                wblock = None if sample_weight is None else \
                    np.asarray(compute(sample_weight.blocks[index])[0], dtype=np.float64)
                _, mind = _assign(block, cand)
                rg = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(rnd, index)))
                u = rg.random(block.shape[0])
                new.append(_dense(block[_weighted(mind, wblock) / np.maximum(u, 1e-300)
                                        > thresh]))
            else:
                new.append(rows[keep])
        new = [r for r in new if len(r)]
        if new:
            cand = np.unique(np.vstack([cand, *new]), axis=0).astype(X.dtype)
        logger.info("k-means|| round %d: phi %.6g, %d candidates", rnd + 1, phi, len(cand))
    if len(cand) <= n_clusters:
        extra = sample_rows(X, n_clusters, rng) if sample_weight is None else \
            weighted_sample_rows(X, sample_weight, n_clusters, rng)
        cand = np.unique(np.vstack([cand, extra]), axis=0)[: max(n_clusters, len(cand))]
        if len(cand) < n_clusters:
            raise ValueError(f"X has only {len(cand)} distinct rows; cannot find "
                             f"n_clusters={n_clusters} distinct centers.")
        if len(cand) == n_clusters:
            return cand.astype(X.dtype)
    c = broadcast(np.ascontiguousarray(cand, dtype=X.dtype), "candidates")
    d = map_reduce_weighted(X, sample_weight, _count_nearest_chunk, _sum_arrays, args=(c,),
                            split_every=split_every, name="kmeans-parallel-weights")
    (weights,) = compute(d)
    km = _SkKMeans(n_clusters, init="k-means++", n_init=1,
                   random_state=int(rng.integers(2**31 - 1)))
    with driver_blas():
        km.fit(cand.astype(np.float64), sample_weight=weights.astype(np.float64) + 1e-12)
    return km.cluster_centers_.astype(X.dtype)
