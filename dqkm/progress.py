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
"""

import contextlib
import logging
import math
import sys

logger = logging.getLogger("dqkm")

__all__ = ["DASK_BARS", "SKLEARN_LINES", "make_reporter", "LineReporter", "LiveLineReporter", "NullReporter",
           "WidgetReporter", "in_jupyter", "log_to_stderr", "show_dask_progress"]


#: Whether Dask's progress bar is shown for every pass over the data: set by
#: :func:`dqkm.parallel.engine.progress` and by a ``verbose=2`` reporter, read by
#: the passes (this module is below :mod:`dqkm.parallel` and imports nothing of it).
DASK_BARS = {"enabled": False}

#: Whether a reporter made by :func:`make_reporter` at ``verbose >= 1`` prints
#: scikit-learn's lines on stdout (see the module docstring).
SKLEARN_LINES = {"enabled": True}


def _converged_line(n_iter, record, tol_abs):
    """scikit-learn's line for a converged run: the record's own ``stop_reason``
    when it has one (an algorithm's sentence; empty: no line), else strict
    convergence (nothing moved) or the center shift within the tolerance."""
    if "stop_reason" in record:
        return record["stop_reason"] and f"{record['stop_reason']}."
    shift = _num(record, "shift")
    if shift == 0 or record.get("n_changed") == 0 or tol_abs is None:
        return f"Converged at iteration {n_iter}: strict convergence."
    return f"Converged at iteration {n_iter}: center shift {shift:e} within tolerance {tol_abs:e}."


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


def _fmt_seconds(s):
    if s is None or not math.isfinite(s):
        return "?"
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(round(s)), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def _num(record, key):
    value = record.get(key)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


class NullReporter:
    """Shows nothing; sends each record to the ``dqkm`` logger at DEBUG level.

    The base of every reporter: its methods are the interface the fit driver
    calls (``start_run``, ``initialized``, ``update``, ``end_run``, ``close``), and
    :meth:`status` and :meth:`summary` the text the other views show.

    Parameters
    ----------
    name : str, default="fit"
        What is fitted, shown first (e.g. ``'KMeans'``).
    max_iter : int, optional
        Iterations per run at most (the ``k/max_iter`` and the ETA bound).
    n_init : int, default=1
        Runs of the fit.
    lines : file-like, optional
        Where scikit-learn's lines go (``Initialization complete``,
        ``Iteration N, inertia X``, ``Converged at iteration N: ...``); None:
        not written.

    Examples
    --------
    >>> reporter = NullReporter("KMeans", max_iter=10)
    >>> reporter.start_run(0, 1)
    >>> reporter.update({"iteration": 1, "objective": 12.5, "shift": 0.25, "seconds": 0.5})
    >>> reporter.end_run(1, 12.5, converged=True)
    >>> reporter.close()
    """

    def __init__(self, name="fit", max_iter=None, n_init=1, lines=None):
        self.name, self.max_iter, self.n_init = name, max_iter, n_init
        self.lines = lines  # where scikit-learn's lines go (None: nowhere)
        self._last = ({}, None)  # the last record and tol_abs
        self.run = 0
        self._seconds = []
        self._dask_bars = contextlib.ExitStack()

    def start_run(self, run, n_runs):
        """Begin run ``run`` (from 0) of ``n_runs``, before its first iteration.

        Parameters
        ----------
        run : int
            Index of the run, from 0.
        n_runs : int
            Runs of the fit (``n_init``).

        Returns
        -------
        None

        Examples
        --------
        >>> NullReporter("KMeans", n_init=2).start_run(1, 2)
        """
        self.run = run
        self._seconds = []

    def initialized(self):
        """A fresh run has its initial state: scikit-learn's ``Initialization complete``.

        Returns
        -------
        None

        Examples
        --------
        >>> import sys
        >>> NullReporter("KMeans", lines=sys.stdout).initialized()
        Initialization complete
        """
        self._sklearn_line("Initialization complete")

    def _sklearn_line(self, text):
        if self.lines is not None:
            print(text, file=self.lines, flush=True)

    def update(self, record, tol_abs=None):
        """Report one iteration.

        Parameters
        ----------
        record : dict
            The iteration's ``history_`` entry (``iteration``, ``objective``,
            ``shift``, ``seconds``, ...).
        tol_abs : float, optional
            The absolute shift tolerance, once known.

        Returns
        -------
        None

        Examples
        --------
        >>> import sys
        >>> reporter = LineReporter("KMeans", max_iter=10, stream=sys.stdout)
        >>> reporter.update({"iteration": 1, "objective": 12.5, "shift": 0.25, "seconds": 0.5})
        KMeans iteration 1/10: objective 12.5, shift 0.25, 0.50s/it, ETA ≤ 4.5s (10% of max_iter)
        """
        self._seconds.append(_num(record, "seconds"))
        self._last = (record, tol_abs)
        self._sklearn_line(f"Iteration {record.get('iteration')}, inertia "
                           f"{_num(record, 'objective')}")
        logger.debug("%s run %d iteration %s: objective %s, shift %s", self.name, self.run + 1,
                     record.get("iteration"), record.get("objective"), record.get("shift"))

    def end_run(self, n_iter, objective, converged):
        """Report the end of a run.

        Parameters
        ----------
        n_iter : int
            Iterations the run made.
        objective : float
            Its final objective.
        converged : bool
            Whether it converged (False: it stopped at ``max_iter``).

        Returns
        -------
        None

        Examples
        --------
        >>> import sys
        >>> LineReporter("KMeans", stream=sys.stdout).end_run(3, 11.0, converged=True)
        KMeans: converged after 3 iterations, objective 11
        """
        logger.info("%s run %d: %s after %s iterations, objective %s", self.name, self.run + 1,
                    "converged" if converged else "stopped at max_iter", n_iter, objective)
        line = converged and _converged_line(n_iter, *self._last)
        if line:
            self._sklearn_line(line)

    def close(self):
        """End the view at the end of fit (also on errors); turns Dask's bars off again.

        Returns
        -------
        None

        Examples
        --------
        >>> NullReporter().close()
        """
        self._dask_bars.close()

    def with_dask_bars(self):
        """Turn on Dask's per-pass bars until :meth:`close` (``verbose=2``).

        Returns
        -------
        NullReporter
            ``self``.

        Examples
        --------
        >>> from dqkm.progress import DASK_BARS
        >>> reporter = NullReporter().with_dask_bars()
        >>> DASK_BARS["enabled"]
        True
        >>> reporter.close()
        >>> DASK_BARS["enabled"]
        False
        """
        old = DASK_BARS["enabled"]
        DASK_BARS["enabled"] = True
        self._dask_bars.callback(DASK_BARS.__setitem__, "enabled", old)
        return self

    # ------------------------------------------------------------------ shared text
    def status(self, record, tol_abs=None):
        """The one-line status of an iteration: ``name [run r/n] iteration k/max:
        objective …, shift … (tol …), … s/it, ETA ≤ … (p% of max_iter)``; the ETA
        assumes the run goes on to ``max_iter``.

        Parameters
        ----------
        record : dict
            The iteration's ``history_`` entry.
        tol_abs : float, optional
            The absolute shift tolerance, shown when given.

        Returns
        -------
        str
            The status line (seconds per iteration from the records passed
            to :meth:`update` so far).

        Examples
        --------
        >>> reporter = NullReporter("KMeans", max_iter=10)
        >>> record = {"iteration": 1, "objective": 12.5, "shift": 0.25, "seconds": 0.5}
        >>> reporter.update(record)
        >>> reporter.status(record, tol_abs=0.01)
        'KMeans iteration 1/10: objective 12.5, shift 0.25 (tol 0.01), 0.50s/it, ETA ≤ 4.5s (10% of max_iter)'
        """
        run = f" run {self.run + 1}/{self.n_init}" if self.n_init > 1 else ""
        tol = f" (tol {tol_abs:.3g})" if tol_abs is not None else ""
        total = f"/{self.max_iter}" if self.max_iter else ""
        k = record.get("iteration", len(self._seconds))
        done = [s for s in self._seconds if math.isfinite(s)]
        per_it = sum(done) / len(done) if done else float("nan")
        eta = ""
        if self.max_iter and isinstance(k, int) and math.isfinite(per_it):
            eta = (f", ETA ≤ {_fmt_seconds(per_it * max(self.max_iter - k, 0))} "
                   f"({100 * k / self.max_iter:.0f}% of max_iter)")
        return (f"{self.name}{run} iteration {k}{total}: "
                f"objective {_num(record, 'objective'):.6g}, "
                f"shift {_num(record, 'shift'):.3g}{tol}, {per_it:.2f}s/it{eta}")

    def summary(self, n_iter, objective, converged):
        """The one-line summary of a run.

        Parameters
        ----------
        n_iter, objective, converged
            As in :meth:`end_run`.

        Returns
        -------
        str
            ``name: converged|stopped at max_iter after n iterations, objective …``.

        Examples
        --------
        >>> NullReporter("KMeans").summary(3, 11.0, converged=False)
        'KMeans: stopped at max_iter after 3 iterations, objective 11'
        """
        state = "converged" if converged else "stopped at max_iter"
        return f"{self.name}: {state} after {n_iter} iterations, objective {objective:.6g}"


class LineReporter(NullReporter):
    """One line per iteration on ``stream`` (stderr by default): for logs and pipes.

    Parameters
    ----------
    name, max_iter, n_init, lines
        As in :class:`NullReporter`.
    stream : file-like, optional
        Where the lines go (default ``sys.stderr``).

    Examples
    --------
    >>> import sys
    >>> reporter = LineReporter("KMeans", max_iter=10, stream=sys.stdout)
    >>> reporter.update({"iteration": 1, "objective": 12.5, "shift": 0.25, "seconds": 0.5})
    KMeans iteration 1/10: objective 12.5, shift 0.25, 0.50s/it, ETA ≤ 4.5s (10% of max_iter)
    >>> reporter.end_run(1, 12.5, converged=True)
    KMeans: converged after 1 iterations, objective 12.5
    """

    def __init__(self, name="fit", max_iter=None, n_init=1, stream=None, lines=None):
        super().__init__(name, max_iter, n_init, lines)
        self.stream = stream if stream is not None else sys.stderr

    def _print(self, text):
        print(text, file=self.stream, flush=True)

    def update(self, record, tol_abs=None):
        super().update(record, tol_abs)
        self._print(self.status(record, tol_abs))

    def end_run(self, n_iter, objective, converged):
        super().end_run(n_iter, objective, converged)
        self._print(self.summary(n_iter, objective, converged))


class LiveLineReporter(LineReporter):
    """A single line rewritten in place (carriage return) on a terminal.

    Each run ends its line with a newline and its summary; the line is padded
    with spaces so a shorter status erases a longer one.

    Parameters
    ----------
    name, max_iter, n_init, stream, lines
        As in :class:`LineReporter`.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> reporter = LiveLineReporter("KMeans", max_iter=10, stream=out)
    >>> reporter.update({"iteration": 1, "objective": 12.5, "shift": 0.25, "seconds": 0.5})
    >>> reporter.end_run(1, 12.5, converged=True)
    >>> out.getvalue().splitlines()[-1]
    'KMeans: converged after 1 iterations, objective 12.5'
    """

    def __init__(self, name="fit", max_iter=None, n_init=1, stream=None, lines=None):
        super().__init__(name, max_iter, n_init, stream, lines)
        self._width = 0
        self._open = False

    def _sklearn_line(self, text):
        if self.lines is not None and self._open:  # clear the live line, redrawn next
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._open, self._width = False, 0
        super()._sklearn_line(text)

    def update(self, record, tol_abs=None):
        NullReporter.update(self, record, tol_abs)
        text = self.status(record, tol_abs)
        pad = " " * max(self._width - len(text), 0)
        self._width = len(text)
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._open = True

    def _end_line(self):
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open, self._width = False, 0

    def end_run(self, n_iter, objective, converged):
        self._end_line()
        super().end_run(n_iter, objective, converged)

    def close(self):
        self._end_line()
        super().close()


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
