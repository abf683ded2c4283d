"""KMeans(empty_clusters='relocate'): scikit-learn's relocation of empty clusters.

The reference is scikit-learn's own KMeans (its 'lloyd' and 'elkan'
iterations relocate empty clusters); dqkm's 'hamerly' is checked against
scikit-learn's 'lloyd' (same iterations, pruned).
"""

import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.cluster
from sklearn.exceptions import ConvergenceWarning

import dqkm
import dqkm.parallel.relocate as relocate_module
from dqkm.cluster._checkpoint import CheckpointMismatchError
from dqkm.exceptions import InvalidParameterError
from dqkm.sparse import sparse_to_dask


def _data(seed=0, n=150):
    """Three blobs, and an init whose three other centers lie far away: they are
    empty after the first assignment, at distinct distances (no ties)."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(loc, 0.6, size=(n // 3, 3))
                   for loc in ([0, 0, 0], [6, 0, 1], [0, 7, -2])])
    init = np.vstack([X[[0, n // 3, 2 * n // 3]],
                      [[60.0, 60, 60], [-70, 55, 0], [40, -80, 35]]])
    w = rng.integers(0, 4, size=X.shape[0]).astype(np.float64)  # zeros included
    return X, init, w


def _reference(X, init, w, algorithm):
    sk_algorithm = "lloyd" if algorithm == "hamerly" else algorithm
    return sklearn.cluster.KMeans(init.shape[0], init=init, n_init=1,
                                  algorithm=sk_algorithm).fit(X, sample_weight=w)


def _assert_same_fit(km, ref):
    labels = km.labels_.compute() if isinstance(km.labels_, da.Array) else km.labels_
    np.testing.assert_array_equal(labels, ref.labels_)
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=1e-10,
                               atol=1e-12)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-10)
    assert km.n_iter_ == ref.n_iter_


@pytest.mark.parametrize("algorithm", ["lloyd", "elkan", "hamerly"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "sample_weight"])
@pytest.mark.parametrize("container", [np.asarray, sp.csr_matrix], ids=["dense", "csr"])
def test_relocation_equals_scikit_learn_in_memory(container, weighted, algorithm):
    X, init, w = _data()
    w = w if weighted else None
    km = dqkm.KMeans(6, init=init, n_init=1, algorithm=algorithm,
                     empty_clusters="relocate").fit(container(X), sample_weight=w)
    _assert_same_fit(km, _reference(container(X), init, w, algorithm))
    first = km.history_[0]
    assert first["empty_clusters"] == [3, 4, 5] and first["relocated"] == [3, 4, 5]
    # a row of weight 0 can be among the farthest: its cluster stays of weight 0
    assert set(first["empty_after_relocation"]) <= ({3, 4, 5} if weighted else set())


@pytest.mark.parametrize("algorithm", ["lloyd", "elkan", "hamerly"])
@pytest.mark.parametrize("kind", ["dense", "csr"])
def test_relocation_on_dask_chunks_equals_scikit_learn(kind, algorithm):
    """Chunks of 20 rows: the farthest rows come from several chunks, merged by
    the tree reduction; Dask weights; labels stay a lazy Dask array."""
    X, init, w = _data(seed=1)
    Xd = sparse_to_dask(sp.csr_matrix(X), chunks=20) if kind == "csr" else \
        da.from_array(X, chunks=(20, -1))
    km = dqkm.KMeans(6, init=init, n_init=1, algorithm=algorithm, persist=False,
                     split_every=3, empty_clusters="relocate")
    km.fit(Xd, sample_weight=da.from_array(w, chunks=20))
    assert isinstance(km.labels_, da.Array) and km.labels_.chunks[0] == Xd.chunks[0]
    _assert_same_fit(km, _reference(X, init, w, algorithm))


@pytest.mark.distributed
def test_relocation_on_a_local_cluster_with_bounds_held_by_the_workers(dist_client):
    """X persisted on the workers, the Hamerly bounds kept there beside its blocks:
    the relocated centers' shifts keep them valid (scikit-learn's result)."""
    X, init, w = _data(seed=6)
    w = w + 1.0  # positive: every relocated cluster keeps its row
    km = dqkm.KMeans(6, init=init, n_init=1, algorithm="hamerly", persist=True,
                     empty_clusters="relocate")
    km.fit(da.from_array(X, chunks=(40, -1)), sample_weight=w)
    _assert_same_fit(km, _reference(X, init, w, "hamerly"))
    assert km.history_[0]["relocated"] and km.history_[-1]["skipped"] > 0


def test_an_extra_pass_only_after_a_pass_that_left_a_cluster_empty(monkeypatch):
    calls = []
    real = relocate_module.farthest_rows_pass

    def spy(X, centers, n, **kw):
        calls.append(n)
        return real(X, centers, n, **kw)

    monkeypatch.setattr(relocate_module, "farthest_rows_pass", spy)
    X, init, _ = _data(seed=2)
    km = dqkm.KMeans(6, init=init, n_init=1, empty_clusters="relocate").fit(X)
    assert calls == [len(h["empty_clusters"]) for h in km.history_ if h["empty_clusters"]]
    assert calls and calls[0] == 3
    calls.clear()
    plain = dqkm.KMeans(3, init=init[:3], n_init=1, empty_clusters="relocate").fit(X)
    assert calls == [] and all(not h["empty_clusters"] for h in plain.history_)
    assert all("relocated" not in h for h in plain.history_)


def test_default_keeps_the_empty_clusters_center():
    X, init, _ = _data(seed=3)
    with pytest.warns(ConvergenceWarning, match="Number of distinct clusters"):
        km = dqkm.KMeans(6, init=init, n_init=1).fit(X)
    np.testing.assert_array_equal(km.cluster_centers_[3:], init[3:])
    assert km.history_[-1]["empty_clusters"] == [3, 4, 5]
    assert all("relocated" not in h for h in km.history_)


def test_two_rows_moved_out_of_one_cluster():
    """Both empty clusters take a row of the same cluster: its sum and weight
    lose both (scikit-learn's result)."""
    X = np.array([[0.0], [0.1], [0.2], [5.0], [9.0]])
    init = np.array([[3.0], [-50.0], [-60.0]])
    km = dqkm.KMeans(3, init=init, n_init=1, empty_clusters="relocate").fit(X)
    _assert_same_fit(km, _reference(X, init, None, "lloyd"))
    assert km.history_[0]["relocated"] == [1, 2]


def test_rows_all_on_their_centers_move_nowhere():
    """More clusters than distinct points: nothing to relocate; the cluster
    still empty takes the heaviest cluster's center, with scikit-learn's warning."""
    X = np.array([[1.0, 1.0]] * 3 + [[5.0, 5.0]] * 2)
    init = np.array([[100.0, 100.0], [1.0, 1.0], [5.0, 5.0]])
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(2\)"):
        km = dqkm.KMeans(3, init=init, n_init=1, empty_clusters="relocate").fit(X)
    rec = km.history_[0]
    assert rec["relocated"] == [] and rec["empty_after_relocation"] == [0]
    np.testing.assert_array_equal(km.cluster_centers_, [[1.0, 1.0], [1.0, 1.0], [5.0, 5.0]])


def test_invalid_option_is_refused_with_the_choices():
    with pytest.raises(InvalidParameterError, match=r"empty_clusters.*'keep'.*'relocate'|"
                                                    r"empty_clusters.*'relocate'.*'keep'"):
        dqkm.KMeans(2, empty_clusters="drop").fit(np.eye(3))


def test_option_is_part_of_the_checkpoint_identity(tmp_path):
    X, init, _ = _data(seed=4)
    with pytest.warns(ConvergenceWarning):
        dqkm.KMeans(6, init=init, n_init=1, max_iter=2).fit(X, checkpoint=tmp_path / "ck")
    with pytest.raises(CheckpointMismatchError, match="empty_clusters"):
        dqkm.KMeans(6, init=init, n_init=1, max_iter=2, empty_clusters="relocate").fit(
            X, checkpoint=tmp_path / "ck", resume=True)


def test_subclasses_without_the_option_do_not_list_it():
    assert "empty_clusters" not in dqkm.QKMeans._parameter_constraints
    assert "empty_clusters" not in dqkm.KMeansL1._parameter_constraints
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert "empty_clusters" not in dqkm.KMeansL1(2, radius=10.0).get_params()


class _Interrupt(Exception):
    pass


def test_resume_after_a_relocation_equals_the_uninterrupted_fit(tmp_path):
    X, init, w = _data(seed=5)
    make = lambda: dqkm.KMeans(6, init=init, n_init=1, empty_clusters="relocate")  # noqa: E731
    full = make().fit(X, sample_weight=w)
    assert full.history_[0]["relocated"]

    def stop(rec, state):
        raise _Interrupt("after the first iteration")

    with pytest.raises(_Interrupt):
        make().fit(X, sample_weight=w, checkpoint=tmp_path / "ck", callback=stop)
    resumed = make().fit(X, sample_weight=w, checkpoint=tmp_path / "ck", resume=True)
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)
    np.testing.assert_array_equal(resumed.labels_, full.labels_)
    assert resumed.n_iter_ == full.n_iter_ and resumed.history_[0]["relocated"] == [3, 4, 5]
