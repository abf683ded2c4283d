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
import logging
import os
import shutil
import warnings
from pathlib import Path

import dask
from distributed import Client, LocalCluster, SSHCluster

from ._cluster_schema import (_CLIENT, _KUBERNETES, _OPTIONAL, _SECURITY, _SSH,  # noqa: F401
                              BACKENDS, ConfigError, ConfigFileNotFoundError, ConfigTypeError,
                              SubmitCommandNotFoundError, validate_config)
from ._cluster_security import (CONFIG_DIR, _resolve, available_configs, build_security,
                                network_exposure, security_dask_config)

__all__ = ["BACKENDS", "CONFIG_DIR", "ClusterClient", "ConfigError", "ConfigFileNotFoundError",
           "ConfigTypeError", "SubmitCommandNotFoundError",
           "available_configs", "build_security", "check_submit_command", "dask_config_for",
           "get_client", "job_script", "load_config", "network_exposure", "security_dask_config",
           "validate_config"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- loading
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
        The config to check, as :func:`load_config` returns it.

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
        # LocalCluster's own defaults are None except for these two, where None means
        # "no dashboard" and "no memory limit": pass every key as written
        kw = {k: v for k, v in sec.items() if k != "malloc_trim_threshold"}
        if security is not None:
            kw["protocol"] = "tls://"
        return LocalCluster(**kw, **extra)
    if backend == "ssh":
        _import_backend("ssh")
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
