"""dqkm: out-of-core clustering on Dask.

Estimators: :class:`KMeans`. Data: :mod:`dqkm.io`, :mod:`dqkm.datasets`.
"""

from .cluster.kmeans import KMeans

__version__ = "0.1.0"

__all__ = ["KMeans", "__version__"]
