"""dqkm.metrics: objective, AMI/NMI/purity, model flops and nnz."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.cluster import KMeans as SKKMeans
from sklearn.metrics import adjusted_mutual_info_score, normalized_mutual_info_score

import dqkm
from dqkm.kernel_approximation import FactorNystroem
from dqkm.kernels import SparseFactors
from dqkm.metrics import ami, model_flops, model_nnz, nmi, objective, purity
from dqkm.neighbors import ClusterIndex


def test_purity_by_hand():
    t = np.array([0, 0, 0, 1, 1, 2])
    p = np.array([5, 5, 7, 7, 7, 7])
    # cluster 5: {0, 0} → 2; cluster 7: {0, 1, 1, 2} → 2; purity = 4/6
    assert purity(t, p) == pytest.approx(4 / 6)
    assert purity(t, t) == 1.0
    assert purity(da.from_array(t, chunks=2), da.from_array(p, chunks=4)) == pytest.approx(4 / 6)


def test_ami_nmi_wrap_sklearn_and_accept_dask():
    rng = np.random.default_rng(0)
    t = rng.integers(0, 4, 300)
    p = np.where(rng.random(300) < 0.7, t, rng.integers(0, 4, 300))
    assert ami(t, p) == pytest.approx(adjusted_mutual_info_score(t, p))
    assert nmi(t, p) == pytest.approx(normalized_mutual_info_score(t, p))
    assert ami(da.from_array(t, chunks=64), da.from_array(p, chunks=100)) == \
        pytest.approx(ami(t, p))
    assert ami(t, t) == pytest.approx(1.0)


def test_label_errors():
    with pytest.raises(ValueError, match="same length; got 3 and 2"):
        ami([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match=r"labels_true must be 1-D \(n_samples,\)"):
        purity(np.zeros((2, 2)), [0, 1])
    with pytest.raises(ValueError, match="at least one sample"):
        purity([], [])


def test_objective_matches_inertia(blobs64):
    X, _ = blobs64
    km = dqkm.KMeans(5, random_state=0).fit(X)
    assert objective(km, X) == pytest.approx(km.inertia_, rel=1e-9)
    assert objective(km, da.from_array(X, chunks=700)) == pytest.approx(km.inertia_, rel=1e-9)
    assert objective(km.cluster_centers_, X) == pytest.approx(km.inertia_, rel=1e-9)
    sk = SKKMeans(5, n_init=1, random_state=0).fit(X)
    assert objective(sk, X) == pytest.approx(sk.inertia_, rel=1e-6)


def test_flops_and_nnz(blobs64):
    X, _ = blobs64
    km = dqkm.KMeans(5, random_state=0).fit(X)
    assert model_nnz(km) == 5 * 8 and model_flops(km) == 2 * 5 * 8
    l1 = dqkm.KMeansL1(5, random_state=0).fit(X)
    assert model_nnz(l1) == l1.nnz_ == np.count_nonzero(l1.cluster_centers_)
    assert model_flops(l1) == 2 * l1.nnz_
    V = SparseFactors([sp.eye(5, 8, format="csr"), sp.eye(8, format="csr") * 2.0])
    fn = FactorNystroem(V).fit(X)
    assert model_nnz(fn) == 13 and model_flops(fn) == 26
    assert model_nnz(ClusterIndex(km).fit(X)) == 40
    had = FactorNystroem("hadamard", n_components=8, random_state=0).fit(X)
    assert model_nnz(had) == 8 and model_flops(had) == 8 + 8 * 3
    with pytest.raises(Exception, match="not fitted"):
        model_nnz(dqkm.KMeans(3))


def test_qkmeans_flops_and_nnz(blobs64):
    X, y = blobs64
    qk = dqkm.QKMeans(5, sparsity=2, random_state=0, max_iter=5, palm_iter=20,
                      palm_iter_init=50).fit(X)
    assert model_nnz(qk) == qk.factors_.nnz < 5 * 8 * 10
    assert model_flops(qk) == qk.factors_.flops == qk.flops_
    assert objective(qk, X) == pytest.approx(qk.inertia_, rel=1e-6)
    assert ami(y, qk.labels_) > 0.5
