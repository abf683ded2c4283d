"""The trust checks of cluster configs: which file a name reads, TLS, exposure.

A cluster config is code (its ``dask_config`` can preload modules on the
scheduler and the workers; ``ssh``, ``slurm`` and ``pbs`` run commands it
names), so three decisions are kept together here:

- which file a config name reads: a bare name is always a config shipped in
  :data:`CONFIG_DIR`, never a file of the working directory;
- the TLS settings of a ``security`` section, as a
  :class:`distributed.security.Security` and as dask config values;
- which listening sockets a config opens beyond this machine without TLS
  (:func:`network_exposure`), which :func:`dqkm.cluster_config.get_client`
  warns about before it starts anything.

The public names are re-exported by :mod:`dqkm.cluster_config`; import them
from there.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import yaml
from distributed.security import Security

from ._cluster_schema import ConfigError, ConfigFileNotFoundError, ConfigTypeError

__all__ = ["CONFIG_DIR", "available_configs", "build_security", "network_exposure",
           "security_dask_config"]

#: Folder of the configs shipped with dqkm (package data, in wheels too; the
#: repository's top-level ``cluster_configs/`` is a link to it).
CONFIG_DIR = Path(__file__).resolve().parent / "cluster_configs"


# ------------------------------------------------------------- which file a name reads
def available_configs():
    """Names of the configs shipped in :data:`CONFIG_DIR` (e.g. ``'local'``).

    Returns
    -------
    list of str
        Sorted names, each accepted by :func:`~dqkm.cluster_config.load_config`
        and :func:`~dqkm.cluster_config.get_client`.

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


# ------------------------------------------------------------------------------- TLS
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
        The ``security`` section of a config from
        :func:`~dqkm.cluster_config.load_config`.

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
    >>> import os, tempfile
    >>> from dqkm.cluster_config import load_config
    >>> tmp = tempfile.TemporaryDirectory()
    >>> ca, cert = os.path.join(tmp.name, "ca.pem"), os.path.join(tmp.name, "me.pem")
    >>> for path in (ca, cert):
    ...     open(path, "w").close()  # stand-ins: only their existence is checked here
    >>> cfg = load_config("local", overrides={"security": {"tls_ca_file": ca,
    ...                                                    "tls_client_cert": cert}})
    >>> sec = build_security(cfg["security"])
    >>> sec.require_encryption, sec.tls_worker_cert == cert
    (True, True)
    >>> tmp.cleanup()
    """
    return Security(require_encryption=security["require_encryption"], **_tls_files(security))


def security_dask_config(security):
    """The same TLS settings as dask config values (``distributed.comm.tls.*``).

    Processes that build their ``Security()`` from the config, like the
    scheduler and workers SSHCluster starts on remote hosts (it forwards the
    config it was started with), then use these certificates.

    Parameters
    ----------
    security : dict
        A validated ``security`` section, as for :func:`build_security`.

    Returns
    -------
    dict
        ``distributed.comm.require-encryption`` and one
        ``distributed.comm.tls.*`` value per certificate or key file.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from dqkm.cluster_config import load_config
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     pem = Path(folder, "cluster.pem")
    ...     pem.touch()  # a stand-in for the CA and the certificate: only checked to exist
    ...     section = {"tls_ca_file": str(pem), "tls_client_cert": str(pem)}
    ...     cfg = load_config("local", overrides={"security": section})
    ...     values = security_dask_config(cfg["security"])
    >>> sorted(values)  # the scheduler's and the workers' certificates default to the client's
    ['distributed.comm.require-encryption', 'distributed.comm.tls.ca-file',
     'distributed.comm.tls.client.cert', 'distributed.comm.tls.scheduler.cert',
     'distributed.comm.tls.worker.cert']
    """
    out = {"distributed.comm.require-encryption": security["require_encryption"]}
    for key, path in _tls_files(security).items():
        if key == "tls_ca_file":
            out["distributed.comm.tls.ca-file"] = path
        else:  # tls_<role>_<cert|key>
            _, role, what = key.split("_")
            out[f"distributed.comm.tls.{role}.{what}"] = path
    return out


# -------------------------------------------------------------------------- exposure
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
    ``security`` section does not cover it).  :func:`~dqkm.cluster_config.get_client` warns with
    each message before it starts anything.

    Parameters
    ----------
    cfg : dict
        A config returned by :func:`~dqkm.cluster_config.load_config`.

    Returns
    -------
    list of (str, str)
        ``("scheduler" | "dashboard", message)`` pairs; empty when nothing is
        exposed.  ``existing`` starts nothing, so it is never reported.

    Examples
    --------
    >>> from dqkm.cluster_config import load_config
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
