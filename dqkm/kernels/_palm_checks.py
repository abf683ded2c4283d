"""Input checks and the starting factors of palm4MSA (private to ``palm4msa``/``hierarchical``)."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import scipy.sparse as sp

from ..exceptions import DataError
from .sparse_factors import SparseFactors

_METHODS = ("factors", "dense")


def _check_target(A, owner):
    if sp.issparse(A):
        A = A.toarray()
    A = np.asarray(A)
    if A.ndim != 2 or A.size == 0:
        raise ValueError(
            f"The 'A' parameter of {owner} must be a non-empty 2-D array. Got shape {A.shape} instead."
        )
    if not (np.issubdtype(A.dtype, np.floating) or np.issubdtype(A.dtype, np.integer)):
        raise TypeError(f"The 'A' parameter of {owner} must be real numeric. Got dtype {A.dtype} instead.")
    if not np.all(np.isfinite(A)):
        raise DataError(f"The 'A' parameter of {owner} contains NaN or infinite values.")
    out_dtype = A.dtype if A.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    return np.ascontiguousarray(A, dtype=np.float64), out_dtype


def _check_fixed_left(fixed_left, K, owner):
    if fixed_left is None:
        return np.ones(K)
    d = np.asarray(fixed_left)
    if d.ndim != 1 or d.shape[0] != K:
        raise ValueError(
            f"The 'fixed_left' parameter of {owner} must be the diagonal of the fixed left "
            f"factor, a 1-D array of length K={K}. Got an array of shape {d.shape} instead."
        )
    if not np.issubdtype(d.dtype, np.number) or not np.all(np.isfinite(d)):
        raise ValueError(f"The 'fixed_left' parameter of {owner} must hold finite real numbers.")
    return d.astype(np.float64)


def _check_tol_lam(tol, lam_init, owner, name="tol"):
    if isinstance(tol, bool) or not isinstance(tol, Real) or not (tol >= 0 and math.isfinite(tol)):
        raise ValueError(f"The '{name}' parameter of {owner} must be a float >= 0. Got {tol!r} "
                         f"instead.")
    if lam_init is not None and (
        isinstance(lam_init, bool) or not isinstance(lam_init, Real) or not math.isfinite(lam_init)
    ):
        raise ValueError(
            f"The 'lam_init' parameter of {owner} must be a finite float or None. Got {lam_init!r} instead."
        )


def _check_method(method, owner):
    if method not in _METHODS:
        raise ValueError(f"The 'method' parameter of {owner} must be one of {list(_METHODS)}. "
                         f"Got {method!r} instead.")
    return method


def _initial_factors(init, constraints, lam_init, owner):
    """Dense float64 factors and λ of the starting operator (unscaled: λ·ΠS)."""
    shapes = [c.shape for c in constraints]
    if init is None:
        mats = [np.zeros(shapes[0])] + [np.eye(*s) for s in shapes[1:]]
        lam = 1.0
    else:
        lam = 1.0
        if isinstance(init, SparseFactors):
            lam = float(init.lam)
            init = list(init.factors)
        if isinstance(init, (str, bytes)) or not hasattr(init, "__len__"):
            raise TypeError(
                f"The 'init' parameter of {owner} must be None, a Palm4MSAResult, a SparseFactors "
                f"or a list of arrays. Got {type(init).__name__} instead."
            )
        if len(init) != len(shapes):
            raise ValueError(
                f"The 'init' parameter of {owner} must hold {len(shapes)} factors (one per "
                f"constraint). Got {len(init)} instead."
            )
        mats = []
        for q, M in enumerate(init):
            M = M.toarray() if sp.issparse(M) else np.asarray(M)
            if M.shape != shapes[q]:
                raise ValueError(
                    f"Factor {q} of 'init' ({owner}) has shape {M.shape}; the constraints "
                    f"expect {shapes[q]}."
                )
            if not np.all(np.isfinite(M)):
                raise DataError(f"Factor {q} of 'init' ({owner}) contains NaN or infinite "
                                "values.")
            mats.append(np.array(M, dtype=np.float64))
    if lam_init is not None:
        lam = float(lam_init)
    # unit-norm factors, scale moved into λ: the product is unchanged
    for M in mats:
        n = np.linalg.norm(M)
        if n > 0:
            M /= n  # OUT (our own copy)
            lam *= n
    return mats, lam
