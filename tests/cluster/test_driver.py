"""The fit driver (dqkm.cluster._driver) with a toy algorithm: no Dask, no K-means.

The toy moves a point halfway to the mean of X every step; its runs start at
random points, so with a small ``max_iter`` they end at different objectives.
"""

import json
import os

import numpy as np
import pytest

from dqkm.cluster._checkpoint import CheckpointMismatchError
from dqkm.cluster._driver import IterativeAlgorithm, RunResult, run_fit
from dqkm.parallel.engine import SchedulerLostError


class Halfway(IterativeAlgorithm):
    name = "Halfway"

    def __init__(self, max_iter=4, tol=0.0, lose_at=None):
        self.max_iter, self.tol = max_iter, tol
        self.inits, self.steps, self.lose_at = 0, [], lose_at

    def identity(self, X):
        return {"estimator": self.name, "max_iter": self.max_iter, "n_samples": len(X)}

    def init_state(self, X, rng):
        self.inits += 1
        return rng.normal(0.0, 10.0, size=X.shape[1])

    def step(self, X, state, iteration, tol_abs):
        self.steps.append(iteration)
        if self.lose_at == len(self.steps):
            raise SchedulerLostError("lost the connection to the Dask scheduler tcp://x")
        target = X.mean(axis=0)
        new = (state + target) / 2
        if tol_abs is None:  # the first step turns the relative tolerance into an absolute one
            tol_abs = self.tol * float(X.var(axis=0).mean())
        rec = {"iteration": iteration, "objective": float(((state - target) ** 2).sum()),
               "shift": float(((new - state) ** 2).sum()), "seconds": 0.0}
        return new, rec, tol_abs

    def pack(self, state):
        return {"point": state}

    def unpack(self, arrays):
        return arrays["point"]

    def finalize(self, X, result: RunResult):
        return float(((result.state - X.mean(axis=0)) ** 2).sum())


@pytest.fixture
def X():
    return np.random.default_rng(0).normal(3.0, 1.0, size=(50, 3))


class Stop(Exception):
    pass


def _stop_at(n, seen=None):
    calls = {"n": 0}

    def cb(rec, state):
        calls["n"] += 1
        if seen is not None:
            seen.append(rec["iteration"])
        if calls["n"] == n:
            raise Stop(f"after {n} iterations")
    return cb


def test_n_init_keeps_the_run_with_the_lowest_final_objective(X):
    finals = []

    class Recording(Halfway):
        def finalize(self, X, result):
            value = super().finalize(X, result)
            finals.append(value)
            return value

    fit = run_fit(Recording(max_iter=2), X, n_init=5, random_state=0)
    assert len(finals) == 5 and len(set(finals)) == 5
    assert fit.run == int(np.argmin(finals)) and fit.value == min(finals)
    assert fit.result.n_iter == 2 and [h["iteration"] for h in fit.result.history] == [1, 2]


def test_same_seed_same_fit_and_convergence_stops_a_run(X):
    a = run_fit(Halfway(max_iter=60, tol=1e-6), X, n_init=2, random_state=3)
    b = run_fit(Halfway(max_iter=60, tol=1e-6), X, n_init=2, random_state=3)
    np.testing.assert_array_equal(a.result.state, b.result.state)
    assert a.result.converged and a.result.n_iter < 60
    assert a.result.history[-1]["shift"] <= 1e-6 * float(X.var(axis=0).mean())


def test_callback_sees_every_iteration_in_order_after_its_record_is_kept(X, tmp_path):
    seen = []

    def cb(rec, state):
        seen.append((rec["iteration"], rec["objective"]))
        # the iteration's state is already the checkpoint's latest when the callback runs
        with open(tmp_path / "ck" / "latest.json") as f:
            assert json.load(f)["group"].endswith(f"iter-{rec['iteration']:06d}")

    fit = run_fit(Halfway(max_iter=3), X, n_init=2, random_state=0, callback=cb,
                  checkpoint=tmp_path / "ck")
    assert [s[0] for s in seen] == [1, 2, 3, 1, 2, 3]
    run = seen[3:] if fit.run == 1 else seen[:3]
    assert run == [(h["iteration"], h["objective"]) for h in fit.result.history]
    objectives = [h["objective"] for h in fit.result.history]
    assert objectives == sorted(objectives, reverse=True)


def test_verbose_1_prints_one_line_per_iteration(X, capsys):
    run_fit(Halfway(max_iter=3), X, random_state=0, verbose=1)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if " iteration " in ln]
    assert len(lines) == 3
    for i, line in enumerate(lines, 1):
        assert f"Halfway iteration {i}/3: objective " in line and ", shift " in line
    run_fit(Halfway(max_iter=3), X, random_state=0, verbose=0)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("verbose", [-1, 1.5, "1"])
def test_verbose_must_be_an_int_at_least_0(X, verbose):
    with pytest.raises((ValueError, TypeError),
                       match=r"The 'verbose' parameter of Halfway must be an int in the range "
                             r"\[0, inf\)"):
        run_fit(Halfway(), X, verbose=verbose)


@pytest.mark.parametrize("stop", [2, 5, 9])
def test_resume_equals_uninterrupted(X, tmp_path, stop):
    full = run_fit(Halfway(max_iter=4), X, n_init=3, random_state=1)
    with pytest.raises(Stop):
        run_fit(Halfway(max_iter=4), X, n_init=3, random_state=1, callback=_stop_at(stop),
                checkpoint=tmp_path / "ck")
    resumed = run_fit(Halfway(max_iter=4), X, n_init=3, random_state=1,
                      checkpoint=tmp_path / "ck", resume=True)
    assert (resumed.value, resumed.run) == (full.value, full.run)
    np.testing.assert_array_equal(resumed.result.state, full.result.state)
    assert resumed.result.history == full.result.history


class NoisyHalfway(Halfway):
    """Steps that draw from the fit's generator (as KMultipleMeans's do)."""

    def begin_run(self, rng):
        self.rng = rng

    def step(self, X, state, iteration, tol_abs):
        new, rec, tol_abs = super().step(X, state, iteration, tol_abs)
        return new + self.rng.normal(0.0, 0.1, size=new.shape), rec, tol_abs


def test_resume_of_steps_that_draw_equals_uninterrupted(X, tmp_path):
    full = run_fit(NoisyHalfway(max_iter=4), X, n_init=2, random_state=2)
    with pytest.raises(Stop):
        run_fit(NoisyHalfway(max_iter=4), X, n_init=2, random_state=2, callback=_stop_at(3),
                checkpoint=tmp_path / "ck")
    resumed = run_fit(NoisyHalfway(max_iter=4), X, n_init=2, random_state=2,
                      checkpoint=tmp_path / "ck", resume=True)
    np.testing.assert_array_equal(resumed.result.state, full.result.state)
    assert resumed.result.history == full.result.history


def test_interrupted_run_resumes_where_it_stopped(X, tmp_path):
    """Stopped after iteration 2 of run 2: the resumed fit draws no new start for
    run 2, continues it at iteration 3, then starts run 3."""
    with pytest.raises(Stop):
        run_fit(Halfway(max_iter=4), X, n_init=3, random_state=1, callback=_stop_at(6),
                checkpoint=tmp_path / "ck")
    names = [n for n in os.listdir(tmp_path / "ck") if "iter-" in n]
    assert names == ["run-002-iter-000002"]  # run and iteration named apart
    algo, seen = Halfway(max_iter=4), []
    run_fit(algo, X, n_init=3, random_state=1, checkpoint=tmp_path / "ck", resume=True,
            callback=lambda rec, state: seen.append(rec["iteration"]))
    assert algo.inits == 1  # run 3's start only
    assert seen == [3, 4, 1, 2, 3, 4]


def test_checkpoint_of_an_older_format_is_refused(X, tmp_path):
    run_fit(Halfway(max_iter=2), X, random_state=0, checkpoint=tmp_path / "ck")
    meta = tmp_path / "ck" / "zarr.json"
    node = json.loads(meta.read_text())
    node["attributes"]["dqkm_checkpoint"]["format_version"] = 2
    meta.write_text(json.dumps(node))
    with pytest.raises(CheckpointMismatchError, match=r"has format 2 \(written by an older "
                                                      r"dqkm\).*resume=False"):
        run_fit(Halfway(max_iter=2), X, random_state=0, checkpoint=tmp_path / "ck",
                resume=True)


def test_lost_scheduler_names_the_saved_state(X, tmp_path):
    with pytest.raises(SchedulerLostError, match=r"Halfway.fit: lost the connection .* state "
                                                 r"after iteration 2 of run 2 .*resume=True"):
        run_fit(Halfway(max_iter=3, lose_at=6), X, n_init=2, random_state=0,
                checkpoint=tmp_path / "ck")
    with pytest.raises(SchedulerLostError, match="Pass checkpoint=PATH"):
        run_fit(Halfway(max_iter=3, lose_at=2), X, random_state=0)


def test_history_records_carry_the_absolute_tolerance():
    """Every record names the stopping rule's line, so a saved model's convergence
    plot (``dqkm report --plot``) draws it without the data."""
    import dqkm
    from dqkm.monitor import recorded_tol_abs

    X = np.random.default_rng(0).normal(size=(500, 3)) * [1.0, 2.0, 3.0]
    km = dqkm.KMeans(4, tol=1e-3, random_state=0).fit(X)
    expected = 1e-3 * X.var(axis=0).mean()
    assert all(np.isclose(r["tol_abs"], expected) for r in km.history_)
    assert np.isclose(recorded_tol_abs(km), expected)
