"""Random embeddings of one chunk of rows for sparse-embedded K-means.

* **SE** (Liu, Shen & Tsang 2017, Algorithm 1): ``X̂ = X·Q·Φ`` with ``Q =
  diag(s)``, ``s_j = ±1`` (Rademacher) and ``Φ ∈ {0, 1}^{d×d̃}`` the hashing
  matrix, ``Φ_{j, h(j)} = 1`` for a uniform hash ``h: [d] → [d̃]``.  Column
  ``j`` of X is multiplied by ``s_j`` and added into column ``h(j)`` of X̂:

      X̂[i, t] = Σ_{j : h(j) = t} s_j · X[i, j]

  so a chunk costs O(nnz(chunk)) and the d×d̃ matrix is never formed: the
  hash and the signs are two length-d vectors.
* **RP** (Boutsidis, Zouzias, Mahoney & Drineas 2015): ``X̂ = X·R`` with
  ``R ∈ {±1/√d̃}^{d×d̃}`` i.i.d. — a dense GEMM (CSR × dense for sparse X).

Both embeddings keep squared norms in expectation (``E‖xQΦ‖² = ‖x‖²``,
``E‖xR‖² = ‖x‖²``), so K-means costs in the embedded space are directly
comparable with costs in the original space.

The random draws take an explicit seed; the kernels hold no state and never
mutate their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

from .lloyd import assign_labels
from .lloyd_sparse import label_moments, merge_label_moments
from .tiles import row_tiles

__all__ = ["SparseEmbedding", "DenseEmbedding", "draw_sparse_embedding",
           "draw_dense_embedding", "sparse_embed", "dense_embed", "embed_chunk",
           "sparse_embedding_matrix", "embed_assign_chunk", "embed_moments_chunk"]


@dataclass(frozen=True)
class SparseEmbedding:
    """The SE map ``x ↦ x·Q·Φ`` as two length-d vectors.

    Attributes
    ----------
    hash : ndarray of shape (n_features,), int64
        ``h(j)`` in ``[0, n_components)``.
    signs : ndarray of shape (n_features,), float64
        The diagonal of Q, entries ±1.
    n_components : int
    """

    hash: np.ndarray
    signs: np.ndarray
    n_components: int

    @property
    def n_features(self) -> int:
        return int(self.hash.shape[0])


@dataclass(frozen=True)
class DenseEmbedding:
    """The RP map ``x ↦ x·R``, ``R`` of shape (n_features, n_components), ±1/√d̃."""

    matrix: np.ndarray

    @property
    def n_components(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def n_features(self) -> int:
        return int(self.matrix.shape[0])


def draw_sparse_embedding(n_features: int, n_components: int, seed) -> SparseEmbedding:
    """Draw h (uniform on ``[0, n_components)``) and the Rademacher signs.

    ``seed`` is anything ``numpy.random.default_rng`` accepts (an int or a
    ``SeedSequence``).
    """
    rng = np.random.default_rng(seed)
    h = rng.integers(0, n_components, size=n_features, dtype=np.int64)
    s = np.where(rng.integers(0, 2, size=n_features) == 1, 1.0, -1.0)
    return SparseEmbedding(hash=h, signs=s, n_components=int(n_components))


def draw_dense_embedding(n_features: int, n_components: int, seed,
                         dtype=np.float64) -> DenseEmbedding:
    """Draw ``R`` with i.i.d. entries ``±1/√n_components`` (equal probability)."""
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(n_components)
    bits = rng.integers(0, 2, size=(n_features, n_components), dtype=np.int8)
    R = np.where(bits == 1, scale, -scale).astype(dtype)
    return DenseEmbedding(matrix=R)


def sparse_embedding_matrix(emb: SparseEmbedding, dtype=np.float64) -> sp.csr_matrix:
    """``Q·Φ`` as a d×d̃ CSR matrix with one non-zero per row (reference and tests)."""
    d = emb.n_features
    return sp.csr_matrix((emb.signs.astype(dtype), emb.hash, np.arange(d + 1)),
                         shape=(d, emb.n_components))


# ----------------------------------------------------------------------------- SE kernels
@njit(nogil=True, cache=True)
def _se_csr_loop(data, indices, indptr, h, s, out):  # OUT out
    n = indptr.shape[0] - 1
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            out[i, h[j]] += s[j] * data[p]


@njit(nogil=True, cache=True)
def _se_dense_loop(X, h, s, out):  # OUT out
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            v = X[i, j]
            if v != 0:
                out[i, h[j]] += s[j] * v


def _float_dtype(dtype):
    dtype = np.dtype(dtype)
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)


def sparse_embed(X, emb: SparseEmbedding):
    """SE embedding ``X·Q·Φ`` of one chunk, in O(nnz(X)).

    Parameters
    ----------
    X : ndarray or scipy.sparse CSR matrix of shape (n_rows, n_features)
    emb : SparseEmbedding

    Returns
    -------
    ndarray of shape (n_rows, n_components)
        In X's float dtype (float64 for integer input); each output entry is
        accumulated in that dtype.

    References
    ----------
    Liu, Shen & Tsang (2017), Sparse Embedded k-Means Clustering, Algorithm 1.
    """
    _check_features(X, emb.n_features)
    dtype = _float_dtype(X.dtype)
    out = np.zeros((X.shape[0], emb.n_components), dtype=dtype)
    s = emb.signs.astype(dtype)
    if sp.issparse(X):
        if X.format != "csr":
            raise TypeError(f"sparse_embed needs a CSR chunk; got format {X.format!r}. "
                            "Convert it with .tocsr().")
        data = X.data if X.data.dtype == dtype else X.data.astype(dtype)
        _se_csr_loop(data, X.indices, X.indptr, emb.hash, s, out)
    else:
        A = np.ascontiguousarray(X, dtype=dtype)
        _se_dense_loop(A, emb.hash, s, out)
    return out


def dense_embed(X, emb: DenseEmbedding):
    """RP embedding ``X·R`` of one chunk (BLAS GEMM; CSR × dense for sparse X).

    Returns
    -------
    ndarray of shape (n_rows, n_components), in X's float dtype.

    References
    ----------
    Boutsidis, Zouzias, Mahoney & Drineas (2015), Randomized dimensionality
    reduction for k-means clustering, IEEE Trans. Inf. Theory 61(2).
    """
    _check_features(X, emb.n_features)
    dtype = _float_dtype(X.dtype)
    R = emb.matrix if emb.matrix.dtype == dtype else emb.matrix.astype(dtype)
    if sp.issparse(X):
        if X.format != "csr":
            raise TypeError(f"dense_embed needs a CSR chunk; got format {X.format!r}. "
                            "Convert it with .tocsr().")
        Xc = X if X.dtype == dtype else X.astype(dtype)
        return np.asarray(Xc @ R, dtype=dtype)
    return np.ascontiguousarray(X, dtype=dtype) @ R


def embed_chunk(X, emb):
    """Dispatch on the embedding type: SE (:func:`sparse_embed`) or RP (:func:`dense_embed`)."""
    if isinstance(emb, SparseEmbedding):
        return sparse_embed(X, emb)
    if isinstance(emb, DenseEmbedding):
        return dense_embed(X, emb)
    raise TypeError(f"emb must be a SparseEmbedding or a DenseEmbedding; got {type(emb).__name__}.")


def _check_features(X, d):
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"X of shape {X.shape} does not have the embedding's {d} features.")


# ----------------------------------------------------------------------------- row tiles
def _row_bytes(X, n_components):
    """Bytes of temporaries per row of a tile: the float64 copy, the gathered
    means and the differences of :func:`label_moments` (dense), or the float64
    non-zeros (CSR), plus the row's image and its distances."""
    n, d = X.shape
    if sp.issparse(X):
        per = 3 * 12 * (X.nnz / max(n, 1)) + 8
    else:
        per = 3 * 8 * d
    return int(per + 2 * 8 * n_components + 64)


def _tiles(X, centers, tile_bytes):
    return row_tiles(X.shape[0], _row_bytes(X, centers.shape[1]), tile_bytes)


def _embedded_labels(Xt, emb, centers):
    Xh = embed_chunk(Xt, emb).astype(centers.dtype, copy=False)
    return assign_labels(Xh, centers)[0]


def embed_assign_chunk(X, emb, centers, *, tile_bytes=None):
    """Embed one chunk and label each row with its nearest embedded center, tile by tile.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_rows, n_features)
    emb : SparseEmbedding or DenseEmbedding
    centers : ndarray of shape (n_clusters, n_components)
    tile_bytes : int, optional
        Bound on one tile's temporaries (default
        :data:`dqkm.kernels.tiles.TILE_BYTES`).

    Returns
    -------
    labels : ndarray of shape (n_rows,), int32
        The same labels as embedding the whole chunk at once (rows are
        independent).
    """
    labels = np.empty(X.shape[0], dtype=np.int32)
    for lo, hi in _tiles(X, centers, tile_bytes):
        labels[lo:hi] = _embedded_labels(X[lo:hi], emb, centers)
    return labels


def embed_moments_chunk(X, emb, centers, *, tile_bytes=None, weights=None):
    """Per-cluster (count, mean, Σ‖x − mean‖²) in the original space of one chunk.

    Each tile of rows is embedded, labelled by the nearest embedded center
    and summarised by :func:`~dqkm.kernels.lloyd_sparse.label_moments` on its
    original rows; the tiles' moments merge by Chan et al.'s pairwise rule.
    No copy of the whole chunk is made (no CSR or float64 copy of a dense
    chunk): the temporaries are one tile's, at most about ``tile_bytes``.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_rows, n_features)
    emb : SparseEmbedding or DenseEmbedding
    centers : ndarray of shape (n_clusters, n_components)
    tile_bytes : int, optional
        Default :data:`dqkm.kernels.tiles.TILE_BYTES`.
    weights : ndarray of shape (n_rows,), optional
        Row weights (see :func:`~dqkm.kernels.lloyd_sparse.label_moments`).

    Returns
    -------
    counts : ndarray of shape (n_clusters,), int64 (float64 total weights with ``weights``)
    means : ndarray of shape (n_clusters, n_features), float64
    m2 : ndarray of shape (n_clusters,), float64
    """
    k = centers.shape[0]
    out = None
    for lo, hi in _tiles(X, centers, tile_bytes):
        Xt = X[lo:hi]
        wt = None if weights is None else weights[lo:hi]
        part = label_moments(Xt, _embedded_labels(Xt, emb, centers), k, weights=wt)
        out = part if out is None else merge_label_moments(out, part)
    if out is None:
        return label_moments(X, np.zeros(0, dtype=np.intp), k,
                             weights=None if weights is None else weights[:0])
    return out
