"""Progress of an iterative fit: one view per fit, not one per pass.

The fit driver creates one reporter per ``fit`` with :func:`make_reporter` and
feeds it every iteration's history record. What the reporter shows depends on
``verbose`` (scikit-learn's name and meaning):

- ``0``: nothing (records still go to the ``dqkm`` logger at DEBUG level);
- ``1``: one line per iteration with the iteration, objective, shift against
  ``tol`` and seconds per iteration;
- ``2``: as ``1``, plus Dask's own progress bar for every pass over the data.

Interface used by the driver (stable; richer views implement the same):

``make_reporter(verbose, *, name, max_iter, n_init=1)`` returns an object with

- ``start_run(run, n_runs)`` before a run's first iteration (``run`` from 0),
- ``update(record, tol_abs=None)`` after every iteration (``record`` is the
  ``history_`` entry: ``iteration``, ``objective``, ``shift``, ``seconds``, ...;
  ``tol_abs`` the absolute shift tolerance once known),
- ``end_run(n_iter, objective, converged)`` after a run,
- ``close()`` at the end of fit (also on errors).
"""

import logging
import sys

logger = logging.getLogger("dqkm")

__all__ = ["make_reporter", "LineReporter", "NullReporter"]


def _check_verbose(verbose):
    if isinstance(verbose, bool):
        verbose = int(verbose)
    if not isinstance(verbose, int) or verbose < 0:
        raise ValueError(f"verbose must be an integer >= 0 (0: silent, 1: one line per "
                         f"iteration, 2: also Dask's per-pass bars); got {verbose!r}")
    return verbose


class NullReporter:
    """Shows nothing; sends each record to the ``dqkm`` logger at DEBUG level."""

    def __init__(self, name="fit", max_iter=None, n_init=1):
        self.name, self.max_iter, self.n_init = name, max_iter, n_init
        self.run = 0

    def start_run(self, run, n_runs):
        self.run = run

    def update(self, record, tol_abs=None):
        logger.debug("%s run %d iteration %s: objective %s, shift %s", self.name, self.run + 1,
                     record.get("iteration"), record.get("objective"), record.get("shift"))

    def end_run(self, n_iter, objective, converged):
        pass

    def close(self):
        pass


class LineReporter(NullReporter):
    """One line per iteration on ``stream`` (stderr by default)."""

    def __init__(self, name="fit", max_iter=None, n_init=1, stream=None):
        super().__init__(name, max_iter, n_init)
        self.stream = stream if stream is not None else sys.stderr

    def _print(self, text):
        print(text, file=self.stream, flush=True)

    def update(self, record, tol_abs=None):
        super().update(record, tol_abs)
        run = f" run {self.run + 1}/{self.n_init}" if self.n_init > 1 else ""
        tol = f" (tol {tol_abs:.3g})" if tol_abs is not None else ""
        total = f"/{self.max_iter}" if self.max_iter else ""
        self._print(f"{self.name}{run} iteration {record.get('iteration')}{total}: "
                    f"objective {record.get('objective', float('nan')):.6g}, "
                    f"shift {record.get('shift', float('nan')):.3g}{tol}, "
                    f"{record.get('seconds', float('nan')):.2f}s")

    def end_run(self, n_iter, objective, converged):
        state = "converged" if converged else "stopped at max_iter"
        self._print(f"{self.name}: {state} after {n_iter} iterations, objective {objective:.6g}")


def make_reporter(verbose, *, name, max_iter=None, n_init=1):
    """The progress reporter for one fit (see the module docstring)."""
    verbose = _check_verbose(verbose)
    if verbose == 0:
        return NullReporter(name, max_iter, n_init)
    return LineReporter(name, max_iter, n_init)
