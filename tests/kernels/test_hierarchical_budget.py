"""hierarchical_palm4msa's budget: progress-based stops under caps, and the
fixed-budget algorithm when the tolerances are 0."""

import numpy as np
import pytest
from sklearn.datasets import load_digits

import dqkm.kernels.hierarchical as hier
from dqkm.kernels import default_constraints, default_residual_constraints, hierarchical_palm4msa
from dqkm.kernels.palm4msa import _run

_SPLIT_LAM = 1e-3


@pytest.fixture(scope="module")
def target():
    X = load_digits().data
    return X[np.random.default_rng(0).choice(len(X), 16, replace=False)].astype(np.float64)


@pytest.fixture
def runs(monkeypatch):
    """Every palm4MSA run of hierarchical_palm4msa: (cap, tol, errors, adaptive step)."""
    log = []

    def spy(A, d, cons, mats, lam, n_iter, tol, *args, **kw):
        out = _run(A, d, cons, mats, lam, n_iter, tol, *args, **kw)
        log.append((n_iter, tol, out[2], kw.get("adaptive", False)))
        return out

    monkeypatch.setattr(hier, "_run", spy)
    return log


def _check_stop(errors, cap, tol):
    """The run ran to its cap, or stopped at its first iteration whose relative
    improvement was at most tol (and not before)."""
    e = np.asarray(errors)
    n = len(e) - 1
    small = np.abs(e[:-1] - e[1:]) <= tol * e[:-1]
    if n < cap:
        assert small[-1], (n, cap, e[-2:])
    assert not small[:-1].any() if n else True
    return n


def test_progress_stop_ends_runs_early_and_caps_them(target, runs):
    cons = default_constraints(*target.shape, sparsity=3)
    Q = len(cons)
    hierarchical_palm4msa(target, cons, n_iter=40, n_iter_last=25, split_tol=2e-2, tol=1e-2)
    # per level a split then a global run; the last global run has its own cap and tol
    assert len(runs) == 2 * (Q - 1)
    caps = [n for n, _, _, _ in runs]
    assert caps == [40] * (2 * (Q - 1) - 1) + [25]
    assert [t for _, t, _, _ in runs] == [2e-2] * (2 * (Q - 1) - 1) + [1e-2]
    done = [_check_stop(e, n, t) for n, t, e, _ in runs]
    # on this target the splits stop on progress, well before the cap
    assert min(done) < 40 and sum(d < 40 for d in done[:-1]) >= Q - 1


def test_zero_tolerance_runs_every_run_to_its_cap(target, runs):
    cons = default_constraints(*target.shape, sparsity=3)
    res = hierarchical_palm4msa(target, cons, n_iter=6, n_iter_global=4, n_iter_last=9,
                                tol=0, split_tol=0)
    Q = len(cons)
    assert [len(e) - 1 for _, _, e, _ in runs] == [6, 4] * (Q - 2) + [6, 9]
    assert res.n_iter == 4 * (Q - 2) + 9


def _fixed_budget_reference(A, cons, residuals, n_iter, adaptive):
    """The hierarchical factorisation with a fixed number of iterations per run:
    each level splits the residual (identity and 0 to start, λ = 1e-3·‖target‖, step
    at the bound) then re-optimises every factor found so far from there."""
    d = np.ones(A.shape[0])
    target, weights, peeled = A, d, []
    for level in range(1, len(cons)):
        split = [cons[level - 1], residuals[level - 1]]
        eye = np.eye(*split[0].shape)
        mats = [eye / np.linalg.norm(eye), np.zeros(split[1].shape)]
        lam0 = _SPLIT_LAM * np.linalg.norm(weights[:, None] * target)
        mats, lam, _ = _run(target, weights, split, mats, lam0, n_iter, 0.0, None, True)
        mats, lam, _ = _run(A, d, cons[:level - 1] + split, peeled + mats, lam, n_iter, 0.0,
                            None, True, adaptive=adaptive)
        peeled, target, weights = mats[:-1], lam * mats[-1], np.ones(mats[-1].shape[0])
    return mats, lam


@pytest.mark.parametrize("adaptive", [False, True])
def test_zero_tolerance_is_the_fixed_budget_algorithm(target, adaptive):
    cons = default_constraints(*target.shape, sparsity=3)
    residuals = default_residual_constraints(cons, rule="geometric")
    mats, lam = _fixed_budget_reference(target, cons, residuals + [cons[-1]], 12, adaptive)
    res = hierarchical_palm4msa(target, cons, residual_constraints=residuals, n_iter=12,
                                tol=0, split_tol=0, adaptive_step=adaptive)
    assert res.lam == pytest.approx(lam, rel=1e-12)
    for got, want in zip(res.factors.factors, mats):
        np.testing.assert_allclose(got.toarray(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("split_adaptive", [False, True])
@pytest.mark.parametrize("adaptive", [False, True])
def test_split_adaptive_step_switches_the_splits_only(target, runs, adaptive, split_adaptive):
    cons = default_constraints(*target.shape, sparsity=3)
    hierarchical_palm4msa(target, cons, n_iter=5, tol=0, split_tol=0, adaptive_step=adaptive,
                          split_adaptive_step=split_adaptive)
    steps = [a for _, _, _, a in runs]
    assert steps[0::2] == [split_adaptive] * (len(cons) - 1)  # the 2-factor splits
    assert steps[1::2] == [adaptive] * (len(cons) - 1)  # the global runs


def test_adaptive_splits_change_the_result(target):
    cons = default_constraints(*target.shape, sparsity=3)
    plain = hierarchical_palm4msa(target, cons, n_iter=30, tol=0, split_tol=0)
    adaptive = hierarchical_palm4msa(target, cons, n_iter=30, tol=0, split_tol=0,
                                     split_adaptive_step=True)
    assert not np.allclose(plain.factors.toarray(), adaptive.factors.toarray())


@pytest.mark.parametrize("kw, match", [
    (dict(n_iter_last=-1), "'n_iter_last' parameter of hierarchical_palm4msa"),
    (dict(n_iter_last=2.5), "'n_iter_last' parameter of hierarchical_palm4msa"),
    (dict(split_adaptive_step="yes"), "'split_adaptive_step' parameter of hierarchical_palm4msa"),
])
def test_bad_budget_params(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        hierarchical_palm4msa(np.ones((4, 4)), **kw)


def test_qkmeans_budget_stops_every_run_on_progress(target, runs):
    """QK-means's initial factorisation: the splits and intermediate global runs stop
    at _SPLIT_TOL, the last global run at _LAST_TOL, each at its first iteration that
    improves the error by at most that much (caps palm_iter_init = 300), far below
    the fixed budget's 2 (Q − 1) × 300 iterations."""
    from dqkm.cluster.qkmeans import _LAST_TOL, _SPLIT_TOL, _hierarchical

    cons = default_constraints(*target.shape, sparsity=3)
    Q = len(cons)
    _hierarchical(target, cons, n_iter=300)
    assert [t for _, t, _, _ in runs] == [_SPLIT_TOL] * (2 * Q - 3) + [_LAST_TOL]
    done = [_check_stop(e, n, t) for n, t, e, _ in runs]
    assert all(n == 300 for n, _, _, _ in runs)
    assert sum(done) < 300 * 2 * (Q - 1) / 4


@pytest.mark.parametrize("seed", [0, 1])
def test_qkmeans_budget_error_against_the_previous_budget_on_digits(seed):
    """Digits centroid targets (K = 16, s = 3): the looser progress budget of QK-means's
    init ends within 20 % of the previous, tighter budget's relative error (measured
    on two seeds: 1.10× and 0.95×), with fewer iterations."""
    from dqkm.cluster.qkmeans import _hierarchical

    X = load_digits().data
    C = X[np.random.default_rng(seed).choice(len(X), 16, replace=False)].astype(np.float64)
    cons = default_constraints(16, 64, sparsity=3)
    fit = _hierarchical(C, cons, n_iter=300)
    full = _hierarchical(C, cons, n_iter=300, budget="full")
    assert fit.errors[-1] <= 1.2 * full.errors[-1]
    assert fit.n_iter < full.n_iter
