"""K-Multiple-Means neighbour search: the l + 1 nearest prototypes of each row.

The distance is eq. (32), ``D = D_E + β·D_F``, element by element as in
:mod:`dqkm.kernels.kmm_distances`; ties are broken by the lower prototype index
(the order is the pair ``(D, j)``).

``solver='fast'`` computes the exact ``D_E`` only where the rank-d′ SVD lower
bound of Lemma 4.10 (eq. 57), minus a floating-point margin, does not exceed the
current K-th smallest distance (Algorithm 3, with K ≥ l + 1 nearest kept for the
next pass); it skips the prototypes of other components when β·D_F alone
exceeds that distance, and a whole row when the previous pass's lower bound on
``D_E`` outside the K kept prototypes exceeds their (l+1)-th distance (dqkm's
additions, exact; docs/ALGORITHMS.md).  The reference computes every ``D_E``.
Both use the same float64 routine for an exact distance, called from one place
(:mod:`dqkm.kernels.kmm_search`), so a pair computed by both has bit-identical ``D_E``.

:func:`nearest_prototypes` checks its inputs and lays them out as a
:class:`NeighborProblem` (the rows' side, the prototypes' side and the
search's rule, named tuples the compiled kernel of
:mod:`dqkm.kernels.kmm_search` reads), then solves it.

All kernels are pure: inputs are never mutated; buffers written in place are
marked ``# OUT``.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(eqs. 32, 50, 56, 57; Lemma 4.10; Algorithm 3).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ._numba_args import kernel_array
from .kmm_distances import LB_MARGIN, MODE_COMPONENTS, MODE_EXTRA, MODE_FULL
from .kmm_search import Outputs, ProtoSide, RowSide, SearchRule, neighbors_kernel

__all__ = ["NeighborProblem", "NeighborResult", "nearest_prototypes", "neighbor_problem"]


@dataclass(frozen=True)
class NeighborResult:
    """The l+1 nearest prototypes of each row, sorted by ``(D, j)``.

    Attributes
    ----------
    indices : ndarray of shape (n_rows, l + 1), int32
        Prototype indices (−1 for skipped rows).
    distances : ndarray of shape (n_rows, l + 1), float64
        D = D_E + β·D_F of those pairs.
    exact_de : ndarray of shape (n_rows, l + 1), float64
        D_E of those pairs.
    n_exact : int
        Number of exact D_E computed.
    n_pairs : int
        Number of (row, prototype) pairs considered (rows × m).
    keep : ndarray of shape (n_rows, K), int32
        ``K = n_keep`` prototypes containing the l + 1 nearest (the K nearest
        when the row was scanned): the next pass's ``seeds``.
    low : ndarray of shape (n_rows,), float64
        A lower bound on D_E from the row to every prototype not in ``keep``
        (−inf: none known); the next pass's ``bound``.
    """

    indices: np.ndarray
    distances: np.ndarray
    exact_de: np.ndarray
    n_exact: int
    n_pairs: int
    keep: np.ndarray = None
    low: np.ndarray = None


# --------------------------------------------------------------------------- the problem
@dataclass(frozen=True)
class NeighborProblem:
    """The inputs of one neighbour search, checked and laid out for the kernel.

    Attributes
    ----------
    rows : RowSide
    protos : ProtoSide
        In the order ``protos.perm`` (by component when grouped).
    rule : SearchRule
    """

    rows: RowSide
    protos: ProtoSide
    rule: SearchRule

    def solve(self):
        """Runs the search: a :class:`NeighborResult`."""
        n = self.rows.X.shape[0]
        m = self.protos.A.shape[0]
        L, K = self.rule.n_nearest, self.rule.n_keep
        out = Outputs(np.empty((n, L), np.int32), np.empty((n, L)), np.empty((n, L)),
                   np.empty((n, K), np.int64), np.empty(n))
        n_exact = neighbors_kernel(self.rows, self.protos, self.rule, out)
        n_live = n - int(self.rows.skip.sum())
        return NeighborResult(out.idx, out.dist, out.de, int(n_exact), int(n_live * m),
                              out.keep.astype(np.int32), out.low)


def _grouping(qcomp, qinv, g2, mode, m):
    """``(perm, comp_lo, comp_hi, cross_min)``: F-KMM with components (eqs. 50, 56)
    groups the prototypes by component, so a point's own component is one range
    and the others can be skipped at once."""
    key = np.where(qcomp >= 0, qcomp, np.iinfo(np.int64).max)
    perm = np.argsort(key, kind="stable").astype(np.int64)
    n_comp = int(qcomp.max()) + 1 if (qcomp >= 0).any() else 0
    sq = qcomp[perm]
    comp_lo = np.searchsorted(sq, np.arange(n_comp), side="left").astype(np.int64)
    comp_hi = np.searchsorted(sq, np.arange(n_comp), side="right").astype(np.int64)
    # the least point-independent part of D_F to a prototype outside component k:
    # ½·min 1/n_j (eq. 56) plus, for eq. (50), min ‖g_j‖²
    cross_min = np.full(n_comp, np.inf)
    for k in range(n_comp):
        other = qcomp != k
        if other.any():
            cross_min[k] = 0.5 * qinv[other].min() + (
                g2[other].min() if mode == MODE_EXTRA else 0.0)
    return perm, comp_lo, comp_hi, cross_min


def _checked_seeds(seeds, bound, moves, pruned, n, m, K):
    """``(seeds, prev_low, moves)`` checked: (n, K) int64 or (n, 0); the bound of
    each row (−inf: none); the moves (m,) ≥ 0."""
    if pruned and seeds is not None:
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        if seeds.shape != (n, K):
            raise ValueError(f"seeds must have shape (n_rows, n_keep) = ({n}, {K}). "
                             f"Got {seeds.shape} instead.")
    else:
        seeds = np.zeros((n, 0), np.int64)
    prev_low = np.full(n, -np.inf)
    moves = np.zeros(m) if moves is None else np.asarray(moves, dtype=np.float64)
    if moves.shape != (m,) or not (np.isfinite(moves).all() and (moves >= 0).all()):
        raise ValueError(f"moves must be {m} finite numbers >= 0 (one per prototype). "
                         f"Got shape {moves.shape}.")
    if pruned and seeds.shape[1] and bound is not None:
        b = np.asarray(bound, dtype=np.float64)
        if b.shape != (n,):
            raise ValueError(f"bound must have shape (n_rows,) = ({n},). Got {b.shape}.")
        prev_low = np.where(np.isnan(b), -np.inf, b)
    return seeds, prev_low, moves


def _projections(lb, pruned, n, m):
    """``(xt, xperp, xn2, xtn, at, aperp, an2, atn)``: the bound's inputs, zeros
    (of width 0) for the reference."""
    if pruned:
        xt, xperp, xn2, at, aperp, an2 = (np.ascontiguousarray(a, dtype=np.float64) for a in lb)
        return (xt, xperp, xn2, np.einsum("ij,ij->i", xt, xt), at, aperp, an2,
                np.einsum("ij,ij->i", at, at))
    zn, zm = np.zeros(n), np.zeros(m)
    return np.zeros((n, 0)), zn, zn, zn, np.zeros((m, 0)), zm, zm, zm


def neighbor_problem(X, A, n_neighbors, term, *, skip=None, pruned=False, lb=None, seeds=None,
                     n_keep=None, bound=None, moves=None):
    """The :class:`NeighborProblem` of :func:`nearest_prototypes` (same parameters)."""
    X = kernel_array(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    A = np.ascontiguousarray(A, dtype=np.float64)
    n, m = X.shape[0], A.shape[0]
    L = int(n_neighbors) + 1
    if L > m:
        raise ValueError(f"n_neighbors + 1 = {L} must be at most the number of prototypes {m}.")
    skip = np.zeros(n, np.bool_) if skip is None else np.ascontiguousarray(skip, dtype=np.bool_)
    F = np.ascontiguousarray(term.point_f, dtype=np.float64)
    G = np.ascontiguousarray(term.proto_g, dtype=np.float64)
    f2 = np.einsum("ij,ij->i", F, F) if F.size else np.zeros(n)
    g2 = np.einsum("ij,ij->i", G, G) if G.size else np.zeros(m)
    qcomp = np.ascontiguousarray(term.proto_comp, np.int64)
    qinv = np.ascontiguousarray(term.proto_inv_n, np.float64)
    xt, xperp, xn2, xtn, at, aperp, an2, atn = _projections(lb, pruned, n, m)
    K = L if n_keep is None or not pruned else int(n_keep)
    if not L <= K <= m:
        raise ValueError(f"n_keep must be in [n_neighbors + 1, m] = [{L}, {m}]. Got {K}.")
    seeds, prev_low, moves = _checked_seeds(seeds, bound, moves, pruned, n, m, K)
    if term.mode not in (MODE_EXTRA, MODE_FULL):
        F = np.zeros((n, 0))
        G = np.zeros((m, 0))
    grouped = bool(pruned) and term.mode in (MODE_COMPONENTS, MODE_EXTRA) and m > 0
    if grouped:
        perm, comp_lo, comp_hi, cross_min = _grouping(qcomp, qinv, g2, term.mode, m)
        if seeds.shape[1]:  # seeds are positions
            inv = np.empty(m, np.int64)
            inv[perm] = np.arange(m)
            seeds = np.where((seeds >= 0) & (seeds < m), inv[np.clip(seeds, 0, m - 1)], -1)
    else:
        perm = np.arange(m, dtype=np.int64)
        comp_lo = comp_hi = np.zeros(0, np.int64)
        cross_min = np.zeros(0)

    def order(a):
        return np.ascontiguousarray(a[perm]) if grouped else a

    mv = order(moves)
    mv_order = np.argsort(-mv, kind="stable").astype(np.int64)
    rows = RowSide(X, skip, np.ascontiguousarray(term.point_comp, np.int64),
                   np.ascontiguousarray(term.point_inv_n, np.float64), F, f2, xt, xtn, xperp,
                   xn2, seeds, prev_low)
    protos = ProtoSide(order(A), order(qcomp), order(qinv), np.ascontiguousarray(order(G).T),
                       order(g2), np.ascontiguousarray(order(at).T), order(atn), order(aperp),
                       order(an2), perm, comp_lo, comp_hi, cross_min, mv_order,
                       np.ascontiguousarray(mv[mv_order]))
    rule = SearchRule(int(term.mode), float(term.beta), bool(pruned), LB_MARGIN, L, K)
    return NeighborProblem(rows, protos, rule)


def nearest_prototypes(X, A, n_neighbors, term, *, skip=None, pruned=False, lb=None,
                       seeds=None, n_keep=None, bound=None, moves=None):
    """The ``l + 1`` nearest prototypes of every row under eq. (32).

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features), float32 or float64
    A : ndarray of shape (m, n_features)
        Prototypes (used in float64).
    n_neighbors : int
        l; ``l + 1 ≤ m``.
    term : SpectralTerm
        β and the D_F rule.
    skip : ndarray of shape (n_rows,), bool, optional
        Rows to leave out (outliers): their indices are −1.
    pruned : bool
        Algorithm 3: exact D_E only where the lower bound cannot prune.
    lb : tuple ``(xt, xperp, xn2, at, aperp, an2)``, required when pruned
        From :func:`~dqkm.kernels.kmm_distances.project` for the rows and for
        the prototypes.
    seeds : ndarray of shape (n_rows, K), int, optional
        Used when pruned: prototypes whose exact distances are computed first
        for each row (e.g. the previous pass's ``keep``), in place of the K
        smallest bounds; a row with an index outside [0, m) falls back to
        those.  The result does not depend on the seeds (only the number of
        exact distances does).
    n_keep : int, optional
        K, in [l + 1, m] (default l + 1): how many nearest prototypes a
        scanned row keeps for the next pass (``keep``, ``low``).
    bound : ndarray of shape (n_rows,), optional
        Used with ``seeds``: the previous pass's ``low`` for exactly these
        seeds, computed with the prototypes before they moved by ``moves``.
        A row is then not scanned: only the prototypes that moved enough to
        possibly come within its seeds' (l+1)-th D get a distance (none when
        nothing moved).  Wrong bounds give wrong neighbours; None: every row
        scans.
    moves : ndarray of shape (m,), optional
        Euclidean move of each prototype since ``bound`` was computed (None: 0).

    Returns
    -------
    NeighborResult
    """
    return neighbor_problem(X, A, n_neighbors, term, skip=skip, pruned=pruned, lb=lb,
                            seeds=seeds, n_keep=n_keep, bound=bound, moves=moves).solve()
