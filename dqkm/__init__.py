"""dqkm: out-of-core clustering on Dask.

Data lives in Zarr stores read as chunked Dask arrays; each iteration is one
blockwise pass over the data on the Dask workers, and the small state stays on
the driver.

Estimators (scikit-learn style: ``fit``, ``predict``, ``get_params``, ...):

- :class:`KMeans`: K-means (Lloyd's algorithm) on in-memory or out-of-core data;
- :class:`MiniBatchKMeans`: mini-batch K-means streamed block by block, and
  ``partial_fit`` for data that arrives in pieces;
- :class:`KMeansL1`: K-means whose centroids are projected on an ℓ1 ball;
- :class:`QKMeans`: QuicK-means, centroids as a product of sparse factors;
- :class:`MiniBatchQKMeans`: mini-batch QuicK-means and its ``partial_fit``;
- :class:`SparseEmbeddedKMeans`: K-means on a random low-dimensional embedding;
- :class:`KMultipleMeans`: K-Multiple-Means, clusters of any shape from many
  prototypes;
- :class:`ClusterIndex` (:mod:`dqkm.neighbors`): k-nearest-neighbour search
  through a fitted clusterer's partition (an inverted index);
- :class:`FactorNystroem` (:mod:`dqkm.kernel_approximation`): Nyström
  features with landmarks from (Q)K-means, uniform rows or Fast-Nyström.

Functions: :func:`save`, :func:`load` (models), :func:`factorize_centroids`.

Submodules (each importable as ``dqkm.<name>`` and listed by ``dir(dqkm)``):
:mod:`dqkm.io` (stores and models), :mod:`dqkm.datasets` (generators),
:mod:`dqkm.metrics`, :mod:`dqkm.monitor` (history plots), :mod:`dqkm.progress`
(progress of a fit: ``verbose``), :mod:`dqkm.cluster_config` (a Dask cluster
from a YAML file), :mod:`dqkm.cli` (the ``dqkm`` command), :mod:`dqkm.parallel`
(the Dask graphs), :mod:`dqkm.kernels` (NumPy/numba kernels, no Dask), ...

Logging: dqkm logs through the ``dqkm`` logger. To see its messages::

    import logging; logging.basicConfig(); logging.getLogger("dqkm").setLevel("INFO")

Dask config keys (defaults in ``dqkm/dqkm.yaml``, registered with
``dask.config.update_defaults`` when :mod:`dqkm.parallel` is imported):

- ``dqkm.fast-zarr-read`` (default ``True``): read uncompressed or blosc/zstd
  Zarr chunks straight from their files; ``False`` always reads through zarr.
  Set with ``dask.config.set({"dqkm.fast-zarr-read": False})``, in
  ``~/.config/dask/dqkm.yaml``, or ``DASK_DQKM__FAST_ZARR_READ=False``.
- ``dqkm.keep-persisted`` (default ``False``): after a fit that persisted X, keep X in
  memory as long as the lazy ``labels_`` refer to it; ``False`` persists
  ``labels_`` on their own and releases X when the fit returns.
- ``dqkm.settle-timeout`` (default ``30``): seconds a failed or interrupted
  write waits for its running tasks to end before dqkm removes its temporary
  store.
- ``dqkm.paused-timeout`` (default ``120``): seconds every worker of the cluster
  may stay paused (its process memory above distributed's pause threshold)
  before a computation is cancelled with
  :class:`~dqkm.exceptions.WorkersPausedError` instead of waiting forever.

Top-level names are imported lazily, so ``import dqkm.kernels`` stays free of
Dask. To export a new estimator, add it to ``_LAZY`` (not as an import).
"""

import importlib
import pkgutil

__version__ = "0.1.0"

_LAZY = {
    "KMeans": "dqkm.cluster.kmeans",
    "KMeansL1": "dqkm.cluster.kmeans_l1",
    "KMultipleMeans": "dqkm.cluster.kmm",
    "MiniBatchKMeans": "dqkm.cluster.minibatch",
    "MiniBatchQKMeans": "dqkm.cluster.minibatch_qkmeans",
    "SparseEmbeddedKMeans": "dqkm.cluster.sekmeans",
    "QKMeans": "dqkm.cluster.qkmeans",
    "ClusterIndex": "dqkm.neighbors",
    "FactorNystroem": "dqkm.kernel_approximation",
    "factorize_centroids": "dqkm.cluster.qkmeans",
    "save": "dqkm.io",
    "load": "dqkm.io",
}

__all__ = sorted(_LAZY) + ["__version__"]

#: public submodules and subpackages (found on disk: a new one needs no edit here)
_SUBMODULES = frozenset(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.name.startswith("_"))


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
    return sorted(set(__all__) | _SUBMODULES)
