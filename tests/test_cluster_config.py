"""Cluster configs: schema validation, LocalCluster, TLS, and a real multi-process cluster."""

import contextlib
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import yaml
from distributed.security import Security

from dqkm import cluster_config
from dqkm.cluster_config import (BACKENDS, CONFIG_DIR, available_configs, build_security,
                                 dask_config_for, get_client, load_config)

from ._multiprocess_cluster import MultiprocessCluster

SHIPPED = ["existing", "kubernetes", "local", "pbs", "slurm", "ssh"]
MTT = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"


def _write(tmp_path, cfg, name="c.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


# ------------------------------------------------------------------ shipped files
def test_every_backend_has_a_shipped_config():
    assert available_configs() == SHIPPED
    assert set(SHIPPED) == set(BACKENDS)
    assert (CONFIG_DIR / "README.md").is_file()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_validates_without_importing_backend(name):
    # validation must work where dask-jobqueue / dask-kubernetes / asyncssh are absent,
    # and must not import them where they are present
    before = {m for m in ("dask_jobqueue", "dask_kubernetes", "asyncssh") if m in sys.modules}
    by_name = load_config(name)
    by_path = load_config(CONFIG_DIR / f"{name}.yaml")
    assert by_name == by_path
    assert by_name["backend"] == name
    after = {m for m in ("dask_jobqueue", "dask_kubernetes", "asyncssh") if m in sys.modules}
    assert after == before
    # a validated config validates again unchanged (defaults are valid values)
    assert load_config(by_name) == by_name


def test_every_key_of_every_section_is_documented_in_readme():
    readme = (CONFIG_DIR / "README.md").read_text()
    for backend, (schema, _) in BACKENDS.items():
        assert f"`{backend}`" in readme
        for key in schema:
            assert f"`{key}`" in readme, (backend, key)
    for key in list(cluster_config._CLIENT) + list(cluster_config._SECURITY):
        assert f"`{key}`" in readme, key


def test_defaults_are_filled(tmp_path):
    cfg = load_config({"backend": "local"})
    assert cfg["local"]["memory_limit"] == "auto"
    assert cfg["local"]["dashboard_address"] == "127.0.0.1:8787"
    assert cfg["local"]["malloc_trim_threshold"] is None
    assert cfg["client"]["wait_for_workers"] == 0
    assert cfg["security"] is None
    cfg = load_config("local", overrides={"local": {"n_workers": 3}, "client": {"timeout": 5}})
    assert cfg["local"]["n_workers"] == 3 and cfg["local"]["threads_per_worker"] == 1
    assert cfg["client"]["timeout"] == 5


def test_malloc_trim_threshold_maps_to_nanny_config():
    assert dask_config_for(load_config("local"))[MTT] is None
    cfg = load_config({"backend": "local", "local": {"malloc_trim_threshold": 65536},
                       "dask_config": {"distributed.comm.timeouts.connect": "20s"}})
    assert dask_config_for(cfg) == {MTT: 65536, "distributed.comm.timeouts.connect": "20s"}
    assert dask_config_for(load_config("slurm")) == {}


# ------------------------------------------------------------------ errors
def test_unknown_key_names_key_section_and_file(tmp_path):
    raw = yaml.safe_load((CONFIG_DIR / "ssh.yaml").read_text())
    raw["ssh"]["hostz"] = raw["ssh"].pop("hosts")
    path = tmp_path / "cluster_configs" / "ssh.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=r"cluster_configs/ssh\.yaml: unknown key 'hostz' in "
                                         r"section 'ssh'; allowed: hosts, connect_options, "):
        load_config(path)


def test_missing_required_key_names_it(tmp_path):
    path = _write(tmp_path, {"backend": "slurm", "slurm": {"cores": 4}})
    with pytest.raises(ValueError, match=r"c\.yaml: missing required key 'memory' in section "
                                         r"'slurm'"):
        load_config(path)
    with pytest.raises(ValueError, match="missing required key 'backend'"):
        load_config({"local": {}})
    with pytest.raises(ValueError, match="missing required key 'name' in section 'kubernetes'"):
        load_config({"backend": "kubernetes", "kubernetes": {"n_workers": 1}})
    with pytest.raises(ValueError, match="missing required section 'existing'"):
        load_config({"backend": "existing"})
    with pytest.raises(ValueError, match="missing required key 'tls_client_cert' in section "
                                         "'security'"):
        load_config({"backend": "existing", "existing": {"address": "tls://127.0.0.1:1"},
                     "security": {"tls_ca_file": "ca.pem"}})


@pytest.mark.parametrize("raw, err, match", [
    ({"backend": "yarn"}, ValueError, r"'backend' must be one of local, existing, ssh, slurm, "
                                      r"pbs, kubernetes; got 'yarn'"),
    ({"backend": "local", "slurm": {}}, ValueError,
     r"unknown top-level key 'slurm' \(section 'slurm' belongs to backend 'slurm', but "
     r"backend is 'local'\)"),
    ({"backend": "local", "local": {"n_workers": "two"}}, TypeError,
     r"key 'n_workers' in section 'local' must be int or null; got str 'two'"),
    ({"backend": "local", "local": {"processes": "yes"}}, TypeError,
     r"'processes' in section 'local' must be bool; got str"),
    ({"backend": "local", "local": {"n_workers": 0}}, ValueError,
     r"'n_workers' in section 'local' must be >= 1; got 0"),
    ({"backend": "local", "local": []}, TypeError, r"section 'local' must be a mapping"),
    ({"backend": "existing", "existing": {"address": "tcp://a:1", "scheduler_file": "s"}},
     ValueError, r"exactly one of 'address' or 'scheduler_file'; got \['address', "
                 r"'scheduler_file'\]"),
    ({"backend": "ssh", "ssh": {"hosts": ["a"]}}, ValueError,
     r"'hosts' in section 'ssh' must list the scheduler host then at least one worker"),
    ({"backend": "ssh", "ssh": {"hosts": ["a", 3]}}, TypeError,
     r"'hosts' in section 'ssh' must be list\[str\]"),
    ({"backend": "ssh", "ssh": {"hosts": ["a", "b"], "connect_options": [{}]}}, ValueError,
     r"one per host \(2\); got a list of 1"),
    ({"backend": "slurm", "slurm": {"cores": 1, "memory": "1GB", "jobs": 2, "n_workers": 2}},
     ValueError, r"at most one of 'jobs', 'n_workers' or 'adapt'; got \['jobs', 'n_workers'\]"),
    ({"backend": "pbs", "pbs": {"cores": 1, "memory": "1GB", "adapt": {"maximum": 3}}},
     ValueError, r"unknown key 'maximum' in section 'pbs.adapt'; allowed: minimum_jobs, "
                 r"maximum_jobs"),
    ({"backend": "pbs", "pbs": {"cores": 1, "memory": "1GB",
                                "adapt": {"minimum_jobs": 4, "maximum_jobs": 2}}},
     ValueError, r"0 <= minimum_jobs <= maximum_jobs; got minimum_jobs=4, maximum_jobs=2"),
    ({"backend": "kubernetes", "kubernetes": {"name": "x", "resources": {"request": {}}}},
     ValueError, r"unknown key 'request' in section 'kubernetes.resources'"),
    ({"backend": "kubernetes", "kubernetes": {"name": "x"},
      "security": {"tls_ca_file": "a", "tls_client_cert": "b"}}, ValueError,
     r"backend 'kubernetes' does not take a 'security' section"),
    ({"backend": "local", "client": {"wait_for_workers": -1}}, ValueError,
     r"'wait_for_workers' in section 'client' must be >= 0"),
    ({"backend": "local", "dask_config": ["a"]}, TypeError,
     r"section 'dask_config' must map dask config keys"),
])
def test_bad_values_are_rejected(raw, err, match):
    with pytest.raises(err, match=match):
        load_config(raw)


def test_bad_path_or_name(tmp_path):
    with pytest.raises(ValueError, match=r"unknown cluster config 'lokal': not a file, nor one "
                                         r"of the shipped configs \(existing, kubernetes, local"):
        load_config("lokal")
    with pytest.raises(FileNotFoundError, match=r"cluster config file '.*nope\.yaml' does not"):
        load_config(str(tmp_path / "nope.yaml"))
    with pytest.raises(TypeError, match=r"'path_or_name' parameter must be a path, the name of "
                                        r"a shipped config .* or a dict; got int"):
        load_config(3)
    with pytest.raises(TypeError, match=r"'overrides' parameter must be a dict; got list"):
        load_config("local", overrides=[1])
    with pytest.raises(TypeError, match=r"l\.yaml: a cluster config must be a mapping with a "
                                        r"'backend' key; got list"):
        load_config(_write(tmp_path, ["backend", "local"], "l.yaml"))
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(TypeError, match=r"empty\.yaml: .* got null"):
        load_config(tmp_path / "empty.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("backend: [local\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize("backend, module, package", [
    ("slurm", "dask_jobqueue", "dask-jobqueue"),
    ("pbs", "dask_jobqueue", "dask-jobqueue"),
    ("kubernetes", "dask_kubernetes.operator", "dask-kubernetes"),
    ("ssh", "asyncssh", "asyncssh"),
])
def test_missing_optional_backend_names_the_extra(monkeypatch, backend, module, package):
    # a None entry in sys.modules makes `import module` raise ImportError, installed or not
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=rf"the '{backend}' cluster backend needs {package}"
                                          rf".*pip install 'dqkm\[cluster\]'"):
        get_client(backend)


# ------------------------------------------------------------------ LocalCluster
def test_local_yaml_starts_a_cluster_and_computes(monkeypatch, caplog):
    # an earlier nanny in this process may have exported the variable; its absence in the
    # workers is what malloc_trim_threshold: null promises
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with caplog.at_level("INFO", logger="dqkm.cluster_config"):
        client = get_client("local",
                            overrides={"local": {"dashboard_address": "127.0.0.1:0"}})
    try:
        cluster = client.cluster
        assert type(cluster).__name__ == "LocalCluster"
        info = client.scheduler_info(n_workers=-1)["workers"]
        assert len(info) == 2
        assert sorted(w["nthreads"] for w in info.values()) == [1, 1]
        assert client.dashboard_link.startswith("http://")
        assert _http_status(client, "/status") == 200
        assert f"dashboard: {client.dashboard_link}" in caplog.text
        envs = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert list(envs.values()) == [None, None]
        x = da.arange(1000, chunks=100)
        assert int((x * 2).sum().compute()) == 999_000
        # a full fit on it, as a user would run one
        from sklearn.cluster import KMeans as SkKMeans
        from sklearn.datasets import make_blobs

        import dqkm

        X, _ = make_blobs(2000, 4, centers=3, random_state=0)
        km = dqkm.KMeans(3, init=X[:3]).fit(da.from_array(X, chunks=(500, -1)))
        ref = SkKMeans(3, init=X[:3], n_init=1, algorithm="lloyd").fit(X)
        np.testing.assert_array_equal(km.labels_.compute(), ref.labels_)
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
    finally:
        client.close()
    assert client.status == "closed"
    assert cluster.status.name == "closed"


def _http_status(client, path):
    port = client.scheduler_info()["services"]["dashboard"]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _openssl_cert(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a self-signed certificate "
                    "(the cryptography package is not installed either)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_security_section_maps_to_security_object(tmp_path):
    cert, key = _openssl_cert(tmp_path)
    sec = load_config({"backend": "existing", "existing": {"address": "tls://127.0.0.1:1"},
                       "security": {"tls_ca_file": str(cert), "tls_client_cert": str(cert),
                                    "tls_client_key": str(key),
                                    "tls_worker_cert": str(cert)}})["security"]
    s = build_security(sec)
    assert s.require_encryption is True
    assert (s.tls_ca_file, s.tls_client_cert, s.tls_client_key) == (str(cert), str(cert),
                                                                     str(key))
    # scheduler and worker certificates default to the client's
    assert (s.tls_scheduler_cert, s.tls_scheduler_key) == (str(cert), str(key))
    assert (s.tls_worker_cert, s.tls_worker_key) == (str(cert), str(key))
    # ssh: the same settings travel as dask config to the remote scheduler and workers,
    # which build Security() from it
    ssh = load_config({"backend": "ssh", "ssh": {"hosts": ["a", "b"]}, "security": sec})
    conf = dask_config_for(ssh)
    assert conf["distributed.comm.tls.worker.cert"] == str(cert)
    assert conf["distributed.comm.require-encryption"] is True
    with dask.config.set(conf):
        remote = Security()
    fields = ["require_encryption", "tls_ca_file", "tls_client_cert", "tls_client_key",
              "tls_scheduler_cert", "tls_scheduler_key", "tls_worker_cert", "tls_worker_key"]
    assert [getattr(remote, f) for f in fields] == [getattr(s, f) for f in fields]
    assert not any(k.startswith("distributed.comm.tls") for k in dask_config_for(
        load_config({"backend": "existing", "existing": {"address": "tls://127.0.0.1:1"},
                     "security": sec})))
    sec["tls_client_key"] = str(tmp_path / "missing.pem")
    with pytest.raises(FileNotFoundError, match=r"key 'tls_client_key' names '.*missing\.pem', "
                                                r"which is not a file"):
        build_security(sec)


def test_tls_local_cluster(tmp_path):
    cert, key = _openssl_cert(tmp_path)
    cfg = {"backend": "local",
           "local": {"n_workers": 1, "threads_per_worker": 1, "processes": False,
                     "dashboard_address": None, "memory_limit": None},
           "security": {"tls_ca_file": str(cert), "tls_client_cert": str(cert),
                        "tls_client_key": str(key)}}
    with get_client(_write(tmp_path, cfg)) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert client.submit(sum, [1, 2, 3]).result() == 6
        # null dashboard_address and memory_limit reach LocalCluster as None: none at all
        assert _http_status(client, "/status") == 404  # the scheduler's HTTP server, no pages
        (worker,) = client.scheduler_info(n_workers=-1)["workers"].values()
        assert not worker["memory_limit"]
        cluster = client.cluster
    assert cluster.status.name == "closed"


# ------------------------------------------------------------------ multi-process cluster
@pytest.fixture(scope="module")
def mp_cluster(tmp_path_factory, request):
    """A scheduler and two workers, each its own process, on 127.0.0.1."""
    cluster = MultiprocessCluster(tmp_path_factory.mktemp("mpcluster"), n_workers=2,
                                  timeout=60)
    request.addfinalizer(cluster.close)
    return cluster.start()


@pytest.fixture
def existing_config(mp_cluster, tmp_path):
    raw = yaml.safe_load((CONFIG_DIR / "existing.yaml").read_text())
    raw["existing"]["address"] = mp_cluster.address
    raw["client"].update(timeout=30, wait_for_workers=2, wait_timeout=30)
    return _write(tmp_path, raw, "existing.yaml")


def test_existing_config_connects_to_subprocess_cluster(mp_cluster, existing_config):
    with get_client(existing_config) as client:
        assert client.cluster is None
        workers = client.scheduler_info(n_workers=-1)["workers"]
        assert sorted(w["name"] for w in workers.values()) == ["worker0", "worker1"]
        assert all(a.startswith("tcp://127.0.0.1:") for a in workers)
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
        x = da.random.default_rng(0).random((2000, 4), chunks=250)
        np.testing.assert_allclose(x.mean(axis=0).compute(), x.compute().mean(axis=0))
    # closing the client leaves an existing cluster running
    with get_client(load_config(existing_config)) as client:
        assert len(client.scheduler_info(n_workers=-1)["workers"]) == 2
    # waiting for more workers than there are is bounded by wait_timeout
    with pytest.raises(TimeoutError, match="3"):
        get_client(existing_config, overrides={"client": {"wait_for_workers": 3,
                                                          "wait_timeout": 1}})
    via_file = {"backend": "existing",
                "existing": {"scheduler_file": str(mp_cluster.scheduler_file)}}
    with get_client(via_file) as client:
        assert client.scheduler.address == mp_cluster.address


def test_kmeans_fit_on_subprocess_cluster_matches_sklearn(existing_config):
    import sklearn.cluster
    from sklearn.datasets import make_blobs

    import dqkm

    X, _ = make_blobs(n_samples=3000, n_features=5, centers=3, cluster_std=2.0,
                      random_state=0)
    init = X[[0, 1, 2]].copy()
    ref = sklearn.cluster.KMeans(n_clusters=3, init=init, n_init=1, algorithm="lloyd",
                                 random_state=0).fit(X)
    with get_client(existing_config):
        km = dqkm.KMeans(n_clusters=3, init=init, random_state=0).fit(
            da.from_array(X, chunks=(700, 5)))
        labels = np.asarray(km.labels_.compute())
    np.testing.assert_array_equal(labels, ref.labels_)
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=1e-6)
    np.testing.assert_allclose(km.inertia_, ref.inertia_, rtol=1e-6)
    assert km.n_iter_ == ref.n_iter_


def test_cli_fit_with_cluster_file(existing_config, tmp_path, capsys):
    from dqkm import cli, datasets, io

    data = tmp_path / "blobs.zarr"
    with get_client(existing_config):  # generate the Zarr store on the cluster too
        X, _ = datasets.make_blobs(4000, 3, 4, chunks=1000, random_state=0, path=str(data))
    out = tmp_path / "model.npz"
    rc = cli.main(["fit", str(data), "--n-clusters", "4", "--out", str(out), "--no-progress",
                   "--cluster", str(existing_config)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    assert "cluster: " in printed.out and "KMeans: n_clusters=4" in printed.out
    model = io.load(str(out))
    assert model.cluster_centers_.shape == (4, 3)
    assert np.isfinite(model.inertia_)
    bad = _write(tmp_path, {"backend": "existing", "existing": {"adress": "tcp://x:1"}})
    rc = cli.main(["fit", str(data), "--n-clusters", "4", "--out", str(tmp_path / "m2.npz"),
                   "--cluster", str(bad)])
    assert rc == 2
    assert "unknown key 'adress' in section 'existing'" in capsys.readouterr().err


# ------------------------------------------------------------------ names, paths, safety
def test_bare_name_is_the_shipped_config_never_a_file_in_cwd(tmp_path, monkeypatch):
    """A file named ``local`` in the working directory is not what ``"local"`` means;
    ``./local`` (a path) is."""
    monkeypatch.chdir(tmp_path)
    mine = {"backend": "existing", "existing": {"address": "tcp://10.9.8.7:8786"}}
    (tmp_path / "local").write_text(yaml.safe_dump(mine))
    assert load_config("local") == load_config(CONFIG_DIR / "local.yaml")
    assert load_config("local")["backend"] == "local"
    assert load_config("./local")["existing"]["address"] == "tcp://10.9.8.7:8786"
    assert load_config(tmp_path / "local")["backend"] == "existing"
    (tmp_path / "mine").write_text(yaml.safe_dump(mine))
    with pytest.raises(ValueError, match=r"unknown cluster config 'mine': not a file, nor one "
                                         r"of the shipped configs \(existing, .*, ssh\).* "
                                         r"'\./mine'"):
        load_config("mine")
    with pytest.raises(FileNotFoundError, match=r"'local\.yml' does not exist.*shipped config "
                                                r"'local' is named without the suffix"):
        load_config("local.yml")


def test_config_errors_are_dqkm_errors():
    from dqkm.exceptions import DqkmError

    with pytest.raises(DqkmError, match="unknown cluster config 'lokal'") as e:
        load_config("lokal")
    assert isinstance(e.value, ValueError)
    with pytest.raises(DqkmError, match="must be int or null") as e:
        load_config({"backend": "local", "local": {"n_workers": "two"}})
    assert isinstance(e.value, TypeError)


def _walk(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,), v
            yield from _walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, path + (i,))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_keep_host_keys_and_dashboards_private(name):
    raw = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    load_config(CONFIG_DIR / f"{name}.yaml")
    for where, value in _walk(raw):
        if where[-1] == "known_hosts":
            assert value is not None, f"{name}.yaml {where}: host key checking is off"
        if where[-1] == "dashboard_address" and value is not None:
            host = str(value).rsplit(":", 1)[0] if ":" in str(value) else ""
            assert host.strip("[]") in ("127.0.0.1", "localhost", "::1"), (name, where, value)


def test_ssh_yaml_checks_host_keys_and_shows_tls():
    text = (CONFIG_DIR / "ssh.yaml").read_text()
    raw = yaml.safe_load(text)
    assert "known_hosts" not in raw["ssh"]["connect_options"]  # asyncssh: ~/.ssh/known_hosts
    assert raw["ssh"]["scheduler_options"]["dashboard_address"] == "127.0.0.1:8787"
    commented = yaml.safe_load("\n".join(ln[2:] for ln in text.splitlines()
                                         if ln.startswith("#   ") or ln == "# security:"))
    assert set(commented["security"]) >= {"tls_ca_file", "tls_client_cert", "tls_client_key"}


@pytest.mark.parametrize("raw, exposed", [
    ({"backend": "local"}, []),
    ({"backend": "local", "local": {"host": "127.0.0.1", "dashboard_address": "localhost:0"}},
     []),
    ({"backend": "local", "local": {"host": "0.0.0.0"}}, ["scheduler"]),
    ({"backend": "local", "local": {"host": ""}}, ["scheduler"]),
    ({"backend": "local", "local": {"host": "10.1.2.3", "dashboard_address": ":8787"}},
     ["scheduler", "dashboard"]),
    ({"backend": "local", "local": {"dashboard_address": "0.0.0.0:8787"}}, ["dashboard"]),
    ({"backend": "local", "local": {"dashboard_address": "[::]:8787"}}, ["dashboard"]),
    ({"backend": "local", "local": {"dashboard_address": "[::1]:8787"}}, []),
    ({"backend": "ssh", "ssh": {"hosts": ["a.example.org", "b"],
                                "scheduler_options": {"dashboard_address": "127.0.0.1:8787"}}},
     ["scheduler"]),
    ({"backend": "ssh", "ssh": {"hosts": ["a.example.org", "b"]}}, ["scheduler", "dashboard"]),
    ({"backend": "ssh", "ssh": {"hosts": ["localhost", "localhost"],
                                "scheduler_options": {"host": "127.0.0.1",
                                                      "dashboard_address": "127.0.0.1:0"}}},
     []),
    ({"backend": "slurm", "slurm": {"cores": 1, "memory": "1GB"}}, ["scheduler"]),
    ({"backend": "kubernetes", "kubernetes": {"name": "x"}}, []),
    ({"backend": "kubernetes", "kubernetes": {"name": "x", "scheduler_service_type":
                                              "LoadBalancer"}}, ["scheduler"]),
    ({"backend": "existing", "existing": {"address": "tcp://10.0.0.5:8786"}}, []),
])
def test_network_exposure_decision(raw, exposed):
    """Which listening sockets of a config reach beyond this machine without TLS."""
    found = cluster_config.network_exposure(load_config(raw))
    assert [what for what, _ in found] == exposed
    for _, message in found:
        assert "TLS" in message or "127.0.0.1" in message


def test_tls_section_covers_the_scheduler_not_the_dashboard(tmp_path):
    (tmp_path / "c.pem").write_text("x")
    tls = {"tls_ca_file": str(tmp_path / "c.pem"), "tls_client_cert": str(tmp_path / "c.pem")}
    cfg = load_config({"backend": "local", "security": tls,
                       "local": {"host": "0.0.0.0", "dashboard_address": ":8787"}})
    assert [w for w, _ in cluster_config.network_exposure(cfg)] == ["dashboard"]
    cfg = load_config({"backend": "ssh", "security": tls, "ssh": {"hosts": ["a", "b"],
                       "scheduler_options": {"dashboard_address": "127.0.0.1:8787"}}})
    assert cluster_config.network_exposure(cfg) == []


def test_get_client_warns_before_starting_an_exposed_scheduler(monkeypatch):
    class Stop(Exception):
        pass

    def no_cluster(cfg, security):
        raise Stop("not started in this test")

    monkeypatch.setattr(cluster_config, "_start_cluster", no_cluster)
    with pytest.warns(UserWarning, match=r"local\.host '0\.0\.0\.0'.*without TLS"):
        with pytest.raises(Stop):
            get_client({"backend": "local", "local": {"host": "0.0.0.0"}})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Stop):
            get_client("local")


def test_config_is_code_is_documented():
    readme = (CONFIG_DIR / "README.md").read_text()
    for text in (readme, get_client.__doc__):
        assert "preload" in text and "trust" in text


# ------------------------------------------------------------------ HPC job scripts
def _lines(script):
    return [ln.strip() for ln in script.splitlines()]


def test_slurm_job_script_carries_the_yaml():
    pytest.importorskip("dask_jobqueue", reason="job scripts are built by dask-jobqueue")
    raw = yaml.safe_load((CONFIG_DIR / "slurm.yaml").read_text())["slurm"]
    lines = _lines(cluster_config.job_script("slurm"))
    assert f"#SBATCH -J {raw['name']}" in lines  # the job name, not 'dask-worker'
    assert f"#SBATCH -A {raw['account']}" in lines
    assert f"#SBATCH -p {raw['queue']}" in lines
    assert f"#SBATCH -t {raw['walltime'][:5]}:00" in lines
    assert "#SBATCH --mem=30G" in lines  # 32GB as dask-jobqueue books it
    assert "#SBATCH --exclusive" in lines
    assert raw["job_script_prologue"][0] in lines
    mine = _lines(cluster_config.job_script("slurm", overrides={"slurm": {
        "name": "mine", "account": "acct9", "queue": "gpu", "memory": "8GB",
        "walltime": "00:10:00"}}))
    assert {"#SBATCH -J mine", "#SBATCH -A acct9", "#SBATCH -p gpu", "#SBATCH --mem=8G",
            "#SBATCH -t 00:10:00"} <= set(mine)


def test_pbs_job_script_carries_the_yaml():
    pytest.importorskip("dask_jobqueue", reason="job scripts are built by dask-jobqueue")
    raw = yaml.safe_load((CONFIG_DIR / "pbs.yaml").read_text())["pbs"]
    lines = _lines(cluster_config.job_script("pbs"))
    assert f"#PBS -N {raw['name']}" in lines
    assert f"#PBS -A {raw['account']}" in lines
    assert f"#PBS -q {raw['queue']}" in lines
    assert f"#PBS -l walltime={raw['walltime']}" in lines
    assert f"#PBS -l {raw['resource_spec']}" in lines  # memory: select=...:mem=100GB
    assert "#PBS -j oe" in lines
    mem = _lines(cluster_config.job_script({"backend": "pbs", "pbs": {
        "cores": 2, "memory": "6GB", "name": "x", "account": "a", "queue": "q"}}))
    assert "#PBS -l select=1:ncpus=2:mem=5723MB" in mem  # 6GB in MiB and "#PBS -N x" in mem


def test_job_script_refuses_other_backends():
    with pytest.raises(cluster_config.ConfigError, match=r"job_script needs a 'slurm' or 'pbs'"
                                                         r" config; got backend 'local'"):
        cluster_config.job_script("local")


def test_scheduler_options_reach_the_jobqueue_cluster(monkeypatch):
    jq = pytest.importorskip("dask_jobqueue", reason="the slurm backend is dask-jobqueue")
    seen = {}

    class Fake:
        def __init__(self, **kw):
            seen.update(kw)

        def scale(self, **kw):
            pass

    monkeypatch.setattr(jq, "SLURMCluster", Fake)
    cluster_config._start_cluster(load_config("slurm"), None)
    assert seen["scheduler_options"] == {"dashboard_address": "127.0.0.1:8787"}
    assert seen["job_name"] == "dqkm" and "name" not in seen
    found = cluster_config.network_exposure(load_config("slurm", overrides={"slurm": {
        "scheduler_options": {"dashboard_address": ":8787"}}}))
    assert [w for w, _ in found] == ["scheduler", "dashboard"]
    assert "slurm.scheduler_options.dashboard_address ':8787'" in found[1][1]


@pytest.mark.parametrize("backend, tool", [("slurm", "sbatch"), ("pbs", "qsub")])
def test_missing_submit_command_fails_before_starting(backend, tool, monkeypatch, tmp_path):
    pytest.importorskip("dask_jobqueue", reason="checked after the backend's package")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch / qsub here

    def started(cfg, security):
        raise AssertionError("a cluster was started without its submit command")

    monkeypatch.setattr(cluster_config, "_start_cluster", started)
    with pytest.raises(cluster_config.SubmitCommandNotFoundError,
                       match=rf"submits its worker jobs with '{tool}', which is not on PATH"):
        with warnings_ignored():
            get_client(backend)
    fake = tmp_path / tool
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    cluster_config.check_submit_command(load_config(backend))  # found: no error


def test_missing_submit_command_is_one_line_from_the_cli(monkeypatch, tmp_path, capsys):
    pytest.importorskip("dask_jobqueue", reason="checked after the backend's package")
    from dqkm.cli import main

    monkeypatch.setenv("PATH", str(tmp_path))
    data = tmp_path / "d.zarr"
    with warnings_ignored():
        status = main(["fit", str(data), "--n-clusters", "2", "--cluster", "slurm",
                       "--out", str(tmp_path / "m.zarr")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "'sbatch', which is not on PATH" in err


def test_kubernetes_needs_a_kubeconfig(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))
    cfg = load_config("kubernetes")
    with pytest.raises(cluster_config.SubmitCommandNotFoundError,
                       match=r"needs a kubeconfig and there is none at .*none.*set KUBECONFIG"):
        cluster_config.check_submit_command(cfg)
    (tmp_path / "none").write_text("apiVersion: v1\n")
    cluster_config.check_submit_command(cfg)
    cfg["kubernetes"]["port_forward_cluster_ip"] = True
    with pytest.raises(cluster_config.SubmitCommandNotFoundError,
                       match=r"'port_forward_cluster_ip'.*needs 'kubectl' on PATH"):
        cluster_config.check_submit_command(cfg)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # in a pod: no file needed
    cfg["kubernetes"]["port_forward_cluster_ip"] = None
    (tmp_path / "none").unlink()
    cluster_config.check_submit_command(cfg)


@contextlib.contextmanager
def warnings_ignored():
    """The slurm configs warn that their scheduler listens without TLS: not tested here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
