"""The ``dqkm`` command: generate data, fit, predict, index and search, inspect models, run
the demo.

Examples
--------
dqkm generate blobs --n-samples 100000 --n-features 32 --centers 8 --out data.zarr
dqkm fit --algorithm kmeans --n-clusters 8 data.zarr --out model.zarr --scheduler local
dqkm predict model.zarr data.zarr --out labels.zarr
dqkm index model.zarr data.zarr --store index.zarr --out index-model.zarr
dqkm neighbors index-model.zarr queries.zarr --n-neighbors 10 --out knn.zarr
dqkm info model.zarr
dqkm report model.zarr --plot history.png

A user error (a :class:`dqkm.exceptions.DqkmError`, a missing, existing or
unwritable path, a damaged model file, a lost scheduler, a parameter refused by
dqkm) prints one line ``dqkm: error: ...`` on stderr and exits with status 2;
Ctrl-C prints one line and exits with status 130; any other exception is a bug
and shows its traceback.  ``-v`` (before or after the command) shows the
traceback of every error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import traceback
import zipfile

from .exceptions import DqkmError

__all__ = ["main"]

# algorithm name on the command line -> estimator class name in dqkm
ALGORITHMS = {"kmeans": "KMeans", "qkmeans": "QKMeans", "kmm": "KMultipleMeans",
              "sekmeans": "SparseEmbeddedKMeans", "kmeans-l1": "KMeansL1"}


class CLIError(DqkmError):
    """A user error found by the command line: printed as one line, exit status 2."""


def _available_algorithms():
    import dqkm

    return {k: getattr(dqkm, v) for k, v in ALGORITHMS.items() if hasattr(dqkm, v)}


def _parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


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
    from .parallel.engine import scheduler_workers

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
        print(f"cluster: {client.scheduler.address} ({kind}, {len(scheduler_workers(client))} "
              "workers)" + (f"; dashboard: {dashboard}" if dashboard else ""), flush=True)
        yield client


def _progress(args):
    from .parallel.engine import progress

    return progress(not getattr(args, "no_progress", False))


# ----------------------------------------------------------------------------- commands
def cmd_generate(args):
    from . import datasets

    _check_out(args.out, args.overwrite)
    t0 = time.perf_counter()
    with _scheduler(args), _progress(args):
        if args.kind == "blobs":
            X, _ = datasets.make_blobs(args.n_samples, args.n_features, args.centers,
                                       chunks=args.chunks, random_state=args.random_state,
                                       dtype=args.dtype, cluster_std=args.cluster_std,
                                       path=args.out, overwrite=args.overwrite)
        else:
            gen = datasets.make_moons if args.kind == "moons" else datasets.make_circles
            X, y = gen(args.n_samples, noise=args.noise, chunks=args.chunks,
                       random_state=args.random_state)
            from .io import save_arrays

            save_arrays({"X": X, "y": y}, args.out, overwrite=args.overwrite)
    print(f"wrote {args.kind} X {X.shape[0]} x {X.shape[1]} ({X.dtype}) and y to {args.out} "
          f"in {time.perf_counter() - t0:.1f}s")


def cmd_fit(args):
    from .io import as_dask_array, save

    algos = _available_algorithms()
    if args.algorithm not in algos:
        raise CLIError(f"unknown --algorithm {args.algorithm!r}; available: {sorted(algos)}.")
    _check_out(args.out, args.overwrite)
    params = {"n_clusters": args.n_clusters, "random_state": args.random_state}
    if args.max_iter is not None:
        params["max_iter"] = args.max_iter
    if args.persist is not None:
        params["persist"] = {"auto": "auto", "true": True, "false": False}[args.persist]
    for item in args.param or []:
        if "=" not in item:
            raise CLIError(f"--param expects KEY=VALUE; got {item!r}.")
        k, v = item.split("=", 1)
        params[k] = _parse_value(v)
    cls = algos[args.algorithm]
    try:
        model = cls(**params)
    except TypeError as e:
        raise CLIError(f"bad parameter for {cls.__name__}: {e}") from None
    with _scheduler(args), _progress(args):
        X = as_dask_array(args.data)
        t0 = time.perf_counter()
        fit_kw = {}
        if args.checkpoint:
            fit_kw = {"checkpoint": args.checkpoint, "resume": args.resume}
        elif args.resume:
            raise CLIError("--resume needs --checkpoint PATH.")
        _fit_checkpointed(model, X, args, fit_kw)
        seconds = time.perf_counter() - t0
        save(model, args.out, overwrite=args.overwrite)
    inertia = getattr(model, "inertia_", float("nan"))
    print(f"{cls.__name__}: n_clusters={args.n_clusters} inertia={inertia:.6g} "
          f"n_iter={getattr(model, 'n_iter_', '-')} seconds={seconds:.2f} -> {args.out}")


def _fit_checkpointed(model, X, args, fit_kw):
    """``model.fit`` with ``--checkpoint``: the checkpoint may not be, contain or lie
    inside the data store or ``--out``; a checkpoint refusal is one line, exit 2."""
    from .cluster._checkpoint import CheckpointError, check_checkpoint_path

    try:
        if args.checkpoint:
            check_checkpoint_path(args.checkpoint, {"the input store": args.data,
                                                    "the --out path": args.out})
        model.fit(X, **fit_kw)
    except CheckpointError as e:
        raise CLIError(f"--checkpoint: {e}") from None


def _apply_saved_model(args, method):
    """``predict``/``transform``: a saved model's ``method`` on the data store,
    blockwise, written to ``--out``.  Returns the model and the (lazy) result."""
    from .io import as_dask_array, save_array

    _check_out(args.out, args.overwrite)
    model = _load_model(args.model, needs=method, command=args.command)
    with _scheduler(args), _progress(args):
        out = getattr(model, method)(as_dask_array(args.data))
        save_array(out, args.out, overwrite=args.overwrite)
    return model, out


def cmd_predict(args):
    _, labels = _apply_saved_model(args, "predict")
    print(f"wrote {labels.shape[0]} labels to {args.out}")


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


def cmd_index(args):
    from .io import as_dask_array, load_array, save
    from .neighbors import ClusterIndex

    _check_out(args.out, args.overwrite)  # an existing --store: ClusterIndex.fit, first
    if args.store:
        _check_parent(args.store, "--store")
    clusterer = _load_model(args.model, needs="predict", command="index")
    if not hasattr(clusterer, "cluster_centers_"):
        raise CLIError(f"the model at {args.model!r} ({type(clusterer).__name__}) has no "
                       "cluster_centers_; index needs a K-means-family model.")
    with _scheduler(args), _progress(args):
        X = as_dask_array(args.data)
        y = None
        if args.labels:
            y = load_array(args.labels, args.labels_component)
            if y.ndim != 1 or y.shape[0] != X.shape[0]:
                raise CLIError(f"--labels must hold one label per row of the data "
                               f"({X.shape[0]},); got shape {y.shape}.")
        t0 = time.perf_counter()
        index = ClusterIndex(clusterer, n_probe=args.n_probe, store=args.store,
                             overwrite=args.overwrite).fit(X, y)
        seconds = time.perf_counter() - t0
        save(index, args.out, overwrite=args.overwrite)
    sizes = index.cluster_sizes_
    where = f"rows in {args.store}" if args.store else f"rows in {args.out}"
    print(f"ClusterIndex: {index.n_samples_fit_} rows in {sizes.size} clusters (largest "
          f"{int(sizes.max())}, mean {sizes.mean():.0f}), n_probe={args.n_probe}"
          f"{', with labels' if y is not None else ''}, {seconds:.2f}s; {where} -> {args.out}")


def cmd_neighbors(args):
    from .io import as_dask_array, save_arrays

    _check_out(args.out, args.overwrite)
    index = _load_model(args.model, needs="kneighbors", command="neighbors")
    with _scheduler(args), _progress(args):
        Q = as_dask_array(args.queries)
        t0 = time.perf_counter()
        dist, ind = index.kneighbors(Q, n_neighbors=args.n_neighbors)
        save_arrays({"distances": dist, "indices": ind}, args.out, overwrite=args.overwrite)
        seconds = time.perf_counter() - t0
    print(f"wrote the {args.n_neighbors} nearest indexed rows of {Q.shape[0]} queries "
          f"(arrays 'distances', 'indices') to {args.out} in {seconds:.2f}s")


def cmd_transform(args):
    model, Y = _apply_saved_model(args, "transform")
    print(f"wrote {type(model).__name__} features {Y.shape[0]} x {Y.shape[1]} ({Y.dtype}) to "
          f"{args.out}")


def _describe(v):
    """A saved parameter or state value for ``info``: nested models and operators in
    one line (``QKMeans(n_clusters=16, …) fitted: inertia_=…``)."""
    from .io import _NESTED, _OPERATOR

    if isinstance(v, dict) and _OPERATOR in v:
        return f"<{v[_OPERATOR]}>"
    if isinstance(v, dict) and (_NESTED in v or {"estimator", "params", "state"} <= set(v)):
        h = v.get(_NESTED, v)
        params = ", ".join(f"{k}={_describe(p)}" for k, p in sorted(h["params"].items()))
        text = f"{h['estimator']}({params})"
        state = {k: x for k, x in (h.get("state") or {}).items() if k != "history_"}
        if h.get("state") is None:
            return text + " unfitted"
        return text + " fitted: " + ", ".join(f"{k}={x}" for k, x in sorted(state.items())
                                              if not isinstance(x, (dict, list)))
    return repr(v)


def cmd_info(args):
    from .io import model_info

    info = _read_model(model_info, args.model)
    state = dict(info.get("state", {}))
    history = state.pop("history_", [])
    print(f"estimator: {info['estimator']} (format {info['format_version']})")
    print("parameters: " + ", ".join(f"{k}={_describe(v)}"
                                     for k, v in sorted(info["params"].items())))
    for k, v in sorted(state.items()):
        print(f"{k}: {_describe(v) if isinstance(v, dict) else v}")
    for k, (shape, dtype) in sorted(info["arrays"].items()):
        print(f"array {k}: shape {tuple(shape)} {dtype}")
    if history:
        last = history[-1]
        print(f"history: {len(history)} iterations; last objective {last.get('objective')}")


def cmd_report(args):
    from .io import load

    if args.plot:
        _check_out(args.plot, args.overwrite, "--plot")
    model = _read_model(load, args.model)
    history = getattr(model, "history_", None) or []
    print(f"{type(model).__name__}: {len(history)} iterations, inertia "
          f"{getattr(model, 'inertia_', float('nan')):.6g}")
    if history:
        extra = [k for k in ("seconds_assign", "seconds_palm", "palm_error", "beta",
                             "n_components") if k in history[0]]
        cols = ["iteration", "objective", "shift", "seconds", *extra, "empty"]
        print("  ".join(f"{c:>14}" for c in cols))
        for i, rec in enumerate(history, 1):
            vals = [rec.get("iteration", i), rec.get("objective"), rec.get("shift"),
                    rec.get("seconds"), *[rec.get(k) for k in extra],
                    len(rec.get("empty_clusters", []) or [])]
            print("  ".join(f"{v:>14.6g}" if isinstance(v, float) else f"{v!s:>14}"
                            for v in vals))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        from .monitor import plot_history

        plot_history(model).savefig(args.plot, dpi=110, bbox_inches="tight")
        print(f"wrote {args.plot}")


def cmd_demo(args):
    from .demo import run_demo

    run_demo(n_samples=args.n_samples, n_features=args.n_features, n_clusters=args.n_clusters,
             n_workers=args.n_workers)


# ----------------------------------------------------------------------------- parser
def _add_scheduler_args(p):
    p.add_argument("--scheduler", default="threads",
                   help="threads (default), local (a LocalCluster) or a scheduler ADDRESS")
    p.add_argument("--n-workers", type=int, default=2, help="workers of --scheduler local")
    p.add_argument("--cluster", metavar="PATH",
                   help="a cluster config: a shipped name (local, ssh, slurm, ...) or a file "
                        "given as a path (./mine.yaml); a config can run code, use only "
                        "configs you trust (see cluster_configs/README.md)")
    p.add_argument("--no-dashboard", dest="dashboard", action="store_false",
                   help="do not start the dashboard of --scheduler local")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


class _Parser(argparse.ArgumentParser):
    """``dqkm``'s parser: ``-v`` counts before and after the command
    (``dqkm -v fit -v ...`` is ``-vv``)."""

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        ns.verbose = getattr(ns, "verbose", 0) + vars(ns).pop("verbose_after_command", 0)
        return ns, rest


def build_parser():
    parser = _Parser(prog="dqkm", description=__doc__.split("\n\n")[0])
    verbose_help = "log per-iteration lines (-v) or debug (-vv); show error tracebacks"
    parser.add_argument("-v", "--verbose", action="count", default=0, help=verbose_help)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", dest="verbose_after_command", action="count",
                        default=0, help=verbose_help)
    sub = parser.add_subparsers(dest="command", required=True,
                                parser_class=argparse.ArgumentParser)

    def add(name, **kwargs):
        return sub.add_parser(name, parents=[common], **kwargs)

    g = add("generate", help="generate a data set into a Zarr store")
    g.add_argument("kind", choices=["blobs", "moons", "circles"])
    g.add_argument("--n-samples", type=int, default=100_000)
    g.add_argument("--n-features", type=int, default=2)
    g.add_argument("--centers", type=int, default=8)
    g.add_argument("--cluster-std", type=float, default=1.0)
    g.add_argument("--noise", type=float, default=0.05)
    g.add_argument("--chunks", type=int, default=None, help="rows per chunk")
    g.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    g.add_argument("--random-state", type=int, default=0)
    g.add_argument("--out", required=True)
    g.add_argument("--overwrite", action="store_true")
    _add_scheduler_args(g)
    g.set_defaults(func=cmd_generate)

    f = add("fit", help="fit a model on a Zarr store and save it")
    f.add_argument("data", help="Zarr store (array, or group with array 'X'), path or URL")
    f.add_argument("--algorithm", default="kmeans", choices=sorted(ALGORITHMS))
    f.add_argument("--n-clusters", type=int, required=True)
    f.add_argument("--max-iter", type=int, default=None)
    f.add_argument("--random-state", type=int, default=0)
    f.add_argument("--persist", choices=["auto", "true", "false"], default=None)
    f.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="any other estimator parameter (JSON value), repeatable")
    f.add_argument("--checkpoint", metavar="DIR",
                   help="write the driver state there after every iteration")
    f.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint if it holds a state")
    f.add_argument("--out", required=True, help="model path (.zarr or .npz)")
    f.add_argument("--overwrite", action="store_true")
    _add_scheduler_args(f)
    f.set_defaults(func=cmd_fit)

    p = add("predict", help="label a Zarr store with a saved model")
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("--out", required=True)
    p.add_argument("--overwrite", action="store_true")
    _add_scheduler_args(p)
    p.set_defaults(func=cmd_predict)

    x = add("index", help="build a ClusterIndex (k-NN through a saved clusterer's "
                          "partition) of a Zarr store and save it")
    x.add_argument("model", help="a saved fitted clusterer (dqkm fit: kmeans, qkmeans, …)")
    x.add_argument("data", help="the rows to index: Zarr store path or URL")
    x.add_argument("--store", metavar="PATH",
                   help="write the inverted index (rows grouped by cluster) as a Zarr store "
                        "there; without it the rows are saved inside --out")
    x.add_argument("--labels", metavar="PATH",
                   help="Zarr store of one label per row (enables 'dqkm predict': 1-NN)")
    x.add_argument("--labels-component", default="y",
                   help="array of the --labels group to read (default 'y')")
    x.add_argument("--n-probe", type=int, default=1, help="clusters searched per query")
    x.add_argument("--out", required=True, help="index model path (.zarr or .npz)")
    x.add_argument("--overwrite", action="store_true", help="replace --out and --store")
    _add_scheduler_args(x)
    x.set_defaults(func=cmd_index)

    n = add("neighbors", help="the k nearest indexed rows of every query, through a "
                              "saved ClusterIndex")
    n.add_argument("model", help="a ClusterIndex saved by 'dqkm index'")
    n.add_argument("queries", help="Zarr store of the queries")
    n.add_argument("--n-neighbors", type=int, default=1)
    n.add_argument("--out", required=True,
                   help="Zarr group written with arrays 'distances' and 'indices'")
    n.add_argument("--overwrite", action="store_true")
    _add_scheduler_args(n)
    n.set_defaults(func=cmd_neighbors)

    t = add("transform", help="a saved model's transform of a Zarr store (e.g. "
                              "FactorNystroem features, distances to centroids)")
    t.add_argument("model")
    t.add_argument("data")
    t.add_argument("--out", required=True)
    t.add_argument("--overwrite", action="store_true")
    _add_scheduler_args(t)
    t.set_defaults(func=cmd_transform)

    i = add("info", help="describe a saved model")
    i.add_argument("model")
    i.set_defaults(func=cmd_info)

    r = add("report", help="print a saved model's history; --plot draws it")
    r.add_argument("model")
    r.add_argument("--plot", metavar="PNG", help="write plot_history's figure there")
    r.add_argument("--overwrite", action="store_true")
    r.set_defaults(func=cmd_report)

    d = add("demo", help="generate blobs to Zarr, fit on a LocalCluster, print a table")
    d.add_argument("--n-samples", type=int, default=500_000)
    d.add_argument("--n-features", type=int, default=64)
    d.add_argument("--n-clusters", type=int, default=16)
    d.add_argument("--n-workers", type=int, default=2)
    d.set_defaults(func=cmd_demo)
    return parser


def _one_line(error):
    """An exception's message on one line (its type when it has none)."""
    text = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text or type(error).__name__


def _raised_by_dqkm(error):
    """Whether the innermost frame that raised ``error`` is dqkm's own code (a
    deliberate check, as opposed to a failure deep inside a library)."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_globals.get("__name__", "")
    return name == "dqkm" or name.startswith("dqkm.")


def _user_error(error):
    """Whether ``error`` is the user's to fix (one line, status 2) rather than a bug.

    DqkmError (CLIError included); the path errors FileNotFoundError,
    FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError; a
    file that is no zip archive, JSON or Zarr store (BadZipFile, JSONDecodeError,
    zarr's errors); a lost scheduler; and ValueError, TypeError, ImportError or
    MemoryError raised by dqkm's own checks.
    """
    known = [DqkmError, FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
             NotADirectoryError, zipfile.BadZipFile, json.JSONDecodeError]
    with contextlib.suppress(ImportError):
        from zarr.errors import BaseZarrError

        known.append(BaseZarrError)
    with contextlib.suppress(ImportError):
        from .parallel.engine import SchedulerLostError

        known.append(SchedulerLostError)
    if isinstance(error, tuple(known)):
        return True
    return isinstance(error, (ValueError, TypeError, ImportError, MemoryError)) \
        and _raised_by_dqkm(error)


def main(argv=None):
    """Run the ``dqkm`` command; return its exit status (0, 2 for a user error,
    130 for Ctrl-C).  Any other exception propagates with its traceback."""
    args = build_parser().parse_args(argv)
    if args.verbose < 2:  # distributed's start/stop lines only with -vv (read at its import,
        # in this process and in the worker processes it starts)
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("dqkm").setLevel(level)
    try:
        args.func(args)
    except KeyboardInterrupt:
        if args.verbose:
            traceback.print_exc()
        print(f"dqkm: interrupted (Ctrl-C) during '{args.command}'.", file=sys.stderr)
        return 130
    except Exception as e:
        if not _user_error(e):
            raise
        if args.verbose:
            traceback.print_exc()
        print(f"dqkm: error: {_one_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
