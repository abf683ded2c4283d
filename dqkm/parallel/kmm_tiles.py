"""K-Multiple-Means chunk tasks in row tiles, and the memory one task needs.

A KMM chunk task keeps its rows of S (and their companions) for the next
pass, and needs per row, while it runs, float64 copies of the row, its
rank-d′ projection, its l + 1 (F-KMM: K) nearest distances and its rows of F.
:func:`dqkm.kernels.kmm_step.chunk_pass` runs the rows in tiles of
:data:`dqkm.kernels.tiles.TILE_BYTES`, so the temporaries are one tile's
(O(tile × (d + K + c))) and only the kept per-row state grows with the
chunk; the prototype side (the m prototypes, their projections and sides of
F, the m × d partial ``SᵀX`` and the sparse m × m ``SᵀS``) is the part that
grows with m.  :func:`kmm_memory` gives these sizes, checked against the
workers' memory before the first pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.tiles import TILE_BYTES

__all__ = ["KMMMemory", "kmm_memory"]


@dataclass(frozen=True)
class KMMMemory:
    """Bytes of one KMM pass task: per kept row, per tile row, and the prototype side."""

    x_row_bytes: int
    kept_row_bytes: int
    tile_row_bytes: int
    prototype_bytes: int

    def parts(self, chunk_rows):
        """The named parts of one task over a chunk of ``chunk_rows`` rows."""
        tile_rows = min(chunk_rows, max(1, TILE_BYTES // self.tile_row_bytes))
        return {"chunk of X": chunk_rows * self.x_row_bytes,
                "rows of S kept (previous)": chunk_rows * self.kept_row_bytes,
                "rows of S kept (new)": chunk_rows * self.kept_row_bytes,
                "one row tile": tile_rows * self.tile_row_bytes,
                "prototype side": self.prototype_bytes}

    def resident(self, n_rows):
        """Bytes of the rows of S held between passes (the previous and the new
        pass's while a pass runs)."""
        return 2 * int(n_rows) * self.kept_row_bytes

    def resident_knobs(self):
        return (f"Its rows of S take {self.kept_row_bytes} bytes per sample (twice during "
                "a pass); give the workers more memory (memory_limit, more workers), or use "
                "fewer n_neighbors, or fit on a sample of X and predict the rest.")

    def knobs(self, X):
        """What to change, given which part dominates."""
        rows = max(X.chunks[0]) if X.chunks[0] else 0
        per_row = self.x_row_bytes + 2 * self.kept_row_bytes
        return (f"X is in row chunks of up to {rows} rows ({per_row} bytes per row in a task): "
                "rechunk it to fewer rows (X.rechunk({0: rows}), or chunks= when writing it); "
                "if the prototype side dominates, use fewer prototypes (n_prototypes) or "
                "give the workers more memory (memory_limit).")


def kmm_memory(X, m, n_neighbors, n_clusters, rank, pruned, extra_kept):
    """:class:`KMMMemory` of a pass over X with m prototypes.

    Parameters
    ----------
    X : dask array of shape (n, d)
    m, n_neighbors, n_clusters : int
    rank : int
        d′ of the lower bound (0 for the reference solver).
    pruned : bool
        F-KMM (keeps K = l + 1 + ``extra_kept`` nearest per row).
    extra_kept : int
    """
    d = int(X.shape[1])
    ell = int(n_neighbors)
    L = ell + 1
    K = min(L + int(extra_kept), m) if pruned else 0
    c = int(n_clusters)
    kept = 12 * ell + 4 * K + 8 + 4 + 1 + 4 + 8 + (8 * (rank + 2) if pruned else 0)
    # float64 copy, centred copy and residual (project), the rows of F (c), the
    # l+1 distances, exact D_E and indices, K kept and seeds (int64), weights
    tile = 8 * (3 * d + 2 * rank + c + 4 * L + 3 * K + 16) + kept
    sts = min(m * m, 64 * m * ell * ell) * 16  # m x m SᵀS (int64 index + float64 value)
    protos = 8 * m * (3 * d + rank + 2 * c + 16) + 2 * sts
    return KMMMemory(x_row_bytes=d * X.dtype.itemsize, kept_row_bytes=kept,
                     tile_row_bytes=tile, prototype_bytes=protos)
