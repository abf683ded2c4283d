"""Refusing non-finite input and values whose squares overflow: one message each.

Every pass that reads X finds out in that same pass whether its block held
NaN or infinity, or finite values too large for squared distances: the
kernels' float64 distances come out non-finite, and only then is the block
looked at again (:func:`describe_bad`) to say which.  Reductions carry that
description to the driver (:func:`first_bad` keeps the lowest row), which
raises it (:func:`raise_bad`); lazy outputs raise when the block that holds
the value is computed (:func:`map_rows_at`, :func:`checked_rows`).  Every
refusal is a :class:`dqkm.exceptions.DataError` (a ``ValueError``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..exceptions import DataError
from .engine import broadcast

__all__ = ["raise_nonfinite", "raise_bad", "describe_bad", "first_bad", "bad_error",
           "check_block", "check_sample", "checked_rows", "map_rows_at", "safe_magnitude"]

_FIX = "dqkm estimators need finite values; drop or impute them first."


def _where(bad):
    if bad.get("row") is None:
        return ""
    a, b = bad["rows"]
    if bad["kind"] == "too large":
        return f" in the block of rows {a}–{b - 1} (first overflowing row: {bad['row']})"
    return f" (first at row {bad['row']}, in the block of rows {a}–{b - 1})"


def safe_magnitude(dtype, n_features):
    """Largest |x| for which ``‖x − c‖² ≤ 4·D·max|x|²`` cannot overflow ``dtype``."""
    return math.sqrt(float(np.finfo(dtype).max) / (4.0 * max(int(n_features), 1)))


def bad_error(bad):
    """The :class:`DataError` for a description made by :func:`describe_bad`."""
    if bad["kind"] != "too large":
        return DataError(f"Input X contains {bad['kind']}{_where(bad)}. {_FIX}")
    m = bad["max_abs"]
    scale = 10.0 ** math.ceil(math.log10(m)) if m > 0 and math.isfinite(m) else 1.0
    centers = (f" (the centers' largest is {bad['centers_max_abs']:.4g})"
               if bad.get("centers_max_abs") is not None else "")
    return DataError(
        f"{bad.get('what', 'Input X')} holds values too large to cluster: the largest "
        f"magnitude is {m:.4g}"
        f"{_where(bad)}{centers}, and squared distances overflow {bad['dtype']} (|x| up to "
        f"about {safe_magnitude(bad['dtype'], bad['n_features']):.3g} is safe with "
        f"{bad['n_features']} features). Rescale X first, e.g. X / {scale:.0e}"
        f"{' (and the init array likewise)' if 'what' in bad else ''}.")


def raise_nonfinite(kind, bad=None):
    """Raise the one "Input X contains NaN/infinity" :class:`DataError`.

    ``bad`` (from :func:`describe_bad`) adds the row where it was found.
    """
    bad = dict(bad or {}, kind=kind)
    raise bad_error(bad)


def raise_bad(bad):
    """Raise the :class:`DataError` described by ``bad`` (NaN, infinity or too large)."""
    raise bad_error(bad)


def _values(block):
    return block.data if sp.issparse(block) else np.asarray(block)


def describe_bad(block, offset=0, dist=None, centers=None):
    """Why a block's distances came out non-finite: a small dict for the driver.

    Parameters
    ----------
    block : ndarray or scipy.sparse matrix, the rows read
    offset : int, the row of X where the block starts
    dist : ndarray of shape (n_rows,), optional
        The block's per-row results (squared distances, ...): its first
        non-finite entry names the row when X itself is finite.
    centers : ndarray, optional
        Named in the message when X is finite but too large.

    Returns
    -------
    dict with ``kind`` ('NaN', 'infinity' or 'too large'), ``row`` (first row
    concerned, in X), ``rows`` (the block's row range) and, for 'too large',
    ``max_abs``, ``dtype`` and ``n_features``.
    """
    values = _values(block)
    n = block.shape[0]
    rows = (int(offset), int(offset) + n)
    finite = np.isfinite(values)
    if not finite.all():
        kind = "NaN" if np.isnan(values).any() else "infinity"
        if sp.issparse(block):
            pos = int(np.argmin(finite))
            r = int(np.searchsorted(block.indptr, pos, side="right")) - 1
        else:
            r = int(np.argmin(finite.all(axis=1)))
        return {"kind": kind, "row": int(offset) + r, "rows": rows}
    r = None
    if dist is not None:
        d = ~np.isfinite(np.asarray(dist).reshape(n, -1)).all(axis=1)
        r = int(offset) + int(np.argmax(d)) if d.any() else None
    max_abs = float(np.abs(values).max(initial=0.0))
    out = {"kind": "too large", "row": r if r is not None else int(offset), "rows": rows,
           # distances are accumulated in float64 whatever X's dtype
           "max_abs": max_abs, "dtype": "float64", "n_features": int(block.shape[1])}
    if centers is not None:
        out["centers_max_abs"] = float(np.abs(np.asarray(centers)).max(initial=0.0))
    return out


def check_sample(rows, what=None):
    """Refuse sampled rows of X (dense or CSR) that hold NaN or infinity, or whose
    squared norms overflow float64 (the driver's k-means++ computes distances).

    ``what`` names another array in the "too large" message (e.g. an init array).
    """
    values = _values(rows)
    if values.size == 0:
        return
    if not np.isfinite(values).all():
        raise_nonfinite("NaN" if np.isnan(values).any() else "infinity")
    max_abs = float(np.abs(values).max())
    if max_abs > safe_magnitude(np.float64, rows.shape[1]):
        bad = {"kind": "too large", "row": None, "max_abs": max_abs,
               "dtype": "float64", "n_features": int(rows.shape[1])}
        raise_bad(bad if what is None else dict(bad, what=what))


def first_bad(*bads):
    """The description with the lowest row among those given (None if none)."""
    bads = [b for b in bads if b]
    return min(bads, key=lambda b: b.get("row") or 0) if bads else None


def check_block(block, offset=0, out=None, centers=None):
    """Raise for ``block`` if ``out`` (its results; default the block itself) is not
    all finite; return ``out``."""
    res = block if out is None else out
    vals = _values(res)
    if vals.dtype.kind == "f" and not np.isfinite(vals).all():
        raise_bad(describe_bad(block, offset, None if out is None else out, centers))
    return res


def _row_offset(block_info):
    return int(block_info[0]["array-location"][0][0]) if block_info else 0


def _checked_block(block, block_info=None):
    vals = _values(block)
    # one float64 reduction per row: NaN and infinity propagate, no block-sized temporary
    s = np.add.reduce(vals, axis=None if sp.issparse(block) else 1, dtype=np.float64)
    if not np.isfinite(s).all() and not np.isfinite(vals).all():
        raise_bad(describe_bad(block, _row_offset(block_info)))
    return block


def checked_rows(X):
    """X whose blocks raise the "Input X contains NaN/infinity" :class:`DataError`
    when they are computed (fused into the task that reads them)."""
    return X.map_blocks(_checked_block, dtype=X.dtype, token="dqkm-checked")


def _at_offset(block, func, one_column, *args, block_info=None):
    out = func(block, *args, _row_offset(block_info))
    return out[:, None] if one_column else out


def map_rows_at(X, func, *args, dtype, n_columns=None, name="rows"):
    """Lazy ``func(block, *args, row_offset)`` per row block of X (rows only chunked).

    Returns a 1-D Dask array (``n_columns`` None) or one of ``n_columns``
    columns, aligned with X's row chunks; ``func`` knows where its block
    starts, so its errors name rows of X.  NumPy arguments above 1 MiB are
    broadcast (one key for all tasks).
    """
    if X.ndim == 2 and X.numblocks[1] != 1:
        raise ValueError("X must be chunked along rows only; got chunks "
                         f"{X.chunks[1]} along features. Fix it with X.rechunk({{1: -1}}).")
    args = [broadcast(a, f"{name}-arg") if isinstance(a, np.ndarray) and a.nbytes > 2**20
            else a for a in args]
    one = n_columns is None
    out = X.map_blocks(_at_offset, func, one, *args, dtype=dtype,
                       chunks=(X.chunks[0], (1 if one else int(n_columns),)),
                       meta=np.empty((0, 0), dtype=dtype), token=f"dqkm-{name}")
    return out[:, 0] if one else out
