"""Progress views of a fit: the reporter driven directly, as the fit driver feeds it."""

import io
import logging
import sys

import dask.array as da
import numpy as np
import pytest

from dqkm import progress as P
from dqkm.data.execute import progress_enabled
from dqkm.parallel import engine


def _records(n, seconds=0.5):
    """History records like the driver's: objective falling, shift shrinking."""
    return [{"iteration": k, "objective": 100.0 / k, "shift": 10.0 ** -k, "seconds": seconds}
            for k in range(1, n + 1)]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _feed(reporter, records, tol_abs=1e-4, converged=True):
    reporter.start_run(0, 1)
    for rec in records:
        reporter.update(rec, tol_abs=tol_abs)
    reporter.end_run(len(records), records[-1]["objective"], converged)
    reporter.close()


def test_line_reporter_prints_one_line_per_iteration_with_k_objective_shift_tol_eta():
    out = io.StringIO()
    _feed(P.LineReporter("KMeans", max_iter=10, stream=out), _records(3))
    lines = out.getvalue().splitlines()
    assert len(lines) == 4  # 3 iterations + the summary
    assert lines[0].startswith("KMeans iteration 1/10: objective 100, shift 0.1 (tol 0.0001)")
    assert lines[2].endswith("0.50s/it, ETA ≤ 3.5s (30% of max_iter)")  # 7 left at 0.5 s
    assert lines[3] == "KMeans: converged after 3 iterations, objective 33.3333"


def test_live_line_rewrites_one_line_in_place_and_ends_it_once():
    out = _Tty()
    reporter = P.LiveLineReporter("QKMeans", max_iter=50, stream=out)
    reporter.start_run(0, 1)
    for rec in _records(3):
        reporter.update(rec, tol_abs=1e-3)
        assert "\n" not in out.getvalue()  # still one line
    text = out.getvalue()
    frames = text.split("\r")[1:]
    assert len(frames) == 3
    assert frames[-1].startswith("QKMeans iteration 3/50: objective 33.3333, shift 0.001 "
                                 "(tol 0.001), 0.50s/it, ETA ≤ 23.5s (6% of max_iter)")
    reporter.end_run(3, 33.3, False)
    reporter.close()
    lines = out.getvalue().split("\n")
    assert len(lines) == 3 and lines[-1] == ""  # the live line, the summary
    assert lines[1] == "QKMeans: stopped at max_iter after 3 iterations, objective 33.3"


def test_live_line_pads_a_shorter_status_over_a_longer_one():
    out = _Tty()
    reporter = P.LiveLineReporter("KM", max_iter=None, stream=out)
    reporter.update({"iteration": 1, "objective": 123456.789, "shift": 1.5, "seconds": 10.0})
    reporter.update({"iteration": 2, "objective": 1.0, "shift": 0.0, "seconds": 10.0})
    first, second = out.getvalue().split("\r")[1:]
    assert len(second) >= len(first)


def test_several_runs_are_numbered():
    out = io.StringIO()
    reporter = P.LineReporter("KMeans", max_iter=5, n_init=3, stream=out)
    reporter.start_run(1, 3)
    reporter.update(_records(1)[0])
    assert out.getvalue().startswith("KMeans run 2/3 iteration 1/5:")


def test_widget_updates_in_place():
    pytest.importorskip("ipywidgets", reason="the Jupyter view needs dqkm[jupyter]")
    reporter = P.WidgetReporter("KMeans", max_iter=20, display=False)
    widget = reporter.widget
    reporter.start_run(0, 1)
    for rec in _records(4):
        reporter.update(rec, tol_abs=1e-5)
        assert reporter.widget is widget  # the same widget, updated
        assert reporter.bar.value == rec["iteration"]
        assert f"iteration {rec['iteration']}/20" in reporter.label.value
    assert reporter.bar.max == 20
    assert "shift 0.0001 (tol 1e-05)" in reporter.label.value
    reporter.end_run(4, 25.0, True)
    assert reporter.bar.bar_style == "success"
    assert reporter.label.value == "KMeans: converged after 4 iterations, objective 25"


def test_make_reporter_picks_the_view(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert type(P.make_reporter(0, name="K", max_iter=3)) is P.NullReporter
    assert type(P.make_reporter(1, name="K", max_iter=3)) is P.LineReporter
    monkeypatch.setattr(sys, "stderr", _Tty())
    assert type(P.make_reporter(True, name="K", max_iter=3)) is P.LiveLineReporter
    pytest.importorskip("ipywidgets", reason="the Jupyter view needs dqkm[jupyter]")
    shown = []
    monkeypatch.setattr(P, "in_jupyter", lambda: True)
    monkeypatch.setattr(P, "_ipython_display", shown.append)
    reporter = P.make_reporter(1, name="K", max_iter=3)
    assert type(reporter) is P.WidgetReporter and shown == [reporter.widget]
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # a kernel without ipywidgets
    assert type(P.make_reporter(1, name="K", max_iter=3)) is P.LiveLineReporter


@pytest.mark.parametrize("verbose", [-1, 1.5, "1"])
def test_make_reporter_refuses_a_bad_verbose(verbose):
    with pytest.raises(ValueError, match=r"verbose must be an integer >= 0.*got"):
        P.make_reporter(verbose, name="K")


def test_verbose_2_turns_on_dask_bars_until_close(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_enabled() is False
    reporter = P.make_reporter(2, name="K", max_iter=3)
    assert progress_enabled() is True
    X = da.ones((40, 2), chunks=10)
    engine.compute(X.sum())  # a pass: dask's bar on stderr
    assert "Completed" in sys.stderr.getvalue()
    reporter.close()
    assert progress_enabled() is False
    P.make_reporter(1, name="K", max_iter=3).close()
    assert progress_enabled() is False


def test_records_reach_the_dqkm_logger(caplog):
    with caplog.at_level(logging.DEBUG, logger="dqkm"):
        _feed(P.make_reporter(0, name="KMeans", max_iter=5), _records(2))
    messages = [r.getMessage() for r in caplog.records]
    assert "KMeans run 1 iteration 2: objective 50.0, shift 0.01" in messages
    assert any("converged after 2 iterations" in m for m in messages)


def test_log_to_stderr_adds_one_handler(monkeypatch):
    logger = logging.getLogger("dqkm")
    before = list(logger.handlers)
    # start without the handler (another test, e.g. a doctest, may have added it)
    logger.handlers = [h for h in before if not getattr(h, "_dqkm_stderr", False)]
    try:
        P.log_to_stderr("DEBUG")
        P.log_to_stderr("INFO")
        added = [h for h in logger.handlers if h not in before]
        assert len(added) == 1 and logger.level == logging.INFO
    finally:
        logger.handlers = before
        logger.setLevel(logging.NOTSET)


def test_dask_bars_with_a_client_in_jupyter_with_and_without_ipywidgets(dist_client,
                                                                        monkeypatch, capsys):
    monkeypatch.setattr(P, "in_jupyter", lambda: True)
    shown = []
    monkeypatch.setattr(P, "_ipython_display", shown.append)
    X = da.from_array(np.arange(40.0).reshape(20, 2), chunks=5)
    with engine.progress(True):
        monkeypatch.setitem(sys.modules, "ipywidgets", None)
        assert engine.compute(X.sum())[0] == 780.0  # no ModuleNotFoundError: a text bar
        assert "Completed" in capsys.readouterr().out and shown == []
        monkeypatch.delitem(sys.modules, "ipywidgets")
        pytest.importorskip("ipywidgets", reason="the Jupyter view needs dqkm[jupyter]")
        assert engine.compute(X.sum())[0] == 780.0
    assert len(shown) == 1  # the widget distributed.progress returns is displayed
    from distributed.diagnostics.progressbar import MultiProgressWidget

    assert isinstance(shown[0], MultiProgressWidget)


def test_the_text_views_examples_run_and_are_the_ones_progress_exports():
    """The reporter base and its text views live in dqkm._progress_lines: the
    names dqkm.progress exports are those classes, and their examples run."""
    import doctest

    from dqkm import _progress_lines

    assert (P.NullReporter, P.LineReporter, P.LiveLineReporter, P.DASK_BARS) == (
        _progress_lines.NullReporter, _progress_lines.LineReporter,
        _progress_lines.LiveLineReporter, _progress_lines.DASK_BARS)
    tests = [t for t in doctest.DocTestFinder().find(_progress_lines) if t.examples]
    assert len(tests) >= 10
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    for t in tests:
        runner.run(t, out=report.write)
    assert runner.summarize(verbose=False).failed == 0, report.getvalue()
