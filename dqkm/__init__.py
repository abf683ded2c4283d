"""dqkm: out-of-core clustering on Dask."""

__version__ = "0.1.0"
