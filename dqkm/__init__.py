"""dqkm: out-of-core clustering on Dask.

Estimators: :class:`KMeans`. Data: :mod:`dqkm.io`, :mod:`dqkm.datasets`.
Models: :func:`save`, :func:`load`.

Top-level names are imported lazily, so ``import dqkm.kernels`` stays free of
Dask. To export a new estimator, add it to ``_LAZY`` (not as an import).
"""

import importlib

__version__ = "0.1.0"

_LAZY = {
    "KMeans": "dqkm.cluster.kmeans",
    "KMeansL1": "dqkm.cluster.kmeans_l1",
    "KMultipleMeans": "dqkm.cluster.kmm",
    "MiniBatchKMeans": "dqkm.cluster.minibatch",
    "SparseEmbeddedKMeans": "dqkm.cluster.sekmeans",
    "QKMeans": "dqkm.cluster.qkmeans",
    "factorize_centroids": "dqkm.cluster.qkmeans",
    "save": "dqkm.io",
    "load": "dqkm.io",
}

__all__ = sorted(_LAZY) + ["__version__"]


_SUBMODULES = {"cluster", "cluster_config", "datasets", "io", "kernels", "kernel_approximation",
               "metrics", "monitor", "neighbors", "parallel"}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"dqkm.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dqkm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
