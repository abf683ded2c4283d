"""The dqkm command end to end, in subprocesses, on small Zarr stores."""

import subprocess
import sys

import numpy as np
import pytest

from dqkm import io


def run(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "dqkm", *map(str, args)], capture_output=True,
                       text=True, timeout=300)
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
              "--scheduler", "local", "--n-workers", 1, "--no-progress")
    assert "dashboard: http" in out.stdout
    assert io.load(d / "m2.npz").cluster_centers_.shape == (4, 5)


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
