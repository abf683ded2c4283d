"""The dqkm command end to end, in a subprocess, on small Zarr stores.

``run`` hands each command line to one process of tests/_cli_server.py, which runs
``dqkm.cli.main`` with its stdout and stderr (file descriptors 1 and 2) captured, as a
``python -m dqkm`` of its own would be, but imports dask, numba and dqkm once for the
module; ``run(..., fresh=True)`` starts ``python -m dqkm`` itself (the tests of the
entry point, of a cluster's log lines, of Ctrl-C and of a closed pipe do).
"""

import json
import os
import select
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import dqkm
from dqkm import io

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(dqkm.__file__)))
_TIMEOUT = 300


class _CliProcess:
    """The module's one process of tests/_cli_server.py, started at its first command."""

    proc = None

    def __call__(self, argv):
        if self.proc is None or self.proc.poll() is not None:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(os.path.dirname(__file__), "_cli_server.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], _TIMEOUT)[0]:
            self.close()
            raise AssertionError(f"dqkm {' '.join(argv)}: no answer in {_TIMEOUT} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"dqkm {' '.join(argv)}: the CLI process exited "
                                 f"({self.proc.wait()})")
        answer = json.loads(line)
        return SimpleNamespace(returncode=answer["rc"], stdout=answer["out"],
                               stderr=answer["err"])

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


_cli = _CliProcess()


@pytest.fixture(scope="module", autouse=True)
def _cli_process():
    yield
    _cli.close()


def run(*args, check=True, fresh=False):
    argv = [str(a) for a in args]
    if fresh:
        p = subprocess.run([sys.executable, "-m", "dqkm", *argv], capture_output=True,
                           text=True, timeout=_TIMEOUT)
    else:
        p = _cli(argv)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    out = run("generate", "blobs", "--n-samples", 6000, "--n-features", 5, "--centers", 4,
              "--chunks", 1500, "--out", d / "data.zarr", "--no-progress")
    assert "wrote blobs X 6000 x 5" in out.stdout
    return d


def test_generate_fit_predict_info(store):
    d = store
    out = run("fit", "--algorithm", "kmeans", "--n-clusters", 4, d / "data.zarr",
              "--out", d / "model.zarr", "--param", "init=\"k-means||\"")
    assert "KMeans: n_clusters=4 inertia=" in out.stdout
    assert "%" in out.stderr or "|" in out.stderr or "[" in out.stderr  # a progress bar
    run("predict", d / "model.zarr", d / "data.zarr", "--out", d / "labels.zarr")
    labels = io.load_array(d / "labels.zarr").compute()
    y = io.load_array(d / "data.zarr", "y").compute()
    from sklearn.metrics import adjusted_rand_score

    assert labels.shape == (6000,) and adjusted_rand_score(y, labels) > 0.99
    model = io.load(d / "model.zarr")
    np.testing.assert_array_equal(model.predict(io.as_dask_array(d / "data.zarr")).compute(),
                                  labels)
    info = run("info", d / "model.zarr").stdout
    assert "estimator: KMeans" in info and "cluster_centers_" in info and "n_iter_" in info


def test_fit_on_local_cluster_prints_dashboard(store):
    d = store
    out = run("fit", "--n-clusters", 4, d / "data.zarr", "--out", d / "m2.npz",
              "--scheduler", "local", "--n-workers", 1, "--no-progress", fresh=True)
    assert "dashboard: http" in out.stdout
    assert io.load(d / "m2.npz").cluster_centers_.shape == (4, 5)
    # distributed's start/stop log lines only with -vv
    assert "distributed.scheduler" not in out.stderr and "Nanny" not in out.stderr


def test_existing_output_needs_overwrite(store):
    d = store
    run("fit", "--n-clusters", 2, d / "data.zarr", "--out", d / "m3.zarr", "--no-progress")
    p = run("fit", "--n-clusters", 2, d / "data.zarr", "--out", d / "m3.zarr", check=False)
    assert p.returncode == 2
    assert "already exists; pass --overwrite" in p.stderr
    run("fit", "--n-clusters", 3, d / "data.zarr", "--out", d / "m3.zarr", "--overwrite",
        "--no-progress")
    assert io.load(d / "m3.zarr").n_clusters == 3


def test_bad_arguments_are_reported(store):
    d = store
    p = run("fit", "--n-clusters", 0, d / "data.zarr", "--out", d / "bad.zarr", check=False)
    assert p.returncode == 2 and "'n_clusters' parameter of KMeans" in p.stderr
    assert not (d / "bad.zarr").exists()
    p = run("fit", "--n-clusters", 2, d / "missing.zarr", "--out", d / "bad.zarr", check=False)
    assert p.returncode == 2 and "No Zarr store" in p.stderr


def test_report_prints_history_and_plots(store):
    d = store
    run("fit", "--n-clusters", 4, d / "data.zarr", "--out", d / "mr.zarr", "--no-progress",
        "--param", "tol=0", "--max-iter", 4)
    out = run("report", d / "mr.zarr", "--plot", d / "h.png").stdout
    lines = out.splitlines()
    n_iter = io.load(d / "mr.zarr").n_iter_
    assert lines[0].startswith(f"KMeans: {n_iter} iterations")
    assert "objective" in lines[1] and len(lines) == 2 + n_iter + 1
    assert (d / "h.png").stat().st_size > 1000
    p = run("report", d / "mr.zarr", "--plot", d / "h.png", check=False)
    assert p.returncode == 2 and "already exists" in p.stderr


def test_fit_with_checkpoint_and_resume(store):
    d = store
    base = ["fit", "--n-clusters", 4, d / "data.zarr", "--no-progress", "--param", "tol=0",
            "--param", "init=\"random\"", "--max-iter", 6]
    run(*base, "--out", d / "ref.npz")
    run(*base, "--out", d / "ck.npz", "--checkpoint", d / "ck")
    assert (d / "ck" / "latest.json").exists()
    run(*base, "--out", d / "resumed.npz", "--checkpoint", d / "ck", "--resume")
    ref, resumed = io.load(d / "ref.npz"), io.load(d / "resumed.npz")
    np.testing.assert_array_equal(ref.cluster_centers_, resumed.cluster_centers_)
    p = run(*base, "--out", d / "x.npz", "--resume", check=False)
    assert p.returncode == 2 and "--resume needs --checkpoint" in p.stderr


def test_fit_kmm_with_checkpoint_and_resume(store):
    """KMultipleMeans checkpoints too: 3 iterations, then resumed up to 5 = 5 at once."""
    d = store
    base = ["fit", "--algorithm", "kmm", "--n-clusters", 4, d / "data.zarr", "--no-progress"]
    run(*base, "--max-iter", 5, "--out", d / "kmm-ref.npz")
    run(*base, "--max-iter", 3, "--out", d / "kmm-3.npz", "--checkpoint", d / "kmm-ck")
    assert (d / "kmm-ck" / "iter-000003" / "rows").is_dir()
    run(*base, "--max-iter", 5, "--out", d / "kmm-5.npz", "--checkpoint", d / "kmm-ck",
        "--resume")
    ref, resumed = io.load(d / "kmm-ref.npz"), io.load(d / "kmm-5.npz")
    assert resumed.n_iter_ == ref.n_iter_ == 5
    np.testing.assert_array_equal(ref.prototypes_, resumed.prototypes_)
    assert ref.beta_ == resumed.beta_


def test_info_of_a_saved_cluster_index(tmp_path):
    """``info`` names the nested clusterer (parameter unfitted, fitted state) in one line each."""
    import dqkm
    from dqkm.neighbors import ClusterIndex

    X = np.random.default_rng(0).standard_normal((300, 4))
    dqkm.save(ClusterIndex(dqkm.KMeans(3, random_state=0)).fit(X), tmp_path / "idx.npz")
    out = run("info", tmp_path / "idx.npz").stdout
    assert "estimator: ClusterIndex" in out
    assert "clusterer=KMeans(" in out and ") unfitted" in out
    line = next(s for s in out.splitlines() if s.startswith("clusterer_: "))
    assert "KMeans(" in line and " fitted: " in line and "n_iter_=" in line
    assert "array index_X: shape (300, 4) float64" in out


def test_index_neighbors_predict_transform(tmp_path):
    """fit → index (Zarr store, labels) → neighbors / predict / transform, against the same
    calls in Python; bad uses exit 2 with one line and write nothing."""
    import dqkm
    from sklearn.neighbors import NearestNeighbors

    d = tmp_path
    run("generate", "moons", "--n-samples", 3000, "--chunks", 700, "--out", d / "m.zarr",
        "--no-progress")
    run("fit", "--algorithm", "kmeans", "--n-clusters", 6, d / "m.zarr", "--out", d / "km.npz",
        "--no-progress")
    out = run("index", d / "km.npz", d / "m.zarr", "--store", d / "idx.zarr", "--labels",
              d / "m.zarr", "--n-probe", 6, "--out", d / "idx.npz", "--no-progress").stdout
    assert "ClusterIndex: 3000 rows in 6 clusters" in out and "with labels" in out
    out = run("neighbors", d / "idx.npz", d / "m.zarr", "--n-neighbors", 3, "--out",
              d / "knn.zarr", "--no-progress").stdout
    assert "3 nearest indexed rows of 3000 queries" in out
    X = io.load_array(d / "m.zarr", "X").compute()
    y = io.load_array(d / "m.zarr", "y").compute()
    ind = io.load_array(d / "knn.zarr", "indices").compute()
    dist = io.load_array(d / "knn.zarr", "distances").compute()
    ref_d, ref_i = NearestNeighbors(n_neighbors=3).fit(X).kneighbors(X)
    np.testing.assert_array_equal(ind, ref_i)              # n_probe = K: exact
    np.testing.assert_allclose(dist, ref_d, atol=1e-12)
    run("predict", d / "idx.npz", d / "m.zarr", "--out", d / "pred.zarr", "--no-progress")
    np.testing.assert_array_equal(io.load_array(d / "pred.zarr").compute(), y)  # 1-NN = itself
    run("transform", d / "km.npz", d / "m.zarr", "--out", d / "dist.zarr", "--no-progress")
    np.testing.assert_allclose(io.load_array(d / "dist.zarr").compute(),
                               dqkm.load(d / "km.npz").transform(X), rtol=1e-6)

    before = sorted(p.name for p in d.iterdir())
    bad = run("neighbors", d / "km.npz", d / "m.zarr", "--out", d / "x.zarr", check=False)
    assert bad.returncode == 2 and "is a KMeans, which has no kneighbors" in bad.stderr
    bad = run("index", d / "km.npz", d / "m.zarr", "--store", d / "idx.zarr", "--out",
              d / "idx2.npz", check=False)
    assert bad.returncode == 2 and "idx.zarr" in bad.stderr and "--overwrite" in bad.stderr
    bad = run("neighbors", d / "idx.npz", d / "m.zarr", "--n-neighbors", 5000, "--out",
              d / "x.zarr", check=False)
    assert bad.returncode == 2 and "n_neighbors" in bad.stderr
    from dqkm.kernel_approximation import FactorNystroem

    dqkm.save(FactorNystroem("uniform", n_components=20, random_state=0).fit(X), d / "fn.npz")
    before.append("fn.npz")
    bad = run("predict", d / "fn.npz", d / "m.zarr", "--out", d / "x.zarr", check=False)
    assert bad.returncode == 2 and "is a FactorNystroem, which has no predict" in bad.stderr
    assert sorted(p.name for p in d.iterdir()) == sorted(before)


# ------------------------------------------------------------------ one-line errors
def _main(capsys, *args):
    """``dqkm ARGS`` in this process: (exit status, stdout, stderr)."""
    from dqkm import cli

    rc = cli.main([str(a) for a in args])
    printed = capsys.readouterr()
    return rc, printed.out, printed.err


def _assert_one_line(rc, err, *needles, status=2):
    assert rc == status, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dqkm: error: " if status == 2 else "dqkm: "), err
    for needle in needles:
        assert needle in lines[0], (needle, err)


@pytest.fixture
def models(tmp_path):
    """A fitted KMeans saved as .npz and as a Zarr group, and a small data store."""
    import dqkm

    X = np.random.default_rng(0).standard_normal((200, 3))
    km = dqkm.KMeans(3, random_state=0).fit(X)
    dqkm.save(km, tmp_path / "m.npz")
    dqkm.save(km, tmp_path / "m.zarr")
    io.save_array(X, tmp_path / "X.zarr")
    return tmp_path


def test_damaged_model_files_are_one_line_errors(models, capsys):
    """Truncated/empty .npz, a Zarr model with an array removed or a broken header:
    one line naming the path, exit 2, nothing written."""
    import shutil

    d = models
    (d / "trunc.npz").write_bytes((d / "m.npz").read_bytes()[:300])
    (d / "empty.npz").write_bytes(b"")
    shutil.copytree(d / "m.zarr", d / "noarray.zarr")
    shutil.rmtree(d / "noarray.zarr" / "cluster_centers_")
    shutil.copytree(d / "m.zarr", d / "badjson.zarr")
    (d / "badjson.zarr" / "zarr.json").write_text("{garbage")
    for model in ("trunc.npz", "empty.npz", "noarray.zarr", "badjson.zarr"):
        for cmd in (["predict", d / model, d / "X.zarr", "--out", d / "labels.zarr"],
                    ["report", d / model], ["info", d / model]):
            if model == "noarray.zarr" and cmd[0] == "info":
                continue  # info reads the header and lists the arrays that are there
            rc, _, err = _main(capsys, *cmd)
            _assert_one_line(rc, err, str(d / model))
    assert not (d / "labels.zarr").exists()
    # the real command, in its own process
    p = run("predict", d / "trunc.npz", d / "X.zarr", "--out", d / "labels.zarr", check=False)
    _assert_one_line(p.returncode, p.stderr, "trunc.npz", "BadZipFile")


def test_checkpoint_that_is_not_a_checkpoint_is_one_line(models, capsys):
    d = models
    (d / "afile").write_text("not a folder")
    rc, _, err = _main(capsys, "fit", "--n-clusters", 2, d / "X.zarr", "--out", d / "o.npz",
                       "--checkpoint", d / "afile", "--no-progress")
    _assert_one_line(rc, err, "afile")
    (d / "junk").mkdir()
    (d / "junk" / "latest.json").write_text("{not json")
    rc, _, err = _main(capsys, "fit", "--n-clusters", 2, d / "X.zarr", "--out", d / "o.npz",
                       "--checkpoint", d / "junk", "--resume", "--no-progress")
    _assert_one_line(rc, err)
    assert not (d / "o.npz").exists()


def test_ctrl_c_is_one_line_and_exit_130(models):
    """KeyboardInterrupt inside a command (here: while saving, after the fit) in the real
    process: one line, status 130, no traceback and no output left behind."""
    d = models
    code = ("import sys, dqkm.io\n"
            "def interrupted(*a, **k):\n"
            "    raise KeyboardInterrupt\n"
            "dqkm.io.save = interrupted\n"
            "from dqkm.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    p = subprocess.run([sys.executable, "-c", code, "fit", "--n-clusters", "2",
                        str(d / "X.zarr"), "--out", str(d / "o.npz"), "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    _assert_one_line(p.returncode, p.stderr, "interrupted", status=130)
    assert not (d / "o.npz").exists()


def test_internal_bug_keeps_its_traceback_and_v_shows_it_always(models, capsys, monkeypatch):
    import dqkm.io

    d = models

    def buggy_save(*args, **kwargs):
        return int("not a number")  # a ValueError raised outside dqkm's own checks

    monkeypatch.setattr(dqkm.io, "save", buggy_save)
    with pytest.raises(ValueError, match="invalid literal for int"):
        _main(capsys, "fit", "--n-clusters", 2, d / "X.zarr", "--out", d / "o.npz",
              "--no-progress")
    monkeypatch.undo()
    # a user error: one line; with -v (before or after the command) its traceback too
    for argv in (["-v", "info", d / "nope.npz"], ["info", d / "nope.npz", "-v"]):
        rc, _, err = _main(capsys, *argv)
        assert rc == 2 and "Traceback" in err
        assert err.strip().splitlines()[-1].startswith("dqkm: error: ")


def test_verbose_flag_after_the_command():
    from dqkm.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["fit", "x.zarr", "--n-clusters", "2", "--out", "m.npz"]).verbose == 0
    assert parse(["fit", "x.zarr", "--n-clusters", "2", "--out", "m.npz", "-v"]).verbose == 1
    assert parse(["-v", "fit", "x.zarr", "--n-clusters", "2", "--out", "m.npz"]).verbose == 1
    assert parse(["-v", "fit", "-v", "x.zarr", "--n-clusters", "2", "--out", "m.npz"]
                 ).verbose == 2


def test_out_under_a_file_or_unwritable_folder_is_refused_before_the_fit(models, capsys,
                                                                        monkeypatch):
    import os

    import dqkm

    d = models

    def no_fit(self, *args, **kwargs):
        raise AssertionError("the fit ran before --out was checked")

    monkeypatch.setattr(dqkm.KMeans, "fit", no_fit)
    (d / "somefile").write_text("x")
    rc, _, err = _main(capsys, "fit", "--n-clusters", 2, d / "X.zarr", "--out",
                       d / "somefile" / "x.zarr", "--no-progress")
    _assert_one_line(rc, err, "--out", "somefile", "is a file")
    rc, _, err = _main(capsys, "predict", d / "m.npz", d / "X.zarr", "--out",
                       d / "somefile" / "deeper" / "l.zarr")
    _assert_one_line(rc, err, "--out", "somefile", "is a file")
    locked = d / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.access(locked, os.W_OK):  # root writes anywhere: make os.access say what it
        real_access = os.access     # says for everyone else
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.fspath(p) ==
                            str(locked) else real_access(p, mode, **kw))
    rc, _, err = _main(capsys, "fit", "--n-clusters", 2, d / "X.zarr", "--out",
                       locked / "m.npz", "--no-progress")
    locked.chmod(0o755)
    _assert_one_line(rc, err, "--out", "locked", "not writable")


# ------------------------------------------------------------------ informative CLI
def test_v_and_q_are_accepted_anywhere():
    from dqkm.cli import build_parser

    parse = build_parser().parse_args
    fit = ["x.zarr", "--n-clusters", "2", "--out", "m.npz"]
    assert parse(["fit", *fit]).quiet is False
    for argv in (["-q", "fit", *fit], ["fit", "-q", *fit], ["fit", *fit, "-q"],
                 ["fit", "x.zarr", "-q", "--n-clusters", "2", "--out", "m.npz"]):
        ns = parse(argv)
        assert ns.quiet is True and ns.verbose == 0, argv
    ns = parse(["info", "m.npz", "-v", "--quiet"])
    assert ns.quiet is True and ns.verbose == 1


@pytest.mark.parametrize("command", ["generate", "fit", "predict", "transform", "index",
                                     "neighbors", "info", "report", "demo"])
def test_every_option_has_help_and_shows_its_default(command, capsys, monkeypatch):
    from dqkm.cli import main

    monkeypatch.setenv("COLUMNS", "300")  # help text on one line
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    options = [i for i, ln in enumerate(lines) if ln.startswith("  -")]
    assert options
    for i in options:  # the help follows the flag, or is on the next, indented, line
        flag, _, help_text = lines[i].strip().partition("  ")
        if not help_text.strip():
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            help_text = nxt.strip() if nxt.startswith(" " * 10) else ""
        assert help_text, f"{command}: {flag} has no help text"
    text = " ".join(" ".join(lines).split())  # flags and their help on one line
    if command == "fit":
        assert "(default: kmeans)" in text and "(default: 0)" in text  # algorithm, seed
        assert "--n-clusters N_CLUSTERS number of clusters (K); required" in text
        assert "--max-iter MAX_ITER iterations per run at most" in text
    if command == "generate":
        assert "(default: 100000)" in text and "(default: float32)" in text


def test_fit_summary_lines_per_algorithm(models, capsys):
    d = models
    rc, out, _ = _main(capsys, "fit", "--n-clusters", 3, d / "X.zarr", "--out", d / "k.npz",
                       "-q")
    assert rc == 0
    assert out.startswith("KMeans: n_clusters=3 inertia=") and " n_iter=" in out
    sizes = io.load(d / "k.npz").predict(io.load_array(d / "X.zarr").compute())
    counts = np.bincount(sizes, minlength=3)
    assert f"sizes=min {counts.min()}/median {int(np.median(counts))}/max {counts.max()}" in out
    rc, out, _ = _main(capsys, "fit", "--algorithm", "kmm", "--n-clusters", 3, d / "X.zarr",
                       "--out", d / "kmm.npz", "--max-iter", 3, "-q", "--param",
                       "detect_outliers=true")
    assert rc == 0
    kmm = io.load(d / "kmm.npz")
    assert "nan" not in out and "inertia" not in out
    assert out.startswith(f"KMultipleMeans: n_clusters=3 found={kmm.n_components_} "
                          f"prototypes={kmm.n_prototypes_} beta={kmm.beta_:.4g} "
                          f"outliers={kmm.n_outliers_} n_iter=3 sizes=")


def test_closed_pipe_is_quiet(models):
    d = models
    p = subprocess.Popen([sys.executable, "-m", "dqkm", "info", str(d / "m.npz")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before dqkm writes anything
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141
    assert err == ""
    shell = subprocess.run(f"'{sys.executable}' -m dqkm info '{d / 'm.npz'}' | head -1",
                           shell=True, capture_output=True, text=True, timeout=300)
    assert shell.stdout.startswith("estimator: KMeans") and shell.stderr == ""


def test_info_groups_internal_arrays_and_shows_cluster_sizes(models, capsys):
    import dqkm
    from dqkm.cluster.qkmeans import QKMeans

    d = models
    X = io.load_array(d / "X.zarr").compute()
    qk = QKMeans(n_clusters=4, sparsity=2, max_iter=2, palm_iter=5, palm_iter_init=5,
                 random_state=0).fit(X)
    dqkm.save(qk, d / "qk.npz")
    rc, out, _ = _main(capsys, "info", d / "qk.npz")
    assert rc == 0 and "array cluster_centers_: shape (4, 3)" in out
    assert "indptr" not in out and "factor0" not in out
    assert "arrays factors_*: one encoded object in" in out and "--all lists them" in out
    rc, out_all, _ = _main(capsys, "info", d / "qk.npz", "--all")
    assert "array factors_factor0_indptr" in out_all and "array factors_header" in out_all
    counts = np.bincount(qk.labels_, minlength=4)  # labels_ are saved with the model
    assert (f"cluster sizes (fitted rows): 4 clusters, min {counts.min()}, max "
            f"{counts.max()}") in out
    assert " ".join(map(str, counts)) in out
    # a model fitted on a store keeps no labels: counted on a store, or said so
    _main(capsys, "fit", "--n-clusters", 3, d / "X.zarr", "--out", d / "lazy.npz", "-q")
    rc, out, _ = _main(capsys, "info", d / "lazy.npz")
    assert "cluster sizes: not stored in this model; --data STORE counts" in out
    rc, out, _ = _main(capsys, "info", d / "lazy.npz", "--data", d / "X.zarr")
    km = io.load(d / "lazy.npz")
    counts = np.bincount(km.predict(X), minlength=3)
    assert f"cluster sizes (rows of {d / 'X.zarr'}): 3 clusters, min {counts.min()}" in out


def test_report_plot_draws_relative_objective_and_shift_against_tol(models, capsys,
                                                                     monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    d = models
    _main(capsys, "fit", "--n-clusters", 3, d / "X.zarr", "--out", d / "r.npz", "-q",
          "--param", "init=\"random\"", "--max-iter", 5)
    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda self, *a, **k: saved.append(self))
    rc, out, _ = _main(capsys, "report", d / "r.npz", "--plot", d / "r.png", "--data",
                       d / "X.zarr")
    assert rc == 0 and f"wrote {d / 'r.png'}" in out and "no tol line" not in out
    obj_ax, shift_ax = saved[0].axes[:2]
    assert obj_ax.get_yscale() == "log" and shift_ax.get_yscale() == "log"
    assert obj_ax.get_ylabel() == "objective / final − 1"
    X = io.load_array(d / "X.zarr").compute()
    model = io.load(d / "r.npz")
    tol_line = [ln for ln in shift_ax.get_lines() if ln.get_label().startswith("tol (")]
    assert len(tol_line) == 1  # scikit-learn's rule: tol × mean feature variance
    assert tol_line[0].get_ydata()[0] == pytest.approx(model.tol * X.var(axis=0).mean())
    # the fit recorded its tolerance in the history: the same line without --data
    rc, out, _ = _main(capsys, "report", d / "r.npz", "--plot", d / "r2.png")
    assert rc == 0 and "no tol line" not in out
    line2 = [ln for ln in saved[-1].axes[1].get_lines() if ln.get_label().startswith("tol (")]
    assert line2[0].get_ydata()[0] == pytest.approx(tol_line[0].get_ydata()[0])
    history = model.history_
    objective = np.array([r["objective"] for r in history])
    rel = objective / objective[-1] - 1
    np.testing.assert_allclose(obj_ax.get_lines()[0].get_ydata(), rel[rel > 0])


def test_fit_sets_verbose_only_on_estimators_that_have_it():
    from argparse import Namespace

    from dqkm.cli import _fit_verbose

    class WithVerbose:
        def __init__(self):
            self.verbose = 0

        def get_params(self):
            return {"n_clusters": 2, "verbose": self.verbose}

        def set_params(self, **kw):
            self.__dict__.update(kw)

    class Without(WithVerbose):
        def get_params(self):
            return {"n_clusters": 2}

        def set_params(self, **kw):
            raise AssertionError("verbose passed to an estimator without it")

    def args(**kw):
        base = {"param": None, "no_progress": False, "quiet": False, "pass_bars": False}
        return Namespace(**{**base, **kw})

    assert _fit_verbose(Without(), args()) is False
    for kw, level in (({}, 1), ({"pass_bars": True}, 2), ({"quiet": True}, 0),
                      ({"no_progress": True, "pass_bars": True}, 0)):
        model = WithVerbose()
        assert _fit_verbose(model, args(**kw)) is True and model.verbose == level, kw
    model = WithVerbose()
    model.verbose = 2  # --param verbose=2 wins
    _fit_verbose(model, args(param=["verbose=2"], quiet=True))
    assert model.verbose == 2
