"""QKMeans(variant="paper") against a short readable implementation of Algorithm 1
(Giffon, Emiya, Ralaivola, Kadri, "QuicK-means: Acceleration of K-means by learning a
fast transform", 2019/2021), and the empty-cluster rule."""

from functools import reduce

import numpy as np
import pytest
from sklearn.datasets import load_digits

import dqkm
from dqkm.kernels import default_constraints, default_residual_constraints, hierarchical_palm4msa


def _prod(mats, n):
    return reduce(np.matmul, mats) if mats else np.eye(n)


def reference_palm4msa(A, w, S, lam, cons, n_iter):
    """palm4MSA (Algorithm 2), plain PALM, dense and readable: min ‖A − diag(w)·λ·ΠS‖."""
    lam = lam * np.prod([np.linalg.norm(M) for M in S])  # unit-norm factors, scale in λ
    S = [M / np.linalg.norm(M) for M in S]
    for _ in range(n_iter):
        for q in reversed(range(len(S))):
            L = np.diag(w) @ _prod(S[:q], len(w))
            R = _prod(S[q + 1:], S[q].shape[1])
            c = 1.001 * lam**2 * np.linalg.norm(L, 2) ** 2 * np.linalg.norm(R, 2) ** 2
            grad = lam * L.T @ (lam * L @ S[q] @ R - A) @ R.T
            S[q] = cons[q](S[q] - grad / c)  # support of the projection, unit norm
        Ahat = np.diag(w) @ _prod(S, len(w))
        lam = np.vdot(A, Ahat) / np.vdot(Ahat, Ahat)
    return S, lam


def reference_qkmeans(X, S, lam, cons, n_iter, palm_iter):
    """Algorithm 1: assign with V = λ·ΠS, cluster means, palm4MSA on D_√n·U warm-started.
    An empty cluster keeps its previous row as target, with weight 1."""
    K = S[0].shape[0]
    objectives, iterates = [], []
    for _ in range(n_iter):
        V = lam * _prod(S, K)
        d2 = ((X[:, None, :] - V[None]) ** 2).sum(-1)
        labels = d2.argmin(1)
        objectives.append(d2[np.arange(len(X)), labels].sum())
        counts = np.bincount(labels, minlength=K)
        U = np.array([X[labels == k].mean(0) if counts[k] else V[k] for k in range(K)])
        w = np.where(counts > 0, np.sqrt(counts), 1.0)
        S, lam = reference_palm4msa(w[:, None] * U, w, S, lam, cons, palm_iter)
        iterates.append(lam * _prod(S, K))
    return objectives, iterates


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data[:600]
    return X, X[np.random.default_rng(1).choice(len(X), 8, replace=False)]


def test_paper_variant_matches_the_reference_iterate_by_iterate(digits):
    X, init = digits
    K, D, s, palm_iter, palm_iter_init = 8, 64, 3, 6, 8
    cons = default_constraints(K, D, sparsity=s)
    kw = dict(sparsity=s, init=init, tol=0, palm_iter=palm_iter, palm_iter_init=palm_iter_init,
              variant="paper", hierarchical_refits=3)  # refits are ignored by "paper"
    # the paper's initialisation: hierarchical palm4MSA of the initial centroids, plain
    # PALM, product residual rule, a fixed number of iterations per run
    start = hierarchical_palm4msa(init, cons, n_iter=palm_iter_init, tol=0, split_tol=0,
                                  safeguard=False,
                                  residual_constraints=default_residual_constraints(cons))
    S0 = [M.toarray() for M in start.factors.factors]
    objectives, iterates = reference_qkmeans(X, S0, start.lam, cons, 3, palm_iter)
    for t in (1, 3):
        qk = dqkm.QKMeans(K, max_iter=t, **kw).fit(X)
        np.testing.assert_allclose([h["objective"] for h in qk.history_], objectives[:t],
                                   rtol=1e-6)
        np.testing.assert_allclose(qk.factors_.toarray(), iterates[t - 1], rtol=1e-5,
                                   atol=1e-6 * np.abs(iterates[t - 1]).max())


def _far_centroid_init(X):
    init = X[np.random.default_rng(2).choice(len(X), 8, replace=False)].copy()
    init[3] = X.max(0) * 3.0  # no point is nearest to it: cluster 3 is empty
    return init


@pytest.mark.parametrize("variant,refits", [("dqkm", 0), ("dqkm", 1), ("paper", 0)])
def test_empty_cluster_keeps_its_previous_row_as_target(digits, variant, refits):
    X, _ = digits
    init = _far_centroid_init(X)
    qk1 = dqkm.QKMeans(8, sparsity=3, init=init, max_iter=1, tol=0, palm_iter=10,
                       palm_iter_init=10, hierarchical_refits=refits, variant=variant).fit(X)
    assert 3 in qk1.history_[0]["empty_clusters"]
    # V⁰: the factorised init, which the first assignment used.  The refit's objective at
    # its warm start is F(V⁰) = Σ n_k‖u_k − v⁰_k‖² = objective − within-cluster scatter
    # (the empty row adds 0 there), and descent bounds the empty row's move by it
    V0 = dqkm.QKMeans(8, sparsity=3, init=init, max_iter=1, tol=0, palm_iter=10,
                      palm_iter_init=10, variant=variant)._factorize(
        init, default_constraints(8, 64, sparsity=3)).toarray()
    labels = ((X[:, None] - V0[None]) ** 2).sum(-1).argmin(1)
    assert 3 not in labels
    scatter = sum(((X[labels == k] - X[labels == k].mean(0)) ** 2).sum()
                  for k in np.unique(labels))
    F0 = qk1.history_[0]["objective"] - scatter
    V1 = qk1.factors_.toarray()
    move = ((V1[3] - V0[3]) ** 2).sum()
    assert move <= F0 * (1 + 1e-9)
    # neither collapsed to 0 nor left where the unconstrained factors put it: the row
    # stays closer to its previous value than to the origin
    assert np.linalg.norm(V1[3] - V0[3]) < np.linalg.norm(V1[3])
    if variant == "dqkm":
        qk = dqkm.QKMeans(8, sparsity=3, init=init, max_iter=4, tol=0, palm_iter=10,
                          palm_iter_init=10, hierarchical_refits=refits).fit(X)
        obj = [h["objective"] for h in qk.history_]
        assert all(b <= a * (1 + 1e-10) for a, b in zip(obj, obj[1:]))


def test_bad_variant(digits):
    X, init = digits
    with pytest.raises(ValueError, match=r"The 'variant' parameter of QKMeans must be one of "
                                         r"\['dqkm', 'paper'\]. Got 'journal' instead."):
        dqkm.QKMeans(8, init=init, variant="journal").fit(X)
