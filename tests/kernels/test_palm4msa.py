import numpy as np
import pytest
from scipy.linalg import hadamard

from dqkm.kernels.hierarchical import default_residual_constraints, hierarchical_palm4msa
from dqkm.kernels.palm4msa import Palm4MSAResult, default_constraints, default_shapes, palm4msa
from dqkm.kernels.projections import Splin, Splincol, Supp
from dqkm.kernels.sparse_factors import SparseFactors


def _monotone(errors):
    # non-increasing up to floating-point noise of the error formula
    return np.all(np.diff(errors) <= 1e-9 * errors[0])


def _exact(A, res, fixed_left=None):
    V = res.factors.toarray().astype(np.float64)
    if fixed_left is not None:
        V = np.asarray(fixed_left, dtype=float)[:, None] * V
    return np.linalg.norm(A - V)


@pytest.fixture(scope="module")
def centroids():
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits

    X = load_digits().data
    return KMeans(32, n_init=1, random_state=0).fit(X).cluster_centers_


def test_default_shapes_hand_worked():
    assert default_shapes(128, 784) == [(128, 128)] * 9 + [(128, 784)]
    assert default_shapes(784, 128) == [(784, 128)] + [(128, 128)] * 9
    assert default_shapes(32, 64, n_factors=3) == [(32, 32), (32, 32), (32, 64)]
    assert default_shapes(5, 7, n_factors=1) == [(5, 7)]
    assert default_shapes(5, 7, n_factors=2) == [(5, 5), (5, 7)]
    assert default_shapes(1, 1) == [(1, 1)]
    cons = default_constraints(3, 100, sparsity=5)
    assert [c.s for c in cons] == [3] * len(cons) and len(cons) == 7
    assert all(isinstance(c, Splincol) for c in cons)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_target_monotone_and_consistent(dtype):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((24, 80)).astype(dtype)
    A0 = A.copy()
    seen = []
    res = palm4msa(A, n_iter=60, tol=0, callback=lambda t, e: seen.append((t, e)))
    assert isinstance(res, Palm4MSAResult)
    assert res.n_iter == 60 and res.errors.shape == (61,)
    assert seen == [(t, res.errors[t]) for t in range(1, 60)] + [(60, seen[-1][1])]
    assert _monotone(res.errors)
    assert res.errors[0] == pytest.approx(np.linalg.norm(A.astype(np.float64)))
    assert res.errors[-1] < 0.9 * res.errors[0]
    assert res.factors.lam == res.lam and res.factors.dtype == dtype
    for S in res.factors.factors:
        assert np.linalg.norm(S.toarray().astype(np.float64)) == pytest.approx(1.0, rel=1e-5)
    rtol = 1e-4 if dtype == np.float32 else 1e-9
    assert _exact(A.astype(np.float64), res) == pytest.approx(res.errors[-1], rel=rtol)
    np.testing.assert_array_equal(A, A0)


def test_centroid_target_monotone_warm_start(centroids):
    A = centroids
    res = palm4msa(A, n_iter=120, tol=0)
    assert _monotone(res.errors)
    assert res.errors[-1] / res.errors[0] < 0.5
    # every factor holds a Splincol support: at most s·(rows + cols) non-zeros
    for S, c in zip(res.factors.factors, default_constraints(*A.shape)):
        assert S.nnz <= c.s * sum(c.shape)
    for init in (res, res.factors, [S.toarray() for S in res.factors.factors]):
        lam = None if not isinstance(init, list) else res.lam
        warm = palm4msa(A, n_iter=20, tol=0, init=init, lam_init=lam)
        assert warm.errors[0] == pytest.approx(res.errors[-1], rel=1e-9)
        assert warm.errors[-1] <= res.errors[-1] * (1 + 1e-12)
        assert _monotone(warm.errors)


def test_fixed_left_with_empty_clusters(centroids):
    A = centroids
    rng = np.random.default_rng(0)
    w = np.sqrt(rng.integers(0, 50, size=A.shape[0]).astype(float))
    w[:3] = 0.0  # empty clusters
    target = w[:, None] * A
    res = palm4msa(target, n_iter=80, tol=0, fixed_left=w)
    assert _monotone(res.errors)
    assert res.factors.shape == A.shape  # fixed_left is not part of the factors
    assert _exact(target, res, fixed_left=w) == pytest.approx(res.errors[-1], rel=1e-9)
    assert res.errors[-1] < 0.6 * res.errors[0]


@pytest.mark.parametrize("sparsity", [3, 5])
def test_adaptive_step_descends_faster_than_the_bound(centroids, sparsity):
    """The guarded update first tries c·scale (scale halved after every
    accepted step, down to 2**-6): measured on the 32×64 digits centroids,
    100 iterations from the default start end at 0.24 / 0.17 relative error
    against 0.30 / 0.23 with every step at the bound c."""
    from dqkm.kernels.palm4msa import _initial_factors, _run

    A = centroids
    cons = default_constraints(*A.shape, sparsity=sparsity)
    errs = {}
    for adaptive in (False, True):
        mats, lam = _initial_factors(None, cons, None, "test")
        _, _, errs[adaptive] = _run(A, np.ones(A.shape[0]), cons, mats, lam, 100, 0.0, None, True,
                                    adaptive=adaptive)
        assert _monotone(errs[adaptive])
    assert errs[True][-1] <= 0.9 * errs[False][-1]
    # palm4msa's default steps at the bound (Algorithm 2); adaptive_step=True is the rule above
    assert palm4msa(A, cons, n_iter=100, tol=0).errors[-1] == pytest.approx(errs[False][-1], rel=1e-9)
    assert palm4msa(A, cons, n_iter=100, tol=0, adaptive_step=True).errors[-1] == \
        pytest.approx(errs[True][-1], rel=1e-9)
    with pytest.raises(TypeError, match="'adaptive_step' parameter of palm4msa must be a bool"):
        palm4msa(A, cons, n_iter=1, adaptive_step="yes")
    with pytest.raises(TypeError, match="'adaptive_step' parameter of hierarchical_palm4msa"):
        hierarchical_palm4msa(A, cons, n_iter=1, adaptive_step=1)


def test_residual_rules_product_and_geometric():
    """product (default): s_l = min(s_{l+1}···s_Q, m); geometric:
    s_l = min(round(m·(s_Q/m)^(l/(Q−1))), s_{l+1}···s_Q, m), m = min(shape)."""
    cons = default_constraints(16, 64, sparsity=3)
    # QuicK-means layout of digits, K = 16, s = 3, Q = 6: products 3^5.. capped at 16, then 9
    assert [c.s for c in default_residual_constraints(cons)] == [16, 16, 16, 9]
    # m = 16, 16·(3/16)^(l/5) = 11.45, 8.19, 5.99, 4.28
    res = default_residual_constraints(cons, rule="geometric")
    assert [c.s for c in res] == [11, 8, 6, 4]
    assert all(c.shape == (16, 64) for c in res)
    # the product caps it: s = 1 factors give Splincol(1) residuals under both rules
    for rule in ("product", "geometric"):
        assert [c.s for c in default_residual_constraints(default_constraints(16, 64, sparsity=1),
                                                          rule=rule)] == [1] * 4
    # digits with K = 10, s = 5 (Q = 6): 10·(1/2)^(l/5) = 8.7, 7.6, 6.6, 5.7 -> 9, 8, 7, 6
    assert [c.s for c in default_residual_constraints(default_constraints(10, 64, sparsity=5),
                                                      rule="geometric")] == [9, 8, 7, 6]
    # Hadamard 2^5 with Splincol(2): both rules give n / 2^l
    had = [Splincol((32, 32), 2)] * 5
    for rule in ("product", "geometric"):
        assert [c.s for c in default_residual_constraints(had, rule=rule)] == [16, 8, 4]
    with pytest.raises(ValueError, match="'rule' parameter of default_residual_constraints must "
                                         "be one of"):
        default_residual_constraints(cons, rule="linear")


def test_exact_projections_never_increase_even_unguarded():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((16, 32))
    cons = [Splin((16, 16), 3), Splin((16, 16), 3), Splin((16, 32), 3)]
    res = palm4msa(A, cons, n_iter=80, tol=0, safeguard=False)
    assert _monotone(res.errors)


def test_tol_stops_early():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((8, 16))
    res = palm4msa(A, n_iter=500, tol=1e-2)
    assert res.n_iter < 500
    prev, last = res.errors[-2], res.errors[-1]
    assert abs(prev - last) <= 1e-2 * prev
    assert palm4msa(A, n_iter=0).n_iter == 0


@pytest.mark.parametrize("k", [5, 6, 7, 8])
def test_hierarchical_factorises_hadamard(k):
    n = 2**k
    H = hadamard(n).astype(np.float64)
    res = hierarchical_palm4msa(H, [Splincol((n, n), 2)] * k)
    assert res.errors[-1] / np.linalg.norm(H) < 1e-3
    assert _exact(H, res) / np.linalg.norm(H) < 1e-3
    for S in res.factors.factors:
        S = S.toarray()
        assert np.all(np.count_nonzero(S, axis=0) == 2) and np.all(np.count_nonzero(S, axis=1) == 2)
    # the residual rule of the Hadamard experiment: Splincol(n / 2^l)
    assert [c.s for c in default_residual_constraints([Splincol((n, n), 2)] * k)] == [
        n // 2**level for level in range(1, k - 1)
    ]


def _butterfly_support(k, q):
    return np.kron(np.kron(np.eye(2**q), np.ones((2, 2))), np.eye(2 ** (k - q - 1))) != 0


@pytest.mark.parametrize("seed", [0, 1])
def test_hierarchical_recovers_random_factors_with_known_supports(seed):
    k, n = 5, 32
    rng = np.random.default_rng(seed)
    masks = [_butterfly_support(k, q) for q in range(k)]
    factors = [np.where(m, rng.uniform(0.5, 1.5, (n, n)) * rng.choice([-1, 1], (n, n)), 0) for m in masks]
    A = np.linalg.multi_dot(factors)
    residuals = []
    for level in range(1, k - 1):
        supp = np.eye(n)
        for m in masks[level:]:
            supp = supp @ m
        residuals.append(Supp(supp != 0))
    res = hierarchical_palm4msa(A, [Supp(m) for m in masks], residual_constraints=residuals, tol=1e-12)
    assert _exact(A, res) / np.linalg.norm(A) < 1e-3
    for S, m in zip(res.factors.factors, masks):
        assert not np.any(S.toarray()[~m])


def test_hierarchical_default_layout_with_fixed_left(centroids):
    A = centroids[:16, :40]
    w = np.linspace(0.0, 3.0, 16)
    res = hierarchical_palm4msa(w[:, None] * A, n_iter=40, fixed_left=w)
    assert res.errors.shape == (res.n_iter + 1,)
    assert _exact(w[:, None] * A, res, fixed_left=w) == pytest.approx(res.errors[-1], rel=1e-9)
    # the hierarchical heuristic beats plain palm4MSA from its default start here
    # (measured 0.09 vs 0.20 relative error)
    plain = palm4msa(w[:, None] * A, n_iter=40, fixed_left=w)
    assert res.errors[-1] < 0.75 * plain.errors[-1]


def test_bad_inputs():
    A = np.ones((4, 8))
    with pytest.raises(ValueError, match="'A' parameter of palm4msa contains NaN or infinite"):
        palm4msa(np.array([[1.0, np.inf]]))
    with pytest.raises(ValueError, match="'A' parameter of hierarchical_palm4msa contains NaN"):
        hierarchical_palm4msa(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match=r"do not chain: factor 0 has shape \(4, 4\) but factor 1 has shape \(5, 8\)"):
        palm4msa(A, [(4, 4), (5, 8)])
    with pytest.raises(ValueError, match=r"must chain from K=4 rows to D=8 columns; factor 0 has shape \(3, 8\)"):
        palm4msa(A, [(3, 8)])
    with pytest.raises(ValueError, match=r"the last factor has shape \(4, 7\)"):
        palm4msa(A, [(4, 7)])
    with pytest.raises(ValueError, match=r"'s' parameter of Splincol must be an int in the range \[1, 4\].*Got 0"):
        palm4msa(A, [Splincol((4, 8), 0)])
    with pytest.raises(ValueError, match=r"'s' parameter of Splincol .*Got 5"):
        Splincol((4, 8), 5)
    with pytest.raises(ValueError, match=r"'sparsity' parameter of default_constraints .*Got 0"):
        default_constraints(4, 8, sparsity=0)
    with pytest.raises(ValueError, match=r"'fixed_left' parameter of palm4msa .*length K=4. Got an array of shape \(3,\)"):
        palm4msa(A, fixed_left=np.ones(3))
    with pytest.raises(ValueError, match=r"'fixed_left' parameter of hierarchical_palm4msa .*shape \(4, 1\)"):
        hierarchical_palm4msa(A, fixed_left=np.ones((4, 1)))
    with pytest.raises(ValueError, match=r"'n_iter' parameter of palm4msa .*\[0, inf\). Got -1"):
        palm4msa(A, n_iter=-1)
    with pytest.raises(ValueError, match="'tol' parameter of palm4msa must be a float >= 0. Got -1"):
        palm4msa(A, tol=-1.0)
    with pytest.raises(ValueError, match=r"'init' parameter of palm4msa must hold 3 factors .* Got 1"):
        palm4msa(A, n_iter=1, init=[np.ones((4, 8))])
    with pytest.raises(ValueError, match=r"Factor 0 of 'init' \(palm4msa\) has shape \(4, 5\); the constraints expect \(4, 4\)"):
        palm4msa(A, n_iter=1, init=[np.ones((4, 5)), np.ones((4, 4)), np.ones((4, 8))])
    with pytest.raises(TypeError, match="'callback' parameter of palm4msa must be callable"):
        palm4msa(A, callback=3)
    with pytest.raises(ValueError, match="'residual_constraints' parameter of hierarchical_palm4msa must hold Q - 2 = 1"):
        hierarchical_palm4msa(A, [(4, 4), (4, 4), (4, 8)], residual_constraints=[])
    with pytest.raises(ValueError, match="'residual_constraints' parameter of hierarchical_palm4msa is required"):
        hierarchical_palm4msa(A, [Splin((4, 4), 1), Splin((4, 4), 1), Splin((4, 8), 1)])


def test_warm_start_from_sparse_factors_object_keeps_product():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((8, 16))
    first = palm4msa(A, n_iter=30, tol=0)
    folded = SparseFactors([3.0 * first.factors.factors[0]] + list(first.factors.factors[1:]), lam=first.lam / 3.0)
    again = palm4msa(A, n_iter=5, tol=0, init=folded)
    assert again.errors[0] == pytest.approx(first.errors[-1], rel=1e-9)
    assert again.errors[-1] <= first.errors[-1] * (1 + 1e-12)


def test_non_finite_targets_and_matrices_raise_dqkm_data_error():
    """palm4MSA's target, its init factors and a projection's input with NaN raise the
    one non-finite error type of dqkm (DataError, a ValueError), as every pass does."""
    from dqkm.exceptions import DataError
    from dqkm.kernels import Splin, default_constraints, palm4msa

    A = np.ones((4, 4))
    A[1, 2] = np.nan
    with pytest.raises(DataError, match="'A' parameter of palm4msa contains NaN"):
        palm4msa(A, default_constraints(4, 4, sparsity=2), n_iter=1)
    with pytest.raises(DataError, match="Splin got a matrix with NaN"):
        Splin((4, 4), 2)(A)
