"""QuicK-means iterations on Dask (Giffon et al., Algorithm 1).

Each iteration: the current sparse factors are broadcast once; every chunk
assigns its rows with the fast operator (``argmin_k ‖v_k‖² − 2[V·x]_k``) and
returns K×D float64 sums, counts and the exact objective; the partials are
tree-reduced; the driver forms ``A = D_√n·U`` and refits the factors with
palm4MSA, warm-started from the previous factors, with ``D_√n`` held fixed.

With sample weights ``w`` (a Dask array aligned with X's row chunks), every
chunk returns the weighted sums ``Σ w·x``, the weighted counts ``n_k = Σ w``
(which enter ``D_√n``) and the weighted objective ``Σ w·‖x − v‖²``; integer
weights give what repeating the rows gives.
"""

from __future__ import annotations

import time

import dask.array as da
import numpy as np
import scipy.sparse as sp

from ..exceptions import DataError
from ..kernels.lloyd import partials_from_labels
from .engine import (PerBlock, active_client, block_offsets, broadcast, compute,
                     map_blocks_reduce)
from .finite import describe_bad, map_rows_at, raise_bad
from .lloyd import (_inertia_combine, _lloyd_combine, _moments, check_lloyd_memory,
                    tolerance_from_moments)

__all__ = ["qkmeans_step", "qk_pass", "assign_factors", "factor_distances",
           "factor_inertia", "aligned_weights", "operator_state", "batch_partials",
           "prepare_worker_kernels"]


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


def _finish(block, labels, dense, weights):
    """``partials_from_labels`` of ``labels``, weighted by ``weights`` when given:
    ``(sums, counts, objective, mind)``."""
    sums, counts, obj, _, mind = partials_from_labels(block, labels, dense)
    if weights is None:
        return sums, counts, obj, mind
    K, n = dense.shape[0], block.shape[0]
    ind = sp.csr_matrix((weights, (labels, np.arange(n))), shape=(K, n))
    sums = np.asarray(ind @ np.asarray(block, dtype=np.float64))
    counts = np.bincount(labels, weights=weights, minlength=K)
    with np.errstate(invalid="ignore", over="ignore"):
        obj = float(np.dot(weights, mind)) if np.isfinite(obj) else obj
    return sums, counts, obj, mind


def _qk_partials(block, state, offset, weights=None):
    """``partials_from_labels`` of the operator's assignment (weighted by
    ``weights`` when given), refusing NaN/inf and overflow:
    ``(sums, counts, objective, bad)``."""
    factors, dense, norms = state
    if block.shape[0] == 0:
        return _finish(block, np.zeros(0, np.int32), dense, weights)[:3] + (None,)
    if not _overflows(block.dtype, norms, 0.0):
        labels = factors.nearest_rows(block, norms)  # the products never leave the cache
        sums, counts, obj, mind = _finish(block, labels, dense, weights)
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
        counts = np.zeros(dense.shape[0], np.int64 if weights is None else np.float64)
        return np.zeros(dense.shape), counts, np.nan, bad
    sums, counts, obj, mind = _finish(block, labels, dense, weights)
    return sums, counts, obj, (None if np.isfinite(obj) else
                               describe_bad(block, offset, mind, dense))


def _qk_chunk(block, state, with_moments, index, offset):
    sums, counts, obj, bad = _qk_partials(block, state, offset)
    out = {"sums": sums, "counts": counts, "objective": obj, "bad": bad}
    if with_moments:
        out["moments"] = _moments(block)
    return out


# --------------------------------------------------------------------------- the workers' kernels
_PREPARED = set()


def prepare_worker_kernels(factors, dtype, weighted=False):
    """Compile, here on the driver, the numba kernels the workers' QK-means tasks
    run, so that the workers load machine code from numba's disk cache.

    Without this, on a cold cache (a fresh checkout or install) every worker
    compiled the kernels of its first task itself, and the memory LLVM keeps
    after compiling stays in the worker: enough to hold a tight worker above
    distributed's pause threshold (80 % of its limit).  That memory is not
    Dask's to spill, so the worker stayed paused and the fit waited forever.
    Here the chunk step runs once per process on two rows of
    ``dtype`` (the types a task sees: C-ordered blocks, float64 weights, the
    broadcast state), which fills the cache the workers read — the driver's,
    shared by the workers of a local cluster.  Does nothing without a
    distributed client (the local scheduler's threads compile in the driver
    process anyway).
    """
    dtype = np.dtype(dtype)
    key = (dtype.str, bool(weighted))
    if key in _PREPARED or active_client() is None:
        return
    state = _state(factors, dtype)
    block = np.ascontiguousarray(state[1][:2])  # rows of V: finite, no overflow
    w = np.ones(block.shape[0]) if weighted else None
    _qk_partials(block, state, 0, w)  # the fit's passes and factor_inertia
    _moments(block)  # the first pass's moments (their numba kernel)
    _labels_block(block, _inference_state(factors, dtype), 0)  # assign_factors
    _dist_block(block, _inference_state(factors, dtype), 0)  # factor_distances
    _PREPARED.add(key)


def _state(factors, dtype):
    f = factors.astype(dtype) if factors.dtype != dtype else factors
    dense = np.ascontiguousarray(f.toarray(), dtype=dtype)
    return f, dense, np.einsum("ij,ij->i", dense, dense, dtype=np.float64)


# --------------------------------------------------------------------------- one batch
def operator_state(factors, dtype):
    """What assigning rows of ``dtype`` through ``factors`` needs (for
    :func:`batch_partials`): the factors in that dtype, V dense, ‖v_k‖²."""
    return _state(factors, dtype)


def batch_partials(block, weights, operator):
    """One in-memory batch assigned through the factors (mini-batch QK-means, on
    the driver): ``(sums, weight_sums, objective)``, float64, weighted by
    ``weights``; the objective is against V.  Refuses overflow as :func:`qk_pass`."""
    sums, counts, obj, bad = _qk_partials(block, operator, 0,
                                          np.asarray(weights, dtype=np.float64))
    if bad:
        raise_bad(bad)
    return sums, counts, float(obj)


# --------------------------------------------------------------------------- weights
def aligned_weights(sample_weight, X):
    """``sample_weight`` as a float64 Dask array aligned with X's row chunks.

    None stays None.  NumPy weights are checked here (shape, finite,
    non-negative, not all zero); the values of Dask weights are checked by
    the pass that reads them (:class:`~dqkm.exceptions.DataError` naming the
    first bad row).
    """
    if sample_weight is None:
        return None
    n = X.shape[0]
    if isinstance(sample_weight, da.Array):
        w = sample_weight
        if w.ndim != 1 or w.shape[0] != n:
            raise DataError(f"sample_weight must have shape ({n},), one weight per row of X; "
                            f"got a Dask array of shape {w.shape}. Pass one non-negative "
                            "weight per row.")
        return w.astype(np.float64).rechunk((X.chunks[0],))
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise DataError(f"sample_weight must be numbers, one per row of X; got "
                        f"{type(sample_weight).__name__} that is not numeric ({e}).") from e
    if w.ndim == 0:
        w = np.full(n, float(w))
    if w.shape != (n,):
        raise DataError(f"sample_weight must have shape ({n},), one weight per row of X; got "
                        f"shape {w.shape}. Pass one non-negative weight per row.")
    _check_weight_values(w, 0)
    if not w.any():
        raise DataError("sample_weight must contain at least one positive weight; got all "
                        "zeros. Give the rows to cluster a positive weight.")
    return da.from_array(w, chunks=(X.chunks[0],))


def _check_weight_values(w, offset):
    """Raise a DataError naming the first NaN, infinite or negative weight."""
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"sample_weight must be finite and non-negative; got {float(w[i])!r} "
                        f"for row {offset + i} of X. Fix or drop that weight.")


def _qk_chunk_weighted(block, wb, state, with_moments, offset):
    wb = np.asarray(wb, dtype=np.float64)
    _check_weight_values(wb, offset)
    sums, counts, obj, bad = _qk_partials(block, state, offset, wb)
    out = {"sums": sums, "counts": counts, "objective": obj, "bad": bad}
    if with_moments:
        out["moments"] = _weighted_moments(block, wb)
    return out


def _weighted_moments(block, w):
    """(Σw, weighted mean, Σ w·(x − mean)²) of a block: the moments of the rows
    repeated as the integer weights say; merged as :func:`_moments`'s."""
    total = float(w.sum())
    d = block.shape[1]
    if total == 0:
        return (0, np.zeros(d), np.zeros(d))
    b = np.asarray(block, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite X is reported elsewhere
        mean = (w @ b) / total
        m2 = w @ (b - mean) ** 2
    return (total, mean, m2)


def _weighted_reduce(X, w, chunk, combine, args, split_every, name):
    """One pass over the row blocks of X and the aligned blocks of ``w``:
    ``chunk(block, w_block, *args, row_offset)`` tree-reduced by ``combine``."""
    offsets = PerBlock(int(o) for o in block_offsets(X.chunks[0])[:-1])
    ws = PerBlock(w.to_delayed().ravel())
    return map_blocks_reduce(X, chunk, combine, args=(ws, *args, offsets), split_every=split_every,
                             name=f"{name}-weighted")


def qk_pass(X, factors, *, split_every=None, with_moments=False, sample_weight=None):
    """One pass: sums, counts and objective for the assignment by ``factors``
    (weighted by ``sample_weight``, a Dask array aligned with X's row chunks,
    when given: then ``counts`` are the float64 weight sums)."""
    # the task's working set is a Lloyd task's (chunk, labels, distances, the dense
    # K × D centers and sums); the operator's tiles stay in cache
    check_lloyd_memory("QKMeans pass", X, factors.shape[0], weighted=sample_weight is not None)
    prepare_worker_kernels(factors, X.dtype, sample_weight is not None)
    st = broadcast(_state(factors, X.dtype), "factors")
    if sample_weight is None:
        d = map_blocks_reduce(X, _qk_chunk, _lloyd_combine, args=(st, with_moments),
                              split_every=split_every, with_offsets=True, name="qkmeans")
    else:
        d = _weighted_reduce(X, sample_weight, _qk_chunk_weighted, _lloyd_combine,
                             (st, with_moments), split_every, "qkmeans")
    (res,) = compute(d)
    if res["bad"]:
        raise_bad(res["bad"])
    if sample_weight is not None and not res["counts"].any():
        raise DataError("sample_weight must contain at least one positive weight; got all "
                        "zeros. Give the rows to cluster a positive weight.")
    return res


def qkmeans_step(X, factors, iteration, constraints, *, palm4msa, tol=1e-4, tol_abs=None,
                 palm_iter=50, split_every=None, sample_weight=None):
    """One QK-means iteration (one pass over X): ``(new_factors, record, tol_abs)``.

    ``palm4msa`` is the solver (``dqkm.kernels.palm4msa`` or one with its
    signature), called on ``A = D_√n·U`` with ``fixed_left=√n`` and
    ``init`` = the previous factors.  Clusters that receive no point keep
    their previous row of V as target and get weight 0.  ``tol``/``tol_abs``
    as in :func:`dqkm.parallel.lloyd.lloyd_step`.  ``sample_weight`` (a Dask
    array aligned with X's row chunks, or None) weights the sums, the counts
    ``n_k`` of ``D_√n``, the objective and the variance behind ``tol_abs``.
    The record adds to Lloyd's
    ``seconds_assign``, ``seconds_palm``, ``palm_error`` (relative),
    ``palm_iter`` and ``nnz``.
    """
    t0 = time.perf_counter()
    V_old = factors.toarray().astype(np.float64)
    res = qk_pass(X, factors, split_every=split_every, with_moments=tol_abs is None,
                  sample_weight=sample_weight)
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


def _max_row_norm(block, factors, offset):
    """An upper bound of the largest ‖x‖ of a block; raises for NaN/inf or float64
    overflow.  One read of the block in its own dtype (a float64 sum of a float32
    block costs five times more); the float64 sums only when that one is not finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        xsq = np.einsum("ij,ij->i", block, block)
    if np.isfinite(xsq).all():  # no NaN or inf in the block; the sums' rounding bounded
        eps = float(np.finfo(xsq.dtype).eps)
        return float(np.sqrt(float(xsq.max()) * (1.0 + 2.0 * block.shape[1] * eps)))
    return float(np.sqrt(_row_sq_norms(block, factors, offset).max()))


def _labels_block(block, state, offset):
    factors, norms = state
    if block.shape[0] == 0:
        return np.empty(0, dtype=np.int32)
    # one read of the block for ‖x‖: the NaN/inf check and the overflow bound
    labels, bad = _nearest(block, factors, norms, _max_row_norm(block, factors, offset), offset)
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
    prepare_worker_kernels(factors, X.dtype)
    st = broadcast(_inference_state(factors, X.dtype), "factors")
    return map_rows_at(X, _labels_block, st, dtype=np.int32, name="assign-factors")


def factor_distances(X, factors):
    """Lazy Euclidean distances from X's rows to the rows of V, (n, K); refuses
    blocks as :func:`assign_factors`."""
    prepare_worker_kernels(factors, X.dtype)
    st = broadcast(_inference_state(factors, X.dtype), "factors")
    return map_rows_at(X, _dist_block, st, dtype=X.dtype, n_columns=factors.shape[0],
                       name="factor-distances")


def _qk_inertia_chunk(block, state, index, offset):
    # as in the fit's passes: no n × K products
    _, _, obj, bad = _qk_partials(block, state, offset)
    return (obj, bad)


def _qk_inertia_chunk_weighted(block, wb, state, offset):
    wb = np.asarray(wb, dtype=np.float64)
    _check_weight_values(wb, offset)
    _, _, obj, bad = _qk_partials(block, state, offset, wb)
    return (obj, bad)


def factor_inertia(X, factors, *, split_every=None, sample_weight=None):
    """The QK-means objective (eq. 5) of X for ``factors``, weighted by
    ``sample_weight`` (aligned with X's row chunks) when given: one pass;
    refuses X as :func:`qk_pass`."""
    check_lloyd_memory("QKMeans objective pass", X, factors.shape[0],
                       weighted=sample_weight is not None)
    prepare_worker_kernels(factors, X.dtype, sample_weight is not None)
    st = broadcast(_state(factors, X.dtype), "factors")
    if sample_weight is not None:
        d = _weighted_reduce(X, sample_weight, _qk_inertia_chunk_weighted, _inertia_combine,
                             (st,), split_every, "qk-inertia")
    else:
        d = map_blocks_reduce(X, _qk_inertia_chunk, _inertia_combine, args=(st,),
                              split_every=split_every, with_offsets=True, name="qk-inertia")
    ((value, bad),) = compute(d)
    if bad:
        raise_bad(bad)
    return float(value)
