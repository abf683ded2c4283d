"""The text views of :mod:`dqkm.progress`: the reporter base and its line reporters.

:class:`NullReporter` is the interface the fit driver feeds (see
:mod:`dqkm.progress`): it sends every record to the ``dqkm`` logger, prints
scikit-learn's lines (``Initialization complete``, ``Iteration N, inertia X``,
``Converged at iteration N: ...``) where it is given a stream for them, and
writes the status and summary text every view shows. :class:`LineReporter`
prints one status line per iteration; :class:`LiveLineReporter` rewrites one
line in place on a terminal. The public names are imported from
:mod:`dqkm.progress`; this module imports nothing from dqkm.
"""

import contextlib
import logging
import math
import sys

logger = logging.getLogger("dqkm")

__all__ = ["DASK_BARS", "LineReporter", "LiveLineReporter", "NullReporter"]

#: Whether Dask's progress bar is shown for every pass over the data: set by
#: :func:`dqkm.parallel.engine.progress` and by a ``verbose=2`` reporter, read by
#: the passes (this module is below :mod:`dqkm.parallel` and imports nothing of it).
DASK_BARS = {"enabled": False}


def _num(record, key):
    value = record.get(key)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _fmt_seconds(s):
    if s is None or not math.isfinite(s):
        return "?"
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(round(s)), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


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


class NullReporter:
    """Shows nothing; sends each record to the ``dqkm`` logger at DEBUG level.

    The base of every reporter: its methods are the interface the fit driver
    calls (``start_run``, ``initialized``, ``update``, ``end_run``, ``close``;
    see :mod:`dqkm.progress`), and :meth:`status` and :meth:`summary` the text
    the other views show.

    Parameters
    ----------
    name : str, default="fit"
        What is fitted, shown first (e.g. ``'KMeans'``).
    max_iter : int, optional
        Iterations per run at most (the ``k/max_iter`` and the ETA bound).
    n_init : int, default=1
        Runs of the fit.
    lines : file-like, optional
        Where scikit-learn's lines go; None: not written.

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

    # ------------------------------------------------------------ the interface
    def start_run(self, run, n_runs):
        """Begin run ``run`` (from 0) of ``n_runs`` (``n_init``), before its first iteration.

        Parameters
        ----------
        run, n_runs : int
            The run's index and the fit's number of runs.

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
        >>> NullReporter("KMeans", lines=sys.stdout).initialized()
        Initialization complete
        """
        self._sklearn_line("Initialization complete")

    def update(self, record, tol_abs=None):
        """Report one iteration: its ``history_`` entry (``iteration``, ``objective``,
        ``shift``, ``seconds``, ...) and the absolute shift tolerance once known.

        Parameters
        ----------
        record : dict
        tol_abs : float, optional

        Returns
        -------
        None

        Examples
        --------
        >>> LineReporter("KMeans", max_iter=10, stream=sys.stdout).update(
        ...     {"iteration": 1, "objective": 12.5, "shift": 0.25, "seconds": 0.5})
        KMeans iteration 1/10: objective 12.5, shift 0.25, 0.50s/it, ETA ≤ 4.5s (10% of max_iter)
        """
        self._seconds.append(_num(record, "seconds"))
        self._last = (record, tol_abs)
        self._sklearn_line(f"Iteration {record.get('iteration')}, inertia "
                           f"{_num(record, 'objective')}")
        logger.debug("%s run %d iteration %s: objective %s, shift %s", self.name, self.run + 1,
                     record.get("iteration"), record.get("objective"), record.get("shift"))

    def end_run(self, n_iter, objective, converged):
        """Report the end of a run: its iterations, final objective and whether it
        converged (False: it stopped at ``max_iter``).

        Parameters
        ----------
        n_iter : int
        objective : float
        converged : bool

        Returns
        -------
        None

        Examples
        --------
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

    def _sklearn_line(self, text):
        if self.lines is not None:
            print(text, file=self.lines, flush=True)

    # ------------------------------------------------------------------ shared text
    def status(self, record, tol_abs=None):
        """The one-line status of an iteration (``record``, as given to :meth:`update`):
        ``name [run r/n] iteration k/max: objective …, shift … (tol …), … s/it,
        ETA ≤ … (p% of max_iter)``; the ETA assumes the run goes on to ``max_iter``.

        Parameters
        ----------
        record : dict
        tol_abs : float, optional
            Shown when given.

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
        """The one-line summary of a run (arguments as in :meth:`end_run`).

        Parameters
        ----------
        n_iter, objective, converged

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
    with spaces so a shorter status erases a longer one, and cleared before
    one of scikit-learn's lines is printed.

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
