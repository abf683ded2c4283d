"""Sparse data: sparse-embedded K-means

tf-idf-like sparse blobs, held as a Dask array of CSR chunks, are clustered by
:class:`dqkm.SparseEmbeddedKMeans`: K-means on a sparse embedding of the rows into
``n_components`` columns (one pass over the non-zeros), then labels for the original
rows. Full :class:`dqkm.KMeans` on the CSR chunks is the reference; the normalised
mutual information with the generating clusters shows what the embedding keeps.
"""

from dqkm import KMeans, SparseEmbeddedKMeans, metrics
from dqkm.sparse import make_sparse_blobs

X, y = make_sparse_blobs(6_000, 5_000, density=0.01, centers=6, signal=0.5, chunks=1_500,
                         random_state=0)
y = y.compute()
print(f"X: {X.shape}, {X.numblocks[0]} CSR chunks, {X.blocks[0].compute().nnz:,} non-zeros "
      "in the first")

full = KMeans(6, n_init=1, random_state=0).fit(X)
print(f"{'method':<28} {'columns':>8} {'NMI':>6}")
print(f"{'KMeans (CSR chunks)':<28} {X.shape[1]:>8,} {metrics.nmi(y, full.labels_.compute()):>6.3f}")
for d in (32, 128):
    se = SparseEmbeddedKMeans(6, n_components=d, random_state=0,
                              kmeans={"n_init": 1}).fit(X)
    print(f"{'SparseEmbeddedKMeans':<28} {d:>8,} {metrics.nmi(y, se.labels_.compute()):>6.3f}")
