"""QuicK-means iterations on Dask (Giffon et al., Algorithm 1).

Each iteration: the current sparse factors are broadcast once; every chunk
assigns its rows with the fast operator (``argmin_k ‖v_k‖² − 2[V·x]_k``) and
returns K×D float64 sums, counts and the exact objective; the partials are
tree-reduced; the driver forms ``A = D_√n·U`` and refits the factors with
palm4MSA, warm-started from the previous factors, with ``D_√n`` held fixed.
"""

from __future__ import annotations

import time

import numpy as np

from ..kernels.lloyd import partials_from_labels
from .engine import broadcast, compute, map_blocks_reduce
from .finite import describe_bad, map_rows_at, raise_bad
from .lloyd import _inertia_combine, _lloyd_combine, _moments, tolerance_from_moments

__all__ = ["qkmeans_step", "qk_pass", "assign_factors", "factor_distances",
           "factor_inertia"]


# The fast operator forms ½‖v‖² − v·x in X's dtype.  |v·x| ≤ ‖v‖·‖x‖: while
# ‖v‖·max‖x‖ and ½‖v‖² stay below the dtype's largest value over this margin
# nothing overflows; otherwise float32 blocks are assigned in float64, and
# float64 blocks are refused as too large.
_MARGIN = 16.0


def _overflows(dtype, norms, x_norm_max):
    """Whether the products or ½‖v‖² of a block may overflow ``dtype``."""
    lim = float(np.finfo(dtype).max) / _MARGIN
    v_max = float(np.sqrt(norms.max(initial=0.0)))
    return not (0.5 * v_max * v_max <= lim and v_max * x_norm_max <= lim)


def _too_large(block, offset, factors):
    return describe_bad(block, offset, centers=factors.toarray())


def _nearest(block, factors, norms, x_norm_max, offset):
    """Labels of a block by the operator, in float64 when X's dtype may overflow;
    ``(labels, bad)`` with ``bad`` set when even float64 may."""
    if not _overflows(block.dtype, norms, x_norm_max):
        return factors.nearest_rows(block, norms), None
    if block.dtype == np.float64 or _overflows(np.float64, norms, x_norm_max):
        return None, _too_large(block, offset, factors)
    f64 = factors.astype(np.float64)
    return f64.nearest_rows(np.asarray(block, dtype=np.float64), norms), None


def _qk_partials(block, state, offset):
    """``partials_from_labels`` of the operator's assignment, refusing NaN/inf and
    overflow: ``(sums, counts, objective, bad)``."""
    factors, dense, norms = state
    if block.shape[0] == 0:
        return partials_from_labels(block, np.zeros(0, np.int32), dense)[:3] + (None,)
    if not _overflows(block.dtype, norms, 0.0):
        labels = factors.nearest_rows(block, norms)  # the products never leave the cache
        sums, counts, obj, _, mind = partials_from_labels(block, labels, dense)
        if not np.isfinite(obj):
            return sums, counts, obj, describe_bad(block, offset, mind, dense)
        # ‖x‖ ≤ ‖x − v_label‖ + ‖v_label‖ bounds the products just formed
        x_norm_max = float(np.sqrt(mind.max())) + float(np.sqrt(norms.max()))
        if not _overflows(block.dtype, norms, x_norm_max):
            return sums, counts, obj, None
    else:
        x_norm_max = float(np.sqrt(np.einsum("ij,ij->i", block, block,
                                             dtype=np.float64).max()))
    labels, bad = _nearest(block, factors, norms, x_norm_max, offset)
    if bad is not None:
        return np.zeros(dense.shape), np.zeros(dense.shape[0], np.int64), np.nan, bad
    sums, counts, obj, _, mind = partials_from_labels(block, labels, dense)
    return sums, counts, obj, (None if np.isfinite(obj) else
                               describe_bad(block, offset, mind, dense))


def _qk_chunk(block, state, with_moments, index, offset):
    sums, counts, obj, bad = _qk_partials(block, state, offset)
    out = {"sums": sums, "counts": counts, "objective": obj, "bad": bad}
    if with_moments:
        out["moments"] = _moments(block)
    return out


def _state(factors, dtype):
    f = factors.astype(dtype) if factors.dtype != dtype else factors
    dense = np.ascontiguousarray(f.toarray(), dtype=dtype)
    return f, dense, np.einsum("ij,ij->i", dense, dense, dtype=np.float64)


def qk_pass(X, factors, *, split_every=None, with_moments=False):
    """One pass: sums, counts and objective for the assignment by ``factors``."""
    st = broadcast(_state(factors, X.dtype), "factors")
    d = map_blocks_reduce(X, _qk_chunk, _lloyd_combine, args=(st, with_moments),
                          split_every=split_every, with_offsets=True, name="qkmeans")
    (res,) = compute(d)
    if res["bad"]:
        raise_bad(res["bad"])
    return res


def qkmeans_step(X, factors, iteration, constraints, *, palm4msa, tol=1e-4, tol_abs=None,
                 palm_iter=50, split_every=None):
    """One QK-means iteration (one pass over X): ``(new_factors, record, tol_abs)``.

    ``palm4msa`` is the solver (``dqkm.kernels.palm4msa`` or one with its
    signature), called on ``A = D_√n·U`` with ``fixed_left=√n`` and
    ``init`` = the previous factors.  Clusters that receive no point keep
    their previous row of V as target and get weight 0.  ``tol``/``tol_abs``
    as in :func:`dqkm.parallel.lloyd.lloyd_step`.  The record adds to Lloyd's
    ``seconds_assign``, ``seconds_palm``, ``palm_error`` (relative),
    ``palm_iter`` and ``nnz``.
    """
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
    norm_a = float(np.linalg.norm(A))
    rec = {"iteration": iteration, "objective": float(res["objective"]),
           "shift": float(((V - V_old) ** 2).sum()), "seconds": t2 - t0,
           "seconds_assign": t1 - t0, "seconds_palm": t2 - t1,
           "palm_error": float(pres.errors[-1]) / norm_a if norm_a > 0 else 0.0,
           "palm_iter": int(pres.n_iter), "nnz": int(factors.nnz),
           "empty_clusters": empty.tolist()}
    return factors, rec, tol_abs


# --------------------------------------------------------------------------- inference
def _row_sq_norms(block, factors, offset):
    """‖x‖² of a block's rows in float64; raises for NaN/inf or float64 overflow."""
    xsq = np.einsum("ij,ij->i", block, block, dtype=np.float64)
    if not np.isfinite(xsq).all():
        raise_bad(describe_bad(block, offset, xsq, factors.toarray()))
    return xsq


def _labels_block(block, state, offset):
    factors, norms = state
    if block.shape[0] == 0:
        return np.empty(0, dtype=np.int32)
    # one read of the block for ‖x‖²: the NaN/inf check and the overflow bound
    xsq = _row_sq_norms(block, factors, offset)
    labels, bad = _nearest(block, factors, norms, float(np.sqrt(xsq.max())), offset)
    if bad is not None:
        raise_bad(bad)
    return labels


def _dist_block(block, state, offset):
    factors, norms = state
    if block.shape[0] == 0:
        return np.empty((0, factors.shape[0]), dtype=block.dtype)
    xsq = _row_sq_norms(block, factors, offset)
    x = block
    if _overflows(block.dtype, norms, float(np.sqrt(xsq.max()))):
        if block.dtype == np.float64 or _overflows(np.float64, norms, np.sqrt(xsq.max())):
            raise_bad(_too_large(block, offset, factors))
        factors, x = factors.astype(np.float64), np.asarray(block, dtype=np.float64)
    d2 = norms[None, :] - 2.0 * factors.apply_rows(x) + xsq[:, None]
    out = np.sqrt(np.maximum(d2, 0)).astype(block.dtype)
    if not np.isfinite(out).all():
        raise_bad(describe_bad(block, offset, out, factors.toarray()))
    return out


def _inference_state(factors, dtype):
    f = factors.astype(dtype) if factors.dtype != dtype else factors
    return f, np.asarray(f.row_norms_sq(), dtype=np.float64)


def assign_factors(X, factors):
    """Lazy labels of X's rows by the fast operator (no dense K×D product).

    Blocks whose products would overflow X's dtype are assigned in float64; a
    block holding NaN or infinity, or values too large for float64, raises
    :class:`~dqkm.exceptions.DataError` when computed.
    """
    st = broadcast(_inference_state(factors, X.dtype), "factors")
    return map_rows_at(X, _labels_block, st, dtype=np.int32, name="assign-factors")


def factor_distances(X, factors):
    """Lazy Euclidean distances from X's rows to the rows of V, (n, K); refuses
    blocks as :func:`assign_factors`."""
    st = broadcast(_inference_state(factors, X.dtype), "factors")
    return map_rows_at(X, _dist_block, st, dtype=X.dtype, n_columns=factors.shape[0],
                       name="factor-distances")


def _qk_inertia_chunk(block, state, index, offset):
    # as in the fit's passes: no n × K products
    _, _, obj, bad = _qk_partials(block, state, offset)
    return (obj, bad)


def factor_inertia(X, factors, *, split_every=None):
    """The QK-means objective (eq. 5) of X for ``factors``: one pass; refuses X
    as :func:`qk_pass`."""
    st = broadcast(_state(factors, X.dtype), "factors")
    d = map_blocks_reduce(X, _qk_inertia_chunk, _inertia_combine, args=(st,),
                          split_every=split_every, with_offsets=True, name="qk-inertia")
    ((value, bad),) = compute(d)
    if bad:
        raise_bad(bad)
    return float(value)
