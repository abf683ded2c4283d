"""QKMeans's budget of palm4MSA iterations: the warm refits stop on progress
(``palm_tol``), the initial factorisation on QK-means's progress budget, the
hierarchical refits on the tighter one, and the defaults are the ones the docstring and
docs/algorithms/qkmeans.md state."""

import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

import dqkm
import dqkm.kernels as kernels
from dqkm.cluster import qkmeans as qkm

DOCS = Path(__file__).resolve().parents[2] / "docs" / "algorithms" / "qkmeans.md"


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data
    return X, X[np.random.default_rng(0).choice(len(X), 10, replace=False)]


@pytest.fixture
def warm_runs(monkeypatch):
    """(n_iter, tol, iterations run) of every warm-started palm4MSA run of a fit."""
    log, real = [], kernels.palm4msa

    def spy(A, cons, **kw):
        res = real(A, cons, **kw)
        if kw.get("init") is not None:
            log.append((kw["n_iter"], kw["tol"], res.n_iter, res.errors))
        return res

    monkeypatch.setattr(kernels, "palm4msa", spy)
    return log


def test_warm_refits_stop_when_the_error_stops_improving(digits, warm_runs):
    """Each Lloyd iteration's warm-started palm4MSA stops at its first iteration that
    lowers the error by at most palm_tol relatively (or at the cap palm_iter)."""
    X, init = digits
    qk = dqkm.QKMeans(10, sparsity=3, init=init, max_iter=6, tol=0, palm_iter=40,
                      palm_tol=1e-2, palm_iter_init=20, hierarchical_refits=0).fit(X)
    assert len(warm_runs) == 6
    for (cap, tol, n, errors), rec in zip(warm_runs, qk.history_):
        assert (cap, tol) == (40, 1e-2) and rec["palm_iter"] == n
        gains = -np.diff(errors) / errors[:-1]
        assert n == 40 or gains[-1] <= 1e-2
        assert (gains[:-1] > 1e-2).all()
    assert sum(n for _, _, n, _ in warm_runs) < 6 * 40


def test_zero_palm_tol_runs_every_refit_to_its_cap(digits, warm_runs):
    X, init = digits
    dqkm.QKMeans(10, sparsity=3, init=init, max_iter=3, tol=0, palm_iter=7, palm_tol=0,
                 palm_iter_init=20, hierarchical_refits=0).fit(X)
    assert [(cap, n) for cap, _, n, _ in warm_runs] == [(7, 7)] * 3


def test_init_on_the_progress_budget_refits_and_post_hoc_on_the_tighter_one(
        digits, hierarchical_budgets):
    """QKMeans's initial factorisation stops on QK-means's progress budget whatever
    ``hierarchical_refits`` (it only seeds the first assignment; the tighter budget
    cost a default fit 28 % more time at K = D = 1024: docs/algorithms/qkmeans.md); the
    hierarchical refits on the means and "K-means + palm4MSA"
    (:func:`dqkm.factorize_centroids`) keep the tighter one."""
    X, init = digits
    calls = hierarchical_budgets
    progress = (qkm._SPLIT_TOL, qkm._LAST_TOL)
    full = (qkm._FULL_BUDGET["split_tol"], qkm._FULL_BUDGET["tol"])
    assert progress != full
    dqkm.QKMeans(10, sparsity=3, init=init, max_iter=1, palm_iter_init=20,
                 hierarchical_refits=0).fit(X)
    assert calls == [progress]
    calls.clear()
    dqkm.QKMeans(10, sparsity=3, init=init, max_iter=2, palm_iter=5, palm_iter_init=20,
                 hierarchical_refits=2, objective_tol=0, tol=0).fit(X)
    assert calls == [progress, full, full]  # the init, then the refits on the means
    calls.clear()
    km = dqkm.KMeans(10, init=init, max_iter=3).fit(X)
    dqkm.factorize_centroids(km, sparsity=3, n_iter=20)
    assert calls == [full]


def _docstring_defaults(cls):
    doc = cls.__doc__
    return dict(re.findall(r"^    (\w+) : .*default=([^\s,]+)", doc, flags=re.M))


@pytest.mark.parametrize("name", ["palm_iter", "palm_iter_init", "palm_tol",
                                  "hierarchical_refits", "sparsity", "offset", "objective_tol"])
def test_defaults_are_the_documented_ones(name):
    """The class docstring and docs/algorithms/qkmeans.md state each default."""
    value = dqkm.QKMeans().get_params()[name]
    assert _docstring_defaults(dqkm.QKMeans)[name] == repr(value)
    page = DOCS.read_text()
    assert f"`{name}={value!r}`" in page, f"docs/algorithms/qkmeans.md: `{name}={value!r}`"


def test_budget_tolerances_are_documented():
    page = DOCS.read_text()
    for name in ("_SPLIT_TOL", "_LAST_TOL"):
        value = getattr(qkm, name)
        assert f"`split_tol={value:g}`" in page or f"`tol={value:g}`" in page, name


@pytest.mark.parametrize("value", [-1e-3, float("nan"), "1e-3"])
def test_bad_palm_tol(digits, value):
    X, init = digits
    with pytest.raises((TypeError, ValueError), match="'palm_tol' parameter of QKMeans"):
        dqkm.QKMeans(10, init=init, palm_tol=value).fit(X)
