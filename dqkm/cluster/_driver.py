"""The fit driver: the one loop every iterative dqkm estimator runs through.

An algorithm supplies an :class:`IterativeAlgorithm` — its initial state, one
step ``(X, state) -> (state, record)``, the pack/unpack of its state and its
identity — and :func:`run_fit` does the rest, the same way for every
estimator:

- ``n_init`` runs from one generator seeded by ``random_state``, keeping the
  run with the lowest final objective;
- the history records (one dict per iteration), convergence against the
  absolute tolerance, logging and progress (:func:`dqkm.progress.make_reporter`),
  the user's ``callback(record, state)``;
- the checkpoint: its path checks, lock and identity, one atomic state per
  iteration (run and iteration stored apart), resuming from it, and the
  message that says how to go on when the Dask scheduler is lost.

The order after every iteration is fixed: the record is appended to the
run's history, the state is checkpointed, the progress reporter and the log
get the record, then the callback runs (an exception raised by the callback
leaves the state of that iteration in the checkpoint).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
from sklearn.utils import check_random_state

from ..parallel.engine import SchedulerLostError
from ..progress import make_reporter
from .._validation import VERBOSE, check_value
from ._checkpoint import Checkpoint, checkpointing, scheduler_lost

logger = logging.getLogger(__name__)

__all__ = ["IterativeAlgorithm", "Composed", "RunResult", "FitResult", "run_fit",
           "stored_identity", "supports_sample_weight"]


@dataclass(frozen=True)
class RunResult:
    """One run's outcome: the final ``state``, its number of iterations, its
    history, whether it converged, the objective of its last step (w.r.t. the
    state that step started from) and its last ``shift``; a zero shift means
    the last step already used the final state."""

    state: object
    n_iter: int
    history: list = field(default_factory=list)
    converged: bool = False
    last_objective: float = np.nan
    shift: float = np.inf


@dataclass(frozen=True)
class FitResult:
    """What :func:`run_fit` returns: the best run, its final objective and, when
    the algorithm's :meth:`~IterativeAlgorithm.finalize` computed them in the
    same pass, the labels of X's rows under its final state (else None)."""

    value: float
    result: RunResult
    run: int
    labels: object = None


class IterativeAlgorithm(ABC):
    """The protocol an iterative algorithm gives the driver (and nothing else).

    Attributes
    ----------
    name : str
        Shown in logs and progress lines and in error messages
        (``"<name>.fit: ..."``); usually the estimator's class name.
    max_iter : int
        Steps per run at most.
    tol : float
        Relative tolerance, passed to :meth:`step` until the step has turned it
        into an absolute one (``tol == 0`` is an absolute tolerance of 0).
    """

    name: str = "fit"
    max_iter: int = 300
    tol: float = 0.0

    @abstractmethod
    def identity(self, X) -> dict:
        """What a checkpoint must match (JSON-serialisable); called once per
        fit, only with a checkpoint, with the lock held (it may pass over X)."""

    @abstractmethod
    def init_state(self, X, rng):
        """The state a run starts from; ``rng`` is the fit's
        ``numpy.random.Generator`` (shared by the runs, in order)."""

    @abstractmethod
    def step(self, X, state, iteration, tol_abs):
        """One iteration (``iteration`` counts from 1 in every run).

        ``tol_abs`` is the absolute tolerance, or None in a run's first step
        when the step computes it (e.g. from the variance of X, in the same
        pass). Returns ``(state, record, tol_abs)``: the new state, the history
        record (a dict with at least ``iteration``, ``objective``, ``shift``
        and ``seconds``, JSON-serialisable) and the absolute tolerance.
        """

    @abstractmethod
    def pack(self, state) -> dict:
        """The state as a dict of NumPy arrays (for the checkpoint)."""

    @abstractmethod
    def unpack(self, arrays: dict):
        """The inverse of :meth:`pack`."""

    @abstractmethod
    def finalize(self, X, result: RunResult):
        """The final objective of a run (compared across runs: lowest wins).

        An algorithm that computes the labels of X's rows in the same pass may
        return ``(objective, labels)``: the driver keeps the best run's labels
        (:attr:`FitResult.labels`) and drops the others'.
        """

    # Optional hooks, with defaults that suit most algorithms.
    def converged(self, record, tol_abs, history=()) -> bool:
        """Whether a run stops after ``record``: its shift is at most ``tol_abs``.
        ``history`` holds the run's records so far, ``record`` last (a resumed run's
        include the checkpoint's), for a rule that compares iterations.  A rule may
        set ``record["stop_reason"]``, the sentence the progress lines end with."""
        return record["shift"] <= tol_abs

    def describe_saved(self, run, iteration):
        """How the message of a lost scheduler names the checkpoint's latest state."""
        return f"iteration {iteration} of run {run + 1}"

    def initial_tol_abs(self):
        """The absolute tolerance known before the first step (None: the first
        step computes it; ``tol == 0`` gives 0)."""
        return 0.0 if not self.tol else None

    def begin_run(self, rng):
        """Called before every run, fresh or resumed, with the fit's generator
        (for a step that draws random numbers: the driver checkpoints the
        generator's state after every step and restores it on resume)."""

    def pack_meta(self, state) -> dict:
        """JSON-serialisable parts of the state kept beside :meth:`pack`'s arrays."""
        return {}

    def save_extra(self, state):
        """A callable ``f(directory)`` writing more of the state into a
        checkpoint's state group (e.g. per-chunk data on the workers), or None."""
        return None

    def load_extra(self, state, directory, meta):
        """The resumed state completed from what :meth:`save_extra` wrote in
        ``directory`` and what :meth:`pack_meta` returned (``meta``)."""
        return state

    def close(self):
        """Called once when the fit ends, however it ends: release what the
        algorithm keeps beside the state (e.g. per-row state on the workers or
        in files it created)."""

    checkpoint_optional: tuple = ()
    """Glob patterns of state-group directories the loader does without."""


class Composed(IterativeAlgorithm):
    """An algorithm run as ``inner`` is, under another identity and name: what
    an estimator that runs another's algorithm on data of its own overrides
    (e.g. SparseEmbeddedKMeans runs KMeans's steps on its embedding)."""

    def __init__(self, inner: IterativeAlgorithm):
        self.inner = inner
        self.name, self.max_iter, self.tol = inner.name, inner.max_iter, inner.tol
        self.checkpoint_optional = inner.checkpoint_optional

    def identity(self, X):
        return self.inner.identity(X)

    def init_state(self, X, rng):
        return self.inner.init_state(X, rng)

    def step(self, X, state, iteration, tol_abs):
        return self.inner.step(X, state, iteration, tol_abs)

    def pack(self, state):
        return self.inner.pack(state)

    def unpack(self, arrays):
        return self.inner.unpack(arrays)

    def finalize(self, X, result):
        return self.inner.finalize(X, result)

    def converged(self, record, tol_abs, history=()):
        return self.inner.converged(record, tol_abs, history)

    def initial_tol_abs(self):
        return self.inner.initial_tol_abs()

    def begin_run(self, rng):
        return self.inner.begin_run(rng)

    def pack_meta(self, state):
        return self.inner.pack_meta(state)

    def save_extra(self, state):
        return self.inner.save_extra(state)

    def load_extra(self, state, directory, meta):
        return self.inner.load_extra(state, directory, meta)

    def close(self):
        return self.inner.close()


def supports_sample_weight(algorithm) -> bool:
    """Whether the class that defines ``algorithm``'s ``step`` declares
    ``supports_sample_weight = True`` in its own body: a subclass that
    replaces the step must say that its step reads ``sample_weight``."""
    for cls in type(algorithm).__mro__:
        if "step" in vars(cls):
            return bool(vars(cls).get("supports_sample_weight", False))
    return False


def stored_identity(checkpoint):
    """The identity recorded in the checkpoint at ``checkpoint`` (``{}`` if none),
    read without a lock: for what must be known before the fit's identity
    can be formed (e.g. the seed an embedding was drawn with)."""
    return Checkpoint(checkpoint, {}).stored_identity() if checkpoint else {}


def _prefixed(prefix, arrays):
    return {prefix + k: v for k, v in arrays.items()}


def _unprefixed(prefix, arrays):
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


def _result_meta(result: RunResult):
    return {"iteration": result.n_iter, "history": result.history,
            "converged": bool(result.converged), "last_objective": result.last_objective,
            "shift": result.shift}


def _result_from_meta(state, meta):
    return RunResult(state=state, n_iter=meta["iteration"], history=list(meta["history"]),
                     converged=meta["converged"], last_objective=meta["last_objective"],
                     shift=meta["shift"])


class _Fit:
    """One call of :func:`run_fit`: its runs, best run, checkpoint and reporter."""

    def __init__(self, algorithm, X, n_init, callback, ck, checkpoint, reporter):
        self.algo, self.X, self.n_init = algorithm, X, n_init
        self.callback, self.ck, self.checkpoint = callback, ck, checkpoint
        self.reporter = reporter
        self.best = None  # (value, RunResult, run[, labels])
        self.saved = None  # (run, iteration) of the checkpoint's latest state

    def _save(self, run, state, history, tol_abs, converged, rng):
        algo = self.algo
        arrays = _prefixed("current_", algo.pack(state))
        best_meta = None
        if self.best is not None:
            value, res, best_run = self.best[:3]
            arrays.update(_prefixed("best_", algo.pack(res.state)))
            best_meta = {"value": value, "run": best_run, "state_meta": algo.pack_meta(res.state),
                         **_result_meta(res)}
        rec = history[-1]
        self.ck.save(rec["iteration"], arrays, {
            "run": run, "iteration": rec["iteration"], "history": history, "tol_abs": tol_abs,
            "converged": bool(converged), "shift": rec["shift"],
            "last_objective": rec["objective"], "rng": rng.bit_generator.state,
            "state_meta": algo.pack_meta(state), "best": best_meta},
            extra=algo.save_extra(state), run=run)
        self.saved = (run, rec["iteration"])

    def _lost(self, error):
        saved = None
        if self.ck is not None and self.saved is not None:
            saved = self.algo.describe_saved(*self.saved)
        return scheduler_lost(self.algo.name, error, self.checkpoint, saved)

    def iterate(self, run, state, rng, start=0, history=(), tol_abs=None):
        """Steps ``start + 1 … max_iter`` of run ``run`` from ``state``."""
        algo, history = self.algo, list(history)
        if tol_abs is None:
            tol_abs = algo.initial_tol_abs()
        converged, shift, objective, it = False, np.inf, np.nan, start
        for it in range(start + 1, algo.max_iter + 1):
            t0 = time.perf_counter()
            state, rec, tol_abs = algo.step(self.X, state, it, tol_abs)
            rec.setdefault("seconds", time.perf_counter() - t0)
            if tol_abs is not None:  # the stopping rule's line, for plots (dqkm report)
                rec.setdefault("tol_abs", float(tol_abs))
            shift, objective = float(rec["shift"]), float(rec["objective"])
            history.append(rec)
            converged = bool(algo.converged(rec, tol_abs, history))
            if self.ck is not None:
                self._save(run, state, history, tol_abs, converged, rng)
            self.reporter.update(rec, tol_abs)
            logger.info("%s run %d iteration %d: objective %.6g, shift %.3g, %.3fs", algo.name,
                        run + 1, it, objective, shift, rec["seconds"])
            if self.callback is not None:
                self.callback(rec, state)
            if converged:
                break
        return RunResult(state=state, n_iter=it, history=history, converged=converged,
                         last_objective=objective, shift=shift)

    def resume(self, saved, rng):
        """The first run to do and, if the checkpoint's run is unfinished, its result."""
        arrays, meta = saved
        algo = self.algo
        self.ck.check_max_iter(algo.max_iter, meta["iteration"], meta["run"])
        logger.info("resuming from %s at run %d, iteration %d", self.checkpoint,
                    meta["run"] + 1, meta["iteration"])
        rng.bit_generator.state = meta["rng"]
        self.saved = (meta["run"], meta["iteration"])
        directory = self.ck.latest_path()
        if meta.get("best") is not None:
            b = meta["best"]
            state = algo.load_extra(algo.unpack(_unprefixed("best_", arrays)), directory,
                                    b.get("state_meta", {}))
            self.best = (b["value"], _result_from_meta(state, b), b.get("run", 0))
        state = algo.load_extra(algo.unpack(_unprefixed("current_", arrays)), directory,
                                meta.get("state_meta", {}))
        return meta["run"], state, meta

    def run(self, rng, saved):
        start_run = 0
        if saved is not None:
            start_run, state, meta = self.resume(saved, rng)
        for run in range(start_run, self.n_init):
            self.reporter.start_run(run, self.n_init)
            self.algo.begin_run(rng)
            try:
                if saved is not None and run == start_run:
                    if meta["converged"] or meta["iteration"] >= self.algo.max_iter:
                        res = _result_from_meta(state, meta)
                    else:
                        res = self.iterate(run, state, rng, meta["iteration"],
                                           meta["history"], meta["tol_abs"])
                else:
                    state = self.algo.init_state(self.X, rng)
                    self.reporter.initialized()
                    res = self.iterate(run, state, rng)
                value, labels = _value_and_labels(self.algo.finalize(self.X, res))
            except SchedulerLostError as e:
                raise self._lost(e) from e
            self.reporter.end_run(res.n_iter, value, res.converged)
            logger.info("%s run %d/%d: objective %.6g after %d iterations", self.algo.name,
                        run + 1, self.n_init, value, res.n_iter)
            if self.best is None or value < self.best[0]:
                self.best = (value, res, run, labels)
        value, res, run, labels = (*self.best, None)[:4]
        return FitResult(value=value, result=res, run=run, labels=labels)


def _value_and_labels(out):
    """:meth:`IterativeAlgorithm.finalize`'s objective, or objective and labels."""
    if isinstance(out, tuple):
        value, labels = out
        return float(value), labels
    return float(out), None


def run_fit(algorithm: IterativeAlgorithm, X, *, n_init=1, random_state=None, callback=None,
            verbose=0, checkpoint=None, resume=False, inputs=None) -> FitResult:
    """Run ``algorithm`` on ``X``: ``n_init`` runs, the best kept.

    Parameters
    ----------
    algorithm : IterativeAlgorithm
    X : dask.array.Array
        The data every step reads (validated by the estimator).
    n_init : int, default=1
        Runs, each from :meth:`IterativeAlgorithm.init_state`; the one with the
        lowest :meth:`IterativeAlgorithm.finalize` value is returned (the first
        on ties).
    random_state : int, RandomState instance or None
        Seeds the generator the runs draw their initial states from, in order.
    callback : callable, optional
        ``callback(record, state)`` after every iteration.
    verbose : int, default=0
        Progress shown (see :mod:`dqkm.progress`).
    checkpoint : str or PathLike, optional
        Directory of the fit's checkpoint (see :meth:`dqkm.KMeans.fit`).
    resume : bool, default=False
        Continue from ``checkpoint``; the result equals an uninterrupted fit's.
    inputs : object, optional
        X as the user gave it: the local stores it reads are protected from
        being used as the checkpoint.

    Returns
    -------
    FitResult
    """
    check_value("verbose", verbose, VERBOSE, algorithm.name)
    rs = check_random_state(random_state)
    rng = np.random.default_rng(rs.randint(2**31 - 1))
    reporter = make_reporter(verbose, name=algorithm.name, max_iter=algorithm.max_iter,
                             n_init=n_init)
    try:
        with checkpointing(checkpoint, inputs=inputs, resume=resume,
                           optional=algorithm.checkpoint_optional,
                           identity=lambda: algorithm.identity(X)) as (ck, saved):
            fit = _Fit(algorithm, X, n_init, callback, ck, checkpoint, reporter)
            return fit.run(rng, saved)
    finally:
        try:
            algorithm.close()
        finally:
            reporter.close()
