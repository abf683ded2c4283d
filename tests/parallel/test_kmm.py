"""dqkm.parallel.kmm.KMMSolver: K-Multiple-Means as the fit driver's steps."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_moons

import dqkm
from dqkm.kernels.kmm_init import svd_basis
from dqkm.parallel.kmm import KMMConfig, KMMSolver, KMMState


@pytest.fixture(autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _moons():
    return da.from_array(make_moons(300, noise=0.06, random_state=0)[0], chunks=100)


def _solver(X):
    return KMMSolver(X, KMMConfig(n_clusters=2, n_neighbors=5, pruned=True))


def test_steps_by_hand_give_the_estimator_s_fit():
    """init_state, then step until converged: the labels and objectives of fit."""
    X = _moons()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = dqkm.KMultipleMeans(2, n_prototypes=30, init=X[:30].compute(), max_iter=8,
                                  random_state=0).fit(X)
    rng = np.random.default_rng(0)
    A = X[:30].compute()
    mu, V = svd_basis(A, 1)  # not the estimator's basis: the bound is exact either way
    solver = _solver(X)
    state = solver.init_state(A, mu, V, rng)
    assert state.iteration == 0 and state.first is not None
    objectives = []
    for t in range(1, 9):
        state, rec = solver.step(state, t)
        objectives.append(rec["objective"])
        assert rec["iteration"] == t == state.iteration
        if state.converged:
            break
    res = solver.result(state, state.iteration)
    np.testing.assert_array_equal(res.labels.compute(), np.asarray(est.labels_.compute()))
    np.testing.assert_allclose(objectives, [h["objective"] for h in est.history_], rtol=1e-6)


def test_pack_unpack_round_trip():
    X = _moons()
    A = X[:30].compute()
    mu, V = svd_basis(A, 1)
    solver = _solver(X)
    state, _ = solver.step(solver.init_state(A, mu, V, np.random.default_rng(1)), 1)
    arrays = state.pack()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    back = KMMState.unpack(arrays, rows=state.rows)
    for k in ("prototypes", "mu", "V"):
        np.testing.assert_array_equal(getattr(back, k), getattr(state, k))
    assert (back.part.stats.sts != state.part.stats.sts).nnz == 0
    assert back.part.scalars() == state.part.scalars()
    assert (back.beta, back.alpha, back.theta, back.unmet, back.row_chunks, back.rng_state) == \
        (state.beta, state.alpha, state.theta, state.unmet, state.row_chunks, state.rng_state)
    # stepping from the unpacked state gives the same next step
    a, ra = solver.step(state, 2)
    b, rb = solver.step(solver.resume(back), 2)
    assert ra["objective"] == rb["objective"] and ra["beta_steps"] == rb["beta_steps"]
    np.testing.assert_array_equal(a.prototypes, b.prototypes)


def test_resume_refuses_other_row_chunks():
    X = _moons()
    A = X[:30].compute()
    mu, V = svd_basis(A, 1)
    state = _solver(X).init_state(A, mu, V, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"rows of S of X in 3 row chunks of 100, but X is in "
                                         r"2 row chunks of 150; rechunk X as it was"):
        _solver(X.rechunk(150)).resume(state)
