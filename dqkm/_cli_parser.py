"""The ``dqkm`` command line: its argument parser (the commands live in :mod:`dqkm.cli`).

Every option has help text, and ``--help`` shows its default; ``-v``/``-q`` are
accepted before and after the command.
"""

from __future__ import annotations

import argparse

from ._cli_algorithms import ALGORITHMS

__all__ = ["build_parser"]


def _add_scheduler_args(p):
    p.add_argument("--scheduler", default="threads",
                   help="where to compute: threads (Dask's threaded scheduler), sync, local "
                        "(a LocalCluster on this machine) or a scheduler ADDRESS")
    p.add_argument("--n-workers", type=int, default=2,
                   help="worker processes of --scheduler local")
    p.add_argument("--cluster", metavar="PATH",
                   help="a cluster config: a shipped name (local, ssh, slurm, ...) or a file "
                        "given as a path (./mine.yaml); a config can run code, use only "
                        "configs you trust (see cluster_configs/README.md)")
    p.add_argument("--no-dashboard", dest="dashboard", action="store_false",
                   help="do not start the dashboard of --scheduler local")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress view (as -q, without hiding warnings)")


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help with every option's default, except where it says nothing (None, flags)."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action.default, bool) \
                or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """``dqkm``'s parser: ``-v`` and ``-q`` count before and after the command
    (``dqkm -v fit -v ...`` is ``-vv``)."""

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        extra = vars(ns)
        ns.verbose = getattr(ns, "verbose", 0) + extra.pop("verbose_after_command", 0)
        ns.quiet = bool(getattr(ns, "quiet", False) or extra.pop("quiet_after_command", False))
        return ns, rest


_VERBOSE_HELP = "log more: -v info, -vv debug; show error tracebacks"
_QUIET_HELP = "no progress view, log only warnings and errors"


def _add_verbosity(p, suffix=""):
    p.add_argument("-v", "--verbose", dest="verbose" + suffix, action="count", default=0,
                   help=_VERBOSE_HELP)
    p.add_argument("-q", "--quiet", dest="quiet" + suffix, action="store_true",
                   help=_QUIET_HELP)


def _add_out(p, what="output path", overwrite="replace --out if it exists"):
    p.add_argument("--out", required=True, help=what)
    p.add_argument("--overwrite", action="store_true", help=overwrite)


def _build_generate(add):
    g = add("generate", help="generate a data set into a Zarr store")
    g.add_argument("kind", choices=["blobs", "moons", "circles"], help="which data set")
    g.add_argument("--n-samples", type=int, default=100_000, help="rows")
    g.add_argument("--n-features", type=int, default=2, help="columns (blobs)")
    g.add_argument("--centers", type=int, default=8, help="clusters (blobs)")
    g.add_argument("--cluster-std", type=float, default=1.0,
                   help="standard deviation of each blob")
    g.add_argument("--noise", type=float, default=0.05, help="noise of moons and circles")
    g.add_argument("--chunks", type=int, default=None,
                   help="rows per chunk (default: about 128 MiB per chunk)")
    g.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                   help="dtype of X")
    g.add_argument("--random-state", type=int, default=0, help="seed")
    _add_out(g, "Zarr store to write (X and y)")
    _add_scheduler_args(g)


def _add_input_args(p):
    """How the positional ``data`` is read (see :func:`dqkm.io.load_array`)."""
    p.add_argument("--format", choices=["zarr", "parquet", "csv", "hdf5", "netcdf"],
                   help="format of the data (default: told by its suffix: .zarr, .parquet, "
                        ".csv/.tsv, .h5/.hdf5, .nc)")
    p.add_argument("--columns", metavar="A,B,…",
                   help="the columns of a Parquet or CSV file to read (default: all)")
    p.add_argument("--component", metavar="NAME",
                   help="the array of a Zarr group, dataset of an HDF5 file or variable of a "
                        "NetCDF file (default: 'X' or the only 2-D one)")


def _build_fit(add):
    f = add("fit", help="fit a model on a Zarr store (or Parquet, CSV, HDF5, NetCDF file) "
                        "and save it")
    f.add_argument("data", help="Zarr store (array, or group with array 'X'), Parquet, CSV, "
                                "HDF5 or NetCDF file; path or URL")
    _add_input_args(f)
    f.add_argument("--algorithm", default="kmeans", choices=sorted(ALGORITHMS),
                   help="kmeans: KMeans, qkmeans: QKMeans, kmm: KMultipleMeans, sekmeans: "
                        "SparseEmbeddedKMeans, kmeans-l1: KMeansL1")
    f.add_argument("--n-clusters", type=int, required=True, help="number of clusters (K); required")
    f.add_argument("--max-iter", type=int, default=None,
                   help="iterations per run at most (default: the estimator's, e.g. 300 "
                        "for kmeans)")
    f.add_argument("--random-state", type=int, default=0, help="seed of the fit")
    f.add_argument("--persist", choices=["auto", "true", "false"], default=None,
                   help="keep X in worker memory during the fit (default: the estimator's, "
                        "'auto')")
    f.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="any other estimator parameter (JSON value), repeatable, e.g. "
                        "--param tol=1e-6")
    f.add_argument("--checkpoint", metavar="DIR",
                   help="write the driver state there after every iteration")
    f.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint if it holds a state")
    f.add_argument("--pass-bars", action="store_true",
                   help="also Dask's progress bar for every pass over the data (verbose=2)")
    _add_out(f, "model path (.zarr or .npz)")
    _add_scheduler_args(f)


def _build_apply(add):
    p = add("predict", help="label a Zarr store with a saved model")
    p.add_argument("model", help="a saved fitted clusterer (dqkm fit)")
    p.add_argument("data", help="Zarr store (or Parquet, CSV, HDF5, NetCDF file) of the rows "
                                "to label")
    _add_input_args(p)
    _add_out(p, "Zarr store of the labels")
    _add_scheduler_args(p)

    t = add("transform", help="a saved model's transform of a Zarr store (e.g. "
                              "FactorNystroem features, distances to centroids)")
    t.add_argument("model", help="a saved model with transform")
    t.add_argument("data", help="Zarr store (or Parquet, CSV, HDF5, NetCDF file) of the rows "
                                "to transform")
    _add_input_args(t)
    _add_out(t, "Zarr store of the transformed rows")
    _add_scheduler_args(t)


def _build_index(add):
    x = add("index", help="build a ClusterIndex (k-NN through a saved clusterer's "
                          "partition) of a Zarr store and save it")
    x.add_argument("model", help="a saved fitted clusterer (dqkm fit: kmeans, qkmeans, …)")
    x.add_argument("data", help="the rows to index: Zarr store path or URL")
    x.add_argument("--store", metavar="PATH",
                   help="write the inverted index (rows grouped by cluster) as a Zarr store "
                        "there; without it the rows are saved inside --out")
    x.add_argument("--labels", metavar="PATH",
                   help="Zarr store of one label per row (enables 'dqkm predict': 1-NN)")
    x.add_argument("--labels-component", default="y", help="array of the --labels group to read")
    x.add_argument("--n-probe", type=int, default=1, help="clusters searched per query")
    _add_out(x, "index model path (.zarr or .npz)", "replace --out and --store")
    _add_scheduler_args(x)

    n = add("neighbors", help="the k nearest indexed rows of every query, through a "
                              "saved ClusterIndex")
    n.add_argument("model", help="a ClusterIndex saved by 'dqkm index'")
    n.add_argument("queries", help="Zarr store of the queries")
    n.add_argument("--n-neighbors", type=int, default=1, help="neighbors per query (k)")
    _add_out(n, "Zarr group written with arrays 'distances' and 'indices'")
    _add_scheduler_args(n)


def _build_inspect(add):
    i = add("info", help="describe a saved model: parameters, fitted values, arrays, "
                         "cluster sizes")
    i.add_argument("model", help="a saved model (.zarr or .npz)")
    i.add_argument("--all", action="store_true",
                   help="also list the internal arrays (e.g. QKMeans' sparse factors)")
    i.add_argument("--data", metavar="STORE",
                   help="count the rows of this Zarr store per cluster (one predict pass)")
    i.add_argument("--max-sizes", type=int, default=50, help="cluster sizes listed at most")

    r = add("report", help="print a saved model's history; --plot draws it")
    r.add_argument("model", help="a saved fitted model")
    r.add_argument("--plot", metavar="PNG",
                   help="write a figure there: objective relative to its final value and "
                        "shift against tol (log scales), then plot_history's panels")
    r.add_argument("--data", metavar="STORE",
                   help="the fit's data: computes the tol line when the model did not "
                        "record its absolute tolerance")
    r.add_argument("--overwrite", action="store_true", help="replace --plot if it exists")

    d = add("demo", help="generate blobs to Zarr, fit on a LocalCluster, print a table")
    d.add_argument("--n-samples", type=int, default=500_000, help="rows")
    d.add_argument("--n-features", type=int, default=64, help="columns")
    d.add_argument("--n-clusters", type=int, default=16, help="clusters")
    d.add_argument("--n-workers", type=int, default=2, help="LocalCluster workers")


def build_parser(description):
    """The ``dqkm`` argument parser; ``description`` is the CLI's one-paragraph summary."""
    parser = _Parser(prog="dqkm", description=description,
                     formatter_class=_Formatter)
    _add_verbosity(parser)
    common = argparse.ArgumentParser(add_help=False)
    _add_verbosity(common, "_after_command")
    sub = parser.add_subparsers(dest="command", required=True,
                                parser_class=argparse.ArgumentParser)

    def add(name, **kwargs):
        return sub.add_parser(name, parents=[common], formatter_class=_Formatter, **kwargs)

    for build in (_build_generate, _build_fit, _build_apply, _build_index, _build_inspect):
        build(add)
    return parser


