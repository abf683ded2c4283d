"""SE / RP embedding kernels and the CSR Lloyd kernel against dense products."""

import numpy as np
import pytest
import scipy.sparse as sp

from dqkm.kernels.embedding import (SparseEmbedding, dense_embed,
                                    draw_dense_embedding, draw_sparse_embedding, embed_chunk,
                                    sparse_embed, sparse_embedding_matrix)
from dqkm.kernels.lloyd import assign_labels, lloyd_partials
from dqkm.kernels.lloyd_sparse import (assign_labels_csr, csr_row_norms, label_moments,
                                       lloyd_partials_csr, merge_label_moments)


def _explicit_QPhi(emb):
    """Q·Φ built densely from its definition (Algorithm 1, lines 2-4)."""
    d, dt = emb.n_features, emb.n_components
    Phi = np.zeros((d, dt))
    Phi[np.arange(d), emb.hash] = 1.0
    Q = np.diag(emb.signs)
    return Q @ Phi


def _sparse_data(n, d, density, dtype, seed):
    return sp.random(n, d, density=density, format="csr", dtype=dtype,
                     random_state=np.random.default_rng(seed))


def test_hand_worked_sparse_embedding():
    emb = SparseEmbedding(hash=np.array([1, 0, 1]), signs=np.array([1.0, -1.0, -1.0]),
                          n_components=2)
    X = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    # column t of X̂ sums s_j·X[:, j] over the j with h(j) = t
    np.testing.assert_array_equal(sparse_embed(X, emb), [[-2.0, -2.0], [0.0, -5.0]])
    np.testing.assert_array_equal(sparse_embed(sp.csr_matrix(X), emb), [[-2.0, -2.0], [0.0, -5.0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_components", [1, 7, 64])
def test_sparse_embed_equals_explicit_product(dtype, n_components):
    X = _sparse_data(200, 90, 0.1, dtype, n_components)
    emb = draw_sparse_embedding(90, n_components, seed=n_components)
    ref = X.toarray().astype(np.float64) @ _explicit_QPhi(emb)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for Xin in (X, X.toarray()):
        out = sparse_embed(Xin, emb)
        assert out.dtype == dtype and out.shape == (200, n_components)
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    # the CSR form of Q·Φ (one non-zero per row) is the same matrix
    np.testing.assert_array_equal(sparse_embedding_matrix(emb).toarray(), _explicit_QPhi(emb))
    assert sparse_embedding_matrix(emb).nnz == 90


def test_embedding_draws_are_seeded_and_have_the_right_law():
    a = draw_sparse_embedding(5000, 16, 3)
    b = draw_sparse_embedding(5000, 16, 3)
    c = draw_sparse_embedding(5000, 16, 4)
    np.testing.assert_array_equal(a.hash, b.hash)
    np.testing.assert_array_equal(a.signs, b.signs)
    assert not np.array_equal(a.hash, c.hash)
    assert set(np.unique(a.signs)) == {-1.0, 1.0}
    assert a.hash.min() == 0 and a.hash.max() == 15
    # uniform hash: every bucket near 5000/16 = 312.5
    assert np.bincount(a.hash).min() > 230
    R = draw_dense_embedding(300, 25, 0).matrix
    np.testing.assert_allclose(np.abs(R), 1 / 5.0)
    assert abs((R > 0).mean() - 0.5) < 0.03


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_embed_matches_gemm_for_dense_and_csr(dtype):
    X = _sparse_data(150, 60, 0.2, dtype, 1)
    emb = draw_dense_embedding(60, 12, 5)
    ref = X.toarray().astype(np.float64) @ emb.matrix
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for Xin in (X, X.toarray()):
        out = dense_embed(Xin, emb)
        assert out.dtype == dtype and isinstance(out, np.ndarray)
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    np.testing.assert_array_equal(embed_chunk(X, emb), dense_embed(X, emb))


def test_norms_preserved_in_expectation():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 400))
    se = [np.sum(sparse_embed(x, draw_sparse_embedding(400, 32, s)) ** 2) for s in range(300)]
    rp = [np.sum(dense_embed(x, draw_dense_embedding(400, 32, s)) ** 2) for s in range(300)]
    assert np.mean(se) / np.sum(x**2) == pytest.approx(1.0, abs=0.05)
    assert np.mean(rp) / np.sum(x**2) == pytest.approx(1.0, abs=0.05)


def test_embedding_rejects_bad_chunks():
    emb = draw_sparse_embedding(10, 3, 0)
    X = _sparse_data(5, 10, 0.5, np.float64, 0)
    with pytest.raises(TypeError, match="CSR chunk; got format 'csc'"):
        sparse_embed(X.tocsc(), emb)
    with pytest.raises(ValueError, match="embedding's 10 features"):
        sparse_embed(np.ones((2, 11)), emb)
    with pytest.raises(TypeError, match="SparseEmbedding or a DenseEmbedding"):
        embed_chunk(X, emb.hash)
    orig = X.copy()
    sparse_embed(X, emb)
    assert (X != orig).nnz == 0


# ----------------------------------------------------------------------------- CSR Lloyd
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 9, 500])
def test_csr_lloyd_matches_dense_kernel(dtype, n):
    rng = np.random.default_rng(n)
    X = _sparse_data(n, 40, 0.15, dtype, n)
    C = rng.standard_normal((6, 40)).astype(dtype) * 0.3
    dense = X.toarray()
    s1, c1, o1, l1, m1 = lloyd_partials_csr(X, C)
    s2, c2, o2, l2, m2 = lloyd_partials(dense, C)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(c1, c2)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(s1, s2, rtol=tol, atol=tol)
    np.testing.assert_allclose(m1, m2, rtol=tol, atol=tol)
    assert o1 == pytest.approx(o2, rel=tol, abs=tol)
    assert s1.dtype == np.float64 and c1.dtype == np.int64 and l1.dtype == np.int32
    l3, m3 = assign_labels_csr(X, C)
    l4, m4 = assign_labels(dense, C)
    np.testing.assert_array_equal(l3, l4)
    np.testing.assert_allclose(m3, m4, rtol=tol, atol=tol)


def test_csr_lloyd_hand_worked_and_ties():
    X = sp.csr_matrix(np.array([[0.0, 0.0], [1.0, 0.0], [4.0, 0.0]]))
    C = np.array([[0.5, 0.0], [0.5, 0.0], [4.0, 0.0]])  # equal centers: lower index wins
    sums, counts, obj, labels, mind = lloyd_partials_csr(X, C)
    assert labels.tolist() == [0, 0, 2]
    assert counts.tolist() == [2, 0, 1]
    assert sums.tolist() == [[1.0, 0.0], [0.0, 0.0], [4.0, 0.0]]
    assert obj == pytest.approx(0.5)
    assert mind.tolist() == [0.25, 0.25, 0.0]
    np.testing.assert_array_equal(csr_row_norms(X), [0.0, 1.0, 16.0])


def test_csr_lloyd_rejects_other_formats():
    X = sp.coo_matrix(np.eye(3))
    with pytest.raises(TypeError, match="CSR matrix; got 'coo'"):
        lloyd_partials_csr(X, np.eye(3))
    with pytest.raises(ValueError, match="share a number of features"):
        assign_labels_csr(X.tocsr(), np.eye(2))


@pytest.mark.parametrize("sparse", [False, True])
def test_label_moments_merge_to_global_means_and_cost(sparse):
    rng = np.random.default_rng(2)
    A = rng.standard_normal((300, 7)) + 5.0
    A[rng.random(A.shape) < 0.5] = 0.0
    labels = rng.integers(0, 4, 300)
    labels[labels == 3] = 2  # cluster 3 stays empty
    X = sp.csr_matrix(A) if sparse else A
    parts = [label_moments(X[a:b], labels[a:b], 4) for a, b in [(0, 0), (0, 100), (100, 300)]]
    out = parts[0]
    for p in parts[1:]:
        out = merge_label_moments(out, p)
    counts, means, m2 = out
    for k in range(3):
        np.testing.assert_allclose(means[k], A[labels == k].mean(0), rtol=1e-12)
        assert m2[k] == pytest.approx(((A[labels == k] - A[labels == k].mean(0)) ** 2).sum(),
                                      rel=1e-10)
    assert counts[3] == 0 and np.all(means[3] == 0) and m2[3] == 0
