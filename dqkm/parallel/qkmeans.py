"""QuicK-means iterations on Dask (Giffon et al., Algorithm 1).

Each iteration: the current sparse factors are broadcast once; every chunk
assigns its rows with the fast operator (``argmin_k ‖v_k‖² − 2[V·x]_k``) and
returns K×D float64 sums, counts and the exact objective; the partials are
tree-reduced; the driver forms ``A = D_√n·U`` and refits the factors with
palm4MSA, warm-started from the previous factors, with ``D_√n`` held fixed.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ..kernels.lloyd import partials_from_labels, squared_norms
from .engine import broadcast, compute, map_blocks_reduce, map_rows
from .lloyd import (IterationResult, _lloyd_combine, _moments, _nonfinite_kind, _raise_nonfinite,
                    end_iteration, tolerance_from_moments)

logger = logging.getLogger(__name__)

__all__ = ["qkmeans", "qk_pass", "assign_factors", "factor_distances",
           "factor_inertia"]


def _qk_chunk(block, state, with_moments):
    factors, dense, norms = state
    labels = factors.nearest_rows(block, norms)  # the products never leave the cache
    sums, counts, obj, _, _ = partials_from_labels(block, labels, dense)
    out = {"sums": sums, "counts": counts, "objective": obj,
           "bad": None if np.isfinite(obj) else _nonfinite_kind(block)}
    if with_moments:
        out["moments"] = _moments(block)
    return out


def _state(factors, dtype):
    f = factors.astype(dtype) if factors.dtype != dtype else factors
    dense = np.ascontiguousarray(f.toarray(), dtype=dtype)
    return f, dense, squared_norms(dense)


def qk_pass(X, factors, *, split_every=None, with_moments=False):
    """One pass: sums, counts and objective for the assignment by ``factors``."""
    st = broadcast(_state(factors, X.dtype), "factors")
    d = map_blocks_reduce(X, _qk_chunk, _lloyd_combine, args=(st, with_moments),
                          split_every=split_every, name="qkmeans")
    (res,) = compute(d)
    if res["bad"]:
        _raise_nonfinite(res["bad"])
    return res


def qkmeans(X, init_factors, constraints, *, palm4msa, max_iter=300, tol=1e-4, palm_iter=50,
            split_every=None, callback=None, start_iter=0, history=None, tol_abs=None,
            on_iteration=None):
    """QK-means iterations from ``init_factors`` (a ``SparseFactors``).

    ``palm4msa`` is the solver (``dqkm.kernels.palm4msa``), called each
    iteration on ``A = D_√n·U`` with ``fixed_left=√n`` and ``init`` = the
    previous factors.  Clusters that receive no point keep their previous row
    of V as target and get weight 0.  One pass over X per iteration.
    ``start_iter``/``history``/``tol_abs``/``on_iteration`` as in
    :func:`dqkm.parallel.lloyd.lloyd` (checkpoint and resume).
    """
    factors = init_factors
    history = list(history or [])
    if tol_abs is None and not tol:
        tol_abs = 0.0
    converged, shift, obj, it = False, np.inf, np.nan, start_iter
    for it in range(start_iter + 1, max_iter + 1):
        t0 = time.perf_counter()
        V_old = factors.toarray().astype(np.float64)
        res = qk_pass(X, factors, split_every=split_every, with_moments=tol_abs is None)
        if tol_abs is None:
            tol_abs = tolerance_from_moments(res["moments"], tol)
        t1 = time.perf_counter()
        counts = res["counts"]
        empty = np.flatnonzero(counts == 0)
        U = V_old.copy()
        nz = counts > 0
        U[nz] = res["sums"][nz] / counts[nz, None]
        weights = np.sqrt(counts.astype(np.float64))
        A = weights[:, None] * U
        pres = palm4msa(A, constraints, n_iter=palm_iter, init=factors, fixed_left=weights)
        factors = pres.factors
        t2 = time.perf_counter()
        V = factors.toarray().astype(np.float64)
        shift = float(((V - V_old) ** 2).sum())
        obj = float(res["objective"])
        norm_a = float(np.linalg.norm(A))
        rec = {"iteration": it, "objective": obj, "shift": shift, "seconds": t2 - t0,
               "seconds_assign": t1 - t0, "seconds_palm": t2 - t1,
               "palm_error": float(pres.errors[-1]) / norm_a if norm_a > 0 else 0.0,
               "palm_iter": int(pres.n_iter), "nnz": int(factors.nnz),
               "empty_clusters": empty.tolist()}
        logger.info("QK-means iteration %d: objective %.6g, shift %.3g, palm4MSA rel. error %.4f "
                    "(%d it.), %.3fs assign + %.3fs palm4MSA", it, obj, shift, rec["palm_error"],
                    rec["palm_iter"], rec["seconds_assign"], rec["seconds_palm"])
        converged = end_iteration(rec, factors, history, tol_abs, on_iteration, callback)
        if converged:
            break
    return IterationResult(state=factors, n_iter=it, history=history, converged=converged,
                           last_objective=obj, shift=shift)


# --------------------------------------------------------------------------- inference
def _fast_scores(block, factors, norms):
    """‖v_k‖² − 2·[V·x]_k for every row (argmin = nearest row of V)."""
    G = factors.apply_rows(block)
    return norms[None, :] - 2.0 * G


def _labels_block(block, state):
    factors, norms = state
    if block.shape[0] == 0:
        return np.empty(0, dtype=np.int32)
    return factors.nearest_rows(block, norms)


def _dist_block(block, state):
    factors, norms = state
    xsq = np.einsum("ij,ij->i", block, block, dtype=np.float64)
    d2 = _fast_scores(block, factors, norms) + xsq[:, None]
    return np.sqrt(np.maximum(d2, 0)).astype(block.dtype)


def _inference_state(factors, dtype):
    f = factors.astype(dtype) if factors.dtype != dtype else factors
    return f, np.asarray(f.row_norms_sq(), dtype=dtype)


def assign_factors(X, factors):
    """Lazy labels of X's rows by the fast operator (no dense K×D product)."""
    st = broadcast(_inference_state(factors, X.dtype), "factors")
    return map_rows(X, _labels_block, st, dtype=np.int32, name="assign-factors")


def factor_distances(X, factors):
    """Lazy Euclidean distances from X's rows to the rows of V, (n, K)."""
    st = broadcast(_inference_state(factors, X.dtype), "factors")
    return X.map_blocks(_dist_block, st, chunks=(X.chunks[0], (factors.shape[0],)),
                        dtype=X.dtype, meta=np.empty((0, 0), X.dtype))


def _qk_inertia_chunk(block, state):
    factors, dense, norms = state
    labels = factors.nearest_rows(block, norms)  # as in the fit's passes: no n × K products
    _, _, obj, _, _ = partials_from_labels(block, labels, dense)
    return (obj, None if np.isfinite(obj) else _nonfinite_kind(block))


def factor_inertia(X, factors, *, split_every=None):
    """The QK-means objective (eq. 5) of X for ``factors``: one pass."""
    from .lloyd import _inertia_combine

    st = broadcast(_state(factors, X.dtype), "factors")
    d = map_blocks_reduce(X, _qk_inertia_chunk, _inertia_combine, args=(st,),
                          split_every=split_every, name="qk-inertia")
    ((value, bad),) = compute(d)
    if bad:
        _raise_nonfinite(bad)
    return float(value)
