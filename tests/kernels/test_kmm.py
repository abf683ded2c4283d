"""Kernels of K-Multiple-Means / F-KMM against hand-worked cases, brute force and eigh."""

import dataclasses
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from dqkm.kernels.kmm import (MODE_COMPONENTS, MODE_EXTRA, MODE_FULL, SpectralTerm, can_weights,
                              nearest_prototypes, project)
from dqkm.kernels.kmm_init import kmeanspp_pruned, outlier_mask, outlier_threshold, svd_basis
from dqkm.kernels.kmm_spectral import (block_eigen, chunk_statistics, components,
                                       merge_statistics, prototype_matrix, reference_svd)


# --------------------------------------------------------------------------- CAN rows
def test_can_weights_by_hand():
    # l = 3: d_(l+1) = 4, denominator 3·4 − (1 + 2 + 3) = 6
    W, alpha = can_weights(np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0]]))
    np.testing.assert_allclose(W[0], [3 / 6, 2 / 6, 1 / 6])
    np.testing.assert_allclose(alpha[0], 3.0)
    np.testing.assert_allclose(W[1], [1 / 3] * 3)  # all l+1 equal: uniform
    assert alpha[1] == 0
    np.testing.assert_allclose(W.sum(axis=1), 1.0)


def test_can_weights_skipped_rows_are_zero():
    W, alpha = can_weights(np.array([[np.inf, np.inf, np.inf], [0.0, 1.0, 3.0]]))
    assert (W[0] == 0).all() and alpha[0] == 0
    # (3 − 0)/(2·3 − 1) = 3/5, (3 − 1)/5 = 2/5
    W2, _ = can_weights(np.array([[0.0, 1.0, 3.0]]))
    np.testing.assert_allclose(W2[0], [3 / 5, 2 / 5])


def test_ties_broken_by_lower_index():
    X = np.zeros((1, 2))
    A = np.array([[1.0, 0], [0, 1.0], [-1.0, 0], [0, -1.0], [2.0, 0]])
    for pruned in (False, True):
        mu, V = svd_basis(A, 1)
        lb = project(X, mu, V) + project(A, mu, V)
        nb = nearest_prototypes(X, A, 3, SpectralTerm.none(1, 5), pruned=pruned, lb=lb)
        assert nb.indices[0].tolist() == [0, 1, 2, 3]


# --------------------------------------------------------------------------- pruning
def _brute(X, A, term, L):
    X = np.asarray(X, dtype=np.float64)
    DE = ((X[:, None, :] - A[None, :, :]) ** 2).sum(-1)
    n, m = DE.shape
    DF = np.zeros_like(DE)
    same = (term.point_comp[:, None] >= 0) & (term.point_comp[:, None] == term.proto_comp[None, :])
    if term.mode == MODE_COMPONENTS:
        DF = np.where(same, 0.0, 0.5 * (term.point_inv_n[:, None] + term.proto_inv_n[None, :]))
    elif term.mode == MODE_EXTRA:
        full = ((term.point_f[:, None, :] - term.proto_g[None, :, :]) ** 2).sum(-1)
        cross = 0.5 * (term.point_inv_n[:, None] + term.proto_inv_n[None, :]) + \
            (term.point_f ** 2).sum(1)[:, None] + (term.proto_g ** 2).sum(1)[None, :]
        DF = np.where(same, full, cross)
    elif term.mode == MODE_FULL:
        DF = ((term.point_f[:, None, :] - term.proto_g[None, :, :]) ** 2).sum(-1)
    D = DE + term.beta * DF
    order = np.lexsort((np.broadcast_to(np.arange(m), D.shape), D), axis=1)[:, :L]
    return order, np.take_along_axis(D, order, 1)


def _clustered(rng, n, d, n_centers, scale, dtype=np.float32):
    """n points around n_centers Gaussian centres (std ``scale``), unit noise."""
    centers = rng.standard_normal((n_centers, d)) * scale
    return (centers[rng.integers(0, n_centers, n)] + rng.standard_normal((n, d))).astype(dtype)


def _random_term(rng, n, m, mode, beta=3.0, b=3, extra=2):
    qcomp = rng.integers(0, b, m)
    pcomp = rng.integers(0, b, n)
    sizes = rng.integers(5, 50, b).astype(float)
    F = rng.standard_normal((n, extra)) * 0.3 if mode in (MODE_EXTRA, MODE_FULL) else np.zeros((n, 0))
    G = rng.standard_normal((m, extra)) * 0.3 if mode in (MODE_EXTRA, MODE_FULL) else np.zeros((m, 0))
    return SpectralTerm(mode, beta, pcomp, 1 / sizes[pcomp], qcomp, 1 / sizes[qcomp], F, G)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", [0, MODE_COMPONENTS, MODE_EXTRA, MODE_FULL])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pruning_never_changes_the_neighbour_sets(dtype, mode, seed):
    rng = np.random.default_rng(seed)
    X = _clustered(rng, 400, 16, 6, 5, dtype=dtype)
    X[:3] = X[3]  # exact duplicates → exact ties
    A = np.vstack([X[rng.choice(400, 40, replace=False)].astype(np.float64), X[3:4]])
    A[7] = A[8]   # duplicate prototypes → ties broken by index
    term = (SpectralTerm.none(len(X), len(A)) if mode == 0
            else _random_term(rng, len(X), len(A), mode))
    mu, V = svd_basis(A, 4)
    lb = project(X, mu, V) + project(A, mu, V)
    X0 = X.copy()
    exact = nearest_prototypes(X, A, 5, term)
    fast = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb)
    np.testing.assert_array_equal(fast.indices, exact.indices)
    np.testing.assert_array_equal(fast.distances, exact.distances)  # same float64 routine
    np.testing.assert_array_equal(X, X0)
    ref_idx, ref_d = _brute(X, A, term, 6)
    np.testing.assert_array_equal(np.sort(exact.indices[:, :5], 1), np.sort(ref_idx[:, :5], 1))
    np.testing.assert_allclose(exact.distances, ref_d, rtol=1e-9, atol=1e-9)
    assert exact.n_exact == exact.n_pairs == 400 * 41
    if mode == 0:
        assert fast.n_exact < 0.6 * fast.n_pairs  # clustered data: the bound prunes


@pytest.mark.parametrize("mode", [0, MODE_COMPONENTS, MODE_EXTRA])
def test_any_seeds_give_the_same_neighbours(mode):
    """Seeds (e.g. the previous pass's neighbours) only change the work: good,
    random, repeated or missing seeds give the unseeded result bit for bit."""
    rng = np.random.default_rng(5)
    X = _clustered(rng, 300, 16, 6, 5)
    A = X[rng.choice(300, 40, replace=False)].astype(np.float64)
    term = (SpectralTerm.none(len(X), len(A)) if mode == 0
            else _random_term(rng, len(X), len(A), mode))
    mu, V = svd_basis(A, 4)
    lb = project(X, mu, V) + project(A, mu, V)
    base = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb)
    good = base.indices.astype(np.int64)
    rand = rng.integers(0, 40, good.shape)          # repeats within a row included
    mixed = good.copy()
    mixed[::3, -1] = -1                            # these rows select their own seeds
    mixed[1::3, 2] = 40                            # out of range: the same
    for seeds in (good, good[:, ::-1], rand, mixed):
        seeds0 = seeds.copy()
        res = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, seeds=seeds)
        np.testing.assert_array_equal(res.indices, base.indices)
        np.testing.assert_array_equal(res.distances, base.distances)
        np.testing.assert_array_equal(res.exact_de, base.exact_de)
        np.testing.assert_array_equal(seeds, seeds0)
    assert nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, seeds=good).n_exact \
        <= base.n_exact
    with pytest.raises(ValueError, match=r"seeds must have shape \(n_rows, n_keep\) "
                                         r"= \(300, 6\)\. Got \(300, 5\)"):
        nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, seeds=good[:, :5])


@pytest.mark.parametrize("mode", [0, MODE_COMPONENTS, MODE_EXTRA])
def test_previous_pass_bound_skips_scans_exactly(mode):
    """keep/low of one pass let the next skip the scan of a row: ``low`` bounds
    D_E to every prototype outside ``keep`` (checked against brute force), and
    the next pass — β doubled, or the prototypes moved with ``moved`` — gives the
    full scan's neighbours bit for bit while computing far fewer distances."""
    rng = np.random.default_rng(7)
    X = _clustered(rng, 400, 16, 5, 5)
    X[:2] = X[2]
    A = X[rng.choice(400, 60, replace=False)].astype(np.float64)
    A[4] = A[9]
    term = (SpectralTerm.none(len(X), len(A)) if mode == 0
            else _random_term(rng, len(X), len(A), mode, beta=0.5, b=1))
    mu, V = svd_basis(A, 4)
    lb = project(X, mu, V) + project(A, mu, V)
    K = 11
    first = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, n_keep=K)
    DE = ((X.astype(np.float64)[:, None, :] - A[None]) ** 2).sum(-1)
    scanned = np.isfinite(first.low)
    assert scanned.all()
    for i in range(len(X)):
        out = np.setdiff1d(np.arange(len(A)), first.keep[i])
        assert DE[i, out].min() >= first.low[i] * (1 - 1e-9)
    np.testing.assert_array_equal(first.keep[:, :6], first.indices)
    term2 = dataclasses.replace(term, beta=2 * term.beta)
    A2 = A + 0.01 * rng.standard_normal(A.shape)  # every prototype moves a little
    A3 = A.copy()
    A3[[3, 20, 41]] += 3.0 * rng.standard_normal((3, 16))  # a few move far
    cases = [(term2, A, None), (term, A2, None), (term, A3, None)]
    for t, B, _ in cases:
        mv = np.sqrt(((B - A) ** 2).sum(1))
        lbB = project(X, mu, V) + project(B, mu, V)
        full = nearest_prototypes(X, B, 5, t)
        res = nearest_prototypes(X, B, 5, t, pruned=True, lb=lbB, n_keep=K, seeds=first.keep,
                                 bound=first.low, moves=mv)
        np.testing.assert_array_equal(res.indices, full.indices)
        np.testing.assert_array_equal(res.distances, full.distances)
        np.testing.assert_array_equal(res.exact_de, full.exact_de)
        plain = nearest_prototypes(X, B, 5, t, pruned=True, lb=lbB, n_keep=K, seeds=first.keep)
        assert res.n_exact < plain.n_exact  # rows not scanned
        DEB = ((X.astype(np.float64)[:, None, :] - B[None]) ** 2).sum(-1)
        for i in range(len(X)):  # the new bound holds for the moved prototypes
            out = np.setdiff1d(np.arange(len(A)), res.keep[i])
            assert DEB[i, out].min() >= res.low[i] * (1 - 1e-9)
        # two passes on: the bound carried by rows not scanned still gives exact results
        again = nearest_prototypes(X, B, 5, term2, pruned=True, lb=lbB, n_keep=K,
                                   seeds=res.keep, bound=res.low)
        np.testing.assert_array_equal(again.indices, nearest_prototypes(X, B, 5, term2).indices)
    with pytest.raises(ValueError, match=r"moves must be 60 finite numbers >= 0"):
        nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, n_keep=K, seeds=first.keep,
                           bound=first.low, moves=-np.ones(60))
    with pytest.raises(ValueError, match=r"n_keep must be in \[n_neighbors \+ 1, m\] = "
                                         r"\[6, 60\]\. Got 61"):
        nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, n_keep=61)


def test_beta_zero_distances_are_the_euclidean_ones_on_every_pass():
    """β = 0: the search computes no D_F (β·D_F stays 0), so every pass — first,
    seeded with the previous bound after a move, reference — returns D = D_E bit
    for bit, and the seeded pass the reference's neighbours."""
    rng = np.random.default_rng(11)
    X = _clustered(rng, 300, 8, 4, 5)
    A = X[rng.choice(300, 30, replace=False)].astype(np.float64)
    term = SpectralTerm.none(300, 30)
    mu, V = svd_basis(A, 3)
    first = nearest_prototypes(X, A, 4, term, pruned=True, n_keep=8,
                               lb=project(X, mu, V) + project(A, mu, V))
    moved = A + 0.05 * rng.standard_normal(A.shape)
    seeded = nearest_prototypes(X, moved, 4, term, pruned=True, n_keep=8,
                                lb=project(X, mu, V) + project(moved, mu, V), seeds=first.keep,
                                bound=first.low, moves=np.sqrt(((moved - A) ** 2).sum(1)))
    ref = nearest_prototypes(X, moved, 4, term)
    for nb in (first, seeded, ref):
        np.testing.assert_array_equal(nb.distances, nb.exact_de)
    np.testing.assert_array_equal(seeded.indices, ref.indices)
    np.testing.assert_array_equal(seeded.distances, ref.distances)
    assert seeded.n_exact < ref.n_exact


@pytest.mark.parametrize("mode", [MODE_COMPONENTS, MODE_EXTRA])
@pytest.mark.parametrize("beta", [3.0, 3e3, 1e6])
def test_other_components_skipped_only_when_exact(mode, beta):
    """Seeded F-KMM passes scan the point's own component first and skip the others
    when β·D_F to them alone exceeds the (l+1)-th D: the neighbours stay those of
    the full scan, bit for bit (empty prototypes, points of no component and ties
    included), and large β skips most of the other components' prototypes."""
    rng = np.random.default_rng(11)
    X = _clustered(rng, 300, 12, 3, 4)
    X[:2] = X[2]
    A = X[rng.choice(300, 45, replace=False)].astype(np.float64)
    A[5] = A[6]
    term = _random_term(rng, len(X), len(A), mode, beta=beta, b=3)
    qcomp = term.proto_comp.copy()
    qinv = term.proto_inv_n.copy()
    qcomp[[3, 17]] = -1  # prototypes with no point
    qinv[[3, 17]] = 0.0
    pcomp = term.point_comp.copy()
    pcomp[::50] = -1  # points of no component: never skip
    term = SpectralTerm(mode, beta, pcomp, term.point_inv_n, qcomp, qinv, term.point_f,
                        term.proto_g)
    mu, V = svd_basis(A, 3)
    lb = project(X, mu, V) + project(A, mu, V)
    exact = nearest_prototypes(X, A, 5, term)
    first = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb)
    for seeds in (first.indices, rng.integers(0, 45, first.indices.shape)):
        res = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, seeds=seeds)
        np.testing.assert_array_equal(res.indices, exact.indices)
        np.testing.assert_array_equal(res.distances, exact.distances)
        np.testing.assert_array_equal(res.exact_de, exact.exact_de)
    ref_idx, ref_d = _brute(X, A, term, 6)
    np.testing.assert_allclose(exact.distances, ref_d, rtol=1e-9, atol=1e-9)
    if beta >= 1e6:  # the other two components are skipped for the points with one
        seeded = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, seeds=first.indices)
        assert seeded.n_exact < 0.5 * seeded.n_pairs


def test_range_kernels_give_the_same_bits_for_any_range():
    """β·D_F and the dot products are element-wise: a prototype's value is the same
    computed alone (a seed) or within a range (a scan) — the rule that keeps a
    pair's D independent of the seeds."""
    from dqkm.kernels.kmm import _df_one, _df_range, _dot_one, _row_dot
    rng = np.random.default_rng(2)
    m = 203
    F = rng.standard_normal((4, 9))
    GT = np.ascontiguousarray(rng.standard_normal((m, 9)).T)
    qcomp = rng.integers(-1, 3, m)
    qinv = rng.random(m)
    g2 = (GT ** 2).sum(0)
    for mode in (0, 1, 2, 3):
        full_fg, full_df = np.empty(m), np.empty(m)
        _row_dot(F, 1, GT, full_fg, 0, m)
        _df_range(mode, 7.5, 1, 0.3, 2.0, qcomp, qinv, full_fg, g2, full_df, 0, m)
        one_fg, one_df = np.full(m, np.nan), np.full(m, np.nan)
        for j in range(m):
            _row_dot(F, 1, GT, one_fg, j, j + 1)
            _df_range(mode, 7.5, 1, 0.3, 2.0, qcomp, qinv, one_fg, g2, one_df, j, j + 1)
        np.testing.assert_array_equal(one_fg, full_fg)
        np.testing.assert_array_equal(one_df, full_df)
        scalar_fg = np.array([_dot_one(F, 1, GT, j) for j in range(m)])
        scalar_df = np.array([_df_one(mode, 7.5, 1, 0.3, 2.0, qcomp, qinv, scalar_fg[j], g2, j)
                              for j in range(m)])
        np.testing.assert_array_equal(scalar_fg, full_fg)  # seeds and movers use these
        np.testing.assert_array_equal(scalar_df, full_df)
        np.testing.assert_allclose(full_fg, F[1] @ GT, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lower_bound_of_lemma_4_10(dtype):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((200, 20)).astype(dtype) * 3 + 100
    A = rng.standard_normal((30, 20)) * 3 + 100
    mu, V = svd_basis(A, 3)
    xt, xp, _ = project(X, mu, V)
    at, ap, _ = project(A, mu, V)
    lb = ((xt[:, None] - at[None]) ** 2).sum(-1) + (xp[:, None] - ap[None]) ** 2
    exact = ((X.astype(np.float64)[:, None] - A[None]) ** 2).sum(-1)
    assert (lb <= exact * (1 + 1e-12) + 1e-9).all()
    assert (lb > 0.2 * exact).mean() > 0.5  # and not trivially zero


# --------------------------------------------------------------------------- graph, eigen
def _block_S(rng, n, m, ell, b, X=None):
    comp = np.sort(rng.permutation(np.arange(m) % b))
    idx = np.zeros((n, ell), np.int64)
    w = np.zeros((n, ell))
    for i in range(n):
        cand = np.flatnonzero(comp == i % b)
        idx[i] = rng.choice(cand, ell, replace=False)
        x = rng.random(ell)
        w[i] = x / x.sum()
    X = rng.standard_normal((n, 3)) if X is None else X
    parts = [chunk_statistics(X[s], idx[s], w[s], m) for s in (slice(0, n // 3), slice(n // 3, n))]
    return idx, w, X, merge_statistics(parts), comp


@pytest.mark.parametrize("seed,b,c", [(0, 3, 6), (1, 4, 4), (2, 2, 7), (3, 5, 3), (4, 1, 5)])
def test_block_eigen_equals_eigh(seed, b, c):
    rng = np.random.default_rng(seed)
    idx, w, X, st, _ = _block_S(rng, 300, 40, 4, b)
    S = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(300), 4), idx.ravel())), shape=(300, 40))
    np.testing.assert_allclose(st.sts.toarray(), (S.T @ S).toarray(), atol=1e-12)
    np.testing.assert_allclose(st.stx, S.T @ X, atol=1e-12)
    cc = components(st.sts, st.colsum)
    assert cc.n_components == b
    M = prototype_matrix(st.sts, st.colsum)
    res = block_eigen(M, cc, st.colsum, c)
    Md = M.toarray()
    ev_all, vec = np.linalg.eigh(Md)
    ev_all, vec = ev_all[::-1], vec[:, ::-1]
    np.testing.assert_allclose(res.values, ev_all[:c], atol=1e-10)
    # eigenpairs of M, orthonormal, zero outside their block (eq. 18)
    np.testing.assert_allclose(Md @ res.vectors, res.vectors * res.values, atol=1e-10)
    np.testing.assert_allclose(res.vectors.T @ res.vectors, np.eye(c), atol=1e-10)
    for t in range(c):
        outside = cc.proto_comp != res.block[t]
        assert not res.vectors[outside, t].any()
    if ev_all[c - 1] - ev_all[c] > 1e-8:  # a unique top-c subspace: the same one
        np.testing.assert_allclose(res.vectors @ res.vectors.T, vec[:, :c] @ vec[:, :c].T,
                                   atol=1e-8)
    assert res.n_lemma == b
    assert res.n_computed <= max(c - b, 0) + b  # pruned by the trace bound
    if b >= c:
        assert res.n_computed == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lemma_4_3_closed_form_is_the_top_eigenvector_of_each_block(seed):
    rng = np.random.default_rng(seed)
    _, _, _, st, _ = _block_S(rng, 200, 30, 3, 3)
    cc = components(st.sts, st.colsum)
    M = prototype_matrix(st.sts, st.colsum).toarray()
    for k in range(cc.n_components):
        mk = np.flatnonzero(cc.proto_comp == k)
        ev, vec = np.linalg.eigh(M[np.ix_(mk, mk)])
        q = np.sqrt(st.colsum[mk])
        q /= np.linalg.norm(q)
        np.testing.assert_allclose(ev[-1], 1.0, atol=1e-12)
        assert ev[-2] < 1 - 1e-6
        np.testing.assert_allclose(np.abs(vec[:, -1] @ q), 1.0, atol=1e-12)


def test_components_equal_bipartite_graph_components():
    rng = np.random.default_rng(7)
    idx, w, _, st, _ = _block_S(rng, 120, 20, 3, 4)
    w[:, -1] = 0.0  # explicit zeros must not connect anything
    w /= w.sum(1, keepdims=True)
    st = chunk_statistics(np.zeros((120, 1)), idx, w, 21)  # prototype 20 is empty
    cc = components(st.sts, st.colsum)
    n, m = 120, 21
    keep = w.ravel() > 0
    S = sp.csr_matrix((w.ravel()[keep], (np.repeat(np.arange(n), 3)[keep], idx.ravel()[keep])),
                      shape=(n, m))
    big = sp.bmat([[None, S], [S.T, None]])
    nb, lab = connected_components(big, directed=False)
    assert cc.n_components == nb - 1  # the empty prototype is no component
    assert cc.empty.tolist() == [20] and cc.proto_comp[20] == -1
    # same partition of the prototypes
    for j in range(20):
        for k in range(20):
            assert (cc.proto_comp[j] == cc.proto_comp[k]) == (lab[n + j] == lab[n + k])
    np.testing.assert_array_equal(cc.sizes, np.bincount(cc.proto_comp[idx[:, 0]]))


def test_lemma_4_1_svd_from_M():
    rng = np.random.default_rng(3)
    idx, w, _, st, _ = _block_S(rng, 250, 30, 4, 2)
    S = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(250), 4), idx.ravel())), shape=(250, 30))
    Dm = sp.diags(1 / np.sqrt(st.colsum))
    St = S @ Dm
    U, s, V = reference_svd(St, 5)
    cc = components(st.sts, st.colsum)
    res = block_eigen(prototype_matrix(st.sts, st.colsum), cc, st.colsum, 5)
    np.testing.assert_allclose(s ** 2, res.values, atol=1e-10)
    Uq = (St @ res.vectors) / np.sqrt(res.values)
    np.testing.assert_allclose(Uq @ Uq.T, U @ U.T, atol=1e-8)
    Ua, sa, Va = reference_svd(St, 5, dense_max=0)  # the ARPACK path
    np.testing.assert_allclose(sa, s, atol=1e-10)
    np.testing.assert_allclose(Ua @ Ua.T, U @ U.T, atol=1e-7)
    for alg, dm in (("arpack", 10**12), ("dense", 0)):  # the algorithm overrides dense_max
        Ub, sb, Vb = reference_svd(St, 5, dense_max=dm, algorithm=alg)
        np.testing.assert_allclose(sb, s, atol=1e-10)
        np.testing.assert_allclose(Vb @ Vb.T, V @ V.T, atol=1e-7)
        assert np.isclose(sb, 1.0, atol=1e-10).sum() == 2  # σ = 1 once per component (b = 2)
    Ud, sd, _ = reference_svd(St, 5, dense_max=0, algorithm="dense")
    np.testing.assert_array_equal(sd, s)  # the same LAPACK call as below dense_max
    with pytest.raises(ValueError, match=r"algorithm must be one of \['auto', 'dense', "
                                         r"'arpack'\]\. Got 'svds' instead"):
        reference_svd(St, 5, algorithm="svds")


# --------------------------------------------------------------------------- seeding, outliers
def _kmeanspp_plain(X, m, rng):
    n = len(X)
    first = int(rng.integers(n))
    u = rng.random(m)
    chosen = [first]
    Dc = ((X - X[first]) ** 2).sum(1)
    for t in range(1, m):
        cum = np.cumsum(np.where(Dc > 0, Dc, 0))
        j = int(np.searchsorted(cum, u[t] * Dc.sum(), side="right"))
        chosen.append(j)
        Dc = np.minimum(Dc, ((X - X[j]) ** 2).sum(1))
    return chosen


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pruned_kmeanspp_equals_plain_kmeanspp(dtype):
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((500, 12)) + 4 * rng.integers(0, 5, (500, 1))).astype(dtype)
    mu, V = svd_basis(X[:40], 3)
    res = kmeanspp_pruned(X, 30, np.random.default_rng(1), mu=mu, V=V)
    ref = _kmeanspp_plain(X.astype(np.float64), 30, np.random.default_rng(1))
    assert res.indices.tolist() == ref
    assert res.n_exact < res.n_pairs


def test_adaptive_seeding_stops_when_the_newest_prototype_is_alone():
    rng = np.random.default_rng(2)
    X = np.vstack([rng.standard_normal((300, 2)) * 0.1 + c for c in ([0, 0], [5, 5], [0, 5])])
    mu, V = svd_basis(X[:50], 1)
    res = kmeanspp_pruned(X, 900, np.random.default_rng(0), mu=mu, V=V, adaptive=True,
                          min_prototypes=4)
    m = len(res.indices)
    assert 4 <= m < 900
    A = X[res.indices]
    lab = np.argmin(((X[:, None] - A[None]) ** 2).sum(-1), axis=1)
    assert (lab == m - 1).sum() == 1


def test_outlier_mask_by_hand():
    de = np.array([[0.1, 0.2, 0.3, 0.4], [0.1, 5.0, 6.0, 7.0], [2.0, 2.0, 9.0, 9.0]])
    # l = 4, θ = 1 (Euclidean): row 0 keeps 4, row 1 keeps 1 (< 2: outlier), row 2 keeps 0
    assert outlier_mask(de, 1.0, 4).tolist() == [False, True, True]
    # θ = √2 compares √D_E: row 2 keeps its two neighbours at D_E = 2 (2 ≥ l/2)
    assert outlier_mask(de, np.sqrt(2.0), 4).tolist() == [False, True, False]
    assert outlier_mask(de, 1.4, 4).tolist() == [False, True, True]
    # l = 3 reads only the first 3 columns: row 1 keeps 1 < 1.5
    assert outlier_mask(de, 2.2, 3).tolist() == [False, True, False]


def test_outlier_threshold_by_hand():
    # distances 3 and 4: mean 3.5, standard deviation 0.5
    assert outlier_threshold(7.0, 25.0, 2, n_sigmas=2.0) == pytest.approx(4.5)
    assert outlier_threshold(7.0, 25.0, 2, n_sigmas=0.0) == pytest.approx(3.5)
    assert outlier_threshold(6.0, 18.0, 2) == pytest.approx(3.0)  # equal distances: σ = 0
    assert outlier_threshold(0.0, 0.0, 0) == 0.0
    d = np.random.default_rng(3).gamma(2.0, size=500)
    assert outlier_threshold(d.sum(), (d * d).sum(), d.size) == pytest.approx(
        d.mean() + 2 * d.std(), rel=1e-12)


def test_block_eigen_lanczos_path_equals_eigh(monkeypatch):
    import dqkm.kernels.kmm_spectral as ks

    monkeypatch.setattr(ks, "DENSE_EIGH_MAX", 5)  # every block through deflated Lanczos
    rng = np.random.default_rng(11)
    _, _, _, st, _ = _block_S(rng, 300, 40, 4, 3)
    cc = components(st.sts, st.colsum)
    M = prototype_matrix(st.sts, st.colsum)
    res = block_eigen(M, cc, st.colsum, 7, rng=np.random.default_rng(0))
    ev = np.linalg.eigvalsh(M.toarray())[::-1]
    np.testing.assert_allclose(res.values, ev[:7], atol=1e-10)
    np.testing.assert_allclose(M.toarray() @ res.vectors, res.vectors * res.values, atol=1e-9)


@pytest.mark.parametrize("batch", [1, 3])
def test_lanczos_batches_serve_the_deflated_eigenpairs_in_order(monkeypatch, batch):
    """A large block's eigenpairs after Lemma 4.3's: one Lanczos run serves
    ``batch`` of them, a request beyond the batch deflates again; all equal eigh's."""
    import dqkm.kernels.kmm_spectral as ks

    monkeypatch.setattr(ks, "DENSE_EIGH_MAX", 5)
    rng = np.random.default_rng(5)
    B = rng.standard_normal((60, 60))
    Mk = sp.csr_matrix(B @ B.T / 60)
    w, v = np.linalg.eigh(Mk.toarray())
    w, v = w[::-1], v[:, ::-1]
    vals, vecs, cache = [float(w[0])], [v[:, 0]], {}
    for j in range(1, 6):  # 5 requests: batches of 3 are served 3 + 2
        lam, vec = ks._top_eigpair(Mk, vals, vecs, np.random.default_rng(j), cache, batch=batch)
        assert lam == pytest.approx(w[j], rel=1e-10)
        assert abs(vec @ v[:, j]) == pytest.approx(1.0, abs=1e-8)
        vals.append(lam)
        vecs.append(vec)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,m,ell", [(500, 37, 4), (60, 400, 8)])  # the 2nd outgrows its buffer
def test_chunk_statistics_equal_scipy_with_skipped_entries(dtype, n, m, ell):
    """SᵀS (sorted, no explicit zeros), column sums and SᵀX from the numba kernel
    equal scipy's products; entries with index −1 or weight 0 are not edges."""
    rng = np.random.default_rng(8)
    idx = rng.integers(0, m, (n, ell))
    w = rng.random((n, ell))
    idx[::9, 1] = -1
    w[::7, 2] = 0.0
    idx[5] = -1  # an outlier row
    X = rng.standard_normal((n, 6)).astype(dtype)
    st = chunk_statistics(X, idx, w, m)
    keep = (idx >= 0) & (w > 0)
    S = sp.csr_matrix((w[keep], (np.nonzero(keep)[0], idx[keep])), shape=(n, m))
    np.testing.assert_allclose(st.sts.toarray(), (S.T @ S).toarray(), rtol=1e-13, atol=1e-15)
    assert st.sts.has_sorted_indices and (st.sts.data != 0).all()
    np.testing.assert_allclose(st.colsum, np.asarray(S.sum(axis=0)).ravel(), rtol=1e-13)
    np.testing.assert_allclose(st.stx, S.T @ X.astype(np.float64), rtol=1e-12, atol=1e-12)


def test_spectral_rows_equal_the_gathered_sum():
    from dqkm.kernels.kmm import spectral_rows

    rng = np.random.default_rng(9)
    idx = rng.integers(0, 30, (200, 5))
    idx[::6, 3] = -1
    w = rng.random((200, 5))
    Wmap = rng.standard_normal((30, 4))
    ref = np.einsum("ik,ikc->ic", np.where(idx >= 0, w, 0.0), Wmap[np.maximum(idx, 0)])
    np.testing.assert_allclose(spectral_rows(idx, w, Wmap), ref, rtol=1e-13, atol=1e-14)


def test_read_only_input_compiles_no_other_kernel_version():
    """A read-only X (scikit-learn's memmap checks, a read-only memory map) is handed to
    the kernels as a writable copy: the numba kernels see the types they already have,
    and the result is the writable input's."""
    import dqkm
    from dqkm.kernels import kmm_init, kmm_search, kmm_spectral

    X = np.random.default_rng(0).normal(size=(300, 3))
    ref = dqkm.KMultipleMeans(3, n_prototypes=20, random_state=0).fit(X)
    kernels = (kmm_search.neighbors_kernel, kmm_spectral._sts_kernel, kmm_init._kmpp_loop)
    before = [list(k.signatures) for k in kernels]
    Xr = X.copy()
    Xr.flags.writeable = False
    got = dqkm.KMultipleMeans(3, n_prototypes=20, random_state=0).fit(Xr)
    assert [list(k.signatures) for k in kernels] == before
    np.testing.assert_array_equal(got.labels_, ref.labels_)
