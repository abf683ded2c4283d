import numpy as np
import pytest

from dqkm.kernels.lloyd import assign_labels, lloyd_partials


def _brute(X, C):
    d = ((X[:, None, :].astype(np.float64) - C[None].astype(np.float64)) ** 2).sum(-1)
    lab = d.argmin(1)
    return lab, d[np.arange(len(X)), lab]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 300, 1000])
def test_partials_match_brute_force(dtype, n):
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, 13)).astype(dtype)
    C = rng.standard_normal((6, 13)).astype(dtype)
    sums, counts, obj, labels, mind = lloyd_partials(X, C)
    lab, dist = _brute(X, C)
    np.testing.assert_array_equal(labels, lab)
    np.testing.assert_allclose(mind, dist, rtol=1e-5)
    np.testing.assert_allclose(obj, dist.sum(), rtol=1e-5)
    assert counts.sum() == n and sums.dtype == np.float64
    for k in range(6):
        np.testing.assert_allclose(sums[k], X[lab == k].astype(np.float64).sum(0), rtol=1e-5,
                                   atol=1e-4)
        assert counts[k] == (lab == k).sum()


def test_hand_worked_example_and_ties():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [4.0, 0.0]])
    C = np.array([[0.5, 0.0], [0.5, 0.0], [4.0, 0.0]])  # two equal centers: lower index wins
    sums, counts, obj, labels, mind = lloyd_partials(X, C)
    assert labels.tolist() == [0, 0, 2]
    assert counts.tolist() == [2, 0, 1]
    assert sums.tolist() == [[1.0, 0.0], [0.0, 0.0], [4.0, 0.0]]
    assert obj == pytest.approx(0.5)
    labels2, mind2 = assign_labels(X, C)
    assert labels2.tolist() == [0, 0, 2] and mind2.tolist() == [0.25, 0.25, 0.0]


def test_inputs_not_mutated_and_nan_propagates():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 4))
    C = X[:3].copy()
    X0, C0 = X.copy(), C.copy()
    lloyd_partials(X, C)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(C, C0)
    X[5, 2] = np.nan
    assert not np.isfinite(lloyd_partials(X, C)[2])


def test_kernels_do_not_import_dask():
    import subprocess
    import sys

    code = "import sys, dqkm.kernels; assert 'dask' not in sys.modules, sorted(m for m in sys.modules if m.startswith('dask'))"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_partials_from_products_equal_dense_kernel(dtype):
    from dqkm.kernels.lloyd import partials_from_products, squared_norms

    rng = np.random.default_rng(1)
    X = rng.standard_normal((400, 9)).astype(dtype)
    C = rng.standard_normal((5, 9)).astype(dtype)
    ref = lloyd_partials(X, C)
    out = partials_from_products(X, X @ C.T, squared_norms(C), C)
    np.testing.assert_array_equal(out[3], ref[3])
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-6)
    np.testing.assert_array_equal(out[1], ref[1])
    assert out[2] == pytest.approx(ref[2], rel=1e-9)
    no_sums = partials_from_products(X, X @ C.T, squared_norms(C), C, with_sums=False)
    np.testing.assert_array_equal(no_sums[3], ref[3])
    assert no_sums[1].sum() == 0
    with pytest.raises(ValueError, match="G must have shape"):
        partials_from_products(X, (X @ C.T)[:, :3], squared_norms(C), C)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 400])
def test_partials_from_labels_equal_dense_kernel(dtype, n):
    from dqkm.kernels.lloyd import partials_from_labels

    rng = np.random.default_rng(2)
    X = rng.standard_normal((n, 9)).astype(dtype)
    C = rng.standard_normal((5, 9)).astype(dtype)
    ref = lloyd_partials(X, C)
    out = partials_from_labels(X, ref[3], C)
    np.testing.assert_array_equal(out[3], ref[3])
    np.testing.assert_array_equal(out[0], ref[0])  # same float64 additions in row order
    np.testing.assert_array_equal(out[1], ref[1])
    np.testing.assert_array_equal(out[4], ref[4])
    assert out[2] == pytest.approx(ref[2], rel=1e-12)
    # any assignment, not only the nearest: sums and costs of that assignment
    labels = rng.integers(0, 5, n).astype(np.int32)
    sums, counts, obj, _, mind = partials_from_labels(X, labels, C)
    X64 = X.astype(np.float64)
    for k in range(5):
        np.testing.assert_allclose(sums[k], X64[labels == k].sum(0), rtol=1e-12, atol=1e-12)
        assert counts[k] == (labels == k).sum()
    np.testing.assert_allclose(mind, ((X64 - C.astype(np.float64)[labels]) ** 2).sum(1),
                               rtol=1e-12)
    assert obj == pytest.approx(mind.sum(), rel=1e-12)


def test_partials_from_labels_rejects_bad_labels():
    from dqkm.kernels.lloyd import partials_from_labels

    X = np.ones((3, 2))
    C = np.zeros((2, 2))
    with pytest.raises(ValueError, match="labels must lie in \\[0, 2\\)"):
        partials_from_labels(X, np.array([0, 2, 1]), C)
    with pytest.raises(ValueError, match="labels must be integers of shape"):
        partials_from_labels(X, np.array([0, 1]), C)
    with pytest.raises(ValueError, match="labels must be integers"):
        partials_from_labels(X, np.array([0.0, 1.0, 1.0]), C)
