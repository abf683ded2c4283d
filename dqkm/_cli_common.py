"""What the CLI's commands share: its error class, output-path checks, the
scheduler set-up and reading saved models (used by :mod:`dqkm.cli` and
:mod:`dqkm._cli_inspect`)."""

from __future__ import annotations

import contextlib
import os
import zipfile

from .exceptions import DqkmError


class CLIError(DqkmError):
    """A user error found by the command line: printed as one line, exit status 2."""


def _check_out(path, overwrite, option="--out"):
    """Refuse, before any work, an output that exists (without ``--overwrite``) or
    that cannot be created: under a file, or in a folder this user cannot write."""
    if os.path.exists(path) and not overwrite:
        raise CLIError(f"output path {path!r} already exists; pass --overwrite to replace it.")
    _check_parent(path, option)


def _check_parent(path, option):
    """The nearest existing folder above a local output ``path`` must be a writable
    folder (URLs are checked by their filesystem when written)."""
    text = os.fspath(path)
    if "://" in text:
        return
    parent = os.path.dirname(os.path.abspath(text))
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise CLIError(f"{option} {text!r} cannot be created: {parent!r} is a file, not a "
                       "folder; choose a path in a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CLIError(f"{option} {text!r} cannot be created: the folder {parent!r} is not "
                       "writable by this user; choose another folder or change its "
                       "permissions.")


def _read_data(args, attr="data"):
    """The command's data (``args.<attr>``) as a 2-D float Dask array, read as the
    options ``--format``, ``--columns`` and ``--component`` say (see
    :func:`dqkm.io.load_array`; the format is told by the suffix by default)."""
    from .io import as_dask_array

    columns = getattr(args, "columns", None)
    return as_dask_array(getattr(args, attr), format=getattr(args, "format", None),
                         columns=[c.strip() for c in columns.split(",")] if columns else None,
                         component=getattr(args, "component", None))


@contextlib.contextmanager
def _scheduler(args):
    """Set up the scheduler named on the command line for the duration of a command.

    ``--cluster FILE`` and ``--scheduler local`` both go through
    :func:`dqkm.cluster_config.get_client` (``local`` is the packaged
    ``cluster_configs/local.yaml`` with ``--n-workers``); an ADDRESS connects
    to a running scheduler; ``threads`` uses Dask's threaded scheduler.
    """
    import dask

    sched = getattr(args, "scheduler", "threads")
    cluster_file = getattr(args, "cluster", None)
    if not cluster_file and sched in ("threads", "sync", "synchronous"):
        with dask.config.set(scheduler="threads" if sched == "threads" else "sync"):
            yield None
        return
    from .cluster_config import get_client
    from .data.execute import scheduler_workers

    if cluster_file:
        client = get_client(cluster_file)
    elif sched == "local":
        local = {"n_workers": args.n_workers}
        if not args.dashboard:
            local["dashboard_address"] = None
        client = get_client("local", overrides={"local": local})
    else:
        client = get_client({"backend": "existing", "existing": {"address": sched}})
    with client:
        started = getattr(client, "cluster", None) is not None
        kind = type(client.cluster).__name__ if started else "existing scheduler"
        dashboard = client.dashboard_link if (not started or args.dashboard) else None
        if not args.quiet:
            print(f"cluster: {client.scheduler.address} ({kind}, "
                  f"{len(scheduler_workers(client))} workers)"
                  + (f"; dashboard: {dashboard}" if dashboard else ""), flush=True)
        yield client


def _read_model(read, path):
    """``read(path)`` (:func:`dqkm.io.load` or :func:`dqkm.io.model_info`), with what a
    damaged, truncated or foreign file raises turned into one :class:`CLIError` that
    names the path (the original error stays chained, shown with ``-v``)."""
    try:
        return read(path)
    except (DqkmError, PermissionError):
        raise
    except (zipfile.BadZipFile, EOFError, KeyError, RuntimeError, ValueError, OSError) as e:
        if isinstance(e, FileNotFoundError) and not os.path.exists(path):
            raise  # "No dqkm model at ..."
        raise CLIError(f"cannot read the model at {str(path)!r} ({type(e).__name__}: "
                       f"{_one_line(e)}): it is incomplete, damaged or not a dqkm model; "
                       "write it again with 'dqkm fit' (or dqkm.save).") from e


def _load_model(path, *, needs, command):
    """A saved model that has the method ``needs`` (a clear CLI error otherwise)."""
    from .io import load

    model = _read_model(load, path)
    if not hasattr(model, needs):
        raise CLIError(f"the model at {str(path)!r} is a {type(model).__name__}, which has no "
                       f"{needs}; {command} needs "
                       + {"kneighbors": "a ClusterIndex saved by 'dqkm index'.",
                          "transform": "a model with transform (FactorNystroem, KMeans, …).",
                          "predict": "a fitted clusterer (see 'dqkm fit')."}[needs])
    return model


def _one_line(error):
    """An exception's message on one line (its type when it has none)."""
    text = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text or type(error).__name__
