"""Rows of X drawn on the workers: uniform and weighted samples, and k-means‖.

The initialisations of :class:`dqkm.KMeans` (and the samples other
estimators draw from X) read only the chunks they touch, each inside its own
task; k-means‖ (Bahmani et al., "Scalable K-Means++", VLDB 2012) makes one
pass over X per round.
"""

from __future__ import annotations

import logging
from functools import partial

import numpy as np
import scipy.sparse as sp

from .engine import block_offsets, broadcast, compute, driver_blas, map_blocks_reduce
from .finite import describe_bad, first_bad, raise_bad
from .lloyd import _assign, _dense, map_reduce_weighted

logger = logging.getLogger(__name__)

__all__ = ["sample_rows", "weighted_sample_rows", "kmeans_parallel_init"]


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
