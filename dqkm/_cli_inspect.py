"""``dqkm info`` and ``dqkm report``, and the summary line of ``dqkm fit``."""

from __future__ import annotations

from . import _cli_common as cli

__all__ = ["cmd_info", "cmd_report", "fit_summary"]


def _fitted_sizes(model):
    """Rows per cluster from a fitted model's ``labels_`` (computed if lazy), or None."""
    labels = getattr(model, "labels_", None)
    if labels is None or getattr(labels, "ndim", 0) != 1 or labels.shape[0] == 0:
        return None
    import numpy as np

    if hasattr(labels, "compute"):
        from .parallel.engine import compute

        labels = compute(labels)[0]
    labels = np.asarray(labels)
    n = int(getattr(model, "n_clusters", 0) or 0)
    return np.bincount(labels[labels >= 0], minlength=n)


def _sizes_text(sizes):
    """`` sizes=min a/median b/max c (k empty)`` of rows per cluster; '' for None."""
    if sizes is None or len(sizes) == 0:
        return ""
    import numpy as np

    empty = int((sizes == 0).sum())
    return (f" sizes=min {int(sizes.min())}/median {int(np.median(sizes))}/max "
            f"{int(sizes.max())}" + (f" ({empty} empty)" if empty else ""))


def fit_summary(model, sizes=None):
    """The line ``fit`` prints for a fitted model, with what its algorithm has:
    K-means family ``n_clusters``, ``inertia``, ``n_iter``; K-Multiple-Means the
    clusters found, prototypes, β and outliers (it has no inertia)."""
    name = type(model).__name__
    n_iter = getattr(model, "n_iter_", "-")
    if hasattr(model, "prototypes_"):  # K-Multiple-Means
        text = (f"{name}: n_clusters={model.n_clusters} found={model.n_components_} "
                f"prototypes={model.n_prototypes_} beta={model.beta_:.4g} "
                f"outliers={model.n_outliers_} n_iter={n_iter}")
    else:
        inertia = getattr(model, "inertia_", None)
        text = f"{name}: n_clusters={model.n_clusters}"
        if inertia is not None:
            text += f" inertia={inertia:.6g}"
        text += f" n_iter={n_iter}"
        if hasattr(model, "flops_"):
            text += f" flops={model.flops_} compression={model.compression_:.3g}"
    return text + _sizes_text(sizes)


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


def _encoded_groups(names):
    """Prefixes of the objects saved as several arrays with a ``<prefix>header`` (e.g.
    QKMeans' sparse factors: ``factors_header``, ``factors_factor0_indptr``, …)."""
    return sorted({n[:-len("header")] for n in names if n.endswith("header")
                   and n != "header"})


def _print_arrays(arrays, show_all):
    """One line per array; an encoded object's arrays as one line unless ``show_all``."""
    groups = [] if show_all else _encoded_groups(arrays)
    for k, (shape, dtype) in sorted(arrays.items()):
        if not any(k.startswith(g) for g in groups):
            print(f"array {k}: shape {tuple(shape)} {dtype}")
    for g in groups:
        n = sum(k.startswith(g) for k in arrays)
        print(f"arrays {g}*: one encoded object in {n} internal arrays (--all lists them)")


def _stored_sizes(model_path, info, state, history):
    """Rows per cluster as the model file stores them (``cluster_sizes_``, ``counts``
    of the last iteration, or ``labels_``), or None."""
    import numpy as np

    for key in ("cluster_sizes_", "counts_"):
        if isinstance(state.get(key), list):
            return np.asarray(state[key])
    if history and isinstance(history[-1].get("counts"), list):
        return np.asarray(history[-1]["counts"])
    stored = [k for k in ("cluster_sizes_", "counts_", "labels_") if k in info["arrays"]]
    if "offsets" in info["arrays"] and info["estimator"] == "ClusterIndex":
        stored = ["cluster_sizes_"]
    if not stored:
        return None
    from .io import load

    model = cli._read_model(load, model_path)
    if stored[0] != "labels_":
        return np.asarray(getattr(model, stored[0]))
    return _fitted_sizes(model)


def _data_sizes(model_path, data, args):
    """Rows per cluster of ``data`` under the saved model (one predict pass)."""
    import numpy as np

    from .io import as_dask_array

    model = cli._load_model(model_path, needs="predict", command="info --data")
    with cli._scheduler(args):
        from .parallel.engine import compute

        labels = compute(model.predict(as_dask_array(data)))[0]
    return np.bincount(np.asarray(labels)[np.asarray(labels) >= 0],
                       minlength=int(getattr(model, "n_clusters", 0) or 0))


def cmd_info(args):
    from .io import model_info

    info = cli._read_model(model_info, args.model)
    state = dict(info.get("state", {}))
    history = state.pop("history_", [])
    print(f"estimator: {info['estimator']} (format {info['format_version']})")
    print("parameters: " + ", ".join(f"{k}={_describe(v)}"
                                     for k, v in sorted(info["params"].items())))
    for k, v in sorted(state.items()):
        print(f"{k}: {_describe(v) if isinstance(v, dict) else v}")
    _print_arrays(info["arrays"], args.all)
    if history:
        last = history[-1]
        print(f"history: {len(history)} iterations; last objective {last.get('objective')}")
    if args.data:
        sizes, where = _data_sizes(args.model, args.data, args), f"rows of {args.data}"
    else:
        sizes, where = _stored_sizes(args.model, info, state, history), "fitted rows"
    if sizes is None:
        if "n_clusters" in info["params"]:
            print("cluster sizes: not stored in this model; --data STORE counts the rows of "
                  "a store per cluster")
        return
    empty = int((sizes == 0).sum())
    print(f"cluster sizes ({where}): {len(sizes)} clusters, min {int(sizes.min())}, max "
          f"{int(sizes.max())}" + (f", {empty} empty" if empty else ""))
    print("  " + " ".join(str(int(n)) for n in sizes[:args.max_sizes])
          + (f" … ({len(sizes) - args.max_sizes} more)" if len(sizes) > args.max_sizes else ""))


def _tol_abs_of_data(model, data):
    """``tol × mean(var(X, axis=0))``: the absolute tolerance K-means-family fits stop
    at (scikit-learn's rule), computed from the data store."""
    from .io import as_dask_array
    from .parallel.engine import compute

    tol = getattr(model, "tol", None)
    if tol is None:
        return None
    X = as_dask_array(data)
    return float(compute(X.astype("float64").var(axis=0).mean())[0]) * float(tol)


def cmd_report(args):
    from .io import load

    if args.plot:
        cli._check_out(args.plot, args.overwrite, "--plot")
    model = cli._read_model(load, args.model)
    history = getattr(model, "history_", None) or []
    inertia = getattr(model, "inertia_", None)
    print(f"{type(model).__name__}: {len(history)} iterations"
          + (f", inertia {inertia:.6g}" if inertia is not None else ""))
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
        _write_report_plot(model, args)


def _write_report_plot(model, args):
    """Convergence (objective / final − 1 and shift against tol, log scales) above
    :func:`dqkm.monitor.plot_history`'s panels, written to ``--plot``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .monitor import history_panels, plot_convergence, plot_history, recorded_tol_abs

    tol_abs = recorded_tol_abs(model)
    if tol_abs is None and args.data:
        with cli._scheduler(args):
            tol_abs = _tol_abs_of_data(model, args.data)
    panels = history_panels(model)
    fig, axes = plt.subplots(2 + len(panels), 1, sharex=True, squeeze=False,
                             figsize=(6.4, 1.9 * (2 + len(panels)) + 0.8))
    axes = list(axes[:, 0])
    plot_convergence(model, tol_abs=tol_abs, ax=axes[:2])
    axes[1].set_xlabel("")
    plot_history(model, ax=axes[2:])
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110, bbox_inches="tight")
    plt.close(fig)
    why = ""
    if tol_abs is None:
        why = (f" (no tol line: {type(model).__name__} has no 'tol')"
               if getattr(model, "tol", None) is None else
               " (no tol line: the model did not record its absolute tolerance; --data "
               "STORE computes it)")
    print(f"wrote {args.plot}{why}")
