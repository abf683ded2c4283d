"""The palm4MSA runs QK-means refits its factors with: the initial hierarchical
factorisation, warm-started refits, the empty-cluster rule and the per-iteration
choice between them (:class:`dqkm.QKMeans` and :class:`dqkm.MiniBatchQKMeans`).

The kernels are looked up in :mod:`dqkm.kernels` at call time, so that a test can
watch every run through that namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..kernels.factor_offset import add_offset, split_offset

# The progress budget of QK-means's initial factorisation (relative-error improvement
# per iteration; palm_iter_init stays the cap): splits and the global runs of levels
# 1 … Q−2 stop at _SPLIT_TOL, the last global run at _LAST_TOL.  The init only seeds the
# first assignment, and the Lloyd iterations refit the factors: the tighter _FULL_BUDGET
# cost a default fit 28 % more time at K = D = 1024 for a 0.9 % lower objective, and
# gave higher objectives on digits (benchmarks/bench_qk_budget.py, docs/algorithms/qkmeans.md).
_SPLIT_TOL = 3e-3
_LAST_TOL = 1e-3
_FIT_BUDGET = dict(split_tol=_SPLIT_TOL, tol=_LAST_TOL)
# the hierarchical refits and factorize_centroids ("K-means + palm4MSA"): on the
# progress budget the refits' objective rose (benchmarks/bench_qk_budget.py)
_FULL_BUDGET = dict(split_tol=1e-3, tol=1e-4)
# conjugate-gradient iterations of least squares on the support of each accepted factor
# update in the warm-started palm4MSA runs (palm4msa's support_cg): on QK-means's refits
# the projected gradient steps alone lower the error by ~0.1 % per iteration
# (docs/algorithms/qkmeans.md)
_SUPPORT_CG = 10


def _hierarchical(A, constraints, *, n_iter, fixed_left=None, paper=False, budget="fit"):
    """Hierarchical palm4MSA as QK-means runs it: adaptive step in the global runs
    and the geometric residual rule (both in docs/ALGORITHMS.md, with the objective
    ratios they buy on digits); every run stops on progress under the cap ``n_iter``
    (``budget="fit"``: QK-means's ``_SPLIT_TOL`` / ``_LAST_TOL``, its initial
    factorisation; ``"full"``: the kernel's tighter defaults, for the hierarchical
    refits and :func:`factorize_centroids`).  ``paper``: the
    published settings — plain PALM (step 1/c, no safeguard), the product residual
    rule, ``n_iter`` iterations per run without early stop."""
    if paper:
        residuals = kernels.default_residual_constraints(constraints, rule="product")
        return kernels.hierarchical_palm4msa(A, constraints, residual_constraints=residuals,
                                             n_iter=n_iter, tol=0.0, split_tol=0.0,
                                             fixed_left=fixed_left, safeguard=False)
    residuals = kernels.default_residual_constraints(constraints, rule="geometric")
    stops = _FIT_BUDGET if budget == "fit" else _FULL_BUDGET
    return kernels.hierarchical_palm4msa(A, constraints, residual_constraints=residuals,
                                         n_iter=n_iter, fixed_left=fixed_left,
                                         adaptive_step=True, **stops)


def _palm(A, constraints, *, n_iter, init=None, fixed_left=None, paper=False, tol=1e-6):
    """palm4MSA as QK-means runs it: the adaptive step (docs/ALGORITHMS.md) and
    ``_SUPPORT_CG`` least-squares iterations on each accepted update's support,
    stopped when an iteration improves the error by at most ``tol`` relatively (cap
    ``n_iter``); ``paper``: plain PALM (step 1/c, no safeguard), ``n_iter`` iterations."""
    if paper:
        return kernels.palm4msa(A, constraints, n_iter=n_iter, tol=0.0, init=init,
                                fixed_left=fixed_left, safeguard=False)
    return kernels.palm4msa(A, constraints, n_iter=n_iter, tol=tol, init=init,
                            fixed_left=fixed_left, adaptive_step=True, support_cg=_SUPPORT_CG)


def _empty_rule(A, init, fixed_left):
    """The empty-cluster rule: a cluster with no point (weight 0) gets its previous
    row of V (``init``) as target with the weight of one point, so the refit keeps
    it near where it was instead of leaving it unconstrained.  The warm start's
    objective is unchanged (the added term is 0 there), so the QK-means objective
    stays non-increasing."""
    w = np.asarray(fixed_left, dtype=np.float64)
    empty = w == 0
    if not empty.any():
        return A, w
    A = np.array(A, dtype=np.float64)
    w = w.copy()
    A[empty] = init.toarray().astype(np.float64)[empty]
    w[empty] = 1.0
    return A, w


def _hierarchical_refit(A, constraints, *, n_iter, init, fixed_left, n_iter_unweighted=None):
    """The better of two refits of ``A = D_√n·U`` (lower ‖A − D_√n·V‖; the
    warm-started one on a tie):

    1. palm4MSA warm-started from the previous factors ``init`` (Algorithm 1);
    2. hierarchical palm4MSA from scratch on the cluster means ``U`` themselves
       (``n_iter_unweighted`` iterations per level — what "K-means + palm4MSA"
       does to K-means's centroids), polished by palm4MSA on ``A``
       warm-started from it.

    The warm-started run never ends above its starting error (palm4MSA's
    safeguard), so the QK-means objective stays non-increasing (journal,
    Proposition 1).  Rows of ``U`` with weight 0 (empty clusters) are the rows
    of ``init`` (they do not count in the weighted error).

    A third candidate, hierarchical palm4MSA from scratch on ``A`` itself, was
    dropped: it cost about half of the second for no better final objective
    (docs/algorithms/qkmeans.md).
    """
    w = np.asarray(fixed_left, dtype=np.float64)
    warm = _palm(A, constraints, n_iter=n_iter, init=init, fixed_left=w)
    U = init.toarray().astype(np.float64)
    nz = w > 0
    U[nz] = A[nz] / w[nz, None]
    plain = _hierarchical(U, constraints, n_iter=n_iter if n_iter_unweighted is None
                          else n_iter_unweighted, budget="full")
    polished = _palm(A, constraints, n_iter=n_iter, init=plain.factors, fixed_left=w)
    return polished if polished.errors[-1] < warm.errors[-1] else warm


@dataclass(frozen=True)
class _OffsetRefit:
    """A refit's result with the offset row: ``factors`` as :func:`add_offset` writes
    them, ``errors`` those of the inner run with the last one after the offset's
    update (‖A − D_√n·V‖ of the returned ``V``), ``n_iter`` the inner run's."""

    factors: object
    errors: np.ndarray
    n_iter: int


def _offset_of(A, w, inner):
    """The offset μ minimising ‖A − D_w·(1·μᵀ + inner)‖ for fixed ``inner``:
    ``Σ_k w_k·(A_k − w_k·inner_k) / Σ_k w_k²`` (0 when every weight is 0)."""
    total = float(w @ w)
    if total == 0:
        return np.zeros(A.shape[1])
    return (w @ (A - w[:, None] * inner)) / total


def _with_offset(solve):
    """``solve`` (a refit with :func:`_solver_for`'s signature) for factors with a
    dense offset row (:mod:`dqkm.kernels.factor_offset`): the empty-cluster rule on
    the centroids, ``solve`` on ``A − D_√n·1·μᵀ`` warm-started from the sparse
    part, then μ by least squares for the new sparse part.  Neither step raises
    ‖A − D_√n·V‖ (``solve`` never ends above its warm start), so the QK-means
    objective stays non-increasing."""

    def refit(A, constraints, *, n_iter, init, fixed_left):
        A, w = _empty_rule(A, init, fixed_left)
        try:
            inner, mu = split_offset(init)
        except ValueError:
            # factors without the layout (a model fitted with offset=False, or saved
            # before it, refitted by partial_fit): the same V with the offset 0
            inner, mu = init, np.zeros(init.shape[1])
        res = solve(A - w[:, None] * mu, constraints, n_iter=n_iter, init=inner, fixed_left=w)
        W = res.factors.toarray().astype(np.float64)
        mu = _offset_of(A, w, W)
        V = add_offset(res.factors, mu)
        errors = np.array(res.errors, dtype=np.float64)
        errors[-1] = np.linalg.norm(A - w[:, None] * (W + mu))
        return _OffsetRefit(factors=V, errors=errors, n_iter=int(res.n_iter))
    return refit


def _factorize_with_offset(factorize, C):
    """``factorize(C − μ0)`` with μ0 the mean row of the centroids ``C``, then μ by
    least squares for the factors found; :func:`add_offset`'s layout."""
    C = np.asarray(C, dtype=np.float64)
    W = factorize(C - C.mean(axis=0))
    mu = _offset_of(C, np.ones(C.shape[0]), W.toarray().astype(np.float64))
    return add_offset(W, mu)


def _refit(hierarchical, n_iter_unweighted=None, variant="dqkm", tol=1e-6):
    """One refit of the factors: :func:`_hierarchical_refit` when ``hierarchical``,
    else warm-started palm4MSA stopped on ``tol`` (``variant="paper"``: plain
    warm-started palm4MSA).  Empty clusters follow :func:`_empty_rule`.  QK-means
    (:func:`_solver_for`) and MiniBatchQKMeans choose ``hierarchical`` each their way."""

    def solve(A, constraints, *, n_iter, init, fixed_left):
        A, fixed_left = _empty_rule(A, init, fixed_left)
        if variant == "paper":
            return _palm(A, constraints, n_iter=n_iter, init=init, fixed_left=fixed_left,
                         paper=True)
        if hierarchical:
            return _hierarchical_refit(A, constraints, n_iter=n_iter, init=init,
                                       fixed_left=fixed_left,
                                       n_iter_unweighted=n_iter_unweighted)
        return _palm(A, constraints, n_iter=n_iter, init=init, fixed_left=fixed_left, tol=tol)
    return solve


def _solver_for(iteration, hierarchical_refits, n_iter_unweighted=None, variant="dqkm",
                tol=1e-6):
    """The refit of Lloyd iteration ``iteration`` (from 1):
    :func:`_hierarchical_refit` in iterations ``1 … hierarchical_refits``,
    warm-started palm4MSA after (``variant="paper"``: plain warm-started
    palm4MSA in every iteration); see :func:`_refit`."""
    return _refit(iteration <= hierarchical_refits, n_iter_unweighted, variant, tol)


def _refit_solver(hierarchical_refits, start_iter, n_iter_unweighted=None, variant="dqkm",
                  tol=1e-6):
    """The solvers of iterations ``start_iter + 1, start_iter + 2, …``, one per
    call (see :func:`_solver_for`)."""
    iteration = [start_iter]

    def solve(A, constraints, *, n_iter, init, fixed_left):
        iteration[0] += 1
        return _solver_for(iteration[0], hierarchical_refits, n_iter_unweighted, variant, tol)(
            A, constraints, n_iter=n_iter, init=init, fixed_left=fixed_left)

    return solve
