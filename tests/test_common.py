"""scikit-learn's estimator checks over every dqkm estimator, the parameter
tables they declare, and feature names / pandas output of their transforms."""

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import dqkm
from dqkm._validation import validate_params
from dqkm.kernel_approximation import FactorNystroem
from dqkm.neighbors import ClusterIndex

# Small parameters: every check fits on a few dozen rows, in a few iterations.
ESTIMATORS = [
    dqkm.KMeans(3, max_iter=5, random_state=0),
    dqkm.QKMeans(3, sparsity=1, max_iter=3, palm_iter=3, palm_iter_init=5,
                 hierarchical_refits=0, random_state=0),
    dqkm.KMeansL1(3, radius=5.0, max_iter=5, random_state=0),
    dqkm.MiniBatchKMeans(3, batch_size=16, max_iter=5, random_state=0),
    dqkm.SparseEmbeddedKMeans(3, n_components=3, kmeans={"max_iter": 5}, random_state=0),
    dqkm.KMultipleMeans(2, n_neighbors=3, max_iter=3, max_inner_iter=5, random_state=0),
    FactorNystroem("uniform", n_components=5, random_state=0),
    ClusterIndex(dqkm.KMeans(3, random_state=0)),
]

_N_CLUSTERS_1 = ("K-Multiple-Means needs n_clusters >= 2; the check sets n_clusters=1, which "
                 "the parameter table refuses")
_SW_REASON = ("the initial centers are drawn from rows by index with the seeded generator: the "
              "data set with repeated rows (in another order) draws others, so the runs start "
              "apart (scikit-learn's KMeans fails this check too); "
              "tests/cluster/test_kmeans_weights.py checks the equivalence from a fixed init")
SAMPLE_WEIGHT_EQUIVALENCE = {"check_sample_weight_equivalence_on_dense_data": _SW_REASON,
                             "check_sample_weight_equivalence_on_sparse_data": _SW_REASON}
_KMM_SW = ("K-Multiple-Means has no per-sample weight: weights that differ are refused "
           "(equal weights are accepted, so the unit-weight checks pass)")
# Every check an estimator is known to fail, with the reason (one line each).
EXPECTED_FAILED_CHECKS = {
    "KMultipleMeans": {
        "check_fit2d_1sample": _N_CLUSTERS_1,
        "check_fit2d_1feature": _N_CLUSTERS_1,
        "check_fit2d_predict1d": _N_CLUSTERS_1,
        "check_dont_overwrite_parameters": _N_CLUSTERS_1,
        "check_methods_subset_invariance": _N_CLUSTERS_1,
        "check_sample_weights_not_overwritten": _KMM_SW,
        "check_sample_weight_equivalence_on_dense_data": _KMM_SW,
    },
    "KMeans": SAMPLE_WEIGHT_EQUIVALENCE,
    "KMeansL1": SAMPLE_WEIGHT_EQUIVALENCE,
    "SparseEmbeddedKMeans": {
        **SAMPLE_WEIGHT_EQUIVALENCE,
        "check_methods_sample_order_invariance": "the check sets n_components=1 below "
                                                 "n_clusters=2; an embedding needs "
                                                 "n_components >= n_clusters, refused",
    },
    "QKMeans": {
        "check_sample_weight_equivalence_on_dense_data": "k-means++ draws its seeds by weight "
                                                         "from the rows, not from their "
                                                         "copies (scikit-learn's KMeans "
                                                         "fails it too); with an init array "
                                                         "the fits are equal (tested)",
    },
    "MiniBatchKMeans": {
        check: "batches are random draws of rows: a repeated row is drawn apart from its "
               "copy (scikit-learn's MiniBatchKMeans fails it too)"
        for check in SAMPLE_WEIGHT_EQUIVALENCE
    },
}


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# ---------------------------------------------------------------- parameter tables
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_every_parameter_is_declared(estimator):
    """The table names every constructor parameter (``verbose`` may be declared
    ahead of the constructor), each with at least one constraint, and the
    defaults satisfy it."""
    table = type(estimator)._parameter_constraints
    params = type(estimator)().get_params(deep=False) if not isinstance(
        estimator, ClusterIndex) else estimator.get_params(deep=False)
    assert set(params) <= set(table), sorted(set(params) - set(table))
    assert set(table) - set(params) <= {"verbose"}
    assert all(isinstance(c, list) and c for c in table.values())
    if not isinstance(estimator, ClusterIndex):
        validate_params(type(estimator)())  # the defaults are valid
    validate_params(estimator)


# --------------------------------------------------------- feature names and pandas
@pytest.mark.parametrize("estimator, prefix, n_out", [
    (dqkm.KMeans(4, random_state=0), "kmeans", 4),
    (dqkm.QKMeans(4, sparsity=2, max_iter=3, random_state=0), "qkmeans", 4),
    (dqkm.KMeansL1(4, radius=5.0, random_state=0), "kmeansl1", 4),
    (dqkm.SparseEmbeddedKMeans(4, n_components=5, random_state=0), "sparseembeddedkmeans", 5),
    (dqkm.KMultipleMeans(2, n_prototypes=12, random_state=0), "kmultiplemeans", 12),
    (FactorNystroem("uniform", n_components=7, random_state=0), "factornystroem", 7),
])
def test_feature_names_out_and_pandas_output(estimator, prefix, n_out):
    pd = pytest.importorskip("pandas", reason="pandas is in the 'test' extra")
    X = np.random.default_rng(0).standard_normal((120, 6))
    est = estimator.fit(X)
    names = est.get_feature_names_out()
    assert list(names) == [f"{prefix}{i}" for i in range(n_out)]
    out = est.set_output(transform="pandas").transform(X)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == list(names)
    np.testing.assert_allclose(out.to_numpy(), est.set_output(transform="default").transform(X))


def test_pipeline_with_pandas_output():
    pd = pytest.importorskip("pandas", reason="pandas is in the 'test' extra")
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.standard_normal((200, 3)), columns=["a", "b", "c"])
    pipe = make_pipeline(StandardScaler(), dqkm.KMeans(8, random_state=0))
    pipe.set_output(transform="pandas")
    out = pipe.fit(X).transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == [f"kmeans{i}" for i in range(8)]
    assert list(out.index) == list(X.index) and out.shape == (200, 8)
    assert (out.to_numpy() >= 0).all()  # distances to the 8 centers
    np.testing.assert_array_equal(pipe.get_feature_names_out(), out.columns)
    # the K-means saw the scaled feature names
    assert list(pipe[-1].feature_names_in_) == ["a", "b", "c"]
