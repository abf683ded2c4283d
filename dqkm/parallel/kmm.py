"""K-Multiple-Means and F-KMM on Dask: the passes over X and one outer iteration.

Every pass is one pass over X.  The driver's small state
(:class:`~dqkm.kernels.kmm_step.PassState`) is broadcast once; each chunk runs
:func:`~dqkm.kernels.kmm_step.chunk_pass` and keeps its rows of S on the
workers as a persisted :class:`~dqkm.kernels.kmm_step.ChunkRows`; its partial
sums (``SᵀS``, column sums, ``SᵀX``, …) are tree-reduced and come back in the
pass's single ``compute``.  The driver then finds the components, updates β
and, when b < c, computes the prototype side of F (Algorithm 2, or the
reference SVD).  The data side of F is never gathered by F-KMM: a chunk
rebuilds its rows as ``u_i = Σ_j s̃_ij q_j / √λ`` (Lemma 4.1) from its own
stored rows of S.

:class:`KMMSolver` is the algorithm as steps: :meth:`KMMSolver.init_state`
(the θ pass and the β = 0 pass), :meth:`KMMSolver.step` (one outer iteration:
the prototype update and the β steps until b = c) and :meth:`KMMSolver.result`;
the state between them is a :class:`KMMState` (packed for a checkpoint by
:meth:`KMMState.pack`; its rows of S are written by a function the caller
gives :func:`run_on_row_blocks`).

Memory per worker: a few chunks of X plus, per chunk, l·(int32 + float64)
per row for S and (F-KMM) d′ + 2 floats per row for the projections and
K = l + 6 int32 + 1 float per row for the prototypes kept for the next pass.
A chunk task runs its rows in tiles of bounded bytes, so its temporaries are
one tile's; before the first pass the memory one task needs is checked
against the workers' (:mod:`dqkm.parallel.kmm_tiles`,
:func:`dqkm.parallel.memory.check_task_memory`).

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024,
Algorithms 1–4 and 7.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field, replace

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from ..data.chunks import describe_row_chunks
from ..kernels.kmm_distances import MODE_COMPONENTS, MODE_EXTRA, MODE_FULL, MODE_NONE, project
from ..kernels.kmm_init import outlier_threshold
from ..kernels.kmm_spectral import (SVD_ALGORITHMS, ChunkStatistics, block_eigen, components,
                                    prototype_matrix, reference_svd)
from ..kernels.kmm_step import (EXTRA_KEPT, ChunkPart, PassState, ThetaSums, chunk_field,
                                chunk_labels, chunk_pass, theta_pass)
from ..kernels.lloyd import assign_labels
from .engine import (PerBlock, array_from_tasks, broadcast, compute, map_blocks_reduce,
                     map_blocks_with_state, map_rows, map_tasks, one_blas_thread)
from .finite import raise_nonfinite
from .kmm_tiles import kmm_memory
from .memory import check_resident_memory, check_task_memory, with_compressed_read

__all__ = ["KMMConfig", "KMMResult", "KMMSolver", "KMMState", "StepStats", "describe_row_chunks",
           "persist_row_blocks", "predict_labels", "prototype_distances", "run_on_row_blocks"]

_SQRT_HALF = np.sqrt(0.5)


def run_on_row_blocks(fn, rows, args, name):
    """``fn(rows[i], args[i])`` for every chunk, on the worker that holds it, in one
    compute: a list of the results (e.g. a checkpoint writer the caller gives)."""
    # fn acts (writes files): fresh keys per call (pure=False)
    return list(compute(*map_tasks(fn, list(zip(rows, args)), name=name, pure=False)))


def persist_row_blocks(fn, args, name):
    """``fn(args[i])`` for every chunk, run and kept on the workers: persisted
    delayed objects (e.g. the rows of S read back by a function the caller gives)."""
    # fn reads files that change between calls: fresh keys per call (pure=False)
    return list(dask.persist(*map_tasks(fn, [(a,) for a in args], name=name, pure=False)))


# --------------------------------------------------------------------------- graph level
class _Passes:
    """Runs one pass over X and keeps the rows of S persisted on the workers."""

    def __init__(self, X, split_every):
        self.X = X
        self.split_every = split_every or 8
        self.sizes = [int(s) for s in X.chunks[0]]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.blocks = [None] * len(self.sizes)

    def run(self, state, U=None):
        """One pass with the :class:`PassState` ``state``: the reduced :class:`ChunkPart`."""
        bstate = broadcast(state, "kmm-state")
        ub = [None if U is None else U[self.offsets[i]:self.offsets[i + 1]]
              for i in range(len(self.sizes))]
        bp = map_blocks_with_state(self.X, chunk_pass, ChunkPart.combine,
                                   args=(PerBlock(self.blocks), PerBlock(ub), bstate),
                                   split_every=self.split_every, name="kmm")
        persisted = dask.persist(*bp.states, bp.result)
        self.blocks = list(persisted[:-1])
        (res,) = compute(persisted[-1])
        if res.bad:
            raise_nonfinite(res.bad)
        return res

    def theta(self, state):
        """θ of Algorithm 7 from one pass."""
        red = map_blocks_reduce(self.X, theta_pass, ThetaSums.combine,
                                args=(broadcast(state, "kmm-theta"),),
                                split_every=self.split_every, name="kmm-theta")
        (res,) = compute(red)
        if res.bad:
            raise_nonfinite(res.bad)
        return outlier_threshold(res.sum_dist, res.sum_de, res.count)

    def gather_S(self, m):
        """The whole n × m matrix S on the driver (the reference solver only)."""
        fields = [(b, f) for f in ("idx", "w") for b in self.blocks]
        rows = compute(*map_tasks(chunk_field, fields, name="kmm-gather-S"))
        idx = np.concatenate(rows[:len(self.blocks)])
        w = np.concatenate(rows[len(self.blocks):])
        n = idx.shape[0]
        keep = (idx >= 0) & (w > 0)
        return sp.csr_matrix((w[keep], (np.nonzero(keep)[0], idx[keep])), shape=(n, m))

    def rows(self, fn, *args, dtype, ncols=None):
        """A lazy Dask array built blockwise from the persisted rows of S
        (one block per block of X, empty blocks included)."""
        chunks = (tuple(self.sizes),) if ncols is None else (tuple(self.sizes), (ncols,))
        return array_from_tasks(fn, [(b, *args) for b in self.blocks], chunks, dtype,
                                name="kmm-rows")


# --------------------------------------------------------------------------- state
@dataclass
class StepStats:
    """The passes of one outer iteration: β and b after each, their seconds, exact
    distances, eigenpairs (Lemma 4.5: naive / computed / by Lemma 4.3), F updates
    and the driver's seconds in them."""

    beta: list = field(default_factory=list)
    n_components: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    exact: int = 0
    pairs: int = 0
    eig_computed: int = 0
    eig_naive: int = 0
    eig_lemma: int = 0
    spectral_seconds: float = 0.0
    f_updates: int = 0

    def add(self, beta, n_components, seconds, part):
        """One pass: β it ran with, b of its graph, its seconds and distances."""
        self.beta.append(float(beta))
        self.n_components.append(int(n_components))
        self.seconds.append(seconds)
        self.exact += part.n_exact
        self.pairs += part.n_pairs

    def record(self):
        """The iteration's history entries from these passes."""
        return {"beta_steps": self.beta, "n_components_steps": self.n_components,
                "step_seconds": self.seconds}


@dataclass(frozen=True)
class KMMState:
    """The state between two outer iterations (what a checkpoint holds).

    Continuing from it gives the same result, bit for bit, as the
    uninterrupted loop.  The components, the prototype side of D_F and F are
    recomputed from ``part.stats`` (deterministically).

    Attributes
    ----------
    iteration : int
        t, the outer iterations done.
    prototypes : ndarray of shape (m, d), float64
        The prototypes that produced the current S.
    mu, V : ndarray
        Centre and rank-d′ basis of the lower bound.
    beta, alpha : float
    theta : float or None
        θ of Algorithm 7 (``detect_outliers``).
    n_outliers : int
    part : ChunkPart
        The last pass's sums: SᵀS, column sums and SᵀX of the current S (what
        eq. 14 and the next F need), the objective's sums, ``changed``.
    unmet : tuple of int
        Outer iterations that ended with b ≠ c.
    converged : bool
        No row changed its nearest prototype in the last iteration (t ≥ 2).
    rng_state : dict
        The bit generator's state: the Lanczos / ARPACK start vectors drawn next.
    rows : list of Delayed
        The per-chunk :class:`~dqkm.kernels.kmm_step.ChunkRows`, persisted on the
        workers.
    row_chunks : tuple of int
        The row chunks of X the rows belong to.
    seeding : dict
        The initialisation's distance counts (constant).
    first : StepStats or None
        The β = 0 pass (iteration 0 only: it belongs to iteration 1's record).
    comps : Components or None
        The components of ``part.stats`` (None: recomputed).
    """

    iteration: int
    prototypes: np.ndarray
    mu: np.ndarray
    V: np.ndarray
    beta: float
    alpha: float
    theta: float | None
    n_outliers: int
    part: ChunkPart
    unmet: tuple
    converged: bool
    rng_state: dict
    rows: list
    row_chunks: tuple
    seeding: dict = field(default_factory=dict)
    first: StepStats | None = None
    comps: object = None

    def pack(self):
        """A dict of NumPy arrays (``rows`` excepted: written on the workers); the
        scalars are one JSON document, ``meta`` (bytes)."""
        sts = sp.csr_matrix(self.part.stats.sts)
        meta = {"iteration": int(self.iteration), "beta": float(self.beta),
                "alpha": float(self.alpha), "theta": self.theta,
                "n_outliers": int(self.n_outliers), "scalars": self.part.scalars(),
                "unmet": [int(t) for t in self.unmet], "converged": bool(self.converged),
                "rng": self.rng_state, "row_chunks": [int(x) for x in self.row_chunks],
                "seeding": self.seeding}
        return {"prototypes": self.prototypes, "mu": self.mu, "V": self.V,
                "sts_data": sts.data, "sts_indices": sts.indices, "sts_indptr": sts.indptr,
                "colsum": self.part.stats.colsum, "stx": self.part.stats.stx,
                "meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}

    @classmethod
    def unpack(cls, arrays, rows=()):
        """The state from :meth:`pack`'s arrays and the rows of S."""
        meta = json.loads(np.asarray(arrays["meta"], np.uint8).tobytes().decode())
        m = arrays["colsum"].shape[0]
        sts = sp.csr_matrix((arrays["sts_data"], arrays["sts_indices"], arrays["sts_indptr"]),
                            shape=(m, m))
        stats = ChunkStatistics(sts, arrays["colsum"], arrays["stx"])
        return cls(iteration=int(meta["iteration"]), prototypes=arrays["prototypes"],
                   mu=arrays["mu"], V=arrays["V"], beta=float(meta["beta"]),
                   alpha=float(meta["alpha"]),
                   theta=None if meta["theta"] is None else float(meta["theta"]),
                   n_outliers=int(meta["n_outliers"]),
                   part=ChunkPart.from_scalars(meta["scalars"], stats),
                   unmet=tuple(meta["unmet"]), converged=bool(meta["converged"]),
                   rng_state=meta["rng"], rows=list(rows),
                   row_chunks=tuple(int(x) for x in meta["row_chunks"]),
                   seeding=dict(meta["seeding"]))


@dataclass(frozen=True)
class KMMResult:
    """What :meth:`KMMSolver.result` returns.

    Attributes
    ----------
    prototypes : ndarray of shape (m, d), float64
        The prototypes that produced the final S.
    proto_comp : ndarray of shape (m,)
        Component (cluster) of each prototype; −1 for prototypes with no point.
    n_components : int
        b of the final S.
    labels : dask array of shape (n,), int64
        Component of every row (−1: outlier).
    neighbors, weights : dask arrays of shape (n, l)
        The rows of S (indices −1 and weights 0 for outliers).
    beta, alpha : float
    n_outliers : int
    theta : float or None
    """

    prototypes: np.ndarray
    proto_comp: np.ndarray
    n_components: int
    labels: da.Array
    neighbors: da.Array
    weights: da.Array
    beta: float
    alpha: float
    n_outliers: int
    theta: float | None


@dataclass(frozen=True)
class KMMConfig:
    """The parameters of a K-Multiple-Means fit the passes read.

    ``pruned``: F-KMM (``solver='fast'``); ``dense_svd_max`` and
    ``svd_algorithm``: the reference's SVD of S̃
    (:func:`~dqkm.kernels.kmm_spectral.reference_svd`; unused by F-KMM).
    """

    n_clusters: int
    n_neighbors: int = 5
    pruned: bool = True
    max_inner_iter: int = 30
    detect_outliers: bool = False
    split_every: int | None = None
    dense_svd_max: int = 40_000_000
    svd_algorithm: str = "auto"


def _generator(state):
    """A generator continuing from the bit-generator ``state``."""
    rng = np.random.default_rng(0)
    rng.bit_generator.state = state
    return rng


def _proto_side(A, mu, V, pruned):
    if not pruned:
        return None
    at, aperp, an2 = project(A, mu, V)
    return (at, aperp, an2)


# --------------------------------------------------------------------------- the steps
class KMMSolver:
    """K-Multiple-Means (``pruned=False``) or F-KMM on one Dask array, as steps.

    Passes over X: one (β = 0, Algorithm 4 line 8) in :meth:`init_state`, one
    more before it with ``detect_outliers`` (θ of Algorithm 7); then, in each
    :meth:`step` (an outer iteration), one per prototype update and one per β
    update.  An outer iteration ends with b = c (or ``max_inner_iter`` β
    updates); the fit stops after an outer iteration (≥ 2) in which no row
    changed its nearest prototype (``KMMState.converged``).

    Parameters
    ----------
    X : dask array of shape (n, d), chunked along rows
    config : KMMConfig
    """

    def __init__(self, X, config):
        if config.svd_algorithm not in SVD_ALGORITHMS:
            raise ValueError(f"svd_algorithm must be one of {list(SVD_ALGORITHMS)}. "
                             f"Got {config.svd_algorithm!r} instead.")
        self.config = config
        self.passes = _Passes(X, config.split_every)
        self.mem = None

    def _check_memory(self, m, rank):
        cfg, X = self.config, self.passes.X
        self.mem = kmm_memory(X, m, cfg.n_neighbors, cfg.n_clusters, rank if cfg.pruned else 0,
                              cfg.pruned, EXTRA_KEPT)
        parts = self.mem.parts(max(self.passes.sizes, default=0))
        held = ("rows of S kept (previous)", "prototype side")  # given to the task
        check_task_memory("KMultipleMeans pass", with_compressed_read(parts, X, held=held),
                          self.mem.knobs(X))
        check_resident_memory("KMultipleMeans", self.mem.resident(X.shape[0]),
                              self.mem.resident_knobs())

    def _pass_state(self, A, mu, V, beta, mode, **kw):
        cfg = self.config
        return PassState(A=A, n_neighbors=cfg.n_neighbors, pruned=cfg.pruned, mu=mu, V=V,
                         tile_row_bytes=self.mem.tile_row_bytes,
                         lb_protos=_proto_side(A, mu, V, cfg.pruned), beta=float(beta),
                         mode=mode, **kw)

    def init_state(self, prototypes, mu, V, rng, seeding=None):
        """The state after the β = 0 pass (iteration 0); ``rng`` is used from here on
        by the steps (its state is carried by the :class:`KMMState`)."""
        A = np.array(prototypes, dtype=np.float64, copy=True)
        self._check_memory(A.shape[0], V.shape[1])
        theta = None
        if self.config.detect_outliers:
            theta = self.passes.theta(self._pass_state(A, mu, V, 0.0, MODE_NONE))
        t0 = time.perf_counter()
        part = self.passes.run(self._pass_state(A, mu, V, 0.0, MODE_NONE, theta=theta))
        if part.n_in == 0:
            raise ValueError("Every sample was marked as an outlier; nothing left to cluster.")
        alpha = part.alpha / part.n_in  # β: Algorithm 4, line 9: set once, never reset
        comps = components(part.stats.sts, part.stats.colsum)
        first = StepStats(beta=[0.0], n_components=[comps.n_components],
                          seconds=[time.perf_counter() - t0], exact=part.n_exact,
                          pairs=part.n_pairs)
        return KMMState(iteration=0, prototypes=A, mu=mu, V=V, beta=alpha, alpha=alpha,
                        theta=theta, n_outliers=int(part.n_out), part=part, unmet=(),
                        converged=False, rng_state=rng.bit_generator.state,
                        rows=list(self.passes.blocks), row_chunks=tuple(self.passes.sizes),
                        seeding=dict(seeding or {}), first=first, comps=comps)

    def resume(self, state):
        """Checks ``state`` (from a checkpoint) against X; the state to step from."""
        self._check_memory(state.prototypes.shape[0], state.V.shape[1])
        sizes = self.passes.sizes
        if tuple(state.row_chunks) != tuple(sizes) or len(state.rows) != len(sizes):
            raise ValueError(f"The state to continue from holds the rows of S of X in "
                             f"{describe_row_chunks(state.row_chunks)}, but X is in "
                             f"{describe_row_chunks(sizes)}; rechunk X as it was.")
        return state

    def step(self, state, t):
        """Outer iteration ``t``: ``(state, record)`` (the record: ``history_``'s entry)."""
        c = self.config.n_clusters
        rng = _generator(state.rng_state)
        self.passes.blocks = list(state.rows)
        t_it = time.perf_counter()
        stats = state.first if state.first is not None else StepStats()
        A, beta, part = state.prototypes, state.beta, state.part
        comps = state.comps if state.comps is not None else \
            components(part.stats.sts, part.stats.colsum)
        shift = 0.0
        if t > 1:
            st = part.stats
            new_A = A.copy()
            nz = st.colsum > 0
            new_A[nz] = st.stx[nz] / st.colsum[nz, None]  # eq. (14)
            shift = float(((new_A - A) ** 2).sum())
            moves = np.sqrt(((new_A - A) ** 2).sum(axis=1))
            A = new_A
            part, comps = self._pass(state, A, beta, part, comps, stats, rng, True, moves)
        inner = 0
        while comps.n_components != c and inner < self.config.max_inner_iter:
            beta = 2.0 * beta if comps.n_components < c else 0.5 * beta
            part, comps = self._pass(state, A, beta, part, comps, stats, rng, False)
            inner += 1
        unmet = state.unmet + ((t,) if comps.n_components != c else ())
        rec = _record(t, part.sum_wd + state.alpha * part.sum_w2, shift, t_it, comps, beta,
                      stats, part, inner)
        new = replace(state, iteration=t, prototypes=A, beta=float(beta), part=part,
                      comps=comps, unmet=unmet, converged=t > 1 and part.changed == 0,
                      rng_state=rng.bit_generator.state, rows=list(self.passes.blocks),
                      first=None)
        return new, rec

    def _pass(self, state, A, beta, part, comps, stats, rng, new_ref, moves=None):
        """One pass with β and the spectral term of the current S (``part``)."""
        t1 = time.perf_counter()
        kw, U, eig = self._spectral(part, comps, rng)
        stats.spectral_seconds += time.perf_counter() - t1
        mode = kw.pop("mode")
        stats.f_updates += int(mode != MODE_COMPONENTS)
        new = self.passes.run(self._pass_state(A, state.mu, state.V, beta, mode,
                                               new_ref=new_ref, moves=moves, **kw), U=U)
        cc = components(new.stats.sts, new.stats.colsum)
        stats.add(beta, cc.n_components, time.perf_counter() - t1, new)
        if eig is not None:
            stats.eig_computed += eig.n_computed
            stats.eig_naive += eig.n_naive
            stats.eig_lemma += eig.n_lemma
        return new, cc

    def _spectral(self, part, comps, rng):
        """D_F's prototype side from the current S: eq. (56) if b ≥ c, else F;
        ``(PassState fields, U or None, EigenResult or None)``."""
        c, pruned = self.config.n_clusters, self.config.pruned
        b = comps.n_components
        kw = {"proto_comp": comps.proto_comp, "inv_n": 1.0 / comps.sizes}
        if b >= c:
            return dict(kw, mode=MODE_COMPONENTS), None, None
        colsum = part.stats.colsum
        m = colsum.shape[0]
        inv_sqrt = np.zeros(m)
        inv_sqrt[colsum > 0] = 1.0 / np.sqrt(colsum[colsum > 0])
        if pruned:
            M = prototype_matrix(part.stats.sts, colsum)
            with one_blas_thread():  # small blocks: 1 thread is best
                eig = block_eigen(M, comps, colsum, c, rng)
            keep = (~eig.is_lemma) & (eig.values > 0)
            Q = eig.vectors[:, keep]
            G = _SQRT_HALF * Q * inv_sqrt[:, None]
            Wmap = G / np.sqrt(eig.values[keep])[None, :]
            return dict(kw, mode=MODE_EXTRA, Gmap=G, Wmap=Wmap), None, eig
        S = self.passes.gather_S(m)
        rowsum = np.asarray(S.sum(axis=1)).ravel()
        inv_r = np.zeros_like(rowsum)
        inv_r[rowsum > 0] = 1.0 / np.sqrt(rowsum[rowsum > 0])
        S_t = sp.diags(inv_r) @ S @ sp.diags(inv_sqrt)
        U, _, Vc = reference_svd(S_t, c, dense_max=self.config.dense_svd_max, rng=rng,
                                 algorithm=self.config.svd_algorithm)
        G = _SQRT_HALF * Vc * inv_sqrt[:, None]
        return dict(kw, mode=MODE_FULL, Gmap=G), U, None

    def result(self, state, n_iter):
        """The :class:`KMMResult` of the final state (a ``ConvergenceWarning`` if
        some outer iteration ended with b ≠ c)."""
        c = self.config.n_clusters
        comps = state.comps if state.comps is not None else \
            components(state.part.stats.sts, state.part.stats.colsum)
        if state.unmet:
            warnings.warn(f"KMultipleMeans: the bipartite graph did not reach n_clusters={c} "
                          f"connected components within max_inner_iter="
                          f"{self.config.max_inner_iter} updates of beta in {len(state.unmet)} "
                          f"of {n_iter} outer iterations (the last has {comps.n_components}). "
                          "Increase max_inner_iter or n_neighbors, or check for groups of "
                          "points far from the rest.", ConvergenceWarning, stacklevel=4)
        self.passes.blocks = list(state.rows)
        pc = comps.proto_comp.copy()
        ell = self.config.n_neighbors
        return KMMResult(
            prototypes=state.prototypes, proto_comp=pc, n_components=comps.n_components,
            labels=self.passes.rows(chunk_labels, pc, dtype=np.int64),
            neighbors=self.passes.rows(chunk_field, "idx", dtype=np.int32, ncols=ell),
            weights=self.passes.rows(chunk_field, "w", dtype=np.float64, ncols=ell),
            beta=float(state.beta), alpha=float(state.alpha), n_outliers=int(state.n_outliers),
            theta=state.theta)


def _record(t, objective, shift, t_it, comps, beta, stats, part, inner):
    """The history entry of outer iteration ``t``."""
    return {"iteration": t, "objective": float(objective), "shift": shift,
            "seconds": time.perf_counter() - t_it,
            "empty_clusters": comps.empty.tolist(), "beta": float(beta),
            "n_components": int(comps.n_components), **stats.record(),
            "n_changed": int(part.changed), "inner_steps": inner,
            "distances_exact": int(stats.exact), "distances_total": int(stats.pairs),
            "eig_lemma": int(stats.eig_lemma), "eig_computed": int(stats.eig_computed),
            "eig_naive": int(stats.eig_naive),
            "eig_pruned": int(stats.eig_naive - stats.eig_computed),
            "spectral_seconds": float(stats.spectral_seconds),
            "f_updates": int(stats.f_updates)}


# --------------------------------------------------------------------------- inference
def _predict_block(block, protos, plabels):
    lab, _ = assign_labels(np.asarray(block), protos)
    return plabels[lab]


def predict_labels(X, prototypes, proto_labels):
    """Lazy cluster of each row's nearest (non-empty) prototype."""
    keep = np.asarray(proto_labels) >= 0
    protos = np.ascontiguousarray(np.asarray(prototypes)[keep], dtype=X.dtype)
    plabels = np.asarray(proto_labels)[keep].astype(np.int64)
    return map_rows(X, _predict_block, protos, plabels, dtype=np.int64, name="kmm-predict")


def _distances_block(block, protos):
    b = np.asarray(block, dtype=np.float64)
    d2 = (np.einsum("ij,ij->i", b, b)[:, None] + np.einsum("ij,ij->i", protos, protos)[None, :]
          - 2.0 * (b @ protos.T))
    return np.sqrt(np.maximum(d2, 0.0))


def prototype_distances(X, prototypes):
    """Lazy Euclidean distances of every row to every prototype, shape (n, m)."""
    protos = np.ascontiguousarray(prototypes, dtype=np.float64)
    return X.map_blocks(_distances_block, protos, chunks=(X.chunks[0], (protos.shape[0],)),
                        dtype=np.float64, meta=np.empty((0, 0), dtype=np.float64))
