"""K-Multiple-Means: one chunk's pass, with its typed state.

A pass over X runs :func:`chunk_pass` on every row chunk.  The driver's small
state (:class:`PassState`: prototypes, their projections, β, the D_F rule and
the prototype side of F) is the same for every chunk; each chunk keeps its
rows of S and their companions (:class:`ChunkRows`) for the next pass and
returns its partial sums (:class:`ChunkPart`: ``SᵀS``, column sums, ``SᵀX``,
α, the objective's sums), which :meth:`ChunkPart.combine` reduces.
:func:`theta_pass` gives the sums of Algorithm 7's θ (:class:`ThetaSums`).

A chunk runs its rows in tiles of ``tile_row_bytes`` each
(:func:`dqkm.kernels.tiles.row_tiles`), so its temporaries are one tile's.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(eqs. 8, 10, 32; Lemma 4.1; Algorithms 3, 4 and 7).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .kmm_distances import MODE_COMPONENTS, MODE_EXTRA, MODE_NONE, SpectralTerm, project
from .kmm_init import outlier_mask
from .kmm_neighbors import nearest_prototypes
from .kmm_spectral import ChunkStatistics, chunk_statistics, merge_statistics
from .kmm_weights import can_weights, spectral_rows
from .tiles import row_tiles

__all__ = ["EXTRA_KEPT", "PassState", "ChunkRows", "ChunkPart", "ThetaSums", "chunk_pass",
           "theta_pass", "chunk_labels", "chunk_field"]

_SQRT_HALF = np.sqrt(0.5)
#: F-KMM keeps the K = l + 1 + this many nearest prototypes of every row for the next
#: pass (its seeds, and the rows whose scan the bound on D_E outside them can skip)
EXTRA_KEPT = 5


@dataclass(frozen=True)
class PassState:
    """What every chunk of one pass reads (broadcast once per pass).

    Attributes
    ----------
    A : ndarray of shape (m, d), float64
        The prototypes.
    n_neighbors : int
        l.
    pruned : bool
        F-KMM (``solver='fast'``).
    mu, V : ndarray or None
        Centre and rank-d′ basis of the lower bound (F-KMM).
    tile_row_bytes : int
        Bytes per row of a tile's temporaries.
    lb_protos : tuple or None
        :func:`~dqkm.kernels.kmm_distances.project` of the prototypes (F-KMM).
    beta : float
    mode : int
        The D_F rule (``MODE_*``).
    theta : float or None
        θ of Algorithm 7 (first pass only).
    new_ref : bool
        The pass after a prototype update: the reference nearest prototypes
        become the previous pass's.
    moves : ndarray of shape (m,) or None
        How far each prototype moved since the previous pass.
    proto_comp, inv_n : ndarray or None
        Component of each prototype and 1/n_k of each component.
    Wmap, Gmap : ndarray or None
        The prototype side of F (eq. 8; Lemma 4.1).
    """

    A: np.ndarray
    n_neighbors: int
    pruned: bool
    mu: np.ndarray | None
    V: np.ndarray | None
    tile_row_bytes: int
    lb_protos: tuple | None
    beta: float
    mode: int
    theta: float | None = None
    new_ref: bool = False
    moves: np.ndarray | None = None
    proto_comp: np.ndarray | None = None
    inv_n: np.ndarray | None = None
    Wmap: np.ndarray | None = None
    Gmap: np.ndarray | None = None


@dataclass(frozen=True)
class ChunkRows:
    """One chunk's rows of S and what the next pass needs of each row.

    Attributes
    ----------
    idx : ndarray of shape (n_b, l), int32
        Neighbour prototypes (−1: outlier).
    w : ndarray of shape (n_b, l)
        CAN weights.
    ref : ndarray of shape (n_b,)
        The reference nearest prototype (for ``n_changed``).
    skip : ndarray of shape (n_b,), bool
        Outliers.
    lb : tuple of ndarrays or None
        The rows' rank-d′ projections (F-KMM).
    nxt : ndarray of shape (n_b,), int32
        The (l+1)-th neighbour.
    keep, low : ndarray or None
        The K nearest kept for the next pass and the bound on D_E outside
        them (empty for the reference; None: not known, the search seeds
        itself).
    """

    idx: np.ndarray
    w: np.ndarray
    ref: np.ndarray
    skip: np.ndarray
    lb: tuple | None
    nxt: np.ndarray
    keep: np.ndarray | None
    low: np.ndarray | None

    def slice(self, lo, hi):
        """Rows ``lo:hi``."""
        return ChunkRows(**{f.name: _slice(getattr(self, f.name), lo, hi)
                            for f in fields(self)})

    @staticmethod
    def concat(parts):
        """The rows of consecutive tiles as one chunk's."""
        return ChunkRows(**{f.name: _concat([getattr(p, f.name) for p in parts])
                            for f in fields(ChunkRows)})


def _slice(v, lo, hi):
    if v is None:
        return None
    if isinstance(v, tuple):
        return tuple(_slice(a, lo, hi) for a in v)
    return v[lo:hi]


def _concat(vs):
    if vs[0] is None:
        return None
    if isinstance(vs[0], tuple):
        return tuple(_concat([v[j] for v in vs]) for j in range(len(vs[0])))
    return np.concatenate(vs)


@dataclass(frozen=True)
class ChunkPart:
    """The sums one pass reduces over the chunks.

    Attributes
    ----------
    stats : ChunkStatistics
        SᵀS, column sums and SᵀX.
    alpha : float
        Σ α_i over the rows that are not outliers.
    n_in, n_out : int
        Rows in the graph and outliers.
    sum_wd, sum_w2 : float
        Σ s_ij·D_ij and Σ s_ij² (the objective).
    n_exact, n_pairs : int
        Exact distances computed and pairs considered.
    changed : int
        Rows whose nearest prototype is not their reference one.
    bad : str or None
        "NaN" or "infinity" when the chunk held one.
    """

    stats: ChunkStatistics
    alpha: float
    n_in: int
    n_out: int
    sum_wd: float
    sum_w2: float
    n_exact: int
    n_pairs: int
    changed: int
    bad: str | None

    _SUMMED = ("alpha", "n_in", "n_out", "sum_wd", "sum_w2", "n_exact", "n_pairs", "changed")

    @staticmethod
    def combine(parts):
        """The sums of several chunks (or tiles)."""
        out = {k: sum(getattr(p, k) for p in parts) for k in ChunkPart._SUMMED}
        return ChunkPart(stats=merge_statistics([p.stats for p in parts]),
                         bad=next((p.bad for p in parts if p.bad), None), **out)

    def scalars(self):
        """Everything but ``stats``, as a JSON-able dict (a checkpoint's)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "stats"}

    @classmethod
    def from_scalars(cls, scalars, stats):
        """The inverse of :meth:`scalars`."""
        names = {f.name for f in fields(cls)}
        return cls(stats=stats, **{k: v for k, v in scalars.items() if k in names})


@dataclass(frozen=True)
class ThetaSums:
    """Σ‖x − a‖, Σ D_E and the count over every row's l nearest prototypes
    (Algorithm 7, line 3), and "NaN or infinity" when a chunk held one."""

    sum_dist: float
    sum_de: float
    count: int
    bad: str | None

    @staticmethod
    def combine(parts):
        return ThetaSums(sum(p.sum_dist for p in parts), sum(p.sum_de for p in parts),
                         sum(p.count for p in parts), next((p.bad for p in parts if p.bad), None))


# --------------------------------------------------------------------------- the pass
def _spectral_term(state, prev, U_block, n_rows):
    """The chunk's :class:`SpectralTerm` from the driver state and its previous rows."""
    mode = state.mode
    m = state.A.shape[0]
    if mode == MODE_NONE:
        return SpectralTerm.none(n_rows, m)
    qcomp = state.proto_comp
    inv_n = state.inv_n
    qinv = np.where(qcomp >= 0, inv_n[np.maximum(qcomp, 0)], 0.0)
    idx, w = prev.idx, prev.w
    first = idx[:, 0]
    pcomp = np.where(first >= 0, qcomp[np.maximum(first, 0)], -1)
    pinv = np.where(pcomp >= 0, inv_n[np.maximum(pcomp, 0)], 0.0)
    if mode == MODE_COMPONENTS:
        F = np.zeros((n_rows, 0))
        G = np.zeros((m, 0))
    elif mode == MODE_EXTRA:  # f_i = Σ_j s_ij·(√2/2)·q_j/(√d[n+j]·√λ)  (Lemma 4.1, eq. 8)
        F = spectral_rows(np.ascontiguousarray(idx), np.ascontiguousarray(w, dtype=np.float64),
                          np.ascontiguousarray(state.Wmap, dtype=np.float64))
        G = state.Gmap
    else:  # MODE_FULL: the reference's U rows, f_i/√d[i]
        rowsum = w.sum(axis=1)
        F = np.zeros_like(U_block)
        ok = rowsum > 0
        F[ok] = _SQRT_HALF * U_block[ok] / np.sqrt(rowsum[ok])[:, None]
        G = state.Gmap
    return SpectralTerm(mode, state.beta, pcomp, pinv, qcomp, qinv, F, G)


def chunk_pass(block, prev, U_block, state):
    """One chunk's pass, row tile by row tile: ``(ChunkRows, ChunkPart)``.

    Parameters
    ----------
    block : ndarray of shape (n_b, d)
    prev : ChunkRows or None
        The chunk's rows from the previous pass (None: the first pass).
    U_block : ndarray of shape (n_b, c) or None
        The reference's rows of U (``MODE_FULL``).
    state : PassState
    """
    X = np.asarray(block)
    tiles = row_tiles(X.shape[0], state.tile_row_bytes)
    if len(tiles) <= 1:
        return _tile_pass(X, prev, U_block, state)
    rows, part = [], None
    for lo, hi in tiles:
        new, p = _tile_pass(X[lo:hi], None if prev is None else prev.slice(lo, hi),
                            None if U_block is None else U_block[lo:hi], state)
        rows.append(new)
        part = p if part is None else ChunkPart.combine([part, p])
    return ChunkRows.concat(rows), part


def _first_rows(X, state):
    """First pass: ``(X, bad, lb_rows, skip)`` — non-finite values reported (and
    zeroed, so the pass still runs), the rows' projections, no outlier yet."""
    bad = None
    if not np.isfinite(X).all():
        bad = "NaN" if np.isnan(X).any() else "infinity"
        X = np.where(np.isfinite(X), X, 0)  # the pass still runs; fit raises after it
    lb_rows = project(X, state.mu, state.V) if state.pruned else None
    return X, bad, lb_rows, np.zeros(X.shape[0], bool)


def _search(X, prev, U_block, state, lb_rows, skip):
    """The l + 1 (F-KMM: K) nearest prototypes of the tile's rows."""
    ell, pruned = state.n_neighbors, state.pruned
    term = _spectral_term(state, prev, U_block, X.shape[0])
    lb = (lb_rows + state.lb_protos) if pruned else None
    # the previous pass's K nearest seed the pruned search, and its bound on D_E
    # outside them lets a row skip the scan (same result, less work)
    m = state.A.shape[0]
    n_keep = min(ell + 1 + EXTRA_KEPT, m) if pruned else None
    seeds = bound = None
    if pruned and prev is not None and prev.keep is not None and prev.keep.shape[1] == n_keep:
        seeds, bound = prev.keep, prev.low
    return nearest_prototypes(X, state.A, ell, term, skip=skip, pruned=pruned, lb=lb,
                              seeds=seeds, n_keep=n_keep, bound=bound, moves=state.moves)


def _tile_pass(X, prev, U_block, state):
    n_rows = X.shape[0]
    ell = state.n_neighbors
    if prev is None:  # first pass: finiteness, projections, outliers
        X, bad, lb_rows, skip = _first_rows(X, state)
    else:
        bad, lb_rows, skip = None, prev.lb, prev.skip
    nb = _search(X, prev, U_block, state, lb_rows, skip)
    dist, idx_all = nb.distances, nb.indices
    if prev is None and state.theta is not None:  # Algorithm 7
        skip = outlier_mask(nb.exact_de, state.theta, ell)
        idx_all = np.where(skip[:, None], -1, idx_all)
        dist = np.where(skip[:, None], np.inf, dist)
    W, alpha = can_weights(dist)
    idx = np.ascontiguousarray(idx_all[:, :ell])
    stats = chunk_statistics(X, idx, W, state.A.shape[0])
    nearest = idx[:, 0]
    if prev is None:
        ref = nearest.copy()
    elif state.new_ref:
        ref = prev.idx[:, 0]
    else:
        ref = prev.ref
    live = ~skip
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite X is reported below
        Dl = np.where(live[:, None], dist[:, :ell], 0.0)
        sum_wd = float((W * Dl).sum())
    part = ChunkPart(stats=stats, alpha=float(alpha[live].sum()), n_in=int(live.sum()),
                     n_out=int(skip.sum()), sum_wd=sum_wd, sum_w2=float((W * W).sum()),
                     n_exact=nb.n_exact, n_pairs=nb.n_pairs,
                     changed=int((nearest[live] != ref[live]).sum()), bad=bad)
    new = ChunkRows(idx=idx, w=W, ref=ref, skip=skip, lb=lb_rows,
                    nxt=np.ascontiguousarray(idx_all[:, ell]),
                    keep=nb.keep if state.pruned else np.zeros((n_rows, 0), np.int32),
                    low=nb.low if state.pruned else np.zeros(n_rows))
    return new, part


def theta_pass(block, state):
    """:class:`ThetaSums` of one chunk, tile by tile (Algorithm 7, line 3)."""
    X = np.asarray(block)
    return ThetaSums.combine([_theta_tile(X[lo:hi], state)
                              for lo, hi in row_tiles(X.shape[0], state.tile_row_bytes)]
                             or [ThetaSums(0.0, 0.0, 0, None)])


def _theta_tile(X, state):
    ell = state.n_neighbors
    pruned = state.pruned
    lb = (project(X, state.mu, state.V) + state.lb_protos) if pruned else None
    nb = nearest_prototypes(X, state.A, ell, SpectralTerm.none(X.shape[0], state.A.shape[0]),
                            pruned=pruned, lb=lb)
    de = nb.exact_de[:, :ell]
    ok = np.isfinite(de)
    bad = None if np.isfinite(X).all() else "NaN or infinity"
    return ThetaSums(float(np.sqrt(de[ok]).sum()), float(de[ok].sum()), int(ok.sum()), bad)


def chunk_field(rows, name):
    """One field of a chunk's :class:`ChunkRows`."""
    return getattr(rows, name)


def chunk_labels(rows, proto_comp):
    """The cluster of each row: its nearest prototype's component (−1: outlier)."""
    first = rows.idx[:, 0]
    return np.where(first >= 0, proto_comp[np.maximum(first, 0)], -1).astype(np.int64)
