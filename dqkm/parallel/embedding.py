"""Blockwise random embeddings (SE / RP) and the pass back to the original space.

* :func:`embed` — the lazy n×d̃ embedding of X, one task per row chunk; the
  embedding (two length-d vectors for SE, the d×d̃ matrix for RP) is one
  graph key that every block depends on.
* :func:`original_space_moments` — one pass over X that embeds each chunk,
  assigns its rows to the embedded centers, and returns the per-cluster
  counts, means and within-cluster sums of squares *in the original space*,
  tree-reduced by Chan et al.'s pairwise rule.
"""

from __future__ import annotations

import numpy as np

from ..kernels.embedding import embed_assign_chunk, embed_chunk, embed_moments_chunk
from ..kernels.lloyd_sparse import as_csr, merge_label_moments
from ..kernels.tiles import TILE_BYTES
from .engine import broadcast, compute, map_blocks_reduce, map_rows
from . import memory
from .memory import row_tile, with_compressed_read

__all__ = ["embed", "embed_assign", "original_space_moments"]


def _embed_block(block, emb):
    return embed_chunk(as_csr(block, "SparseEmbeddedKMeans"), emb)


def embed(X, emb, dtype=None):
    """Lazy ``X·Q·Φ`` (SE) or ``X·R`` (RP), a dense Dask array aligned with X's rows.

    Parameters
    ----------
    X : dask array of shape (n_samples, n_features), dense or CSR chunks
    emb : SparseEmbedding or DenseEmbedding
    dtype : float32 or float64, optional
        The output dtype (default X's float dtype).

    Returns
    -------
    dask array of shape (n_samples, n_components)

    Memory per task: one chunk of X and its n_rows × d̃ image; O(nnz(chunk))
    work for SE, a GEMM for RP.
    """
    dtype = np.dtype(dtype or (X.dtype if X.dtype in (np.float32, np.float64) else np.float64))
    e = broadcast(emb, "embedding")
    out = X.map_blocks(_embed_block, e, chunks=(X.chunks[0], (emb.n_components,)),
                       dtype=dtype, meta=np.empty((0, 0), dtype), token="dqkm-embed")
    return out if out.dtype == dtype else out.astype(dtype)


#: The smallest row tile a pass of SE works with.
MIN_TILE_ROWS = 64


def pass_tile_bytes(X, n_components, what):
    """The ``tile_bytes`` of a pass over dense X: :data:`~dqkm.kernels.tiles.TILE_BYTES`,
    less where the tightest worker's headroom (:func:`~dqkm.parallel.memory.task_budget`)
    less one chunk of X does not hold it (None for CSR chunks: their per-row cost is
    their non-zeros').

    Raises :class:`~dqkm.parallel.memory.MemoryBudgetError` when not even a tile of
    :data:`MIN_TILE_ROWS` rows fits beside the chunk, or when X is read from a
    compressed Zarr store and the chunk with its compressed bytes, held together
    while the chunk is decoded, does not fit.
    """
    if getattr(X, "dtype", None) is None or X.dtype.kind != "f" or X.ndim != 2 \
            or not isinstance(getattr(X, "_meta", None), np.ndarray):
        return None
    d = int(X.shape[1])
    per_row = 3 * 8 * d + 2 * 8 * int(n_components) + 64  # kernels.embedding._row_bytes
    chunk = max(X.chunks[0], default=0) * d * X.dtype.itemsize
    knobs = ("Store X in chunks of fewer rows, or give the workers a larger memory_limit (or "
             "fewer threads each).")
    budget = memory.task_budget()
    # reading a compressed chunk holds it beside the decoded one before any tile exists
    read = with_compressed_read({"chunk of X": chunk}, X)
    if budget is not None and len(read) > 1:
        memory.check_task_memory(what, read, knobs, budget)
    rows = row_tile(what, rows=max(1, TILE_BYTES // per_row), per_row=per_row, fixed=chunk,
                    min_rows=MIN_TILE_ROWS, knobs=knobs, budget=budget)
    return rows * per_row


def _assign_block(block, emb, centers, tile_bytes=None):
    return embed_assign_chunk(as_csr(block, "SparseEmbeddedKMeans"), emb, centers,
                              tile_bytes=tile_bytes)


def embed_assign(X, emb, embedded_centers):
    """Lazy labels: embed every chunk and assign it to the nearest embedded center.

    Each task embeds and labels its chunk tile by tile
    (:func:`dqkm.kernels.embedding.embed_assign_chunk`): it holds its chunk,
    the labels and one tile's image.
    """
    tile = pass_tile_bytes(X, emb.n_components, "SparseEmbeddedKMeans labels pass")
    e = broadcast(emb, "embedding")
    c = broadcast(np.ascontiguousarray(embedded_centers), "centers")
    return map_rows(X, _assign_block, e, c, tile, dtype=np.int32, name="embed-assign")


def _moments_chunk(block, emb, centers, tile_bytes=None):
    return embed_moments_chunk(as_csr(block, "SparseEmbeddedKMeans"), emb, centers,
                               tile_bytes=tile_bytes)


def _weighted_moments_chunk(block, weights, emb, centers, tile_bytes, index, offset):
    return embed_moments_chunk(as_csr(block, "SparseEmbeddedKMeans"), emb, centers,
                               weights=np.asarray(weights, dtype=np.float64),
                               tile_bytes=tile_bytes)


def _moments_combine(parts):
    out = parts[0]
    for p in parts[1:]:
        out = merge_label_moments(out, p)
    return out


def original_space_moments(X, emb, embedded_centers, *, split_every=None, sample_weight=None):
    """Per-cluster statistics in the original space of the embedded partition (one pass).

    Each chunk is embedded, its rows labelled by the nearest embedded center,
    and its (count, mean, Σ‖x − mean‖²) per cluster computed on the
    original rows; partials merge by Chan et al.'s rule, so the result is the
    exact means and K-means cost ``‖X − D̂D̂ᵀX‖²_F`` of the partition.

    With ``sample_weight`` (a Dask array with X's row chunks) the counts
    are total weights and the means and costs weighted.

    Returns
    -------
    counts : ndarray of shape (n_clusters,), int64 (float64 with weights)
    means : ndarray of shape (n_clusters, n_features), float64
    m2 : ndarray of shape (n_clusters,), float64

    Memory per task: its chunk, K×d float64 partials and one row tile's
    temporaries (:data:`dqkm.kernels.tiles.TILE_BYTES`, less when a worker's
    headroom is smaller: :func:`pass_tile_bytes`): the chunk is embedded and
    summarised tile by tile, never copied whole.
    """
    tile = pass_tile_bytes(X, emb.n_components, "SparseEmbeddedKMeans moments pass")
    e = broadcast(emb, "embedding")
    c = broadcast(np.ascontiguousarray(embedded_centers), "centers")
    if sample_weight is not None:
        from .lloyd import map_reduce_weighted

        d = map_reduce_weighted(X, sample_weight, _weighted_moments_chunk, _moments_combine,
                                args=(e, c, tile), split_every=split_every, name="se-moments")
    else:
        d = map_blocks_reduce(X, _moments_chunk, _moments_combine, args=(e, c, tile),
                              split_every=split_every, name="se-moments")
    (res,) = compute(d)
    return res
