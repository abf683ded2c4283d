"""K-means on a Zarr store

Blobs are written chunk by chunk to a Zarr store; :class:`dqkm.KMeans` fits on the
lazy Dask array that reads it (every pass runs chunk by chunk), the labels come
back as a lazy Dask array aligned with the data, and the model is saved as a Zarr
group (no pickle) and loaded back. scikit-learn's ``KMeans`` started from the same
centers is the reference: Lloyd's algorithm is deterministic from given centers.
"""

import os
import shutil
import tempfile

import numpy as np
from sklearn.cluster import KMeans as SkKMeans

import dqkm
from dqkm import datasets

tmp = tempfile.mkdtemp()
X, y = datasets.make_blobs(20_000, 8, centers=5, cluster_std=3.0, chunks=5_000,
                           random_state=0, path=os.path.join(tmp, "blobs.zarr"))
print("X:", X.shape, X.dtype, "in", X.numblocks[0], "chunks of a Zarr store")

X_np = X.compute()
init = X_np[np.random.default_rng(0).choice(len(X_np), 5, replace=False)]
km = dqkm.KMeans(5, init=init, n_init=1, random_state=0).fit(X)
sk = SkKMeans(5, init=init, n_init=1, algorithm="lloyd").fit(X_np)
print(f"dqkm.KMeans:   {km.n_iter_} iterations, inertia {km.inertia_:.6g}")
print(f"scikit-learn:  {sk.n_iter_} iterations, inertia {sk.inertia_:.6g}")
labels = km.labels_                       # a lazy Dask array, chunked like X
print("labels_:", type(labels).__name__, "with chunks", labels.chunks[0])
print("same labels as scikit-learn:", bool(np.array_equal(labels.compute(), sk.labels_)))
print("adjusted mutual information with the true blobs:",
      round(dqkm.metrics.ami(y.compute(), labels.compute()), 3))

path = dqkm.save(km, os.path.join(tmp, "kmeans.zarr"))
loaded = dqkm.load(path)
print("the loaded model predicts the same labels:",
      bool(np.array_equal(loaded.predict(X_np), labels.compute())))
shutil.rmtree(tmp)
