"""Pure kernels: math on one chunk of rows or on small matrices.

No dask, no I/O, no logging, no hidden random state; inputs are never mutated.
"""

from .lloyd import assign_labels, lloyd_partials, squared_norms
from .sparse_factors import SparseFactors

__all__ = ["assign_labels", "lloyd_partials", "squared_norms", "SparseFactors"]
