"""QK-means's dense offset row (``offset``) and its objective stopping rule
(``objective_tol``)."""

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_blobs

import dqkm
from dqkm.kernels.factor_offset import split_offset


def _monotone(history):
    obj = [h["objective"] for h in history]
    return all(b <= a * (1 + 1e-10) for a, b in zip(obj, obj[1:]))


@pytest.fixture(scope="module")
def far_blobs():
    """Blobs 1000 away from the origin: every centroid shares a large common row."""
    X, _ = make_blobs(1500, 24, centers=12, cluster_std=1.0, random_state=0)
    return X + 1000.0


@pytest.mark.parametrize("data", ["digits", "far_blobs"])
def test_offset_fit_is_monotone_and_its_factors_are_the_centroids(data, far_blobs):
    X = load_digits().data if data == "digits" else far_blobs
    K = 10 if data == "digits" else 12
    qk = dqkm.QKMeans(K, sparsity=3, random_state=0, max_iter=12, tol=0, objective_tol=0,
                      palm_iter=20).fit(X)
    assert qk.n_iter_ == 12 and _monotone(qk.history_)
    V = qk.factors_.toarray()
    np.testing.assert_array_equal(qk.cluster_centers_, V)
    d = ((X[:, None, :] - V[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(qk.labels_, d.argmin(1))
    np.testing.assert_allclose(qk.inertia_, d.min(1).sum(), rtol=1e-9)
    inner, mu = split_offset(qk.factors_)
    np.testing.assert_allclose(inner.toarray() + mu, V, rtol=1e-12, atol=1e-9 * np.abs(V).max())
    # the offset costs K + nnz(μ) + Q − 2 non-zeros over the sparse part
    assert qk.factors_.nnz == inner.nnz + K + np.count_nonzero(mu) + qk.factors_.n_factors - 2


def test_offset_lowers_the_objective_where_centroids_share_a_row(far_blobs):
    """Far from the origin the sparse factors alone spend their non-zeros on the
    common row; with the offset they fit what differs (measured: 2.2 × K-means's
    objective with it, 16.8 × without — 12 well-separated blobs in 24 dimensions
    are hard for 3 non-zeros per row and column either way)."""
    X = far_blobs
    km = dqkm.KMeans(12, random_state=0).fit(X)
    got = {}
    for offset in (False, True):
        qk = dqkm.QKMeans(12, sparsity=3, random_state=0, max_iter=10, offset=offset,
                          palm_iter=20).fit(X)
        got[offset] = qk.inertia_ / km.inertia_
    assert got[True] < 0.25 * got[False], got


def test_offset_on_digits_is_below_the_sparse_factors_alone():
    """Digits, K = 10, s = 3, 15 iterations, same k-means++ seed (measured 1.06 against
    1.10 × K-means's objective)."""
    X = load_digits().data
    km = dqkm.KMeans(10, random_state=0).fit(X)
    ratio = {off: dqkm.QKMeans(10, sparsity=3, random_state=0, max_iter=15, tol=0,
                               objective_tol=0, offset=off).fit(X).inertia_ / km.inertia_
             for off in (False, True)}
    assert ratio[True] < ratio[False] - 0.02, ratio


def test_paper_variant_and_offset_false_have_no_offset(far_blobs):
    X = far_blobs[:600]
    kw = dict(sparsity=3, random_state=0, max_iter=3, palm_iter=5, palm_iter_init=10)
    plain = dqkm.QKMeans(12, offset=False, **kw).fit(X)
    with pytest.raises(ValueError, match="dense offset row"):
        split_offset(plain.factors_)
    a = dqkm.QKMeans(12, variant="paper", offset=True, **kw).fit(X)
    b = dqkm.QKMeans(12, variant="paper", offset=False, **kw).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    with pytest.raises(ValueError, match="dense offset row"):
        split_offset(a.factors_)


def test_minibatch_qkmeans_fits_the_offset_too(far_blobs):
    X = far_blobs
    got = {}
    for offset in (False, True):
        mb = dqkm.MiniBatchQKMeans(12, sparsity=3, batch_size=300, max_iter=3, palm_iter=5,
                                   palm_iter_init=30, random_state=0, offset=offset).fit(X)
        got[offset] = mb.inertia_
        V = mb.factors_.toarray()
        np.testing.assert_array_equal(mb.predict(X), ((X[:, None] - V[None]) ** 2).sum(-1)
                                      .argmin(1))
    inner, mu = split_offset(mb.factors_)
    assert np.abs(mu).min() > 900  # the common row went to the offset
    assert got[True] < 0.5 * got[False], got


def test_partial_fit_adds_the_offset_to_factors_fitted_without_it(far_blobs):
    """A model fitted without the offset (or saved before it existed) refitted with it:
    its factors are read as the same V with the offset 0 (no error, the same operator),
    and the refits go on from there.  (The common row stays in the sparse part: the
    least-squares offset of factors that already hold it is near 0.)"""
    X = far_blobs
    mb = dqkm.MiniBatchQKMeans(12, sparsity=3, batch_size=300, max_iter=2, palm_iter=5,
                               palm_iter_init=30, random_state=0, offset=False).fit(X)
    before = mb.inertia_
    with pytest.raises(ValueError, match="dense offset row"):
        split_offset(mb.factors_)
    mb.set_params(offset=True)
    for _ in range(3):
        mb.partial_fit(X)
    inner, mu = split_offset(mb.factors_)
    np.testing.assert_allclose(inner.toarray() + mu, mb.factors_.toarray(), atol=1e-6)
    V = mb.factors_.toarray()
    np.testing.assert_array_equal(mb.predict(X), ((X[:, None] - V[None]) ** 2).sum(-1).argmin(1))
    # the refits go on from there: no blow-up (mini-batch refits move the objective by a
    # few percent either way from batch to batch: up to +6 % over six partial_fits here)
    assert -mb.score(X) <= 1.1 * before


# --------------------------------------------------------------- objective_tol
def _stop(history, rtol):
    for t in range(1, len(history)):
        before, now = history[t - 1]["objective"], history[t]["objective"]
        if abs(before - now) <= rtol * before:
            return t + 1
    return None


def test_objective_tol_stops_at_the_first_small_change_with_those_factors():
    """The fit stopped by objective_tol is the long fit cut after the first iteration
    whose objective changed by at most objective_tol relatively: same iterations,
    same factors, and its stop is said in the record."""
    X = load_digits().data
    kw = dict(sparsity=3, random_state=0, max_iter=30, palm_iter=20, tol=0)
    seen = {}
    long = dqkm.QKMeans(10, objective_tol=0, **kw).fit(
        X, callback=lambda rec, factors: seen.__setitem__(rec["iteration"], factors.toarray()))
    assert long.n_iter_ == 30
    t = _stop(long.history_, 1e-3)
    assert t is not None and 2 <= t < 30
    short = dqkm.QKMeans(10, objective_tol=1e-3, **kw).fit(X)
    assert short.n_iter_ == t
    np.testing.assert_array_equal(short.cluster_centers_, seen[t])
    reason = short.history_[-1]["stop_reason"]
    assert f"Converged at iteration {t}: objective changed by" in reason
    assert "within objective_tol 1.000000e-03" in reason
    assert all("stop_reason" not in r for r in short.history_[:-1])


def test_objective_tol_stop_is_the_same_after_a_resume(tmp_path):
    """The rule compares with the previous iteration's objective, which a resumed fit
    reads from the checkpoint's history: it stops where the uninterrupted fit stops."""
    X = load_digits().data
    kw = dict(sparsity=3, random_state=0, max_iter=30, palm_iter=20, tol=0, objective_tol=1e-3)
    full = dqkm.QKMeans(10, **kw).fit(X)
    t = full.n_iter_
    assert t > 3

    class Stop(Exception):
        pass

    def stop(rec, factors):
        if rec["iteration"] == t - 1:
            raise Stop

    with pytest.raises(Stop):
        dqkm.QKMeans(10, **kw).fit(X, checkpoint=tmp_path / "ck", callback=stop)
    resumed = dqkm.QKMeans(10, **kw).fit(X, checkpoint=tmp_path / "ck", resume=True)
    assert resumed.n_iter_ == t
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)


def test_objective_tol_is_checked():
    X = load_digits().data[:200]
    with pytest.raises(ValueError, match=r"The 'objective_tol' parameter of QKMeans must be a "
                                         r"float in the range \[0(\.0)?, inf\)"):
        dqkm.QKMeans(10, objective_tol=-1e-3).fit(X)
    with pytest.raises(ValueError, match="The 'offset' parameter of QKMeans must be"):
        dqkm.QKMeans(10, offset="yes").fit(X)
