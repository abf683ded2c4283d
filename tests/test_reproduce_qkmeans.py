"""examples/reproduce_qkmeans.py --results: one record per finished (case, K, seed, method)
with settings, values and provenance, written atomically as each seed finishes, read back
instead of recomputed, and rendered by docs/results/render.py as the script's own tables
(the script itself is run at full size by hand; see docs/reproducing/qkmeans.md)."""

import importlib.util
import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs", "results"))

import render  # noqa: E402

# wine (178 × 13), K = 3, one sparsity, a few iterations: a seed takes well under a second
TINY = ["--cases", "wine:3", "--seeds", "2", "--sparsities", "3", "--max-iter", "3",
        "--palm-iter", "2", "--palm-iter-init", "3", "--bisect-steps", "2"]
# the ℓ1 radius bisection's smallest radii leave one cluster on this tiny data: expected
pytestmark = pytest.mark.filterwarnings("ignore:Number of distinct clusters")
METHODS = ["K-means", "QK-means s=3", "K-means + palm4MSA s=3", "K-means ℓ1 (s=3 nnz)",
           "brute-force 1-NN (no partition)"]


@pytest.fixture(scope="module")
def rep():
    spec = importlib.util.spec_from_file_location(
        "reproduce_qkmeans", os.path.join(ROOT, "examples", "reproduce_qkmeans.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _table(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def test_results_hold_one_record_per_case_seed_and_method(rep, tmp_path, capsys):
    path = str(tmp_path / "r.json")
    rep.main(TINY + ["--results", path])
    printed = capsys.readouterr().out
    stored = rep.load_results(path)
    assert [(r["key"]["case"], r["key"]["K"], r["key"]["seed"], r["key"]["method"])
            for r in stored] == [("wine", 3, s, m) for s in (0, 1) for m in METHODS]
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary file left behind
    first = stored[0]
    assert first["key"]["settings"] == {
        "sparsities": [3], "max_iter": 3, "palm_iter": 2, "palm_iter_init": 3,
        "init_factorization": "hierarchical", "hierarchical_refits": 1, "variant": "dqkm",
        "tol_l1": 0.01, "bisect_steps": 2}
    assert set(first["values"]) == {"objective", "ratio", "AMI", "1-NN acc", "nnz", "flops",
                                    "compression", "fit s"}
    assert first["values"]["ratio"] == 1.0 and first["values"]["nnz"] == 3 * 13
    assert 0.5 < first["values"]["1-NN acc"] <= 1.0
    qk = next(r for r in stored if r["key"]["method"] == "QK-means s=3")
    assert qk["method_settings"] == {"sparsity": 3}
    assert qk["values"]["compression"] == pytest.approx(39 / qk["values"]["nnz"])
    l1 = [r for r in stored if r["key"]["method"].startswith("K-means ℓ1")]
    assert l1[0]["method_settings"]["radius"] > 0  # bisected on seed 0, reused on seed 1
    assert l1[0]["method_settings"] == l1[1]["method_settings"]
    prov = first["provenance"]
    assert prov["command"] == "python examples/reproduce_qkmeans.py " + " ".join(
        TINY + ["--results", path])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", prov["date"])
    assert prov["machine"]["cores"] == os.cpu_count()
    assert len(prov["machine"]["load average"]) == 3
    assert prov["dqkm"] and "commit" in prov
    # the rendered records are the table the run printed
    assert _table(render.render_qkmeans(stored)) == _table(printed)


def test_interrupted_run_keeps_finished_seeds_and_rerun_computes_only_the_rest(
        rep, tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "r.json")
    real = rep.run_seed
    calls = []

    def stop_at_seed_1(name, K, seed, a, radius):
        calls.append((seed, radius))
        if seed == 1:
            raise KeyboardInterrupt
        return real(name, K, seed, a, radius)

    monkeypatch.setattr(rep, "run_seed", stop_at_seed_1)
    with pytest.raises(KeyboardInterrupt):
        rep.main(TINY + ["--results", path])
    assert sorted({r["key"]["seed"] for r in rep.load_results(path)}) == [0]
    assert os.listdir(tmp_path) == ["r.json"]

    calls.clear()

    def spy(name, K, seed, a, radius):
        calls.append((seed, radius))
        return real(name, K, seed, a, radius)

    monkeypatch.setattr(rep, "run_seed", spy)
    rep.main(TINY + ["--results", path])
    (seed, radius), = calls  # seed 0 read back; seed 1 with seed 0's stored radius
    assert seed == 1 and radius == rep.load_results(path)[3]["method_settings"]["radius"]
    assert len(rep.load_results(path)) == 2 * len(METHODS)
    complete = capsys.readouterr().out

    def must_not_run(*args):
        raise AssertionError("a stored seed was computed again")

    monkeypatch.setattr(rep, "run_seed", must_not_run)
    rep.main(TINY + ["--results", path])
    assert _table(capsys.readouterr().out) == _table(complete)[-len(METHODS) - 2:]

    # other settings are another case: computed, and stored beside the first ones
    monkeypatch.setattr(rep, "run_seed", real)
    rep.main(TINY[:-1] + ["3", "--seeds", "1", "--results", path])
    assert len(rep.load_results(path)) == 3 * len(METHODS)


def test_summary_records_render_in_the_scripts_format(rep):
    settings = {"max_iter": 10, "hierarchical_refits": 0}
    prov = {"commit": "71de968", "date": "2026-11-24", "machine": {"cores": 2},
            "command": "python examples/reproduce_qkmeans.py --cases blobs:128"}
    records = [{"summary": True, "n_seeds": 5, "provenance": prov, "method_settings": ms,
                "key": {"case": "blobs", "K": 128, "method": m, "settings": settings},
                "values": v} for m, ms, v in [
        ("K-means", {}, {"ratio": {"mean": 1.0, "std": 0.0},
                         "nnz": {"mean": 256000, "std": 0}}),
        ("QK-means s=3", {"sparsity": 3}, {"ratio": {"mean": 1.0273, "std": 0.0003},
                                           "nnz": {"mean": 10633, "std": 47},
                                           "objective": {"mean": 1.0226e10, "std": 1.9e6}})]]
    text = render.render_qkmeans(records)
    assert "### blobs, K = 128 (5 seeds)" in text
    assert "commit 71de968" in text and "summary records" in text
    assert "`python examples/reproduce_qkmeans.py --cases blobs:128`" in text
    assert "| K-means |  | 1.0000 ± 0.0000 |  |  | 256,000 |  |  |  |" in text
    assert "| QK-means s=3 | 1.0226e+10 ± 1.9e+06 | 1.0273 ± 0.0003 |  |  | 10,633 ± 47 |" in text


def test_stored_qkmeans_files_render_next_to_their_data(tmp_path):
    records = [{"key": {"case": "wine", "K": 3, "seed": s, "method": "K-means",
                        "settings": {"max_iter": 3}},
                "values": {"AMI": v}, "provenance": {"command": "c", "date": "2026-01-02T00:00Z",
                                                     "machine": {"cores": 2,
                                                                 "load average": [l, 1, 1]}}}
               for s, v, l in ((0, 0.5, 3.0), (1, 0.7, 5.0))]
    path = tmp_path / "qkmeans_x.json"
    path.write_text(json.dumps(records))
    (out,) = render.write_qkmeans_pages([str(path)])
    assert out == str(tmp_path / "qkmeans_x.md")
    text = open(out, encoding="utf-8").read()
    assert "### wine, K = 3 (2 seeds)" in text and "| K-means |  |  | 0.600 ± 0.100 |" in text
    assert "load average (1 min) 3.0 – 5.0" in text
    # the applications page leaves the QK-means records to their own page
    page = render.write_page(str(tmp_path / "page.md"), [str(path)])
    assert "wine" not in open(page, encoding="utf-8").read()


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0"], "--seeds must be a positive integer, got 0"),
    (["--max-iter", "-1"], "--max-iter must be a positive integer, got -1"),
    (["--hierarchical-refits", "-2"], "--hierarchical-refits must be >= 0, got -2"),
    (["--sparsities", "0", "3"], r"--sparsities must be positive integers, got \[0, 3\]"),
    (["--cases", "iris:3"], r"--cases items are NAME:K .* got 'iris:3'"),
    (["--cases", "wine:1"], r"K >= 2, got 'wine:1'"),
    (["--variant", "fast"], r"--variant: invalid choice: 'fast'"),
])
def test_bad_arguments(rep, capsys, args, message):
    with pytest.raises(SystemExit, match="^2$"):
        rep.main(args)
    assert re.search(message, capsys.readouterr().err)


def test_every_stored_qkmeans_file_is_rendered_on_the_reproduction_page():
    page = open(os.path.join(ROOT, "docs", "reproducing", "qkmeans.md"), encoding="utf-8").read()
    stored = sorted(p for p in os.listdir(os.path.join(ROOT, "docs", "results"))
                    if p.startswith("qkmeans_") and p.endswith(".json"))
    assert "qkmeans_defaults.json" in stored
    for name in stored:
        assert f"```{{include}} ../results/{name[:-len('.json')]}.md\n```" in page, name
        records = render._load(os.path.join(ROOT, "docs", "results", name))
        text = render.render_qkmeans(records)
        assert text.startswith("Measured by `python examples/reproduce_qkmeans.py ")
        assert text.count("| K-means |") == len(render.qkmeans_groups(records))
