"""dqkm.MiniBatchKMeans: Sculley's mini-batch K-means streamed by blocks, and partial_fit."""

import dask.array as da
import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans
from sklearn.cluster import MiniBatchKMeans as SKMiniBatch
from sklearn.datasets import load_digits, make_blobs

import dqkm
from dqkm.exceptions import DataError
from dqkm.parallel import stream


@pytest.fixture(scope="module")
def digits():
    return load_digits().data


def _batches(X, size):
    return [X[a:a + size] for a in range(0, X.shape[0], size)]


def test_partial_fit_equals_scikit_learn_step_by_step(digits):
    """Same init, same batches, no reassignment: scikit-learn's partial_fit and
    dqkm's give the same centers after every call."""
    init = digits[:10]
    ours = dqkm.MiniBatchKMeans(10, init=init, reassignment_ratio=0, compute_labels=False)
    ref = SKMiniBatch(10, init=init, n_init=1, reassignment_ratio=0, compute_labels=False)
    for batch in _batches(digits, 128):
        ours.partial_fit(batch)
        ref.partial_fit(batch)
        np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-10,
                                   atol=1e-10)


def test_partial_fit_on_dask_blocks_equals_calls_per_block(digits):
    """A Dask array makes one step per block: the same state as one call per batch."""
    init = digits[:10]
    per_call = dqkm.MiniBatchKMeans(10, init=init, random_state=0)
    for batch in _batches(digits, 200):
        per_call.partial_fit(batch)
    at_once = dqkm.MiniBatchKMeans(10, init=init, random_state=0)
    at_once.partial_fit(da.from_array(digits, chunks=200))
    np.testing.assert_array_equal(per_call.cluster_centers_, at_once.cluster_centers_)
    assert per_call.n_steps_ == at_once.n_steps_ == 9


@pytest.mark.parametrize("lazy", [False, True])
def test_fit_converges_on_blobs(lazy):
    X, _ = make_blobs(20000, 8, centers=12, cluster_std=1.0, random_state=1)
    X = X.astype(np.float32)
    full = SKKMeans(12, n_init=3, random_state=0).fit(X).inertia_
    Xin = da.from_array(X, chunks=3000) if lazy else X
    km = dqkm.MiniBatchKMeans(12, batch_size=512, random_state=0, n_init=3).fit(Xin)
    assert km.inertia_ <= 1.02 * full
    labels = km.labels_.compute() if lazy else km.labels_
    assert isinstance(km.labels_, da.Array) == lazy
    np.testing.assert_array_equal(labels, km.predict(X))
    assert km.n_steps_ >= 1 and km.n_iter_ >= 1 and km.history_


def test_fit_on_digits_close_to_scikit_learn(digits):
    ours = dqkm.MiniBatchKMeans(10, batch_size=256, max_iter=30, max_no_improvement=None,
                                random_state=0).fit(digits)
    ref = SKMiniBatch(10, batch_size=256, max_iter=30, max_no_improvement=None,
                      random_state=0).fit(digits)
    full = SKKMeans(10, n_init=3, random_state=0).fit(digits).inertia_
    assert ours.inertia_ <= 1.02 * full
    assert ours.inertia_ <= 1.02 * ref.inertia_
    assert ours.n_steps_ == ref.n_steps_  # max_iter epochs of n // batch_size steps


def test_fit_streams_one_block_at_a_time(tmp_path, monkeypatch):
    """From a Zarr store, the driver reads single blocks, never X."""
    X, _ = make_blobs(6000, 4, centers=5, random_state=0)
    dqkm.io.save_array(da.from_array(X.astype(np.float32), chunks=1000), tmp_path / "X.zarr")
    Xz = dqkm.io.load_array(tmp_path / "X.zarr")
    sizes = []
    real = stream._read

    def spy(X, i):
        block = real(X, i)
        sizes.append(block.shape[0])
        return block

    monkeypatch.setattr(stream, "_read", spy)
    dqkm.MiniBatchKMeans(5, batch_size=300, max_iter=2, random_state=0,
                         max_no_improvement=None, compute_labels=False).fit(Xz)
    assert sizes == [1000] * 12  # 2 epochs of 6 blocks


def test_integer_weights_equal_repeated_rows(digits):
    init = digits[:8]
    w = np.random.default_rng(0).integers(0, 4, digits.shape[0])
    weighted = dqkm.MiniBatchKMeans(8, init=init, reassignment_ratio=0)
    weighted.partial_fit(digits, sample_weight=w)
    repeated = dqkm.MiniBatchKMeans(8, init=init, reassignment_ratio=0)
    repeated.partial_fit(np.repeat(digits, w, axis=0))
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_,
                               rtol=1e-12, atol=1e-9)
    assert np.isclose(weighted.score(digits, sample_weight=w),
                      repeated.score(np.repeat(digits, w, axis=0)))


@pytest.mark.parametrize("weights, match", [
    (-np.ones(50), "non-negative"),
    (np.r_[np.nan, np.ones(49)], "finite"),
    (np.ones(3), r"shape \(50,\)"),
])
def test_bad_sample_weight_is_refused(weights, match):
    X = np.random.default_rng(0).random((50, 3))
    with pytest.raises(DataError, match=match):
        dqkm.MiniBatchKMeans(2).fit(X, sample_weight=weights)


def test_non_finite_block_names_its_row():
    X = np.random.default_rng(0).random((400, 3))
    X[321, 1] = np.nan
    with pytest.raises(DataError, match="NaN.*321"):
        dqkm.MiniBatchKMeans(2, random_state=0, init=X[:2]).fit(da.from_array(X, chunks=100))


@pytest.mark.parametrize("param, value, match", [
    ("batch_size", 0, r"'batch_size' parameter of MiniBatchKMeans must be an int in the "
                      r"range \[1, inf\)"),
    ("reassignment_ratio", -1.0, "'reassignment_ratio'"),
    ("init", "k-means||", "'init' parameter"),
])
def test_bad_parameters_are_refused(param, value, match):
    X = np.random.default_rng(0).random((50, 3))
    with pytest.raises(ValueError, match=match):
        dqkm.MiniBatchKMeans(2, **{param: value}).fit(X)


def test_callable_init(digits):
    seen = {}

    def first_rows(X, k, random_state):
        seen["shape"] = X.shape
        return X[:k]

    km = dqkm.MiniBatchKMeans(5, init=first_rows, max_iter=2, batch_size=100,
                              random_state=0).fit(digits)
    assert seen["shape"] == (300, 64)  # init_size = 3 * batch_size rows
    assert km.cluster_centers_.shape == (5, 64)


def test_save_load(tmp_path, digits):
    km = dqkm.MiniBatchKMeans(5, max_iter=2, random_state=0).fit(digits)
    dqkm.save(km, tmp_path / "m.npz")
    back = dqkm.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.predict(digits), km.predict(digits))
    assert back.n_steps_ == km.n_steps_


def test_fit_on_a_local_cluster(dist_client):
    X, _ = make_blobs(5000, 4, centers=4, random_state=3)
    km = dqkm.MiniBatchKMeans(4, batch_size=256, random_state=0).fit(
        da.from_array(X, chunks=1000))
    ref = SKKMeans(4, n_init=3, random_state=0).fit(X).inertia_
    assert km.inertia_ <= 1.02 * ref


def test_checkpoint_resume_equals_uninterrupted(tmp_path, digits):
    """Through the fit driver: an epoch interrupted by the callback resumes from the
    checkpoint with the same batches (the generator is checkpointed too)."""
    params = dict(batch_size=100, max_iter=4, max_no_improvement=None, random_state=0)
    full = dqkm.MiniBatchKMeans(8, **params).fit(digits)

    def stop_after_two(record, state):
        if record["iteration"] == 2:
            raise KeyboardInterrupt

    ck = tmp_path / "ck"
    with pytest.raises(KeyboardInterrupt):
        dqkm.MiniBatchKMeans(8, **params).fit(digits, checkpoint=ck, callback=stop_after_two)
    resumed = dqkm.MiniBatchKMeans(8, **params).fit(digits, checkpoint=ck, resume=True)
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)
    assert resumed.n_steps_ == full.n_steps_
    assert [h["iteration"] for h in resumed.history_] == [1, 2, 3, 4]


def test_verbose_prints_one_line_per_epoch(digits, capsys):
    dqkm.MiniBatchKMeans(4, batch_size=200, max_iter=3, max_no_improvement=None,
                         random_state=0, verbose=1).fit(digits)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "iteration " in ln and "/3" in ln]
    assert len(lines) == 3 and "objective" in lines[0] and "shift" in lines[0]


def test_batch_size_above_n_samples_is_capped_as_scikit_learn():
    """batch_size > n_samples steps with all rows (scikit-learn's cap): max_iter
    epochs are max_iter steps, and more of them lower the inertia."""
    X = np.random.RandomState(42).randn(100, 10)
    big = dqkm.MiniBatchKMeans(8, batch_size=1024, max_iter=10, n_init=1, random_state=42,
                               max_no_improvement=None).fit(X)
    exact = dqkm.MiniBatchKMeans(8, batch_size=100, max_iter=10, n_init=1, random_state=42,
                                 max_no_improvement=None).fit(X)
    assert big.n_steps_ == 10 and big.n_iter_ == 10
    np.testing.assert_array_equal(big.cluster_centers_, exact.cluster_centers_)
    one = dqkm.MiniBatchKMeans(8, max_iter=1, n_init=1, random_state=42).fit(X)
    assert big.score(X) > one.score(X)


@pytest.mark.parametrize("tol, max_no_improvement, reason", [
    (1e-4, None, "Converged (small centers change) at step "),
    (0, 3, "Converged (lack of improvement in inertia) at step "),
])
def test_early_stop_is_recorded_and_printed_in_scikit_learns_words(tol, max_no_improvement,
                                                                   reason, capsys):
    X, _, centers = make_blobs(centers=3, random_state=0, return_centers=True)
    km = dqkm.MiniBatchKMeans(3, init=centers, batch_size=20, tol=tol, n_init=1,
                              max_no_improvement=max_no_improvement, random_state=0,
                              verbose=1).fit(X)
    last = km.history_[-1]["stop_reason"]
    assert last == f"{reason}{km.n_steps_}"
    assert f"{last}.\n" in capsys.readouterr().out


def test_fit_equals_partial_fit_calls_over_the_same_batches(digits, monkeypatch):
    """The batches fit draws, given one by one to partial_fit, give fit's centers
    (same init; no random reassignment, which draws from the generator)."""
    import dqkm.cluster.minibatch as module

    batches, real = [], module.minibatch_step

    def recording(Xb, wb, *args, **kw):
        batches.append((np.array(Xb), np.array(wb)))
        return real(Xb, wb, *args, **kw)

    kw = dict(init=digits[:10], batch_size=100, max_iter=2, max_no_improvement=None, tol=0.0,
              reassignment_ratio=0, compute_labels=False, random_state=0)
    w = np.random.default_rng(0).integers(1, 4, size=digits.shape[0]).astype(np.float64)
    monkeypatch.setattr(module, "minibatch_step", recording)
    fitted = dqkm.MiniBatchKMeans(10, **kw).fit(digits, sample_weight=w)
    monkeypatch.undo()
    assert len(batches) == fitted.n_steps_ == (2 * digits.shape[0]) // 100  # scikit-learn's count
    stepped = dqkm.MiniBatchKMeans(10, **kw)
    for Xb, wb in batches:
        stepped.partial_fit(Xb, sample_weight=wb)
    np.testing.assert_array_equal(stepped.cluster_centers_, fitted.cluster_centers_)
    assert stepped.n_steps_ == fitted.n_steps_
