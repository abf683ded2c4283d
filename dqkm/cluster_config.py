"""Cluster config files → a ``distributed.Client``.

A config is a small YAML file (or a dict) with a top-level ``backend`` key and
one section named after the backend::

    backend: local
    local:
      n_workers: 2
      threads_per_worker: 1

Backends: ``local``, ``existing`` (a running scheduler), ``ssh``, ``slurm``,
``pbs``, ``kubernetes``; shared optional sections: ``client``, ``security``
(TLS) and ``dask_config``.  ``cluster_configs/README.md`` documents every key;
the schema in :mod:`dqkm._cluster_schema` is the source of truth, and
:func:`load_config` checks a file against it without importing any optional
backend.

A config is code: its ``dask_config`` may make the scheduler and the workers
import Python modules (``distributed.scheduler.preload``,
``distributed.worker.preload``, ``distributed.nanny.preload``), ``ssh`` runs
``worker_class`` and ``remote_python`` on the hosts, and ``slurm``/``pbs`` run
``job_script_prologue`` as shell lines.  Only use config files you trust.

Examples
--------
>>> from dqkm.cluster_config import load_config
>>> load_config("local")["local"]["threads_per_worker"]
1
"""

from __future__ import annotations

import importlib
import ipaddress
import logging
import os
import warnings
from pathlib import Path

import yaml
from distributed import Client

from ._cluster_schema import (_CLIENT, _KUBERNETES, _OPTIONAL, _SECURITY, _SSH,  # noqa: F401
                              BACKENDS, ConfigError, ConfigFileNotFoundError, ConfigTypeError,
                              SubmitCommandNotFoundError, validate_config)

__all__ = ["BACKENDS", "CONFIG_DIR", "ClusterClient", "ConfigError", "ConfigFileNotFoundError",
           "ConfigTypeError", "SubmitCommandNotFoundError",
           "available_configs", "build_security", "check_submit_command", "dask_config_for",
           "get_client", "job_script", "load_config", "network_exposure", "security_dask_config",
           "validate_config"]

logger = logging.getLogger(__name__)

#: Folder of the configs shipped with dqkm (package data, in wheels too; the
#: repository's top-level ``cluster_configs/`` is a link to it).
CONFIG_DIR = Path(__file__).resolve().parent / "cluster_configs"


# --------------------------------------------------------------------------- loading
def available_configs():
    """Names of the configs shipped in :data:`CONFIG_DIR` (e.g. ``'local'``).

    Returns
    -------
    list of str
        Sorted names, each accepted by :func:`load_config` and :func:`get_client`.

    Examples
    --------
    >>> "local" in available_configs()
    True
    """
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _is_path(text):
    """A user's config file must be written as a path: with a folder separator or a
    ``.yaml``/``.yml`` suffix; any other string is the bare name of a shipped config."""
    return "/" in text or os.sep in text or text.lower().endswith((".yaml", ".yml"))


def _resolve(path_or_name):
    """Return (parsed YAML, source label) for a dict, a path or a shipped name.

    A bare name (``'local'``) always means the shipped config: a file of that
    name in the working directory is never read in its place (pass
    ``'./local'`` for that file).  Path objects are always paths.
    """
    if isinstance(path_or_name, dict):
        return path_or_name, "<dict>"
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise ConfigTypeError(f"The 'path_or_name' parameter must be a path, the name of a "
                              f"shipped config ({', '.join(available_configs())}) or a dict; "
                              f"got {type(path_or_name).__name__}.")
    text = os.fspath(path_or_name)
    if isinstance(path_or_name, str) and not _is_path(text):
        path = CONFIG_DIR / f"{text}.yaml"
        if text not in available_configs():
            here = (f" (a file {text!r} exists in {os.getcwd()!r}; it is not read as a "
                    "config unless named as a path)" if os.path.isfile(text) else "")
            raise ConfigError(f"unknown cluster config {text!r}: not a file, nor one of the "
                              f"shipped configs ({', '.join(available_configs())}). A bare "
                              f"name selects a shipped config; give your own config file as "
                              f"a path, e.g. './{text}' or '{text}.yaml'{here}.")
        source = f"cluster_configs/{path.name}"
    else:
        path = Path(text).expanduser()
        if not path.is_file():
            stem = Path(text).stem
            hint = (f"; the shipped config {stem!r} is named without the suffix or folder "
                    f"('{stem}')" if stem in available_configs() else "")
            raise ConfigFileNotFoundError(f"cluster config file {text!r} does not exist"
                                          f"{hint}.")
        source = text
    with open(path, encoding="utf-8") as f:
        try:
            raw = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConfigError(f"{source}: not valid YAML: {e}") from None
    return raw, source


def _merge(base, overrides):
    out = dict(base)
    for k, v in overrides.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path_or_name, *, overrides=None):
    """Read and validate a cluster config without starting or importing anything.

    Parameters
    ----------
    path_or_name : str, path-like or dict
        A YAML file, the bare name of a shipped config (``'local'`` →
        ``cluster_configs/local.yaml``), or an already parsed dict.  A string
        without a folder separator or a ``.yaml``/``.yml`` suffix is always a
        shipped name, never a file of the working directory (write
        ``'./local'`` for that file).
    overrides : dict, optional
        Merged (recursively) into the config before validation, e.g.
        ``{"local": {"n_workers": 4}}``.

    Returns
    -------
    dict
        The validated config with every default filled in (see
        :func:`validate_config`).

    Examples
    --------
    >>> cfg = load_config("local", overrides={"local": {"n_workers": 1}})
    >>> cfg["backend"], cfg["local"]["n_workers"]
    ('local', 1)
    """
    raw, source = _resolve(path_or_name)
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise ConfigTypeError(f"The 'overrides' parameter must be a dict; got "
                                  f"{type(overrides).__name__}.")
        if not isinstance(raw, dict):
            raw = {}
        raw = _merge(raw, overrides)
    return validate_config(raw, source)


# ---------------------------------------------------------------------------- starting
def _tls_files(security):
    """The certificate/key paths of a validated ``security`` section, defaults resolved."""
    for key, path in security.items():
        if key.startswith("tls_") and path is not None and not Path(path).expanduser().is_file():
            raise ConfigFileNotFoundError(f"security: key {key!r} names {path!r}, which is "
                                          f"not a file.")
    cert, key = security["tls_client_cert"], security["tls_client_key"]
    files = {"tls_ca_file": security["tls_ca_file"], "tls_client_cert": cert,
             "tls_client_key": key,
             "tls_scheduler_cert": security["tls_scheduler_cert"] or cert,
             "tls_scheduler_key": security["tls_scheduler_key"] or key,
             "tls_worker_cert": security["tls_worker_cert"] or cert,
             "tls_worker_key": security["tls_worker_key"] or key}
    return {k: str(Path(v).expanduser()) for k, v in files.items() if v is not None}


def build_security(security):
    """A :class:`distributed.security.Security` from a validated ``security`` section.

    Scheduler and worker certificates default to the client's, so one
    certificate signed by ``tls_ca_file`` is enough for a private cluster.
    Every file must exist (checked here, so the error names the key).

    Parameters
    ----------
    security : dict
        The ``security`` section of a config from :func:`load_config`.

    Returns
    -------
    distributed.security.Security
        For the cluster and the client.

    Raises
    ------
    ConfigFileNotFoundError
        A ``tls_*`` key names a path that is not a file.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> tmp = tempfile.mkdtemp()
    >>> files = {k: os.path.join(tmp, k + ".pem")
    ...          for k in ("tls_ca_file", "tls_client_cert", "tls_client_key")}
    >>> for path in files.values():
    ...     open(path, "w").close()  # stand-ins: only their existence is checked here
    >>> cfg = load_config("local", overrides={"security": files})
    >>> sec = build_security(cfg["security"])
    >>> sec.require_encryption, sec.tls_worker_cert == files["tls_client_cert"]
    (True, True)
    >>> shutil.rmtree(tmp)
    """
    from distributed.security import Security

    return Security(require_encryption=security["require_encryption"], **_tls_files(security))


def security_dask_config(security):
    """The same TLS settings as dask config values (``distributed.comm.tls.*``).

    Processes that build their ``Security()`` from the config, like the
    scheduler and workers SSHCluster starts on remote hosts (it forwards the
    config it was started with), then use these certificates.

    Parameters
    ----------
    security : dict
        The ``security`` section of a config from :func:`load_config`.

    Returns
    -------
    dict
        ``distributed.comm.require-encryption`` and one
        ``distributed.comm.tls.*`` value per certificate or key file.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> tmp = tempfile.mkdtemp()
    >>> files = {k: os.path.join(tmp, k + ".pem")
    ...          for k in ("tls_ca_file", "tls_client_cert", "tls_client_key")}
    >>> for path in files.values():
    ...     open(path, "w").close()  # stand-ins: only their existence is checked here
    >>> cfg = load_config("local", overrides={"security": files})
    >>> values = security_dask_config(cfg["security"])
    >>> values["distributed.comm.tls.worker.cert"] == files["tls_client_cert"]
    True
    >>> shutil.rmtree(tmp)
    """
    out = {"distributed.comm.require-encryption": security["require_encryption"]}
    for key, path in _tls_files(security).items():
        if key == "tls_ca_file":
            out["distributed.comm.tls.ca-file"] = path
        else:  # tls_<role>_<cert|key>
            _, role, what = key.split("_")
            out[f"distributed.comm.tls.{role}.{what}"] = path
    return out


def dask_config_for(cfg):
    """The dask config values to set while the cluster starts.

    ``dask_config`` from the file, plus for ``local`` the nanny's
    pre-spawn ``MALLOC_TRIM_THRESHOLD_`` (None removes it: dqkm's default,
    faster Zarr reads for ≈100 MB more RSS per worker), and for ``ssh`` the
    ``security`` section as ``distributed.comm.tls.*`` values, which
    SSHCluster passes on to the processes it starts.

    Parameters
    ----------
    cfg : dict
        A config returned by :func:`load_config`.

    Returns
    -------
    dict
        Dask config keys and values, for ``dask.config.set``.

    Examples
    --------
    >>> dask_config_for(load_config("local"))
    {'distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_': None}
    """
    out = dict(cfg["dask_config"])
    if cfg["backend"] == "local":
        mtt = cfg["local"]["malloc_trim_threshold"]
        out["distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"] = mtt
    if cfg["backend"] == "ssh" and cfg["security"] is not None:
        out.update(security_dask_config(cfg["security"]))
    return out


# ---------------------------------------------------------------------------- exposure
def _listen_host(address):
    """The host part of a listening address (``'tcp://h:1'``, ``'h:1'``, ``':1'``,
    ``'[::1]:1'``, ``'8787'``); ``''`` means every interface."""
    text = str(address).split("://", 1)[-1]
    if text.startswith("["):
        return text[1:text.find("]")]
    if text.count(":") == 1:
        text = text.rsplit(":", 1)[0]
    return "" if text.isdigit() else text


def _is_loopback(host):
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # '' (every interface) or a host name other than localhost
        return False


def network_exposure(cfg):
    """The listening sockets a validated config opens beyond this machine without TLS.

    The scheduler counts when it listens on an address other than loopback
    (``127.0.0.1``, ``::1``, ``localhost``) and the config has no ``security``
    section: anyone who can reach it can submit work, that is run code, on the
    workers.  The dashboard counts when it listens beyond loopback without
    ``distributed.scheduler.dashboard.tls.cert`` in ``dask_config`` (the
    ``security`` section does not cover it).  :func:`get_client` warns with
    each message before it starts anything.

    Parameters
    ----------
    cfg : dict
        A config returned by :func:`load_config`.

    Returns
    -------
    list of (str, str)
        ``("scheduler" | "dashboard", message)`` pairs; empty when nothing is
        exposed.  ``existing`` starts nothing, so it is never reported.

    Examples
    --------
    >>> network_exposure(load_config("local"))
    []
    >>> [what for what, _ in network_exposure(
    ...     load_config("local", overrides={"local": {"host": "0.0.0.0"}}))]
    ['scheduler']
    """
    backend, sec = cfg["backend"], cfg.get(cfg["backend"])
    tls = cfg.get("security") is not None
    dashboard_tls = bool((cfg.get("dask_config") or {})
                         .get("distributed.scheduler.dashboard.tls.cert"))
    fix = "add a 'security' section (TLS, see cluster_configs/README.md)"
    found = []

    def scheduler(what):
        if not tls:
            found.append(("scheduler", f"cluster config: {what} without TLS; anyone who can "
                          f"reach it can run code on the workers: {fix}."))

    def dashboard(where, value):
        if value is not None and not dashboard_tls and not _is_loopback(_listen_host(value)):
            found.append(("dashboard", f"cluster config: {where} {value!r} serves the Dask "
                          f"dashboard to the network without TLS; use '127.0.0.1:8787' (reach "
                          f"it through an SSH tunnel) or set "
                          f"distributed.scheduler.dashboard.tls.* in dask_config."))

    if backend == "local":
        if sec["host"] is not None and not _is_loopback(_listen_host(sec["host"])):
            scheduler(f"local.host {sec['host']!r} (null: 127.0.0.1) makes the Dask "
                      f"scheduler listen beyond this machine")
        dashboard("local.dashboard_address", sec["dashboard_address"])
    elif backend == "ssh":
        opts = sec["scheduler_options"]
        host = opts.get("host")
        if host is None or not _is_loopback(_listen_host(host)):
            scheduler(f"the ssh Dask scheduler listens on {sec['hosts'][0]!r}, "
                      + ("every interface (scheduler_options.host unset)" if host is None
                         else f"address {host!r}"))
        # distributed's Scheduler serves the dashboard on ':8787' unless told otherwise
        dashboard("ssh.scheduler_options.dashboard_address",
                  opts.get("dashboard_address", ":8787"))
    elif backend in ("slurm", "pbs"):  # the workers on other nodes must reach it
        scheduler(f"the {backend} Dask scheduler listens on this node for workers on "
                  f"other nodes")
        dashboard(f"{backend}.scheduler_options.dashboard_address",
                  sec["scheduler_options"].get("dashboard_address"))
    elif backend == "kubernetes" and sec["scheduler_service_type"] != "ClusterIP":
        found.append(("scheduler", f"cluster config: kubernetes.scheduler_service_type "
                      f"{sec['scheduler_service_type']!r} exposes the Dask scheduler outside "
                      f"the Kubernetes cluster without TLS; anyone who can reach it can run "
                      f"code on the workers: use 'ClusterIP' with port_forward_cluster_ip."))
    return found


def _import_backend(backend):
    module, attr, what = _OPTIONAL[backend]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"the {backend!r} cluster backend needs {what}; it could not be "
                          f"imported ({e}).") from e
    return getattr(mod, attr) if attr else mod


def _kwargs(section, keys):
    """Keyword arguments from ``keys`` of a section; None means 'backend default'."""
    return {k: section[k] for k in keys if section[k] is not None}


def _jobqueue_kwargs(sec):
    """dask-jobqueue job keyword arguments of a slurm/pbs section: ``name`` is the job
    name (``job_name``; dask-jobqueue's own ``name`` names the worker)."""
    cluster_only = ("jobs", "n_workers", "adapt", "scheduler_options", "name")
    kw = _kwargs(sec, [k for k in sec if k not in cluster_only])
    if sec["name"] is not None:
        kw["job_name"] = sec["name"]
    return kw


#: the command-line tool each batch backend submits its jobs with
_SUBMIT_TOOLS = {"slurm": "sbatch", "pbs": "qsub"}


def _kubeconfig_files():
    env = os.environ.get("KUBECONFIG")
    paths = env.split(os.pathsep) if env else [os.path.join("~", ".kube", "config")]
    return [p for p in paths if p and Path(p).expanduser().is_file()]


def check_submit_command(cfg):
    """Check that this machine can start the cluster a validated config describes.

    ``slurm`` needs ``sbatch`` on ``PATH``, ``pbs`` needs ``qsub``;
    ``kubernetes`` needs a kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``)
    or to run inside a pod, and ``kubectl`` when ``port_forward_cluster_ip``
    is true. Other backends need nothing. :func:`get_client` calls it before
    starting anything, so a missing tool fails at once instead of after
    ``client.wait_timeout``.

    Parameters
    ----------
    cfg : dict
        A config returned by :func:`load_config`.

    Returns
    -------
    None
        When everything the backend needs is there.

    Raises
    ------
    SubmitCommandNotFoundError
        One line naming what is missing and how to fix it (a
        ``FileNotFoundError`` and a :class:`dqkm.exceptions.DqkmError`).

    Examples
    --------
    >>> check_submit_command(load_config("local"))  # a local cluster needs no tool
    """
    import shutil

    backend = cfg["backend"]
    tool = _SUBMIT_TOOLS.get(backend)
    if tool is not None and shutil.which(tool) is None:
        raise SubmitCommandNotFoundError(
            f"cluster config backend {backend!r} submits its worker jobs with {tool!r}, which "
            f"is not on PATH on this machine; run dqkm on a node that can submit {backend} "
            f"jobs (a login node) or add the folder of {tool!r} to PATH.")
    if backend != "kubernetes":
        return
    in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not in_pod and not _kubeconfig_files():
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise SubmitCommandNotFoundError(
            f"cluster config backend 'kubernetes' needs a kubeconfig and there is none at "
            f"{where!r} (nor is this process in a pod); copy your cluster's kubeconfig there "
            f"or set KUBECONFIG to its path.")
    if cfg["kubernetes"]["port_forward_cluster_ip"] and shutil.which("kubectl") is None:
        raise SubmitCommandNotFoundError(
            "cluster config key 'port_forward_cluster_ip' in section 'kubernetes' needs "
            "'kubectl' on PATH, which is missing on this machine; install kubectl or set "
            "port_forward_cluster_ip: false.")


def job_script(path_or_name, *, overrides=None, scheduler="tcp://SCHEDULER:8786"):
    """The batch script a ``slurm`` or ``pbs`` config submits for each job.

    Built by dask-jobqueue's own job class without starting a scheduler or
    submitting anything, so a config can be checked on any machine that has
    dask-jobqueue: job name, account, queue, memory, walltime lines.

    Parameters
    ----------
    path_or_name, overrides
        As for :func:`load_config`.
    scheduler : str
        The scheduler address written into the worker command (the real
        one is known only once the cluster starts).

    Returns
    -------
    str
        The job script.

    Examples
    --------
    >>> print(job_script("slurm"))  # doctest: +SKIP
    #!/usr/bin/env bash
    <BLANKLINE>
    #SBATCH -J dqkm
    ...
    """
    cfg = load_config(path_or_name, overrides=overrides)
    backend = cfg["backend"]
    if backend not in _SUBMIT_TOOLS:
        raise ConfigError(f"job_script needs a 'slurm' or 'pbs' config; got backend "
                          f"{backend!r}.")
    cls = _import_backend(backend)
    return cls.job_cls(scheduler=scheduler, name="dqkm-worker",
                       **_jobqueue_kwargs(cfg[backend])).job_script()


def _start_cluster(cfg, security):
    backend = cfg["backend"]
    sec = cfg[backend]
    extra = {"security": security} if security is not None else {}
    if backend == "local":
        from distributed import LocalCluster

        # LocalCluster's own defaults are None except for these two, where None means
        # "no dashboard" and "no memory limit": pass every key as written
        kw = {k: v for k, v in sec.items() if k != "malloc_trim_threshold"}
        if security is not None:
            kw["protocol"] = "tls://"
        return LocalCluster(**kw, **extra)
    if backend == "ssh":
        _import_backend("ssh")
        from distributed import SSHCluster

        return SSHCluster(**_kwargs(sec, list(_SSH)), **extra)
    if backend in ("slurm", "pbs"):
        cls = _import_backend(backend)
        kw = _jobqueue_kwargs(sec)
        if sec["scheduler_options"]:
            kw["scheduler_options"] = sec["scheduler_options"]
        cluster = cls(**kw, **extra)
        if sec["adapt"] is not None:
            cluster.adapt(**sec["adapt"])
        elif sec["jobs"] is not None:
            cluster.scale(jobs=sec["jobs"])
        elif sec["n_workers"] is not None:
            cluster.scale(sec["n_workers"])
        return cluster
    if backend == "kubernetes":
        cls = _import_backend("kubernetes")
        cluster = cls(**_kwargs(sec, [k for k in _KUBERNETES if k != "adapt"]))
        if sec["adapt"] is not None:
            cluster.adapt(**sec["adapt"])
        return cluster
    raise AssertionError(backend)  # pragma: no cover - validate_config rejects it


class ClusterClient(Client):
    """A :class:`distributed.Client` that owns the cluster it was started with.

    ``client.cluster`` is the cluster object (LocalCluster, SLURMCluster, ...);
    closing the client (``close()`` or leaving a ``with`` block) closes that
    cluster too.  A client connected to an existing scheduler owns nothing.

    Parameters
    ----------
    *args, **kwargs
        Passed to :class:`distributed.Client` (the cluster or an address, ...).
    owned_cluster : cluster object, optional
        Closed with the client, also when the client fails to start.

    Examples
    --------
    >>> from distributed import LocalCluster
    >>> cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=":0")
    >>> with ClusterClient(cluster, owned_cluster=cluster) as client:
    ...     client.submit(sum, [1, 2]).result()
    3
    >>> cluster.status.name
    'closed'
    """

    def __init__(self, *args, owned_cluster=None, **kwargs):
        self._dqkm_owned_cluster = owned_cluster
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            self._close_owned()
            raise

    def _close_owned(self):
        cluster, self._dqkm_owned_cluster = self._dqkm_owned_cluster, None
        if cluster is not None:
            cluster.close()

    def close(self, *args, **kwargs):
        """Close the client, then the cluster it started (if any).

        Parameters
        ----------
        *args, **kwargs
            Passed to :meth:`distributed.Client.close` (e.g. ``timeout``).

        Returns
        -------
        object
            What :meth:`distributed.Client.close` returns.

        Examples
        --------
        >>> from distributed import LocalCluster
        >>> cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=":0")
        >>> ClusterClient(cluster, owned_cluster=cluster).close()
        >>> cluster.status.name
        'closed'
        """
        try:
            return super().close(*args, **kwargs)
        finally:
            self._close_owned()


def get_client(path_or_name, *, overrides=None):
    """Start (or connect to) the cluster a config describes; return its client.

    Parameters
    ----------
    path_or_name : str, path-like or dict
        A YAML file, the bare name of a shipped config (``'local'``,
        ``'existing'``, ...) or a dict; see ``cluster_configs/README.md``.
        A bare name always means the shipped config; a file of your own must
        be written as a path (``'./local'``, ``'my.yaml'``).  A config file is
        code: its ``dask_config`` can make the scheduler and the workers
        import Python (``distributed.*.preload``), and ``ssh``, ``slurm`` and
        ``pbs`` run commands it names on the hosts.  Only use configs you
        trust.
    overrides : dict, optional
        Merged into the config before validation, e.g.
        ``{"local": {"n_workers": 4}}``.

    Returns
    -------
    ClusterClient
        A :class:`distributed.Client`; ``client.cluster`` is the cluster it
        started (None for ``existing``), closed together with the client.

    Warns
    -----
    UserWarning
        Before anything starts, once per finding of :func:`network_exposure`:
        a scheduler or dashboard listening beyond this machine without TLS.

    Raises
    ------
    ConfigError, ConfigTypeError
        The config does not match the schema (the message names the key and
        the file); a ``ValueError`` / ``TypeError`` and a ``DqkmError``.
    ImportError
        The backend's optional package is missing; the message names the
        extra to install (``pip install 'dqkm[cluster]'``).
    SubmitCommandNotFoundError
        ``sbatch`` (slurm), ``qsub`` (pbs) or a kubeconfig (kubernetes) is
        missing here, found before anything starts (see
        :func:`check_submit_command`).

    Examples
    --------
    >>> from dqkm.cluster_config import get_client
    >>> with get_client("local", overrides={"local": {"n_workers": 1}}) as client:  # doctest: +SKIP
    ...     print(client.dashboard_link)
    """
    import dask

    cfg = load_config(path_or_name, overrides=overrides)
    backend = cfg["backend"]
    if backend in _OPTIONAL:  # fail before building anything
        _import_backend(backend)
    check_submit_command(cfg)
    for _, message in network_exposure(cfg):
        warnings.warn(message, UserWarning, stacklevel=2)
    security = build_security(cfg["security"]) if cfg["security"] is not None else None
    client_kw = _kwargs(cfg["client"], ["set_as_default", "timeout"])
    if security is not None:
        client_kw["security"] = security
    with dask.config.set(dask_config_for(cfg)):
        if backend == "existing":
            sec = cfg["existing"]
            if sec["scheduler_file"] is not None:
                client = ClusterClient(scheduler_file=sec["scheduler_file"], **client_kw)
            else:
                client = ClusterClient(sec["address"], **client_kw)
        else:
            cluster = _start_cluster(cfg, security)
            client = ClusterClient(cluster, owned_cluster=cluster, **client_kw)
    n_wait = cfg["client"]["wait_for_workers"]
    if n_wait:
        try:
            client.wait_for_workers(n_wait, timeout=cfg["client"]["wait_timeout"])
        except BaseException:
            client.close()
            raise
    logger.info("dqkm: %s cluster at %s; dashboard: %s", backend, client.scheduler.address,
                client.dashboard_link)
    return client
