"""Approximate nearest neighbours through a partition

:class:`dqkm.neighbors.ClusterIndex` stores the rows of X grouped by cluster (an
inverted index); a query scans the ``n_probe`` clusters whose centroids are nearest.
The recall@1 against scikit-learn's exact brute-force search shows the trade-off:
``n_probe = n_clusters`` is exact k-NN.
"""

import numpy as np
from sklearn.neighbors import NearestNeighbors

from dqkm import KMeans, datasets
from dqkm.neighbors import ClusterIndex

X, _ = datasets.make_blobs(11_000, 16, centers=20, cluster_std=4.0, random_state=0)
X = X.compute()
X, queries = X[:10_000], X[10_000:]
exact = NearestNeighbors(algorithm="brute").fit(X).kneighbors(queries, 1)[1][:, 0]

index = ClusterIndex(KMeans(32, n_init=1, random_state=0)).fit(X)
print("cluster sizes: smallest", int(index.cluster_sizes_.min()), "largest",
      int(index.cluster_sizes_.max()))
print(f"{'n_probe':>7} {'recall@1':>9}")
for n_probe in (1, 2, 4, 32):
    dist, ind = index.set_params(n_probe=n_probe).kneighbors(queries, n_neighbors=1)
    print(f"{n_probe:>7} {np.mean(ind[:, 0] == exact):>9.3f}")
