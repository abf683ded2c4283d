"""Sparse factors with a dense offset row written as plain factors (kernels.factor_offset)."""

import numpy as np
import pytest
import scipy.sparse as sp

from dqkm.kernels import SparseFactors, default_constraints, palm4msa
from dqkm.kernels.factor_offset import add_offset, split_offset


def _factors(K, D, Q, rng, dtype=np.float64, lam=1.7):
    shapes = [c.shape for c in default_constraints(K, D, sparsity=2, n_factors=Q)]
    mats = [sp.random(*s, density=0.5, random_state=rng, dtype=dtype).tocsr() for s in shapes]
    return SparseFactors(mats, lam=lam)


@pytest.mark.parametrize("K,D,Q", [(6, 9, 2), (8, 5, 3), (7, 7, 4)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_written_factors_are_the_sum_and_split_back(K, D, Q, dtype):
    rng = np.random.default_rng(K * D + Q)
    W = _factors(K, D, Q, rng, dtype)
    mu = rng.normal(size=D)
    mu[0] = 0.0  # a zero entry is not stored, and still read back
    V = add_offset(W, mu)
    assert V.shape == (K, D) and V.n_factors == Q and V.lam == 1.0 and V.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(V.toarray(), W.toarray() + mu.astype(dtype), rtol=tol, atol=tol)
    # the operator itself: apply_rows (what the assignment uses) sees the sum
    X = rng.normal(size=(5, D)).astype(dtype)
    np.testing.assert_allclose(V.apply_rows(X), X @ (W.toarray() + mu.astype(dtype)).T,
                               rtol=1e-4 if dtype == np.float32 else 1e-10, atol=tol * 10)
    assert V.nnz == W.nnz + K + np.count_nonzero(mu) + (Q - 2)
    inner, back = split_offset(V)
    assert inner.shape == (K, D) and inner.lam == 1.0
    np.testing.assert_allclose(inner.toarray(), W.toarray(), rtol=tol, atol=tol)
    np.testing.assert_allclose(back, mu.astype(dtype), rtol=tol, atol=tol)
    # the split survives a round trip through its arrays (checkpoints, saved models)
    again = split_offset(SparseFactors(V.factors, lam=V.lam).astype(np.float64))[1]
    np.testing.assert_allclose(again, back)


def test_a_warm_start_from_the_split_part_is_the_same_palm4msa_run():
    """palm4MSA rescales a warm start to unit-norm factors: the split part (λ folded
    into S1) gives the run the unsplit factors give, to rounding."""
    rng = np.random.default_rng(3)
    K, D = 16, 24
    A = rng.normal(size=(K, D))
    cons = default_constraints(K, D, sparsity=3)
    W = palm4msa(A, cons, n_iter=5).factors
    inner, _ = split_offset(add_offset(W, rng.normal(size=D)))
    a = palm4msa(A, cons, n_iter=4, init=W, tol=0.0)
    b = palm4msa(A, cons, n_iter=4, init=inner, tol=0.0)
    np.testing.assert_allclose(b.errors, a.errors, rtol=1e-9)
    np.testing.assert_allclose(b.factors.toarray(), a.factors.toarray(), rtol=1e-8, atol=1e-10)


def test_factors_without_the_layout_are_refused():
    """Plain factors are never read as factors with an offset (the split checks the
    column of ones and the unit corners)."""
    rng = np.random.default_rng(0)
    W = _factors(6, 9, 3, rng)
    with pytest.raises(ValueError, match="last column of the first factor"):
        split_offset(W)
    V = add_offset(W, np.ones(9))
    mats = [S.toarray() for S in V.factors]
    mats[1][0, -1] = 0.5  # something in the added column of an inner factor
    with pytest.raises(ValueError, match="factor 2 does not end with a unit corner"):
        split_offset(SparseFactors(mats))
    with pytest.raises(ValueError, match=r"shape \(9,\)"):
        add_offset(W, np.ones(8))
    with pytest.raises(ValueError, match="NaN or inf"):
        add_offset(W, np.r_[np.ones(8), np.nan])
    with pytest.raises(TypeError, match="SparseFactors"):
        add_offset(W.toarray(), np.ones(9))
