"""Least squares on a factor's support (palm4MSA's ``support_cg``)."""

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dqkm.kernels._palm_support import support_cg
from dqkm.kernels.palm4msa import default_constraints, palm4msa


def _support(rng, r, c, per_row):
    mask = np.zeros((r, c), dtype=bool)
    for i in range(r):
        mask[i, rng.choice(c, per_row, replace=False)] = True
    indptr = np.concatenate([[0], np.cumsum(mask.sum(1))]).astype(np.int64)
    indices = np.nonzero(mask)[1].astype(np.int64)
    return mask, indptr, indices


@pytest.mark.parametrize("left, right", [("chain", "chain"), ("diagonal", "chain"),
                                         ("chain", "identity")])
def test_enough_iterations_reach_the_least_squares_solution_on_the_support(left, right):
    """With enough iterations (as many as entries, in exact arithmetic) the values are the
    minimiser of ‖A − L·X·R‖ over the X with that support (solved here by NumPy's lstsq
    on the Kronecker form), for a diagonal left part and an identity right part too."""
    rng = np.random.default_rng(0)
    K, r, c, D = 9, 7, 6, 8
    A = rng.standard_normal((K, D))
    if left == "diagonal":
        d = rng.uniform(0.5, 2.0, r)
        K, A, L = r, rng.standard_normal((r, D)), np.diag(d)
        GL, Lt = d * d, d
    else:
        L = rng.standard_normal((K, r))
        GL, Lt = L.T @ L, L.T
    if right == "identity":
        R, GR = np.eye(c), None
        A = A[:, :c]
    else:
        R = rng.standard_normal((c, D))
        GR = R @ R.T
    mask, indptr, indices = _support(rng, r, c, 3)
    Rt = A @ R.T if GR is not None else A  # (A Rᵀ) is K × c; the kernel takes its transpose
    values = rng.standard_normal(indices.size)
    lam = 1.7
    x = support_cg(indptr, indices, values, (r, c), GL, GR, Lt, np.ascontiguousarray(Rt.T), lam,
                   n_iter=4 * indices.size)  # exact in nnz; rounding needs a few more
    # vec(L X R) = (Rᵀ ⊗ L) vec(X), X column-major; keep the support's columns
    M = np.kron(R.T, L)[:, mask.flatten(order="F")]
    best = np.linalg.lstsq(M, A.flatten(order="F"), rcond=None)[0]
    got = np.zeros((r, c))
    got[np.repeat(np.arange(r), np.diff(indptr)), indices] = x
    np.testing.assert_allclose(got.flatten(order="F")[mask.flatten(order="F")], best,
                               rtol=1e-7, atol=1e-9)


def test_no_iteration_returns_the_start():
    rng = np.random.default_rng(1)
    _, indptr, indices = _support(rng, 4, 5, 2)
    values = rng.standard_normal(indices.size)
    x = support_cg(indptr, indices, values, (4, 5), np.eye(4), np.eye(5), np.eye(4),
                   rng.standard_normal((5, 4)), 2.0, n_iter=0)
    np.testing.assert_array_equal(x, 2.0 * values)


@pytest.fixture(scope="module")
def digits_target():
    """Cluster means of digits: a target palm4MSA approaches slowly."""
    from sklearn.cluster import KMeans

    X = load_digits().data.astype(np.float64)
    return KMeans(64, n_init=1, random_state=0).fit(X).cluster_centers_


def test_palm4msa_with_support_cg_descends_stays_feasible_and_gets_lower(digits_target):
    """Every iteration's error is at most the previous one, every factor stays in its
    constraint set with unit norm, and after the same iterations the error is well
    below plain palm4MSA's (the refinement minimises over the support, a gradient
    step only moves along the gradient)."""
    A = digits_target
    cons = default_constraints(*A.shape, sparsity=3)
    start = palm4msa(A, cons, n_iter=5, adaptive_step=True)
    plain = palm4msa(A, cons, n_iter=20, tol=0, init=start, adaptive_step=True)
    cg = palm4msa(A, cons, n_iter=20, tol=0, init=start, adaptive_step=True, support_cg=8)
    assert np.all(np.diff(cg.errors) <= 1e-12 * cg.errors[0])
    for c, S in zip(cons, cg.factors.factors):
        assert c._contains(S.toarray())
        assert np.linalg.norm(S.toarray()) == pytest.approx(1.0)
    err = np.linalg.norm(A - cg.factors.toarray())
    assert err == pytest.approx(cg.errors[-1], rel=1e-9)
    assert cg.errors[-1] < 0.9 * plain.errors[-1], (cg.errors[-1], plain.errors[-1])


@pytest.mark.parametrize("fixed_left", [False, True])
def test_support_cg_gives_the_same_iterates_through_the_factors_and_dense(digits_target,
                                                                         fixed_left):
    A = digits_target
    w = np.sqrt(np.random.default_rng(2).integers(0, 30, A.shape[0])) if fixed_left else None
    cons = default_constraints(*A.shape, sparsity=3)
    kw = dict(n_iter=6, tol=0, adaptive_step=True, support_cg=5, fixed_left=w)
    a = palm4msa(A, cons, method="factors", **kw)
    b = palm4msa(A, cons, method="dense", **kw)
    # "to rounding": the reference's float32 gradients perturb each CG start by ~1e-7,
    # which the least squares carry further than a gradient step does (most where a
    # weight is 0 and the rows are unconstrained), so the bounds are looser than
    # test_palm4msa_factors's; the supports and the errors agree closely
    np.testing.assert_allclose(a.errors, b.errors, rtol=1e-5)
    assert a.lam == pytest.approx(b.lam, rel=1e-3)
    for Sa, Sb in zip(a.factors.factors, b.factors.factors):
        np.testing.assert_array_equal(Sa.toarray() != 0, Sb.toarray() != 0)
        np.testing.assert_allclose(Sa.toarray(), Sb.toarray(), rtol=0, atol=2e-4)


def test_support_cg_needs_the_safeguard_and_a_count():
    A = np.random.default_rng(0).standard_normal((8, 8))
    with pytest.raises(ValueError, match=r"'support_cg'.*safeguard=True.*support_cg=3"):
        palm4msa(A, n_iter=2, support_cg=3, safeguard=False)
    with pytest.raises(ValueError, match="support_cg"):
        palm4msa(A, n_iter=2, support_cg=-1)
