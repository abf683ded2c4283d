"""K-Multiple-Means on one chunk of rows: the names of its kernel modules in one place.

The code lives in cohesive modules, imported one way (distances ← search ←
neighbours; weights and spectral blocks beside them; the chunk step on top):

* :mod:`dqkm.kernels.kmm_distances` — D_E, β·D_F (eq. 34 by ``mode``) and the
  rank-d′ lower bound, element by element;
* :mod:`dqkm.kernels.kmm_search` — the compiled row-by-row search;
* :mod:`dqkm.kernels.kmm_neighbors` — :func:`nearest_prototypes` (its inputs
  checked and laid out, then solved);
* :mod:`dqkm.kernels.kmm_weights` — the CAN weights (eq. 10) and the data rows
  of F (Lemma 4.1);
* :mod:`dqkm.kernels.kmm_spectral` — SᵀS, components, eigenblocks, the SVD;
* :mod:`dqkm.kernels.kmm_init` — SVD basis, pruned k-means++, outliers;
* :mod:`dqkm.kernels.kmm_step` — one chunk's pass with its typed state.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024.
F. Nie, C.-L. Wang, X. Li, *K-Multiple-Means*, KDD 2019.
"""

from __future__ import annotations

from .kmm_distances import (LB_MARGIN, MODE_COMPONENTS, MODE_EXTRA, MODE_FULL, MODE_NONE,
                            SpectralTerm, _bounds_range, _df_one, _df_range, _dot_one, _insert,
                            _row_dot, _sqdist, project)
from .kmm_neighbors import NeighborResult, nearest_prototypes
from .kmm_weights import can_weights, spectral_rows

__all__ = [
    "MODE_NONE", "MODE_COMPONENTS", "MODE_EXTRA", "MODE_FULL", "LB_MARGIN",
    "NeighborResult", "SpectralTerm", "nearest_prototypes", "can_weights", "project",
    "spectral_rows",
]

# the element-wise routines, for the tests that compare them range by range
_ELEMENTWISE = (_bounds_range, _df_one, _df_range, _dot_one, _insert, _row_dot, _sqdist)
