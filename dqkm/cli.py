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
and shows its traceback.  ``-v`` and ``-q`` go anywhere on the line: ``-v`` logs
more (``-vv``: debug) and shows the traceback of every error, ``-q`` shows no
progress and only warnings and errors.  Output to a closed pipe
(``dqkm info model.zarr | head -1``) ends quietly with status 141, as a
command stopped by SIGPIPE.

``fit`` shows one progress view of the fit (iteration k/max_iter, objective,
shift against tol, seconds per iteration, ETA: a live line in a terminal, one
line per iteration in a log) when the estimator takes ``verbose``;
``--pass-bars`` adds Dask's bar for every pass, ``--no-progress`` or ``-q``
shows none.
"""

from __future__ import annotations

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

from ._cli_algorithms import ALGORITHMS
from ._cli_common import (CLIError, _check_out, _check_parent, _load_model,  # noqa: F401
                          _one_line, _read_data, _read_model, _scheduler)
from ._cli_inspect import _fitted_sizes, cmd_info, cmd_report, fit_summary  # noqa: F401


def _available_algorithms():
    import dqkm

    return {k: getattr(dqkm, v) for k, v in ALGORITHMS.items() if hasattr(dqkm, v)}


def _parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _progress(args, *, fit_reporter=False):
    """Dask's per-pass bars, unless ``--no-progress``/``-q``; for a fit whose estimator
    reports its own progress (``fit_reporter``) only with ``--pass-bars``."""
    from .parallel.engine import progress

    quiet = getattr(args, "no_progress", False) or args.quiet
    if fit_reporter:
        return progress(False)  # verbose=2 turns them on with the fit's own view
    return progress(not quiet)


@contextlib.contextmanager
def _no_sklearn_lines():
    """No scikit-learn progress lines on stdout during a fit: stdout holds the summary."""
    from .progress import SKLEARN_LINES

    old, SKLEARN_LINES["enabled"] = SKLEARN_LINES["enabled"], False
    try:
        yield
    finally:
        SKLEARN_LINES["enabled"] = old


def _fit_verbose(model, args):
    """Set ``verbose`` on an estimator that has it (one view of the fit: 1, plus Dask's
    per-pass bars: 2, none: 0); returns whether it has it."""
    if "verbose" not in model.get_params():
        return False
    if any(item.split("=", 1)[0] == "verbose" for item in args.param or []):
        return True  # --param verbose=... wins
    quiet = args.no_progress or args.quiet
    model.set_params(verbose=0 if quiet else (2 if args.pass_bars else 1))
    return True


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
    from .io import save

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
    reports = _fit_verbose(model, args)
    with _scheduler(args), _progress(args, fit_reporter=reports), _no_sklearn_lines():
        X = _read_data(args)
        t0 = time.perf_counter()
        fit_kw = {}
        if args.checkpoint:
            fit_kw = {"checkpoint": args.checkpoint, "resume": args.resume}
        elif args.resume:
            raise CLIError("--resume needs --checkpoint PATH.")
        _fit_checkpointed(model, X, args, fit_kw)
        seconds = time.perf_counter() - t0
        sizes = _fitted_sizes(model)
        save(model, args.out, overwrite=args.overwrite)
    print(f"{fit_summary(model, sizes)} seconds={seconds:.2f} -> {args.out}")


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
    from .io import save_array

    _check_out(args.out, args.overwrite)
    model = _load_model(args.model, needs=method, command=args.command)
    with _scheduler(args), _progress(args):
        out = getattr(model, method)(_read_data(args))
        save_array(out, args.out, overwrite=args.overwrite)
    return model, out


def cmd_predict(args):
    _, labels = _apply_saved_model(args, "predict")
    print(f"wrote {labels.shape[0]} labels to {args.out}")


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


def cmd_demo(args):
    from .demo import run_demo

    run_demo(n_samples=args.n_samples, n_features=args.n_features, n_clusters=args.n_clusters,
             n_workers=args.n_workers)


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


def build_parser():
    """The ``dqkm`` argument parser (see :mod:`dqkm._cli_parser`)."""
    from ._cli_parser import build_parser as build

    return build(__doc__.split("\n\n")[0])


_COMMANDS = {"generate": "cmd_generate", "fit": "cmd_fit", "predict": "cmd_predict",
             "transform": "cmd_transform", "index": "cmd_index", "neighbors": "cmd_neighbors",
             "info": "cmd_info", "report": "cmd_report", "demo": "cmd_demo"}

#: exit status on a closed output pipe: 128 + SIGPIPE, as a command SIGPIPE stopped
EXIT_BROKEN_PIPE = 141


def _silence_stdout():
    """After a closed pipe: send what is left of stdout to /dev/null, so that the
    interpreter's final flush does not print a second error."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv=None):
    """Run the ``dqkm`` command; return its exit status (0, 2 for a user error,
    130 for Ctrl-C, 141 when the output pipe was closed).  Any other exception
    propagates with its traceback."""
    args = build_parser().parse_args(argv)
    if args.verbose < 2:  # distributed's start/stop lines only with -vv (read at its import,
        # in this process and in the worker processes it starts)
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    if args.quiet and not args.verbose:
        level = logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("dqkm").setLevel(level)
    try:
        globals()[_COMMANDS[args.command]](args)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
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
