"""The schema of cluster config files and its validation (no backend is imported).

:mod:`dqkm.cluster_config` re-exports :func:`validate_config` and :data:`BACKENDS`;
``cluster_configs/README.md`` documents every key listed here.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

from .exceptions import DqkmError, StoreError

__all__ = ["BACKENDS", "ConfigError", "ConfigFileNotFoundError", "ConfigTypeError", "Key",
           "SubmitCommandNotFoundError", "validate_config"]


class ConfigError(DqkmError, ValueError):
    """A cluster config is unknown, or a key or value of it is not allowed.

    Examples
    --------
    >>> from dqkm.cluster_config import load_config
    >>> load_config("no-such-config")
    Traceback (most recent call last):
    ...
    dqkm._cluster_schema.ConfigError: unknown cluster config 'no-such-config': not a file, ...
    """


class ConfigTypeError(DqkmError, TypeError):
    """A value of a cluster config has the wrong type.

    Examples
    --------
    >>> from dqkm.cluster_config import load_config
    >>> load_config(3)
    Traceback (most recent call last):
    ...
    dqkm._cluster_schema.ConfigTypeError: The 'path_or_name' parameter must be a path, ...
    """


class ConfigFileNotFoundError(StoreError, FileNotFoundError):
    """A cluster config file, or a certificate file it names, does not exist.

    Examples
    --------
    >>> from dqkm.cluster_config import load_config
    >>> load_config("/no/such/folder/cluster.yaml")
    Traceback (most recent call last):
    ...
    dqkm._cluster_schema.ConfigFileNotFoundError: cluster config file '...' does not exist.
    """


class SubmitCommandNotFoundError(DqkmError, FileNotFoundError):
    """A backend's job submission tool (``sbatch``, ``qsub``) or Kubernetes access
    (a kubeconfig, ``kubectl``) is missing on this machine: found before any
    cluster starts.

    Examples
    --------
    On a machine where ``sbatch`` is not on ``PATH`` (here: an empty ``PATH``):

    >>> import os
    >>> from dqkm.cluster_config import check_submit_command, load_config
    >>> cfg, path = load_config("slurm"), os.environ["PATH"]
    >>> os.environ["PATH"] = ""
    >>> try:
    ...     check_submit_command(cfg)
    ... except SubmitCommandNotFoundError as e:
    ...     print(e)
    ... finally:
    ...     os.environ["PATH"] = path
    cluster config backend 'slurm' submits its worker jobs with 'sbatch', which is not on ...
    """


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
    "name": _k("str|null", None, "job name (#SBATCH -J, #PBS -N): dask-jobqueue's job_name"),
    "scheduler_options": _k("dict", {}, "keyword arguments of the scheduler on this node, "
                                        "e.g. dashboard_address"),
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
        raise ConfigTypeError(f"{source}: section {section!r} must be a mapping of keys to "
                              f"values; got {_type_name(data)} {data!r}.")
    for key in data:
        if key not in schema:
            raise ConfigError(f"{source}: unknown key {key!r} in section {section!r}; "
                              f"allowed: {', '.join(schema)}.")
    out = {}
    for key, spec in schema.items():
        if key not in data:
            if spec.required:
                raise ConfigError(f"{source}: missing required key {key!r} in section "
                                  f"{section!r} ({spec.doc}).")
            out[key] = copy.deepcopy(spec.default)
            continue
        value = data[key]
        if not any(_KIND_CHECKS[kind](value) for kind in spec.kinds):
            raise ConfigTypeError(f"{source}: key {key!r} in section {section!r} must be "
                                  f"{' or '.join(spec.kinds)}; got {_type_name(value)} "
                                  f"{value!r}.")
        out[key] = copy.deepcopy(value)
    return out


def _check_min(section, values, source, keys, low):
    for key in keys:
        v = values.get(key)
        if v is not None and v < low:
            raise ConfigError(f"{source}: key {key!r} in section {section!r} must be >= {low}; "
                              f"got {v!r}.")


def _check_backend_rules(backend, sec, source):
    """Rules that span several keys of a backend section."""
    if backend == "local":
        _check_min("local", sec, source, ["n_workers", "threads_per_worker"], 1)
        _check_min("local", sec, source, ["scheduler_port", "malloc_trim_threshold"], 0)
    elif backend == "existing":
        given = [k for k in ("address", "scheduler_file") if sec[k] is not None]
        if len(given) != 1:
            raise ConfigError(f"{source}: section 'existing' needs exactly one of 'address' or "
                              f"'scheduler_file'; got {given or 'neither'}.")
        if sec["address"] is not None and not sec["address"].strip():
            raise ConfigError(f"{source}: key 'address' in section 'existing' must be a "
                              f"scheduler address like 'tcp://127.0.0.1:8786'; got ''.")
    elif backend == "ssh":
        if len(sec["hosts"]) < 2:
            raise ConfigError(f"{source}: key 'hosts' in section 'ssh' must list the scheduler "
                              f"host then at least one worker host; got {sec['hosts']!r}.")
        co = sec["connect_options"]
        if isinstance(co, list) and len(co) != len(sec["hosts"]):
            raise ConfigError(f"{source}: key 'connect_options' in section 'ssh' must be one "
                              f"mapping, or a list with one per host ({len(sec['hosts'])}); "
                              f"got a list of {len(co)}.")
    elif backend in ("slurm", "pbs"):
        _check_min(backend, sec, source, ["cores", "processes"], 1)
        _check_min(backend, sec, source, ["jobs", "n_workers"], 0)
        scaling = [k for k in ("jobs", "n_workers", "adapt") if sec[k] is not None]
        if len(scaling) > 1:
            raise ConfigError(f"{source}: section {backend!r} takes at most one of 'jobs', "
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
        raise ConfigError(f"{source}: section {section!r} needs 0 <= {lo} <= {hi}; "
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
    ConfigError
        Unknown or missing key, unknown backend, value out of range (a
        ``ValueError`` and a :class:`dqkm.exceptions.DqkmError`).
    ConfigTypeError
        A value of the wrong type (a ``TypeError`` and a ``DqkmError``).

    Examples
    --------
    >>> cfg = validate_config({"backend": "local", "local": {"n_workers": 2}})
    >>> cfg["local"]["n_workers"], cfg["local"]["threads_per_worker"], cfg["security"]
    (2, None, None)
    >>> validate_config({"backend": "local", "local": {"n_workerz": 2}})
    Traceback (most recent call last):
    ...
    dqkm._cluster_schema.ConfigError: <dict>: unknown key 'n_workerz' in section 'local'; ...
    """
    if not isinstance(raw, dict):
        raise ConfigTypeError(f"{source}: a cluster config must be a mapping with a 'backend' "
                              f"key; got {_type_name(raw)}.")
    if "backend" not in raw:
        raise ConfigError(f"{source}: missing required key 'backend' (one of "
                          f"{', '.join(BACKENDS)}).")
    backend = raw["backend"]
    if backend not in BACKENDS:
        raise ConfigError(f"{source}: key 'backend' must be one of {', '.join(BACKENDS)}; "
                          f"got {backend!r}.")
    schema, tls_ok = BACKENDS[backend]
    allowed = ["backend", backend, "client", "security", "dask_config"]
    for key in raw:
        if key not in allowed:
            hint = (f" (section {key!r} belongs to backend {key!r}, but backend is "
                    f"{backend!r})" if key in BACKENDS else "")
            raise ConfigError(f"{source}: unknown top-level key {key!r}{hint}; allowed: "
                              f"{', '.join(allowed)}.")
    if raw.get("security") is not None and not tls_ok:
        raise ConfigError(f"{source}: backend {backend!r} does not take a 'security' section; "
                          f"configure TLS in the cluster itself. Backends with TLS: "
                          f"{', '.join(b for b, (_, t) in BACKENDS.items() if t)}.")
    sec = _check_section(raw.get(backend), schema, backend, source)
    if backend == "existing" and raw.get(backend) is None:
        raise ConfigError(f"{source}: missing required section 'existing' with key 'address' "
                          f"(e.g. tcp://127.0.0.1:8786) or 'scheduler_file'.")
    _check_backend_rules(backend, sec, source)
    client = _check_section(raw.get("client"), _CLIENT, "client", source)
    _check_min("client", client, source, ["wait_for_workers"], 0)
    security = raw.get("security")
    if security is not None:
        security = _check_section(security, _SECURITY, "security", source)
    dask_config = raw.get("dask_config") or {}
    if not isinstance(dask_config, dict) or not all(isinstance(k, str) for k in dask_config):
        raise ConfigTypeError(f"{source}: section 'dask_config' must map dask config keys "
                              f"(str, e.g. 'distributed.comm.timeouts.connect') to values; got "
                              f"{dask_config!r}.")
    return {"backend": backend, backend: sec, "client": client, "security": security,
            "dask_config": dict(dask_config)}
