"""Sparse (CSR) data as Dask arrays: checks, Zarr CSR groups, sparse blobs (public facade).

A sparse data set is a Dask array chunked along rows whose chunks are
``scipy.sparse`` CSR matrices (``X._meta`` is a CSR matrix).  The code lives
in :mod:`dqkm.data.csr` (format, checks, Zarr CSR groups) and
:mod:`dqkm.data.generators` (:func:`make_sparse_blobs`); this module only
re-exports it.

Examples
--------
>>> import scipy.sparse as sp
>>> from dqkm.sparse import is_sparse_dask, sparse_to_dask
>>> X = sparse_to_dask(sp.random(100, 20, density=0.1, format="csr", random_state=0), chunks=50)
>>> is_sparse_dask(X), X.shape
(True, (100, 20))
"""

from .data.csr import (CSR_FORMAT_VERSION, as_csr_block, check_sparse, is_csr_store,
                       is_sparse_dask, load_csr, save_csr, sparse_to_dask)
from .data.generators import make_sparse_blobs

__all__ = ["is_sparse_dask", "check_sparse", "as_csr_block", "sparse_to_dask", "save_csr",
           "load_csr", "is_csr_store", "make_sparse_blobs", "CSR_FORMAT_VERSION"]
