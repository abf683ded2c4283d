"""Every dense Lloyd kernel's labels are those of the exact float64 distances.

The direct (low dimension) kernel sums in X's dtype and the GEMM kernel uses
``½‖c‖² − x·c``; their rounding alone would decide a near-tie (two centers
within a relative ~D·1e-7 in float32, ~D·1e-16 in float64) otherwise than the
bound-pruned kernels, which check their bounds against exact float64
distances.  Both Lloyd kernels therefore certify each label against their
rounding and decide the near-ties by :func:`exact_sq_dist`, so Lloyd, Hamerly
and Elkan give the same labels on any data (float32 X above the direct
kernel's dimension excepted: it runs Lloyd only).
"""

import numpy as np
import pytest

from dqkm.kernels import lloyd as L
from dqkm.kernels._exact import bound_sq_dist, exact_sq_dist
from dqkm.kernels.bounds_geometry import _EPS
from dqkm.kernels.bounds import center_geometry, center_separations, elkan_partials, hamerly_partials


def near_ties(n, d, dtype, rel, seed=0, offset=10.0):
    """Rows almost midway between centers 0 and 1 (relative gap ``rel``), three
    more centers elsewhere; returns (X, centers) in ``dtype``."""
    rng = np.random.default_rng(seed)
    C = (rng.normal(size=(5, d)) * 3 + offset).astype(dtype)
    c1, c2 = C[0].astype(np.float64), C[1].astype(np.float64)
    e = (c2 - c1) / np.linalg.norm(c2 - c1)
    P = rng.normal(size=(n, d)) * 2
    P -= (P @ e)[:, None] * e
    step = rng.uniform(-1, 1, size=n) * rel * np.linalg.norm(c2 - c1)
    X = (c1 + c2) / 2 + P + step[:, None] * e
    return X.astype(dtype), C


def exact_labels(X, C):
    """Lowest index of the smallest :func:`exact_sq_dist` (the kernels' own reference)."""
    X, C = np.ascontiguousarray(X), np.ascontiguousarray(C)
    return np.array([np.argmin([L.exact_sq_dist(X, r, C, j) for j in range(len(C))])
                     for r in range(len(X))])


CASES = [(np.float32, d, 1e-5) for d in (2, 3, 8, 16, 32)] + \
        [(np.float64, d, 1e-14) for d in (2, 3, 16, 32, 40, 64)]


@pytest.mark.parametrize("dtype, d, rel", CASES)
def test_lloyd_labels_are_the_exact_labels_on_near_ties(dtype, d, rel):
    X, C = near_ties(3000, d, dtype, rel)
    exact = exact_labels(X, C)
    assert np.bincount(exact, minlength=2)[:2].min() > 300  # many rows on the 0/1 boundary
    sums, counts, obj, labels, mind = L.lloyd_partials(X, C)
    np.testing.assert_array_equal(labels, exact)
    np.testing.assert_array_equal(L.assign_labels(X, C)[0], exact)
    np.testing.assert_array_equal(counts, np.bincount(exact, minlength=len(C)))


@pytest.mark.parametrize("kind", ["hamerly", "elkan"])
@pytest.mark.parametrize("dtype, d, rel", CASES)
def test_bounded_kernels_equal_lloyd_on_near_ties(kind, dtype, d, rel):
    """The regression: on these rows the float32 direct kernel (and the float64
    GEMM) used to label a few per thousand otherwise than Hamerly/Elkan."""
    X, C = near_ties(3000, d, dtype, rel, seed=1)
    n, k = X.shape[0], C.shape[0]
    half_sep, shift = center_geometry(C)
    if kind == "hamerly":
        out = hamerly_partials(X, C, np.full(n, -1), np.zeros(n), np.zeros(n), shift, half_sep)
    else:
        out = elkan_partials(X, C, np.full(n, -1), np.zeros(n), np.zeros((n, k)), shift,
                             half_sep, center_separations(C))
    ref = L.lloyd_partials(X, C)
    np.testing.assert_array_equal(out[3], ref[3])
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_array_equal(out[4], ref[4])
    assert out[2] == ref[2]


def test_exact_ties_go_to_the_lowest_index_in_both_kernels():
    """Rows exactly midway (integer data: every distance exact) and a duplicated
    center: the certification must keep the lowest index, direct and GEMM."""
    rng = np.random.default_rng(3)
    for d in (4, 48):
        C = rng.integers(-4, 5, size=(6, d)).astype(np.float64)
        C[4] = C[1]
        X = np.vstack([(C[0] + C[2]) / 2 + 0.0, C[1], C[4]]).repeat(50, axis=0)
        X = X + 0.0 * rng.standard_normal(X.shape)
        labels = L.lloyd_partials(X, C)[3]
        np.testing.assert_array_equal(labels, exact_labels(X, C))
        assert not np.any(labels == 4)


@pytest.mark.parametrize("dtype, d", [(np.float64, 300), (np.float64, 8), (np.float32, 8)])
def test_csr_kernel_labels_equal_the_dense_kernels_on_ties(dtype, d):
    """Rows and centers with disjoint supports, all of unit norm: every distance is 2 up
    to rounding, so the label is decided by the exact (feature-order float64) distance.
    The CSR kernel decides these near-ties as the dense kernels do (it used to keep its
    own rounding: 30 % of the labels differed, and KMeans on CSR chunks parted from
    KMeans on the same rows dense)."""
    import scipy.sparse as sp

    from dqkm.kernels import lloyd_partials
    from dqkm.kernels.lloyd_sparse import lloyd_partials_csr

    rng = np.random.default_rng(0)
    n, k = 400, 5
    X = np.zeros((n, d))
    for i in range(n):
        cols = rng.choice(d, size=2, replace=False)
        X[i, cols] = rng.standard_normal(2)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    C = np.zeros((k, d))
    for j in range(k):
        C[j, rng.choice(d, size=2, replace=False)] = rng.standard_normal(2)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    X, C = X.astype(dtype), C.astype(dtype)
    dense = lloyd_partials(X, C)
    csr = lloyd_partials_csr(sp.csr_matrix(X), C)
    np.testing.assert_array_equal(csr[3], dense[3])
    np.testing.assert_array_equal(csr[1], dense[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [3, 32, 257, 4096])
def test_bound_distance_stays_within_its_rounding_of_the_exact_one(dtype, d):
    """The bounds' upper distances (Hamerly's tightening and rescans) are summed in any
    order (:func:`bound_sq_dist`); the labels use :func:`exact_sq_dist`.  With
    non-negative terms the two differ by at most ~2·D·u relatively, far inside the
    bounds' outward rounding ``_EPS``: an upper bound from one holds for the other,
    on rows far from the origin and of very different scales alike."""
    rng = np.random.default_rng(d)
    scale = rng.uniform(1e-3, 1e3, size=(40, 1))
    X = (rng.normal(size=(40, d)) * scale + 1e4).astype(dtype)
    C = (X[:6] + rng.normal(size=(6, d)) * 1e-2).astype(dtype)
    u = 2.0 ** -53
    for r in range(40):
        for j in range(6):
            e, b = exact_sq_dist(X, r, C, j), bound_sq_dist(X, r, C, j)
            assert abs(b - e) <= 4 * d * u * e
            assert np.sqrt(b) * (1.0 + _EPS) >= np.sqrt(e)
