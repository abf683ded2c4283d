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
the schema below is the source of truth, and :func:`load_config` checks a file
against it without importing any optional backend.

Examples
--------
>>> from dqkm.cluster_config import load_config
>>> load_config("local")["local"]["threads_per_worker"]
1
"""

from __future__ import annotations

import copy
import importlib
import logging
import os
from pathlib import Path
from typing import NamedTuple

import yaml
from distributed import Client

__all__ = ["BACKENDS", "CONFIG_DIR", "ClusterClient", "available_configs", "build_security",
           "dask_config_for", "get_client", "load_config", "security_dask_config",
           "validate_config"]

logger = logging.getLogger(__name__)

#: Folder of the configs shipped with dqkm (package data, in wheels too; the
#: repository's top-level ``cluster_configs/`` is a link to it).
CONFIG_DIR = Path(__file__).resolve().parent / "cluster_configs"

_EXTRA_HINT = "pip install 'dqkm[cluster]'"


# ----------------------------------------------------------------------------- schema
class Key(NamedTuple):
    """One allowed key of a config section: accepted YAML types (among ``int``,
    ``number``, ``str``, ``bool``, ``dict``, ``list[str]``, ``list[dict]``,
    ``null``), default, whether it is required, and a few words on it."""

    kinds: tuple
    default: object = None
    required: bool = False
    doc: str = ""


def _k(kinds, default=None, doc="", required=False):
    return Key(tuple(kinds.split("|")), default, required, doc)


_CLIENT = {
    "timeout": _k("number|str|null", None, "seconds (or '30s') to wait when connecting"),
    "wait_for_workers": _k("int", 0, "block until this many workers are connected"),
    "wait_timeout": _k("number|str", 120, "give up waiting for workers after this long"),
    "set_as_default": _k("bool", True, "make the client dask's default scheduler"),
}

_SECURITY = {
    "tls_ca_file": _k("str", required=True, doc="CA certificate(s), PEM"),
    "tls_client_cert": _k("str", required=True, doc="this client's certificate, PEM"),
    "tls_client_key": _k("str|null", None, "its key, if not inside tls_client_cert"),
    "tls_scheduler_cert": _k("str|null", None, "scheduler certificate (default: client's)"),
    "tls_scheduler_key": _k("str|null", None, "scheduler key (default: client's)"),
    "tls_worker_cert": _k("str|null", None, "worker certificate (default: client's)"),
    "tls_worker_key": _k("str|null", None, "worker key (default: client's)"),
    "require_encryption": _k("bool", True, "refuse unencrypted connections"),
}

_LOCAL = {
    "n_workers": _k("int|null", None, "worker processes (None: distributed's choice)"),
    "threads_per_worker": _k("int|null", None, "threads per worker"),
    "memory_limit": _k("str|number|null", "auto", "per worker: 'auto', '4GB', bytes, 0 = none"),
    "processes": _k("bool", True, "workers in separate processes (nanny) or threads"),
    "dashboard_address": _k("str|null", "127.0.0.1:8787", "dashboard; null: no pages"),
    "host": _k("str|null", None, "interface the scheduler listens on (None: 127.0.0.1)"),
    "scheduler_port": _k("int", 0, "scheduler port (0: any free port)"),
    "local_directory": _k("str|null", None, "workers' scratch space"),
    "malloc_trim_threshold": _k("int|null", None,
                                "MALLOC_TRIM_THRESHOLD_ for worker processes; null: unset"),
}

_EXISTING = {
    "address": _k("str|null", None, "scheduler address, e.g. tcp://10.0.0.5:8786"),
    "scheduler_file": _k("str|null", None, "scheduler file written by 'dask scheduler'"),
}

_SSH = {
    "hosts": _k("list[str]", required=True, doc="first: scheduler, others: workers"),
    "connect_options": _k("dict|list[dict]", {}, "asyncssh connect options"),
    "worker_options": _k("dict", {}, "keyword arguments of each worker"),
    "scheduler_options": _k("dict", {}, "keyword arguments of the scheduler"),
    "worker_class": _k("str", "distributed.Nanny", "worker class, dotted path"),
    "remote_python": _k("str|list[str]|null", None, "python executable on the hosts"),
}

_JOBQUEUE = {
    "cores": _k("int", required=True, doc="cores per job"),
    "memory": _k("str", required=True, doc="memory per job, e.g. '16GB'"),
    "processes": _k("int|null", None, "worker processes per job"),
    "queue": _k("str|null", None, "destination queue / partition"),
    "account": _k("str|null", None, "accounting string"),
    "walltime": _k("str|null", None, "walltime per job, e.g. '01:00:00'"),
    "job_extra_directives": _k("list[str]", [], "extra #SBATCH / #PBS lines"),
    "job_script_prologue": _k("list[str]", [], "shell lines run before the worker"),
    "worker_extra_args": _k("list[str]", [], "extra 'dask worker' arguments"),
    "interface": _k("str|null", None, "network interface, e.g. ib0"),
    "local_directory": _k("str|null", None, "workers' scratch space on the nodes"),
    "log_directory": _k("str|null", None, "where job logs go"),
    "death_timeout": _k("number|null", None, "seconds a worker waits for the scheduler"),
    "python": _k("str|null", None, "python executable on the nodes"),
    "name": _k("str|null", None, "job name"),
    "jobs": _k("int|null", None, "scale to this many jobs"),
    "n_workers": _k("int|null", None, "scale to this many workers"),
    "adapt": _k("dict|null", None, "adaptive scaling: minimum_jobs, maximum_jobs"),
}
_SLURM = {**_JOBQUEUE, "job_cpu": _k("int|null", None, "cpus to book (#SBATCH --cpus-per-task)"),
          "job_mem": _k("str|null", None, "memory to book (#SBATCH --mem)")}
_PBS = {**_JOBQUEUE, "resource_spec": _k("str|null", None, "#PBS -l resource string")}
_JOBQUEUE_ADAPT = {"minimum_jobs": _k("int", 0), "maximum_jobs": _k("int", required=True)}

_KUBERNETES = {
    "name": _k("str", required=True, doc="DaskCluster resource name"),
    "namespace": _k("str|null", None, "Kubernetes namespace (None: current)"),
    "image": _k("str", "ghcr.io/dask/dask:latest", "container image; must hold dqkm"),
    "n_workers": _k("int", 3, "worker pods"),
    "resources": _k("dict|null", None, "pod resources: requests/limits of cpu/memory"),
    "env": _k("dict|null", None, "environment variables of the pods"),
    "scheduler_service_type": _k("str", "ClusterIP", "ClusterIP, NodePort or LoadBalancer"),
    "shutdown_on_close": _k("bool|null", None, "delete the cluster when the client closes"),
    "port_forward_cluster_ip": _k("bool|null", None, "port-forward to a ClusterIP scheduler"),
    "adapt": _k("dict|null", None, "adaptive scaling: minimum, maximum"),
}
_KUBE_ADAPT = {"minimum": _k("int", 0), "maximum": _k("int", required=True)}
_KUBE_RESOURCES = {"requests": _k("dict", {}), "limits": _k("dict", {})}

#: backend name -> (its section's schema, supports a ``security`` section)
BACKENDS = {
    "local": (_LOCAL, True),
    "existing": (_EXISTING, True),
    "ssh": (_SSH, True),
    "slurm": (_SLURM, True),
    "pbs": (_PBS, True),
    "kubernetes": (_KUBERNETES, False),
}
_SHARED_SECTIONS = {"client": _CLIENT, "security": _SECURITY}

# optional backends: module to import, the class or function, what to install
_OPTIONAL = {
    "ssh": ("asyncssh", None, "asyncssh (pip install asyncssh, or " + _EXTRA_HINT + ")"),
    "slurm": ("dask_jobqueue", "SLURMCluster", "dask-jobqueue (" + _EXTRA_HINT + ")"),
    "pbs": ("dask_jobqueue", "PBSCluster", "dask-jobqueue (" + _EXTRA_HINT + ")"),
    "kubernetes": ("dask_kubernetes.operator", "KubeCluster",
                   "dask-kubernetes (" + _EXTRA_HINT + ")"),
}


# ------------------------------------------------------------------------ validation
def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


_KIND_CHECKS = {
    "null": lambda v: v is None,
    "bool": lambda v: isinstance(v, bool),
    "int": _is_int,
    "number": lambda v: _is_int(v) or isinstance(v, float),
    "str": lambda v: isinstance(v, str),
    "dict": lambda v: isinstance(v, dict),
    "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "list[dict]": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
}


def _type_name(value):
    return "null" if value is None else type(value).__name__


def _check_section(data, schema, section, source):
    """Validate one mapping against ``schema``; return it with defaults filled."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TypeError(f"{source}: section {section!r} must be a mapping of keys to values; "
                        f"got {_type_name(data)} {data!r}.")
    for key in data:
        if key not in schema:
            raise ValueError(f"{source}: unknown key {key!r} in section {section!r}; "
                             f"allowed: {', '.join(schema)}.")
    out = {}
    for key, spec in schema.items():
        if key not in data:
            if spec.required:
                raise ValueError(f"{source}: missing required key {key!r} in section "
                                 f"{section!r} ({spec.doc}).")
            out[key] = copy.deepcopy(spec.default)
            continue
        value = data[key]
        if not any(_KIND_CHECKS[kind](value) for kind in spec.kinds):
            raise TypeError(f"{source}: key {key!r} in section {section!r} must be "
                            f"{' or '.join(spec.kinds)}; got {_type_name(value)} {value!r}.")
        out[key] = copy.deepcopy(value)
    return out


def _check_min(section, values, source, keys, low):
    for key in keys:
        v = values.get(key)
        if v is not None and v < low:
            raise ValueError(f"{source}: key {key!r} in section {section!r} must be >= {low}; "
                             f"got {v!r}.")


def _check_backend_rules(backend, sec, source):
    """Rules that span several keys of a backend section."""
    if backend == "local":
        _check_min("local", sec, source, ["n_workers", "threads_per_worker"], 1)
        _check_min("local", sec, source, ["scheduler_port", "malloc_trim_threshold"], 0)
    elif backend == "existing":
        given = [k for k in ("address", "scheduler_file") if sec[k] is not None]
        if len(given) != 1:
            raise ValueError(f"{source}: section 'existing' needs exactly one of 'address' or "
                             f"'scheduler_file'; got {given or 'neither'}.")
        if sec["address"] is not None and not sec["address"].strip():
            raise ValueError(f"{source}: key 'address' in section 'existing' must be a "
                             f"scheduler address like 'tcp://127.0.0.1:8786'; got ''.")
    elif backend == "ssh":
        if len(sec["hosts"]) < 2:
            raise ValueError(f"{source}: key 'hosts' in section 'ssh' must list the scheduler "
                             f"host then at least one worker host; got {sec['hosts']!r}.")
        co = sec["connect_options"]
        if isinstance(co, list) and len(co) != len(sec["hosts"]):
            raise ValueError(f"{source}: key 'connect_options' in section 'ssh' must be one "
                             f"mapping, or a list with one per host ({len(sec['hosts'])}); "
                             f"got a list of {len(co)}.")
    elif backend in ("slurm", "pbs"):
        _check_min(backend, sec, source, ["cores", "processes"], 1)
        _check_min(backend, sec, source, ["jobs", "n_workers"], 0)
        scaling = [k for k in ("jobs", "n_workers", "adapt") if sec[k] is not None]
        if len(scaling) > 1:
            raise ValueError(f"{source}: section {backend!r} takes at most one of 'jobs', "
                             f"'n_workers' or 'adapt'; got {scaling}.")
        if sec["adapt"] is not None:
            sec["adapt"] = _check_section(sec["adapt"], _JOBQUEUE_ADAPT, f"{backend}.adapt",
                                          source)
            _check_adapt(sec["adapt"], "minimum_jobs", "maximum_jobs", f"{backend}.adapt", source)
    elif backend == "kubernetes":
        _check_min("kubernetes", sec, source, ["n_workers"], 0)
        if sec["resources"] is not None:
            sec["resources"] = _check_section(sec["resources"], _KUBE_RESOURCES,
                                              "kubernetes.resources", source)
        if sec["adapt"] is not None:
            sec["adapt"] = _check_section(sec["adapt"], _KUBE_ADAPT, "kubernetes.adapt", source)
            _check_adapt(sec["adapt"], "minimum", "maximum", "kubernetes.adapt", source)


def _check_adapt(adapt, lo, hi, section, source):
    if not 0 <= adapt[lo] <= adapt[hi]:
        raise ValueError(f"{source}: section {section!r} needs 0 <= {lo} <= {hi}; "
                         f"got {lo}={adapt[lo]}, {hi}={adapt[hi]}.")


def validate_config(raw, source="<dict>"):
    """Check a parsed config against the schema; return it with defaults filled.

    Parameters
    ----------
    raw : dict
        The parsed YAML.
    source : str
        Where it came from, used in error messages.

    Returns
    -------
    dict
        Keys ``backend``, the backend's section, ``client``, ``security``
        (None when absent) and ``dask_config``, every default filled in.

    Raises
    ------
    ValueError
        Unknown or missing key, unknown backend, value out of range.
    TypeError
        A value of the wrong type.
    """
    if not isinstance(raw, dict):
        raise TypeError(f"{source}: a cluster config must be a mapping with a 'backend' key; "
                        f"got {_type_name(raw)}.")
    if "backend" not in raw:
        raise ValueError(f"{source}: missing required key 'backend' (one of "
                         f"{', '.join(BACKENDS)}).")
    backend = raw["backend"]
    if backend not in BACKENDS:
        raise ValueError(f"{source}: key 'backend' must be one of {', '.join(BACKENDS)}; "
                         f"got {backend!r}.")
    schema, tls_ok = BACKENDS[backend]
    allowed = ["backend", backend, "client", "security", "dask_config"]
    for key in raw:
        if key not in allowed:
            hint = (f" (section {key!r} belongs to backend {key!r}, but backend is "
                    f"{backend!r})" if key in BACKENDS else "")
            raise ValueError(f"{source}: unknown top-level key {key!r}{hint}; allowed: "
                             f"{', '.join(allowed)}.")
    if raw.get("security") is not None and not tls_ok:
        raise ValueError(f"{source}: backend {backend!r} does not take a 'security' section; "
                         f"configure TLS in the cluster itself. Backends with TLS: "
                         f"{', '.join(b for b, (_, t) in BACKENDS.items() if t)}.")
    sec = _check_section(raw.get(backend), schema, backend, source)
    if backend == "existing" and raw.get(backend) is None:
        raise ValueError(f"{source}: missing required section 'existing' with key 'address' "
                         f"(e.g. tcp://127.0.0.1:8786) or 'scheduler_file'.")
    _check_backend_rules(backend, sec, source)
    client = _check_section(raw.get("client"), _CLIENT, "client", source)
    _check_min("client", client, source, ["wait_for_workers"], 0)
    security = raw.get("security")
    if security is not None:
        security = _check_section(security, _SECURITY, "security", source)
    dask_config = raw.get("dask_config") or {}
    if not isinstance(dask_config, dict) or not all(isinstance(k, str) for k in dask_config):
        raise TypeError(f"{source}: section 'dask_config' must map dask config keys (str, e.g. "
                        f"'distributed.comm.timeouts.connect') to values; got {dask_config!r}.")
    return {"backend": backend, backend: sec, "client": client, "security": security,
            "dask_config": dict(dask_config)}


# --------------------------------------------------------------------------- loading
def available_configs():
    """Names of the configs shipped in :data:`CONFIG_DIR` (e.g. ``'local'``)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _resolve(path_or_name):
    """Return (parsed YAML, source label) for a dict, a path or a packaged name."""
    if isinstance(path_or_name, dict):
        return path_or_name, "<dict>"
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise TypeError(f"The 'path_or_name' parameter must be a path, the name of a shipped "
                        f"config ({', '.join(available_configs())}) or a dict; got "
                        f"{type(path_or_name).__name__}.")
    text = os.fspath(path_or_name)
    path = Path(text).expanduser()
    if not path.is_file():
        bare = isinstance(path_or_name, str) and os.sep not in text and "/" not in text \
            and path.suffix not in (".yaml", ".yml")
        if not bare:
            raise FileNotFoundError(f"cluster config file {text!r} does not exist.")
        path = CONFIG_DIR / f"{text}.yaml"
        if not path.is_file():
            raise ValueError(f"unknown cluster config {text!r}: not a file, nor one of the "
                             f"shipped configs ({', '.join(available_configs())}).")
        source = f"cluster_configs/{path.name}"
    else:
        source = text
    with open(path, encoding="utf-8") as f:
        try:
            raw = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ValueError(f"{source}: not valid YAML: {e}") from None
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
        ``cluster_configs/local.yaml``), or an already parsed dict.
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
            raise TypeError(f"The 'overrides' parameter must be a dict; got "
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
            raise FileNotFoundError(f"security: key {key!r} names {path!r}, which is not a "
                                    f"file.")
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
    """
    from distributed.security import Security

    return Security(require_encryption=security["require_encryption"], **_tls_files(security))


def security_dask_config(security):
    """The same TLS settings as dask config values (``distributed.comm.tls.*``).

    Processes that build their ``Security()`` from the config, like the
    scheduler and workers SSHCluster starts on remote hosts (it forwards the
    config it was started with), then use these certificates.
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
        keys = [k for k in BACKENDS[backend][0] if k not in ("jobs", "n_workers", "adapt")]
        cluster = cls(**_kwargs(sec, keys), **extra)
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
        """Close the client, then the cluster it started (if any)."""
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
    overrides : dict, optional
        Merged into the config before validation, e.g.
        ``{"local": {"n_workers": 4}}``.

    Returns
    -------
    ClusterClient
        A :class:`distributed.Client`; ``client.cluster`` is the cluster it
        started (None for ``existing``), closed together with the client.

    Raises
    ------
    ValueError, TypeError
        The config does not match the schema (the message names the key and
        the file).
    ImportError
        The backend's optional package is missing; the message names the
        extra to install (``pip install 'dqkm[cluster]'``).

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
