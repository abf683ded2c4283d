"""Pure kernels: math on one chunk of rows or on small matrices.

No dask, no I/O, no logging, no hidden random state; inputs are never mutated.
"""

from .lloyd import assign_labels, lloyd_partials, squared_norms
from .sparse_factors import SparseFactors

__all__ = ["assign_labels", "lloyd_partials", "squared_norms", "SparseFactors"]

from .factor_offset import add_offset, split_offset
from .hierarchical import default_residual_constraints, hierarchical_palm4msa
from .palm4msa import Palm4MSAResult, default_constraints, default_shapes, palm4msa
from .projections import Sp, Spcol, Splin, Splincol, Supp

__all__ += ["palm4msa", "hierarchical_palm4msa", "Palm4MSAResult", "default_shapes",
            "default_constraints", "default_residual_constraints",
            "Sp", "Splin", "Spcol", "Splincol", "Supp", "add_offset", "split_offset"]
