"""examples/reproduce_applications.py: the stored results it resumes from, its N/A rule and
its argument checks (the script itself is run at full size by hand; see
docs/reproducing/applications.md)."""

import importlib.util
import json
import math
import os
import re

import numpy as np
import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "examples", "reproduce_applications.py")


@pytest.fixture(scope="module")
def rep():
    spec = importlib.util.spec_from_file_location("reproduce_applications", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SMALL = ["--datasets", "breast cancer", "--seeds", "2", "--no-svm", "--palm-iter-init", "5",
         "--palm-iter", "3"]


def test_results_file_is_written_and_resumed(rep, tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "r.json")
    rep.main(SMALL + ["--results", path])
    first = capsys.readouterr().out
    with open(path) as f:
        stored = json.load(f)
    assert [(r["key"]["dataset"], r["key"]["K"], r["key"]["seed"]) for r in stored] == \
        [("breast cancer", 64, 0), ("breast cancer", 64, 1)]
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary file left behind
    values = dict((tuple(k), v) for k, v in stored[0]["values"])
    assert 0.8 < values[("1-NN acc", "ClusterIndex(K-means)")] <= 1.0
    assert ("SVM acc", "K-means") not in values  # --no-svm

    def must_not_run(*args):
        raise AssertionError("a stored case was computed again")

    monkeypatch.setattr(rep, "run_one", must_not_run)
    rep.main(SMALL + ["--results", path])
    again = capsys.readouterr().out
    table = [line for line in first.splitlines() if line.startswith("|")]
    assert table and table == [line for line in again.splitlines() if line.startswith("|")]

    # other settings are another case: computed, and stored beside the first ones
    monkeypatch.undo()
    rep.main(["--datasets", "breast cancer", "--seeds", "1", "--no-svm", "--palm-iter-init", "6",
              "--palm-iter", "3", "--results", path])
    with open(path) as f:
        assert len(json.load(f)) == 3


def test_runs_sharing_a_results_file_keep_each_others_records(rep, tmp_path):
    path = str(tmp_path / "shared.json")
    a = {"key": {"dataset": "blobs", "K": 128, "seed": 0, "settings": {"x": 1}}, "values": [1]}
    b = {"key": {"dataset": "blobs", "K": 512, "seed": 0, "settings": {"x": 1}}, "values": [2]}
    rep.save_results(path, [a])  # run A
    rep.save_results(path, [b])  # run B, which read the file before A wrote it
    assert rep.load_results(path) == [a, b]
    a2 = dict(a, values=[3])  # the same case again: replaced, not duplicated
    rep.save_results(path, [a2])
    assert rep.load_results(path) == [a2, b]
    assert os.listdir(tmp_path) == ["shared.json"]


def test_not_available_cells(rep):
    assert rep.fmt([math.nan, math.nan]) == "N/A"
    assert rep.fmt([0.5, math.nan, 0.7]) == "0.600 ± 0.100 (2 of 3 seeds)"
    assert rep.fmt(np.array([0.25, 0.75])) == "0.500 ± 0.250"


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0"], "--seeds must be a positive integer, got 0"),
    (["--tree-budget", "0"], "--tree-budget must be positive, got 0.0"),
    (["--blob-ks", "1"], r"--blob-ks must be integers >= 2, got \[1\]"),
    (["--svm-landmarks", "random"], r"--svm-landmarks: invalid choice: 'random'"),
    (["--seeds", "3", "--seed-ids", "1", "3", "-1"],
     r"--seed-ids must lie in 0 … 2 \(--seeds 3\), got \[-1, 3\]"),
])
def test_bad_arguments(rep, capsys, args, message):
    with pytest.raises(SystemExit):
        rep.main(args)
    assert re.search(message, capsys.readouterr().err)


def test_svm_on_chosen_landmarks_only(rep, tmp_path):
    path = str(tmp_path / "r.json")
    rep.main(["--datasets", "breast cancer", "--seeds", "1", "--palm-iter-init", "5",
              "--palm-iter", "3", "--svm-landmarks", "K-means", "uniform", "--results", path])
    with open(path) as f:
        (stored,) = json.load(f)
    assert stored["key"]["settings"]["svm_landmarks"] == ["K-means", "uniform"]
    svm = {k[1]: v for k, v in stored["values"] if k[0] == "SVM acc"}
    assert set(svm) == {"K-means", "uniform"}
    assert all(0.8 < v <= 1.0 for v in svm.values())


def test_would_exceed_projects_without_the_fixed_overhead(rep):
    import time

    X = np.zeros((1000, 2))

    def overhead_then_cheap(Q):  # 20 ms per call + 0.1 ms per row: 0.12 s for all 1000
        time.sleep(0.02 + 1e-4 * len(Q))

    def slow_per_row(Q):  # 1 ms per row: 1 s for all 1000
        time.sleep(1e-3 * len(Q))

    # from 10 rows alone the first would look like 2 s; from 10 and 50 rows it is ≈ 0.12 s
    # (a limit of 1 s leaves room for ≈ 35 ms of sleep overshoot on a loaded machine)
    assert not rep.would_exceed(overhead_then_cheap, X, 1.0)
    assert rep.would_exceed(slow_per_row, X, 0.5)
    assert not rep.would_exceed(slow_per_row, X, 5.0)


def test_seed_ids_run_only_those_seeds(rep, tmp_path, monkeypatch, capsys):
    ran = []

    def fake_run_one(name, K, seed, a, rec):
        ran.append((name, K, seed))
        rec[("AMI", "K-means")].append(seed / 10)

    monkeypatch.setattr(rep, "run_one", fake_run_one)
    path = str(tmp_path / "r.json")
    rep.main(["--datasets", "digits", "--seeds", "5", "--seed-ids", "3", "1", "3",
              "--results", path])
    assert ran == [("digits", 64, 1), ("digits", 64, 3)]
    assert [r["key"]["seed"] for r in rep.load_results(path)] == [1, 3]
    out = capsys.readouterr().out
    assert "### digits, K = 64 (2 seeds)" in out
    assert "| K-means |  |  |  |  |  | 0.200 ± 0.100 |" in out


def test_svm_summary_combines_runs_and_reports_conflicts(rep, tmp_path, capsys):
    def record(K, seed, landmarks, values, **extra):
        settings = {"palm_iter": 30, "svm_iter": 1000, "svm_landmarks": landmarks, **extra}
        return {"key": {"dataset": "blobs", "K": K, "seed": seed, "settings": settings},
                "values": [[["SVM acc", m], v] for m, v in values.items()]
                + [[["AMI", "K-means"], 0.5]]}

    path = str(tmp_path / "r.json")
    rep.save_results(path, [
        record(128, 0, ["K-means"], {"K-means": 0.9}, qk=True),
        record(128, 1, ["K-means", "uniform"], {"K-means": 0.8, "uniform": 0.7}, qk=False),
        record(128, 1, ["K-means"], {"K-means": 0.8}, qk=True),  # the same value again
        record(256, 0, ["uniform"], {"uniform": 0.5}, qk=False),
        record(256, 0, ["K-means", "uniform"], {"uniform": 0.6}, qk=True),  # differs
        record(128, 0, ["K-means"], {"K-means": 0.1}, qk=True, palm_iter=300),  # other group
    ])
    rep.main(["--svm-summary", "--results", path])
    out = capsys.readouterr().out
    first, second = out.split("### LinearSVC accuracy, blobs")[1:]
    assert "| uniform | 0.700 ± 0.000 (1 seed) | 0.500 ± 0.000 (1 seed) |" in first
    assert "| K-means | 0.850 ± 0.050 (2 seeds) |  |" in first
    assert "differing values stored for uniform, K = 256, seed 0: [0.5, 0.6]" in first
    assert '"palm_iter": 300' in second and "| K-means | 0.100 ± 0.000 (1 seed) |" in second

    with pytest.raises(SystemExit):
        rep.main(["--svm-summary", "--results", str(tmp_path / "none.json")])
    assert "--svm-summary reads the file given by --results" in capsys.readouterr().err
