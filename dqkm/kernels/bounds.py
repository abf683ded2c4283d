"""Exact bound pruning for Lloyd's assignment: Hamerly's one upper and one lower bound per row.

G. Hamerly, "Making k-means even faster", SIAM International Conference on
Data Mining (SDM), 2010.  Every row keeps its label ``a``, an upper bound
``u ≥ ‖x − c_a‖`` and a lower bound ``l ≤ min_{j≠a} ‖x − c_j‖`` (Euclidean,
not squared).  When the centers move by ``δ_j``, ``u += δ_a`` and
``l -= max_{j≠a} δ_j`` keep them valid.  With ``s_j = ½ min_{j'≠j} ‖c_j − c_j'‖``,
``u < max(s_a, l)`` proves that ``c_a`` is strictly the nearest center, so the
row's K distances are skipped; otherwise ``u`` is tightened to the exact
distance and, if the test still fails, all K distances are computed and both
bounds reset.

Exactness.  The tests are strict (``<``), so a row is kept only when its
center is the *unique* nearest one: a row on a tie is always rescanned and
gets the lowest index, as in :mod:`dqkm.kernels.lloyd`.  Every bound is
rounded outward by a relative margin far above float64 rounding
(``_EPS``): upper bounds up, lower bounds and half-separations down, shifts
up, so a bound stays valid for the exact distances.  Distances are computed
in float64; the labels are those of the float64 distances with the lowest
index on ties (:func:`dqkm.kernels.lloyd.exact_sq_dist`), which is how the
Lloyd kernels certify theirs: the labels are identical.  A distance that only
sets an upper bound (a row's tightened bound, a rescanned row's new one) is
summed in any order (:func:`~dqkm.kernels._exact.bound_sq_dist`, vectorised):
within ~2·D·2⁻⁵³ relatively of the exact one, far inside ``_EPS``.  The exact
sum in feature order is one dependent chain of additions per row, which
dominated a step once most rows keep their bounds.

The sums, counts, per-row distances and objective are accumulated by the
Lloyd kernel's finishing loop, so for the same labels they are bit-identical
to :func:`dqkm.kernels.lloyd.lloyd_partials`'s.

Elkan's variant (C. Elkan, "Using the triangle inequality to accelerate
k-means", International Conference on Machine Learning (ICML), 2003) keeps one
lower bound per row *and center* (``n_rows × K`` float64) and the K × K
center separations, and skips each center separately: more state and more
skipped distances, which pays at larger K.  :func:`elkan_partials` follows the
same exactness rules (a center is skipped only when it is strictly farther;
computed candidates are compared by their float64 squared distances, the lower
index winning ties).

All functions here are pure: the bounds and labels are returned as new arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._exact import _rescan_direct, _scan, bound_sq_dist, exact_sq_dist
from .bounds_geometry import _EPS, center_geometry, center_separations
from .bounds_pack import pack_state
from .lloyd import (_DIRECT_MAX_D, _direct_rounding, _direct_tile, _finish_tile, _outputs, _prepare,
                    _run_tiled, certified_pass)

__all__ = ["hamerly_partials", "elkan_partials", "center_geometry", "center_separations",
           "HamerlyResult", "pack_state"]

# From this share of a chunk's rows failing their bounds, Hamerly's step runs the
# Lloyd pass over the whole chunk (which yields every row's bounds too) instead of
# rescanning the failing rows one by one: a rescanned row costs about twice a row
# of the Lloyd pass (benchmarks/bench_kmeans.py's convergence grid measures whole fits).
_FULL_PASS_SHARE = 0.5


# ‖X[r] − centers[j]‖² in float64, in feature order: the distance that defines the
# labels of every dense kernel, the Lloyd kernels' included.
_sq_dist = exact_sq_dist


@njit(nogil=True, cache=True)
def _hamerly_rows(X, centers, labels, upper, lower, shift, half_sep, eps, todo, full_from):  # OUT labels, upper, lower, todo
    """Move and test the bounds of every row, tightening the upper bound where
    the test fails; the rows still failing (and those with label -1: no bounds
    yet) are listed in ``todo`` for :func:`_rescan`.  Returns (distances
    computed, number of rows listed).

    Two loops: the first moves every row's bounds and lists the failing rows
    without a branch (a skip/fail branch per row was mispredicted often enough
    to cost more than the bounds' arithmetic); the second tightens the listed
    rows' upper bounds by their exact distance and keeps those still failing.
    A row listed by the first loop has its moved bounds written; a row the
    second keeps is rescanned, which resets them.  When the first loop lists
    ``full_from`` rows, it stops there and the second is not run (the caller
    passes over every row): returns (0, ``full_from``).
    """
    k = centers.shape[0]
    # largest and second-largest move: max_{j≠a} δ_j without a K loop per row
    m1 = -1.0
    m2 = 0.0
    a1 = -1
    for j in range(k):
        if shift[j] > m1:
            m2 = max(m1, 0.0)
            m1 = shift[j]
            a1 = j
        elif shift[j] > m2:
            m2 = shift[j]
    m1 = max(m1, 0.0)
    up = 1.0 + eps
    m = 0
    for r in range(X.shape[0]):
        a = labels[r]
        aa = max(a, 0)
        other = m2 if aa == a1 else m1
        u = (upper[r] + shift[aa]) * up
        lw = lower[r]
        lo = lw - other
        low = lo - eps * (abs(lw) + other)
        lo = low if np.isfinite(lo) else lo
        bound = max(half_sep[aa], lo)
        upper[r] = u
        lower[r] = lo
        todo[m] = r
        m += 0 if (u < bound and a >= 0) else 1
        if m >= full_from:  # the caller passes over every row, resetting the bounds
            return 0, m
    computed = 0
    n_todo = 0
    for i in range(m):
        r = todo[i]
        a = labels[r]
        if a >= 0:
            computed += 1
            u = np.sqrt(bound_sq_dist(X, r, centers, a)) * up  # a bound: any order
            if u < max(half_sep[a], lower[r]):
                upper[r] = u
                continue
        todo[n_todo] = r
        n_todo += 1
    return computed, n_todo


@njit(nogil=True, cache=True, fastmath={"nnan", "reassoc", "nsz"})
def _min_finite(a):
    """min(a) for an array without NaN (the reduction vectorises)."""
    m = np.inf
    for j in range(a.shape[0]):
        m = min(m, a[j])
    return m


@njit(nogil=True, cache=True)
def _resolve_row(X, r, centers, CT, g, rn, cn, err, d2, lb, want_lb):  # OUT d2, lb
    """Nearest center of row r from its float64 products ``g`` with the centers.

    With ``A_j = ‖c_j‖² − 2 g_j``, ``‖x‖² + A_j`` is within ``err`` of the exact
    float64 squared distance (:func:`_sq_dist`) whatever the GEMM's order of
    summation, so only the centers with ``A_j ≤ min_i A_i + 2 err`` can be
    nearest: their exact distances decide (lowest index on ties); usually
    there is one.  Returns (label, its squared distance — exact, or
    :func:`bound_sq_dist`'s where a single candidate settles the row: the upper
    bound's input only —, a lower bound
    of the exact squared distance to every other center); with ``want_lb``,
    ``lb[j]`` receives such a bound for every center (exact where computed).
    A row whose norm or products are not finite is scanned exactly
    (:func:`_scan`).
    """
    k = centers.shape[0]
    if not (np.isfinite(rn) and np.isfinite(err)):
        arg, best, second = _scan(X, r, CT, d2)
        if want_lb:
            for j in range(k):
                lb[j] = d2[j]
        return arg, best, second
    for j in range(k):  # the products are finite (checked per tile), so is every A_j
        d2[j] = cn[j] - 2.0 * g[j]
    m1 = _min_finite(d2)
    a1 = 0
    while d2[a1] != m1:
        a1 += 1
    d2[a1] = np.inf
    m2 = _min_finite(d2) if k > 1 else np.inf
    d2[a1] = m1
    if m2 > m1 + 2.0 * err and not want_lb:  # one candidate: the usual case
        return a1, bound_sq_dist(X, r, centers, a1), max(rn + m2 - err, 0.0)
    best = np.inf
    arg = -1
    for j in range(k):
        v = d2[j]
        if v <= m1 + 2.0 * err:
            e = _sq_dist(X, r, centers, j)
            lb[j] = e
            if e < best or arg < 0:
                best = e
                arg = j
        else:
            lb[j] = max(rn + v - err, 0.0)
    second = np.inf
    for j in range(k):
        if j != arg and lb[j] < second:
            second = lb[j]
    return arg, best, second


@njit(nogil=True, cache=True, fastmath={"nsz"})
def _two_smallest(GT, cn, t, m1, m2, a1):  # OUT m1, m2, a1
    """Per row i < t: the smallest and second smallest ``A_j = ‖c_j‖² − 2 GT[j, i]``
    and the first j reaching the smallest; selects across the rows (SIMD lanes),
    one center at a time in increasing order (the lowest index wins ties; a NaN
    never wins)."""
    for i in range(t):
        m1[i] = np.inf
        m2[i] = np.inf
        a1[i] = 0
    for j in range(GT.shape[0]):
        g = GT[j]
        c = cn[j]
        for i in range(t):
            v = c - 2.0 * np.float64(g[i])
            b1 = m1[i]
            b2 = m2[i]
            lt1 = v < b1
            m2[i] = b1 if lt1 else (v if v < b2 else b2)
            m1[i] = v if lt1 else b1
            a1[i] = j if lt1 else a1[i]


@njit(nogil=True, cache=True)
def _resolve_rows(X, rows, centers, CT, GT, rn, cn, err_scale, labels, upper, lower, eps):  # OUT labels, upper, lower
    """:func:`_resolve_row` for the rows ``rows`` (the columns of ``GT``, the
    products transposed): labels and fresh bounds, Hamerly's (``lower`` 1-D)
    or Elkan's (``lower`` n × K).  For Hamerly's bounds the usual row, with a
    single candidate center, is settled from :func:`_two_smallest`."""
    k = centers.shape[0]
    t = rows.shape[0]
    d2 = np.empty(k)
    lb = np.empty(k)
    cmax = 0.0
    for j in range(k):
        cmax = max(cmax, cn[j])
    elkan = lower.ndim == 2
    m1 = np.empty(t)
    m2 = np.empty(t)
    a1 = np.empty(t, dtype=np.int64)
    if not elkan:
        _two_smallest(GT, cn, t, m1, m2, a1)
    for i in range(t):
        r = rows[i]
        err = err_scale * (rn[i] + cmax)
        if not elkan and np.isfinite(rn[i]) and np.isfinite(err) and np.isfinite(m1[i]) \
                and m2[i] > m1[i] + 2.0 * err:
            arg = a1[i]
            best = bound_sq_dist(X, r, centers, arg)
            second = max(rn[i] + m2[i] - err, 0.0)
        else:
            g = np.empty(k)
            for j in range(k):
                g[j] = GT[j, i]
            arg, best, second = _resolve_row(X, r, centers, CT, g, rn[i], cn, err, d2, lb,
                                             elkan)
        labels[r] = arg
        upper[r] = np.sqrt(best) * (1.0 + eps)
        if elkan:
            for j in range(k):
                lower[r, j] = np.sqrt(lb[j]) * (1.0 - eps)
        else:
            lower[r] = np.sqrt(second) * (1.0 - eps)


# Rows per GEMM of _rescan (its float64 products are _RESCAN_TILE × K).
_RESCAN_TILE = 1024


def _rescan(X, rows, centers, CT, labels, upper, lower, eps):  # OUT labels, upper, lower
    """Full scans of the rows ``rows`` (those whose bounds failed): one GEMM
    per tile of rows gives every row-center product, then the exact distances
    of the few centers that can be nearest decide (:func:`_resolve_row`); the
    bounds are reset from them.  ``lower`` is 1-D (Hamerly) or n × K (Elkan).
    Labels are those of the exact float64 distances, as a per-row scan gives them."""
    c64 = CT.T
    cn = np.einsum("ij,ij->i", c64, c64)
    # |‖x‖² + ‖c‖² − 2g − d| ≤ (γ_D + O(u))·(‖x‖² + ‖c‖²) for any order of
    # summation of the products g (γ_D ≈ D·u, u the GEMM dtype's unit roundoff:
    # float32 X is multiplied in float32, its conversion exact), the exact float64
    # distance d's own rounding included; the scales below hold it with a margin
    # over 2.  A float32 tile whose products overflow is multiplied in float64.
    err64 = 1e-15 * (X.shape[1] + 4)
    CT32 = CT.astype(np.float32) if X.dtype == np.float32 else None
    C32 = None if CT32 is None else np.ascontiguousarray(CT32.T)
    c64 = np.ascontiguousarray(c64)
    for s in range(0, rows.shape[0], _RESCAN_TILE):
        idx = rows[s:s + _RESCAN_TILE]
        t = idx.shape[0]
        # a run of consecutive rows (a block without bounds) is read as a slice
        R = X[idx[0]:idx[0] + t] if idx[t - 1] - idx[0] == t - 1 else X[idx]
        err_scale = err64
        with np.errstate(over="ignore", invalid="ignore"):
            rn = np.einsum("ij,ij->i", R, R, dtype=np.float64)
            GT = None  # K × t: each center's products with the tile's rows are contiguous
            if CT32 is not None:
                GT = C32 @ R.T
                err_scale = 1.2e-7 * (X.shape[1] + 4)
                if not np.isfinite(GT).all():
                    GT, err_scale = None, err64
            if GT is None:
                GT = c64 @ R.T.astype(np.float64)
        _resolve_rows(X, idx, centers, CT, GT, rn, cn, err_scale, labels, upper, lower, eps)


def _rescan_hamerly(X, rows, centers, CT, labels, upper, lower, eps):  # OUT labels, upper, lower
    """Hamerly's full scans: the direct kernel up to ``_DIRECT_MAX_D`` features
    (as the Lloyd pass), else the GEMM of :func:`_rescan`."""
    k, d = centers.shape
    if d > _DIRECT_MAX_D:
        return _rescan(X, rows, centers, CT, labels, upper, lower, eps)
    dp = d + d % 2
    cpad = np.zeros((k, dp), dtype=X.dtype)
    cpad[:, :d] = centers
    margin, tiny = _direct_rounding(X.dtype, dp)
    with np.errstate(over="ignore", invalid="ignore"):
        _rescan_direct(X, rows, centers, cpad, CT, _direct_tile(dp), margin, tiny, labels, upper,
                       lower, eps)


@njit(nogil=True, cache=True)
def _elkan_row(X, r, centers, CT, d2, a, u, lows, shift, cc, eps):  # OUT lows, d2
    """Elkan's scan of row r from label ``a`` and moved bounds ``u``, ``lows``;
    returns (label, upper bound, distances computed)."""
    k = centers.shape[0]
    computed = 0
    tight = False
    a2 = 0.0
    for j in range(k):
        if j == a or u < lows[j] or u < cc[a, j]:  # c_j strictly farther than c_a
            continue
        if not tight:
            a2 = _sq_dist(X, r, centers, a)
            computed += 1
            u = np.sqrt(a2) * (1.0 + eps)
            lows[a] = np.sqrt(a2) * (1.0 - eps)
            tight = True
            if u < lows[j] or u < cc[a, j]:
                continue
        v = _sq_dist(X, r, centers, j)
        computed += 1
        lows[j] = np.sqrt(v) * (1.0 - eps)
        if v < a2 or (v == a2 and j < a):
            a = j
            a2 = v
            u = np.sqrt(v) * (1.0 + eps)
    return a, u, computed


@njit(nogil=True, cache=True)
def _elkan_rows(X, centers, CT, labels, upper, lower, shift, half_sep, cc, eps, todo):  # OUT labels, upper, lower, todo
    """Move every row's bounds by the centers' shifts, then :func:`_elkan_row` where
    ``u < s_a`` does not already settle it; rows without bounds (label -1) are
    listed in ``todo`` for :func:`_rescan`.  Returns (distances computed,
    number of rows listed)."""
    k = centers.shape[0]
    computed = 0
    m = 0
    d2 = np.empty(k)
    for r in range(X.shape[0]):
        a = labels[r]
        lows = lower[r]
        if a < 0:
            todo[m] = r
            m += 1
            continue
        for j in range(k):
            lo = lows[j] - shift[j]
            if np.isfinite(lo):
                lo = lo - eps * (abs(lows[j]) + shift[j])
            lows[j] = lo
        u = (upper[r] + shift[a]) * (1.0 + eps)
        if u < half_sep[a]:
            upper[r] = u
            continue
        a, u, c = _elkan_row(X, r, centers, CT, d2, a, u, lows, shift, cc, eps)
        labels[r] = a
        upper[r] = u
        computed += c
    return computed, m


@njit(nogil=True, cache=True)
def _mark_nonfinite(mind):  # OUT mind
    """+inf for rows whose distance is not finite (NaN/inf in X, or overflow); whether any."""
    found = False
    for r in range(mind.shape[0]):
        if not np.isfinite(mind[r]):
            mind[r] = np.inf
            found = True
    return found


class HamerlyResult(tuple):
    """``(sums, counts, objective, labels, min_sq_dist, upper, lower, n_skipped)``.

    The first five as :func:`dqkm.kernels.lloyd.lloyd_partials`; ``upper`` and
    ``lower`` the rows' new bounds (float64) and ``n_skipped`` the number of
    row-center distances not computed (out of ``n_rows × n_clusters``).
    """

    __slots__ = ()

    def __new__(cls, *items):
        return super().__new__(cls, items)


def hamerly_partials(X, centers, labels, upper, lower, shift, half_sep, *, with_sums=True,
                     copy=True):
    """One Lloyd step on a chunk, with Hamerly's bounds skipping distance computations.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features), float32 or float64
    centers : ndarray of shape (n_clusters, n_features)
        The centers of this step.
    labels : ndarray of shape (n_rows,), integer
        Each row's label from the previous step; -1 where the row has no bounds
        yet (its K distances are computed).
    upper, lower : ndarray of shape (n_rows,), float64
        The rows' bounds as returned by the previous step (ignored where the
        label is -1).
    shift : ndarray of shape (n_clusters,), float64
        How far each center moved since the previous step, rounded up
        (:func:`center_geometry`); zeros on the first step.
    half_sep : ndarray of shape (n_clusters,), float64
        Half the distance of each center to its nearest other, rounded down
        (:func:`center_geometry`).
    with_sums : bool, default=True
        False: no sums and counts (empty arrays), and ``min_sq_dist`` bit for bit
        :func:`~dqkm.kernels.lloyd.assign_labels`'s (a fit's last pass).
    copy : bool, default=True
        False: ``labels`` (int32), ``upper`` and ``lower`` (float64), when
        contiguous and writeable, are updated in place and returned (no new
        state per step; others are copied).  A step re-run on a state it
        already updated gives the same result (its moves only loosen bounds
        that already hold for these centers).

    Returns
    -------
    HamerlyResult
        ``(sums, counts, objective, labels, min_sq_dist, upper, lower, n_skipped)``:
        the first five equal :func:`~dqkm.kernels.lloyd.lloyd_partials`'s for
        the same labels (bit for bit); the rest is the next step's state and
        the number of row-center distances skipped.
    """
    X, centers = _prepare(X, centers)
    n, k = X.shape[0], centers.shape[0]
    labels, upper, lower = (_own(a, t, copy) for a, t in zip((labels, upper, lower),
                                                             (np.int32, np.float64, np.float64)))
    shift = np.ascontiguousarray(shift, dtype=np.float64)
    half_sep = np.ascontiguousarray(half_sep, dtype=np.float64)
    _check_state(n, k, labels, upper, lower, (n,))
    if shift.shape != (k,) or half_sep.shape != (k,):
        raise ValueError(f"shift and half_sep must have shape (n_clusters,) = ({k},); got "
                         f"{shift.shape} and {half_sep.shape}; compute them with "
                         "center_geometry(centers, previous).")
    sums, counts, _, mind = _outputs(n, k, X.shape[1], with_sums)
    obj = 0.0
    computed = 0
    if n:
        todo = np.empty(n, dtype=np.int64)
        full_from = n + 1
        if certified_pass(X.dtype, X.shape[1]):
            full_from = max(1, int(np.ceil(_FULL_PASS_SHARE * n)))
        computed, m = _hamerly_rows(X, centers, labels, upper, lower, shift, half_sep, _EPS,
                                    todo, full_from)
        if m >= full_from:
            # most rows rescanned: the Lloyd pass over the whole chunk, its labels
            # certified exact, gives every row's bounds for less
            with np.errstate(over="ignore", invalid="ignore"):  # second distances in lower:
                obj = _run_tiled(X, centers, sums, counts, labels, mind, with_sums, low=lower)
            _bounds_from_squares(mind, lower, upper, _EPS)
            computed = n * k
        else:
            if m:
                CT = np.ascontiguousarray(centers.T, dtype=np.float64)
                _rescan_hamerly(X, todo[:m], centers, CT, labels, upper, lower, _EPS)
                computed += m * k
            with np.errstate(over="ignore", invalid="ignore"):
                obj = _finish_tile(X, 0, n, centers, sums, counts, labels, mind, with_sums, 0.0)
        if _mark_nonfinite(mind):
            obj = np.inf
    return HamerlyResult(sums, counts, float(obj), labels, mind, upper, lower,
                         int(n * k - computed))


def _own(a, dtype, copy):
    """``a`` as a 1-D C-contiguous writeable array of ``dtype``: a copy, or with
    ``copy=False`` ``a`` itself where it already is one."""
    if not copy and isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == dtype \
            and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, dtype=dtype, copy=True).reshape(-1)


@njit(nogil=True, cache=True)
def _bounds_from_squares(d2, low2, upper, eps):  # OUT upper, low2
    """``upper = √d2·(1 + eps)`` and, in place, ``low2 = √low2·(1 − eps)``: a full
    scan's squared distances to the nearest and second nearest centers as bounds
    (one loop, no temporaries; the same roundings as the NumPy expressions)."""
    for r in range(d2.shape[0]):
        upper[r] = np.sqrt(d2[r]) * (1.0 + eps)
        low2[r] = np.sqrt(low2[r]) * (1.0 - eps)


def _check_state(n, k, labels, upper, lower, lower_shape):
    if labels.shape != (n,) or upper.shape != (n,) or lower.shape != lower_shape:
        raise ValueError(f"labels, upper and lower must have shapes ({n},), ({n},) and "
                         f"{lower_shape}; got {labels.shape}, {upper.shape} and {lower.shape}. "
                         "Pass the state returned by the previous step for the same chunk.")
    if n and (labels.min() < -1 or labels.max() >= k):
        raise ValueError(f"labels must lie in [-1, {k}); got values in "
                         f"[{labels.min()}, {labels.max()}].")


def elkan_partials(X, centers, labels, upper, lower, shift, half_sep, separations, *,
                   copy=True, with_sums=True):
    """One Lloyd step on a chunk with Elkan's bounds (one lower bound per row and center).

    As :func:`hamerly_partials`, except that ``lower`` has shape
    ``(n_rows, n_clusters)`` and ``separations`` is
    :func:`center_separations` of ``centers`` (K × K, float64).  With
    ``copy=False`` a C-contiguous float64 ``lower`` is updated in place and
    returned (the n × K copy costs as much as the step once most distances are
    skipped), and so are ``labels`` and ``upper`` as in :func:`hamerly_partials`;
    the bounds they hold at any moment stay valid for the new centers, so a step
    re-run on a partly updated state gives the same result.
    ``with_sums`` as in :func:`hamerly_partials`.

    Returns
    -------
    HamerlyResult
        ``(sums, counts, objective, labels, min_sq_dist, upper, lower, n_skipped)``,
        the first five bit-identical to :func:`~dqkm.kernels.lloyd.lloyd_partials`'s
        for the same labels.
    """
    X, centers = _prepare(X, centers)
    n, k = X.shape[0], centers.shape[0]
    labels, upper = _own(labels, np.int32, copy), _own(upper, np.float64, copy)
    lower = np.array(lower, dtype=np.float64, copy=True if copy else None, order="C")
    shift = np.ascontiguousarray(shift, dtype=np.float64)
    half_sep = np.ascontiguousarray(half_sep, dtype=np.float64)
    cc = np.ascontiguousarray(separations, dtype=np.float64)
    _check_state(n, k, labels, upper, lower, (n, k))
    if shift.shape != (k,) or half_sep.shape != (k,) or cc.shape != (k, k):
        raise ValueError(f"shift, half_sep and separations must have shapes ({k},), ({k},) "
                         f"and ({k}, {k}); got {shift.shape}, {half_sep.shape} and "
                         f"{cc.shape}; compute them with center_geometry and "
                         "center_separations.")
    sums, counts, _, mind = _outputs(n, k, X.shape[1], with_sums)
    obj = 0.0
    computed = 0
    if n:
        CT = np.ascontiguousarray(centers.T, dtype=np.float64)
        todo = np.empty(n, dtype=np.int64)
        computed, m = _elkan_rows(X, centers, CT, labels, upper, lower, shift, half_sep, cc,
                                  _EPS, todo)
        if m:
            _rescan(X, todo[:m], centers, CT, labels, upper, lower, _EPS)
            computed += m * k
        with np.errstate(over="ignore", invalid="ignore"):
            obj = _finish_tile(X, 0, n, centers, sums, counts, labels, mind, with_sums, 0.0)
        if _mark_nonfinite(mind):
            obj = np.inf
    return HamerlyResult(sums, counts, float(obj), labels, mind, upper, lower,
                         int(n * k - computed))
