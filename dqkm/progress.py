"""Progress of an iterative fit: one view per fit, not one per pass.

The fit driver creates one reporter per ``fit`` with :func:`make_reporter` and
feeds it every iteration's history record. What the reporter shows depends on
``verbose`` (scikit-learn's name and meaning) and on where Python runs:

- ``0``: nothing (records still go to the ``dqkm`` logger at DEBUG level);
- ``1``: one view of the fit with the iteration ``k/max_iter``, the objective,
  the centroid shift against ``tol``, seconds per iteration and an ETA
  (bounded by ``max_iter``: a fit that converges ends earlier):

  - in a terminal, a single line rewritten in place (carriage return);
  - in Jupyter (an IPython kernel with ``ipywidgets``, the ``jupyter``
    extra), a widget updated in place;
  - elsewhere (a log file, a pipe), one line per iteration;

- ``2``: as ``1``, plus Dask's own progress bar for every pass over the data
  (:func:`dqkm.parallel.engine.progress`).

At ``verbose >= 1`` every view also prints scikit-learn's lines on stdout, as
scikit-learn's KMeans does: ``Initialization complete``, ``Iteration N,
inertia X`` and ``Converged at iteration N: strict convergence.`` (nothing
moved) or ``...: center shift S within tolerance T.``, or the record's own
``stop_reason`` sentence (e.g. MiniBatchKMeans's early stops); ``SKLEARN_LINES``
turns them off (the command line does: its stdout holds its summary).

Logging: dqkm logs through the ``dqkm`` logger and adds no handler of its own.
One line shows its records (each iteration at DEBUG, milestones at INFO)::

    import logging; logging.basicConfig(); logging.getLogger("dqkm").setLevel("DEBUG")

or, equivalently, ``dqkm.progress.log_to_stderr("DEBUG")``.

Interface used by the driver (stable; every view implements it):

``make_reporter(verbose, *, name, max_iter, n_init=1)`` returns an object with

- ``start_run(run, n_runs)`` before a run's first iteration (``run`` from 0),
- ``initialized()`` once a fresh run has its initial state,
- ``update(record, tol_abs=None)`` after every iteration (``record`` is the
  ``history_`` entry: ``iteration``, ``objective``, ``shift``, ``seconds``, ...;
  ``tol_abs`` the absolute shift tolerance once known),
- ``end_run(n_iter, objective, converged)`` after a run,
- ``close()`` at the end of fit (also on errors).

:class:`NullReporter` (the base) and the text views :class:`LineReporter` and
:class:`LiveLineReporter` live in ``dqkm._progress_lines`` and are imported
from here; this module picks the view and holds the Jupyter parts.
"""

import logging
import sys

from ._progress_lines import DASK_BARS, LineReporter, LiveLineReporter, NullReporter

logger = logging.getLogger("dqkm")

__all__ = ["DASK_BARS", "SKLEARN_LINES", "make_reporter", "LineReporter", "LiveLineReporter",
           "NullReporter", "WidgetReporter", "in_jupyter", "log_to_stderr", "show_dask_progress"]


#: Whether a reporter made by :func:`make_reporter` at ``verbose >= 1`` prints
#: scikit-learn's lines on stdout (see the module docstring).
SKLEARN_LINES = {"enabled": True}


def _check_verbose(verbose):
    if isinstance(verbose, bool):
        verbose = int(verbose)
    if not isinstance(verbose, int) or verbose < 0:
        raise ValueError(f"verbose must be an integer >= 0 (0: silent, 1: one line per "
                         f"iteration, 2: also Dask's per-pass bars); got {verbose!r}")
    return verbose


def log_to_stderr(level="INFO"):
    """Show the ``dqkm`` logger's records at ``level`` and above on stderr.

    One handler is added once (calling again only changes the level).

    Parameters
    ----------
    level : str or int, default="INFO"
        A :mod:`logging` level: ``"DEBUG"`` shows every iteration, ``"INFO"``
        the milestones.

    Returns
    -------
    logging.Logger
        The ``dqkm`` logger.

    Examples
    --------
    >>> log_to_stderr("WARNING").name
    'dqkm'
    """
    if not any(getattr(h, "_dqkm_stderr", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        handler._dqkm_stderr = True
        logger.addHandler(handler)
    logger.setLevel(level)
    return logger


def in_jupyter():
    """Whether this process is an IPython kernel (Jupyter, nbclient), not a terminal.

    IPython is never imported here: a kernel has imported it already.

    Returns
    -------
    bool
        True inside a Jupyter kernel, False in a terminal, a script or IPython's
        terminal shell.

    Examples
    --------
    >>> in_jupyter()
    False
    """
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - a broken IPython is "not a kernel"
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _widgets():
    """``ipywidgets`` if it can be imported, else None."""
    try:
        import ipywidgets
    except ImportError:
        return None
    return ipywidgets


def _ipython_display(obj):
    from IPython.display import display

    display(obj)


def show_dask_progress(futures):
    """Dask's progress bar for ``futures`` of a ``distributed.Client``.

    In Jupyter with ``ipywidgets`` the widget is displayed (it returns at
    once); otherwise a text bar on stdout (it returns when the futures are
    done), also in a kernel without ``ipywidgets``.

    Parameters
    ----------
    futures : list of distributed.Future
        The futures to follow.

    Returns
    -------
    None

    Examples
    --------
    >>> from distributed import Client
    >>> with Client(processes=False) as client:  # doctest: +SKIP
    ...     show_dask_progress(client.map(abs, [-1, -2, 3]))
    [########################################] | 100% Completed |  0.1s
    """
    from distributed import progress as dist_progress

    if in_jupyter() and _widgets() is not None:
        _ipython_display(dist_progress(futures, notebook=True))
    else:
        dist_progress(futures, notebook=False)


class WidgetReporter(NullReporter):
    """An ``ipywidgets`` view updated in place: a progress bar (``k/max_iter``)
    and a text line (objective, shift against tol, seconds per iteration, ETA).

    ``display=False`` builds the widget without showing it (``self.widget``).

    Parameters
    ----------
    name, max_iter, n_init, lines
        As in :class:`NullReporter`.
    display : bool, default=True
        Show the widget now (in the notebook's output).

    Examples
    --------
    >>> reporter = WidgetReporter("KMeans", max_iter=10, display=False)
    >>> reporter.update({"iteration": 1, "objective": 12.5, "shift": 0.25, "seconds": 0.5})
    >>> reporter.bar.value
    1
    >>> reporter.end_run(1, 12.5, converged=True)
    >>> reporter.bar.bar_style
    'success'
    """

    def __init__(self, name="fit", max_iter=None, n_init=1, display=True, lines=None):
        super().__init__(name, max_iter, n_init, lines)
        import ipywidgets as w

        self.bar = w.IntProgress(value=0, min=0, max=max(int(max_iter or 1), 1),
                                 description=name, bar_style="info")
        self.label = w.HTML(value=f"{name}: starting")
        self.widget = w.VBox([self.bar, self.label])
        if display:
            _ipython_display(self.widget)

    def start_run(self, run, n_runs):
        super().start_run(run, n_runs)
        self.bar.value, self.bar.bar_style = 0, "info"
        if n_runs > 1:
            self.bar.description = f"{self.name} {run + 1}/{n_runs}"

    def update(self, record, tol_abs=None):
        super().update(record, tol_abs)
        k = record.get("iteration")
        if isinstance(k, int):
            self.bar.value = min(k, self.bar.max)
        self.label.value = self.status(record, tol_abs)

    def end_run(self, n_iter, objective, converged):
        super().end_run(n_iter, objective, converged)
        self.bar.bar_style = "success" if converged else "warning"
        self.label.value = self.summary(n_iter, objective, converged)


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def make_reporter(verbose, *, name, max_iter=None, n_init=1):
    """The progress reporter for one fit (see the module docstring).

    Parameters
    ----------
    verbose : int
        ``0`` silent, ``1`` one view of the fit, ``2`` also Dask's per-pass bars.
    name : str
        What is fitted, shown first (e.g. ``'KMeans'``).
    max_iter : int, optional
        Iterations per run at most (the ``k/max_iter`` and the ETA bound).
    n_init : int
        Runs of the fit.

    Returns
    -------
    NullReporter
        A :class:`WidgetReporter` in Jupyter with ``ipywidgets``, a
        :class:`LiveLineReporter` when stderr is a terminal, a
        :class:`LineReporter` otherwise, a :class:`NullReporter` at
        ``verbose=0``; at ``verbose >= 1`` it also prints scikit-learn's
        lines on ``sys.stdout`` while ``SKLEARN_LINES["enabled"]``.

    Examples
    --------
    >>> type(make_reporter(0, name="KMeans", max_iter=10)).__name__
    'NullReporter'
    """
    verbose = _check_verbose(verbose)
    if verbose == 0:
        return NullReporter(name, max_iter, n_init)
    lines = sys.stdout if SKLEARN_LINES["enabled"] else None
    if in_jupyter() and _widgets() is not None:
        reporter = WidgetReporter(name, max_iter, n_init, lines=lines)
    elif _is_terminal(sys.stderr):
        reporter = LiveLineReporter(name, max_iter, n_init, lines=lines)
    else:
        reporter = LineReporter(name, max_iter, n_init, lines=lines)
    return reporter.with_dask_bars() if verbose >= 2 else reporter
