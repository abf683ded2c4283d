"""dqkm.monitor.plot_history on K-means-, QK-means- and KMM-like histories."""

import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402

import dqkm  # noqa: E402
from dqkm.monitor import history_panels, plot_history  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _kmeans_history(n=6):
    obj = 100.0 * 0.5 ** np.arange(n) + 10
    return [{"iteration": i + 1, "objective": float(obj[i]), "shift": 1.0 / (i + 1),
             "seconds": 0.1 + 0.01 * i, "empty_clusters": [2] if i == 1 else []}
            for i in range(n)]


def _qkmeans_history(n=5):
    hist = _kmeans_history(n)
    for i, rec in enumerate(hist):
        rec.update(palm_error=0.5 / (i + 1), seconds_assign=0.04, seconds_palm=0.05)
    return hist


def _kmm_history(n=7):
    hist = _kmeans_history(n)
    for i, rec in enumerate(hist):
        rec.update(beta=2.0 ** (i % 4), n_components=[1, 2, 3, 4, 3, 3, 3][i])
        rec["empty_clusters"] = []
    return hist


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_kmeans_like_history():
    hist = _kmeans_history()
    fig = plot_history(hist)
    assert history_panels(hist) == ["objective", "seconds"]
    assert len(fig.axes) == 2
    obj_ax, sec_ax = fig.axes
    lines = _lines(obj_ax)
    assert set(lines) == {"objective", "empty clusters"}
    np.testing.assert_array_equal(lines["objective"].get_xdata(), np.arange(1, 7))
    np.testing.assert_allclose(lines["objective"].get_ydata(), [h["objective"] for h in hist])
    # the one iteration with an empty cluster is marked
    np.testing.assert_array_equal(lines["empty clusters"].get_xdata(), [2])
    assert list(_lines(sec_ax)) == ["total"]
    np.testing.assert_allclose(_lines(sec_ax)["total"].get_ydata(),
                               [h["seconds"] for h in hist])
    assert sec_ax.get_xlabel() == "iteration"
    assert obj_ax.get_ylabel() == "objective" and sec_ax.get_ylabel() == "seconds"
    assert obj_ax.get_title() == "history: 6 iterations"


def test_no_empty_cluster_marker_without_empty_clusters():
    hist = _kmm_history()
    fig = plot_history(hist)
    assert list(_lines(fig.axes[0])) == ["objective"]


def test_qkmeans_like_history():
    hist = _qkmeans_history()
    fig = plot_history(hist)
    assert history_panels(hist) == ["objective", "seconds", "palm_error"]
    assert len(fig.axes) == 3
    assert set(_lines(fig.axes[1])) == {"total", "assign", "palm"}
    palm = _lines(fig.axes[2])["palm4MSA relative error"]
    np.testing.assert_allclose(palm.get_ydata(), 0.5 / np.arange(1, 6))
    assert fig.axes[2].get_yscale() == "linear"  # 0.5 to 0.1: less than a decade
    assert plot_history(_qkmeans_history(12)).axes[2].get_yscale() == "log"  # 0.5 to 0.04


def test_kmm_like_history():
    hist = _kmm_history()
    fig = plot_history(hist)
    assert history_panels(hist) == ["objective", "seconds", "beta", "n_components"]
    assert len(fig.axes) == 4
    np.testing.assert_allclose(_lines(fig.axes[2])["β"].get_ydata(),
                               [1, 2, 4, 8, 1, 2, 4])
    assert fig.axes[2].get_yscale() == "log"
    np.testing.assert_array_equal(
        _lines(fig.axes[3])["connected components"].get_ydata(), [1, 2, 3, 4, 3, 3, 3])


def test_missing_values_are_gaps():
    hist = _qkmeans_history(3)
    del hist[0]["palm_error"]
    fig = plot_history(hist)
    y = _lines(fig.axes[2])["palm4MSA relative error"].get_ydata()
    assert np.isnan(y[0]) and np.isfinite(y[1:]).all()


def test_fitted_model_and_png(tmp_path):
    X = np.random.default_rng(0).normal(size=(300, 2))
    km = dqkm.KMeans(n_clusters=3, random_state=0, max_iter=20).fit(X)
    fig = plot_history(km)
    assert fig.axes[0].get_title() == f"KMeans: {len(km.history_)} iterations"
    np.testing.assert_allclose(_lines(fig.axes[0])["objective"].get_ydata(),
                               [h["objective"] for h in km.history_])
    path = tmp_path / "history.png"
    fig.savefig(path, dpi=80)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot_history(_kmm_history()).savefig(tmp_path / "kmm.png", dpi=80)
    plot_history(_qkmeans_history()).savefig(tmp_path / "qkm.png", dpi=80)
    assert (tmp_path / "kmm.png").stat().st_size > 1000


def test_draws_into_given_axes():
    fig, axes = plt.subplots(1, 3)
    out = plot_history(_qkmeans_history(), ax=axes)
    assert out is fig
    assert all(len(a.get_lines()) >= 1 for a in axes)
    with pytest.raises(ValueError, match=r"'ax' parameter of plot_history must hold one Axes "
                                         r"per panel \(3: objective, seconds, palm_error\)\. "
                                         r"Got 2"):
        plot_history(_qkmeans_history(), ax=axes[:2])


def test_unfitted_model_raises_not_fitted():
    with pytest.raises(NotFittedError, match=r"This KMeans instance is not fitted yet"):
        plot_history(dqkm.KMeans(n_clusters=2))


@pytest.mark.parametrize("model, err, match", [
    (42, TypeError, r"'model' parameter of plot_history must be a fitted dqkm estimator or "
                    r"a list of per-iteration dicts\. Got int"),
    ([], ValueError, r"history to plot is empty"),
    ([{"objective": 1.0, "seconds": 0.1}, 3], TypeError, r"history entry 1 must be a dict"),
    ([{"objective": 1.0}], ValueError, r"history entry 0 lacks \['seconds'\]"),
    ([{"objective": "high", "seconds": 0.1}], TypeError,
     r"history entry 0: 'objective' must be a number\. Got str 'high'"),
])
def test_bad_input(model, err, match):
    with pytest.raises(err, match=match):
        plot_history(model)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'dqkm\[plot\]'"):
        plot_history(_kmeans_history())
