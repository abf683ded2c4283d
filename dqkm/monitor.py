"""Watching a fit: plots of a fitted model's per-iteration ``history_``.

Every dqkm estimator records one dict per iteration in ``history_`` with at
least ``objective``, ``shift``, ``seconds`` and ``empty_clusters``;
algorithms add their own keys (QK-means: ``palm_error``, ``seconds_assign``,
``seconds_palm``; KMM: ``beta``, ``n_components``).
:func:`plot_history` draws whatever of these a history holds;
:func:`plot_convergence` draws the stopping rule: the objective relative to
its final value and the centroid shift against the tolerance.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.exceptions import NotFittedError

__all__ = ["history_panels", "plot_convergence", "plot_history", "recorded_tol_abs"]

# panel name -> (keys that make it appear, y label, log base or None)
_PANELS = {
    "objective": (("objective",), "objective", None),
    "seconds": (("seconds",), "seconds", None),
    "palm_error": (("palm_error",), "palm4MSA relative error", 10),
    "beta": (("beta",), "β", 2),  # β doubles or halves: powers of 2
    "n_components": (("n_components",), "connected components", None),
}
_REQUIRED = ("objective", "seconds")


def _check_history(model):
    """The list of per-iteration dicts of a fitted model (or of a plain list)."""
    if isinstance(model, (list, tuple)):
        history = list(model)
    elif hasattr(model, "fit"):
        history = getattr(model, "history_", None)
        if history is None:
            raise NotFittedError(f"This {type(model).__name__} instance is not fitted yet "
                                 f"(it has no 'history_'). Call 'fit' before plot_history.")
    else:
        raise TypeError(f"The 'model' parameter of plot_history must be a fitted dqkm "
                        f"estimator or a list of per-iteration dicts. Got "
                        f"{type(model).__name__} instead.")
    if not history:
        raise ValueError("The history to plot is empty: the model made no iteration.")
    for i, rec in enumerate(history):
        if not isinstance(rec, dict):
            raise TypeError(f"history entry {i} must be a dict of per-iteration values. "
                            f"Got {type(rec).__name__} instead.")
        missing = [k for k in _REQUIRED if k not in rec]
        if missing:
            raise ValueError(f"history entry {i} lacks {missing}; every entry needs "
                             f"{list(_REQUIRED)}. Got keys {sorted(rec)}.")
    return history


def _series(history, key):
    """Values of ``key`` per iteration as float64, NaN where an entry lacks it."""
    out = np.full(len(history), np.nan)
    for i, rec in enumerate(history):
        v = rec.get(key)
        if isinstance(v, numbers.Real) and not isinstance(v, bool):
            out[i] = float(v)
        elif v is not None:
            raise TypeError(f"history entry {i}: {key!r} must be a number. "
                            f"Got {type(v).__name__} {v!r} instead.")
    return out


def _iterations(history):
    it = [rec.get("iteration") for rec in history]
    if all(isinstance(v, numbers.Integral) for v in it):
        return np.asarray(it)
    return np.arange(1, len(history) + 1)


def _seconds_parts(history):
    """``seconds_*`` keys (e.g. seconds_assign, seconds_palm), in first-seen order."""
    keys = []
    for rec in history:
        keys += [k for k in rec if k.startswith("seconds_") and k not in keys]
    return keys


def history_panels(model):
    """Names of the panels :func:`plot_history` draws for this history, in order.

    ``objective`` and ``seconds`` always; ``palm_error``, ``beta`` and
    ``n_components`` when some iteration recorded them.

    Parameters
    ----------
    model : fitted dqkm estimator or list of dict
        Anything with a ``history_`` list, or that list itself.

    Returns
    -------
    list of str
        The panel names, top to bottom.

    Examples
    --------
    >>> from dqkm.monitor import history_panels
    >>> history_panels([{"objective": 3.0, "seconds": 0.1, "shift": 0.5,
    ...                  "empty_clusters": 0}])
    ['objective', 'seconds']
    """
    return _panels_of(_check_history(model))


def _panels_of(history):
    present = {k for rec in history for k in rec}
    return [name for name, (keys, _, _) in _PANELS.items()
            if any(k in present for k in keys)]


def plot_history(model, ax=None):
    """Plot a fit's history: objective, time and the algorithm's own quantities.

    One panel per quantity, stacked, sharing the iteration axis:

    - **objective** per iteration; iterations where some cluster was empty
      are marked with red crosses (a second line, only when there are any);
    - **seconds** per iteration, plus one line per ``seconds_*`` key
      (QK-means: ``seconds_assign``, ``seconds_palm``);
    - **palm4MSA relative error** (log scale) when ``palm_error`` is present;
    - **β** (log scale) and **connected components** when ``beta`` /
      ``n_components`` are present (K-Multiple-Means).

    Parameters
    ----------
    model : fitted dqkm estimator or list of dict
        Anything with a ``history_`` list, or that list itself.
    ax : sequence of matplotlib Axes, optional
        Axes to draw into, one per panel (see :func:`history_panels`); by
        default a new figure with the right number of axes is made.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    sklearn.exceptions.NotFittedError
        ``model`` is an estimator that has not been fitted.
    ImportError
        matplotlib is not installed (``pip install 'dqkm[plot]'``).

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.monitor import plot_history
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> km = dqkm.KMeans(n_clusters=3, random_state=0).fit(X)
    >>> fig = plot_history(km)          # doctest: +SKIP
    >>> fig.savefig("history.png")      # doctest: +SKIP
    """
    history = _check_history(model)
    panels = _panels_of(history)
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"plot_history needs matplotlib: pip install 'dqkm[plot]' "
                          f"({e}).") from e
    if ax is None:
        fig, axes = plt.subplots(len(panels), 1, sharex=True, squeeze=False,
                                 figsize=(6.4, 1.9 * len(panels) + 0.8))
        axes = list(axes[:, 0])
    else:
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != len(panels):
            raise ValueError(f"The 'ax' parameter of plot_history must hold one Axes per "
                             f"panel ({len(panels)}: {', '.join(panels)}). Got {len(axes)}.")
        fig = axes[0].figure

    x = _iterations(history)
    for a, name in zip(axes, panels):
        keys, label, log = _PANELS[name]
        if name == "objective":
            _draw_objective(a, x, history)
        elif name == "seconds":
            _draw_seconds(a, x, history)
        else:
            y = _series(history, keys[0])
            a.plot(x, y, marker="." if len(x) <= 50 else None, label=label)
            _maybe_log(a, y, log)
        a.set_ylabel(label)
        a.grid(True, alpha=0.3)
    if "n_components" in panels:
        axes[panels.index("n_components")].yaxis.get_major_locator().set_params(integer=True)
    axes[-1].set_xlabel("iteration")
    axes[-1].xaxis.get_major_locator().set_params(integer=True)
    title = type(model).__name__ if not isinstance(model, (list, tuple)) else "history"
    axes[0].set_title(f"{title}: {len(history)} iterations")
    fig.align_ylabels(axes)
    if ax is None:
        fig.tight_layout()
    return fig


def _maybe_log(a, y, base):
    """Log scale when the values are positive and span more than one step of ``base``."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    if base is None or not np.isfinite(y).any():
        return
    lo, hi = np.nanmin(y), np.nanmax(y)
    if lo > 0 and hi / lo > base:
        a.set_yscale("log", base=base)
        if base == 10:  # label 0.05, 0.1, 0.2, 0.5 ... rather than one tick per decade
            a.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            a.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        a.yaxis.set_minor_formatter(NullFormatter())


def _draw_objective(a, x, history):
    y = _series(history, "objective")
    a.plot(x, y, marker="." if len(x) <= 50 else None, label="objective")
    empty = np.array([bool(rec.get("empty_clusters")) for rec in history])
    if empty.any():
        a.plot(x[empty], y[empty], linestyle="none", marker="x", color="tab:red",
               label="empty clusters")
        a.legend(loc="best", fontsize="small")


def _draw_seconds(a, x, history):
    a.plot(x, _series(history, "seconds"), marker="." if len(x) <= 50 else None,
           label="total")
    parts = _seconds_parts(history)
    for key in parts:
        a.plot(x, _series(history, key), linestyle="--", label=key[len("seconds_"):])
    if parts:
        a.legend(loc="best", fontsize="small")
    a.set_ylim(bottom=0)


def recorded_tol_abs(model):
    """The absolute shift tolerance a fit recorded (a history entry's ``tol_abs``
    or the model's ``tol_abs_``), or None when it recorded none.

    Parameters
    ----------
    model : fitted dqkm estimator or list of dict
        Anything with a ``history_`` list (or ``tol_abs_``), or that list itself.

    Returns
    -------
    float or None
        The last ``tol_abs`` a history entry holds, else the model's ``tol_abs_``.

    Examples
    --------
    >>> from dqkm.monitor import recorded_tol_abs
    >>> recorded_tol_abs([{"objective": 3.0, "tol_abs": 0.01}])
    0.01
    >>> recorded_tol_abs([{"objective": 3.0}]) is None
    True
    """
    history = model if isinstance(model, (list, tuple)) else getattr(model, "history_", None)
    for rec in reversed(history or []):
        if isinstance(rec, dict) and isinstance(rec.get("tol_abs"), numbers.Real):
            return float(rec["tol_abs"])
    value = getattr(model, "tol_abs_", None)
    return float(value) if isinstance(value, numbers.Real) else None


def plot_convergence(model, tol_abs=None, ax=None):
    """Plot how a fit converged: objective relative to its final value, and shift vs tol.

    Two panels sharing the iteration axis, both on a log scale:

    - **objective / final − 1**: how far each iteration's objective is above
      the final one (the final iteration itself is 0 and not drawn; values
      ≤ 0 are left out);
    - **shift** per iteration with a horizontal line at the absolute
      tolerance ``tol_abs``: a run stops at the first shift at or below it.

    Parameters
    ----------
    model : fitted dqkm estimator or list of dict
        Anything with a ``history_`` list, or that list itself.
    tol_abs : float, optional
        The absolute tolerance to draw; by default the one the fit recorded
        (:func:`recorded_tol_abs`). Without one, no line is drawn and the
        legend says so.
    ax : sequence of two matplotlib Axes, optional
        Axes to draw into; by default a new figure.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.monitor import plot_convergence
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> km = dqkm.KMeans(n_clusters=3, random_state=0).fit(X)
    >>> fig = plot_convergence(km)      # doctest: +SKIP
    >>> fig.savefig("convergence.png")  # doctest: +SKIP
    """
    history = _check_history(model)
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"plot_convergence needs matplotlib: pip install 'dqkm[plot]' "
                          f"({e}).") from e
    if tol_abs is None:
        tol_abs = recorded_tol_abs(model)
    if ax is None:
        fig, axes = plt.subplots(2, 1, sharex=True, figsize=(6.4, 4.6))
    else:
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != 2:
            raise ValueError(f"The 'ax' parameter of plot_convergence must hold 2 Axes. "
                             f"Got {len(axes)}.")
        fig = axes[0].figure
    x = _iterations(history)
    marker = "." if len(x) <= 50 else None
    obj = _series(history, "objective")
    final = obj[np.isfinite(obj)][-1] if np.isfinite(obj).any() else np.nan
    rel = obj / final - 1.0 if final > 0 else obj - final
    keep = np.isfinite(rel) & (rel > 0)
    axes[0].plot(x[keep], rel[keep], marker=marker, label="objective / final − 1")
    axes[0].set_ylabel("objective / final − 1")
    shift = _series(history, "shift")
    good = np.isfinite(shift) & (shift > 0)
    axes[1].plot(x[good], shift[good], marker=marker, label="shift")
    if tol_abs is not None and tol_abs > 0:
        axes[1].axhline(tol_abs, color="tab:red", linestyle="--", label=f"tol ({tol_abs:.3g})")
    else:
        axes[1].plot([], [], " ", label="tol: not recorded")
    axes[1].legend(loc="best", fontsize="small")
    axes[1].set_ylabel("centroid shift")
    for a, y in ((axes[0], rel[keep]), (axes[1], shift[good])):
        if y.size:
            a.set_yscale("log")
        a.grid(True, alpha=0.3)
    axes[-1].set_xlabel("iteration")
    axes[-1].xaxis.get_major_locator().set_params(integer=True)
    title = type(model).__name__ if not isinstance(model, (list, tuple)) else "history"
    axes[0].set_title(f"{title}: convergence over {len(history)} iterations")
    fig.align_ylabels(axes)
    if ax is None:
        fig.tight_layout()
    return fig
