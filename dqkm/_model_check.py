"""What a saved model may hold: each estimator's declared state, checked on load.

:func:`check_state` is called by :func:`dqkm.io.unpack_model` before an
estimator's ``_set_state`` and :func:`check_fitted` after it.  A state array or
scalar that the estimator does not declare (e.g. ``predict``, which would
shadow the method), a missing one, an array of the wrong number of
dimensions, dtype kind or shape (shapes are declared in terms of the
parameters and scalars, e.g. ``cluster_centers_`` is ``(n_clusters,
n_features_in_)``), or labels out of range are refused with
:class:`~dqkm.exceptions.ModelFileError` naming the key.
"""

from __future__ import annotations

import numbers

import numpy as np

from .exceptions import ModelFileError

__all__ = ["STATE_SPECS", "check_state", "check_fitted"]

_INT = "int"
_REAL = "real"
_NONE = type(None)
_SCALARS = {_INT: lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
            _REAL: lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)}

# arrays: name -> (shape, dtype kinds, required); a shape entry is an int, the name of a
#   parameter or scalar ("n_clusters", "n_features_in_", ...), or a free symbol ("n",
#   "m") that must be the same wherever it appears
# meta: scalar name -> (accepted types or _INT/_REAL, required)
# ranges: array name -> (low, high): every value in [low, high)
# prefixes: names of arrays that nested parts (operators, models) own, checked by them
_LABELS = (("n",), "iu", False)
_KMEANS = {
    "arrays": {"cluster_centers_": (("n_clusters", "n_features_in_"), "f", True),
               "labels_": _LABELS},
    "meta": {"inertia_": (_REAL, True), "n_iter_": (_INT, True),
             "n_features_in_": (_INT, True), "history_": ((list,), True)},
    "ranges": {"labels_": (0, "n_clusters")},
}
STATE_SPECS = {
    "KMeans": _KMEANS,
    "MiniBatchKMeans": {**_KMEANS, "meta": {**_KMEANS["meta"], "n_steps_": (_INT, True)}},
    "KMeansL1": {**_KMEANS, "meta": {**_KMEANS["meta"], "nnz_": (_INT, True)}},
    "QKMeans": {**_KMEANS, "meta": {**_KMEANS["meta"], "flops_": (_INT, True),
                                    "compression_": (_REAL, True)},
                "prefixes": ("factors_",)},
    "SparseEmbeddedKMeans": {
        "arrays": {"embedded_centers_": (("n_clusters", "n_components_"), "f", True),
                   "cluster_centers_": (("n_clusters", "n_features_in_"), "f", True),
                   "embedding_hash": (("n_features_in_",), "iu", False),
                   "embedding_signs": (("n_features_in_",), "f", False),
                   "embedding_matrix": (("n_features_in_", "n_components_"), "f", False),
                   "labels_": _LABELS},
        "meta": {"n_components_": (_INT, True), "inertia_": (_REAL, True),
                 "embedded_inertia_": (_REAL, True), "empty_clusters_": ((list,), True),
                 "n_iter_": (_INT, True), "history_": ((list,), True),
                 "n_features_in_": (_INT, True)},
        "ranges": {"labels_": (0, "n_clusters"), "embedding_hash": (0, "n_components_")},
        "one_of": [("embedding_hash", "embedding_signs"), ("embedding_matrix",)],
    },
    "KMultipleMeans": {
        "arrays": {"prototypes_": (("n_prototypes_", "n_features_in_"), "f", True),
                   "prototype_labels_": (("n_prototypes_",), "iu", True),
                   "labels_": _LABELS,
                   "similarity_neighbors_": (("n", "m"), "iu", False),
                   "similarity_weights_": (("n", "m"), "f", False)},
        "meta": {"beta_": (_REAL, True), "alpha_": (_REAL, True),
                 "n_components_": (_INT, True), "n_outliers_": (_INT, True),
                 "n_iter_": (_INT, True), "n_features_in_": (_INT, True),
                 "n_prototypes_": (_INT, True), "history_": ((list,), True),
                 "seeding_": ((dict, _NONE), True)},
        "together": [("labels_", "similarity_neighbors_", "similarity_weights_")],
        "ranges": {"similarity_neighbors_": (0, "n_prototypes_")},
    },
    "ClusterIndex": {
        "arrays": {"offsets": (("c",), "iu", True),
                   "index_X": (("n_samples_fit_", "n_features_in_"), "f", False),
                   "index_ids": (("n_samples_fit_",), "iu", False),
                   "index_sq_norms": (("n_samples_fit_",), "f", False),
                   "y_codes": (("n_samples_fit_",), "iu", False),
                   "classes_": (("l",), "iufb", False)},
        "meta": {"n_samples_fit_": (_INT, True), "n_features_in_": (_INT, True),
                 "clusterer_is_param": ((bool,), True), "index_store": ((str, _NONE), True),
                 "index_uid": ((str, _NONE), False), "clusterer_": ((dict,), False),
                 "classes_": ((list,), False), "classes_dtype": ((str,), False)},
        "together": [("index_X", "index_ids", "index_sq_norms")],
        "ranges": {"index_ids": (0, "n_samples_fit_"), "y_codes": (0, "l")},
        "prefixes": ("fitted_clusterer__",),
    },
    "FactorNystroem": {
        "arrays": {"operator": (("n_components_", "n_features_in_"), "f", False),
                   "components_": (("n_components_", "n"), "f", True),
                   "component_sq_norms_": (("n_components_",), "f", True),
                   "normalization_": (("n_components_", "n_components_"), "f", True)},
        "meta": {"operator_kind": ((str,), True), "gamma_": (_REAL, True),
                 "kernel_": ((str,), True), "n_components_": (_INT, True),
                 "n_features_in_": (_INT, True)},
        "prefixes": ("operator__",),
    },
}


def _refuse(source, estimator, what):
    raise ModelFileError(f"The model file {source} does not hold a valid {estimator}: {what}. "
                         "It was damaged or edited after dqkm.save; save the model again.")


def _check_meta(spec, meta, source, name):
    if not isinstance(meta, dict):
        _refuse(source, name, f"its state is a {type(meta).__name__}, expected a JSON object")
    for key, value in meta.items():
        if key not in spec["meta"]:
            _refuse(source, name, f"state key {key!r} is not one of {name}'s fitted "
                                  f"attributes {sorted(spec['meta'])}")
        kind, _ = spec["meta"][key]
        ok = _SCALARS[kind](value) if isinstance(kind, str) else isinstance(value, kind)
        if not ok:
            _refuse(source, name, f"state key {key!r} is {value!r} "
                                  f"({type(value).__name__}), expected {kind}")
    for key, (_, required) in spec["meta"].items():
        if required and key not in meta:
            _refuse(source, name, f"state key {key!r} is missing")


def check_state(name, params, arrays, meta, source, prefix=""):
    """Refuse (``ModelFileError``) a state that estimator ``name`` does not declare.

    ``arrays`` are the model's state arrays without ``prefix`` (nested parts'
    arrays included, under the declared prefixes); ``meta`` its JSON scalars.
    """
    spec = STATE_SPECS.get(name)
    if spec is None:  # an estimator without a declaration: nothing to check against
        return
    _check_meta(spec, meta, source, name)
    prefixes = spec.get("prefixes", ())
    declared = spec["arrays"]
    env = {k: v for k, v in params.items() if _SCALARS[_INT](v)}
    env.update({k: v for k, v in meta.items() if _SCALARS[_INT](v)})
    for key in arrays:
        if key not in declared and not key.startswith(prefixes):
            _refuse(source, name, f"array {prefix + key!r} is not one of {name}'s state "
                                  f"arrays {sorted(declared)}")
    for key, (shape, kinds, required) in declared.items():
        if key not in arrays:
            if required:
                _refuse(source, name, f"array {prefix + key!r} is missing")
            continue
        a = arrays[key]
        if a.dtype.kind not in kinds:
            _refuse(source, name, f"array {prefix + key!r} has dtype {a.dtype}, expected "
                                  f"kind {kinds!r}")
        if a.ndim != len(shape):
            _refuse(source, name, f"array {prefix + key!r} has shape {a.shape}, expected "
                                  f"{len(shape)} dimensions {tuple(shape)}")
        for size, sym in zip(a.shape, shape):
            want = env.setdefault(sym, size) if isinstance(sym, str) else sym
            if size != want:
                _refuse(source, name, f"array {prefix + key!r} has shape {a.shape}, expected "
                                      f"{tuple(env.get(s, s) for s in shape)} "
                                      f"({', '.join(map(str, shape))})")
    for group in spec.get("together", ()):
        if any(k in arrays for k in group) and not all(k in arrays for k in group):
            _refuse(source, name, f"arrays {[prefix + k for k in group]} come together; "
                                  f"only {[prefix + k for k in group if k in arrays]} found")
    one_of = spec.get("one_of")
    if one_of and sum(all(k in arrays for k in g) for g in one_of) != 1:
        _refuse(source, name, f"exactly one of the array sets {one_of} is expected")
    for key, (low, high) in spec.get("ranges", {}).items():
        a = arrays.get(key)
        if a is None or a.size == 0:
            continue
        lo, hi = env.get(low, low), env.get(high, high)
        if not isinstance(lo, numbers.Integral) or not isinstance(hi, numbers.Integral):
            continue
        if a.min() < lo or a.max() >= hi:
            _refuse(source, name, f"array {prefix + key!r} holds values in [{a.min()}, "
                                  f"{a.max()}], expected [{lo}, {hi})")
    if name == "ClusterIndex":
        off = arrays["offsets"]
        n = meta["n_samples_fit_"]
        if off.size < 2 or off[0] != 0 or off[-1] != n or np.any(np.diff(off) < 0):
            _refuse(source, name, f"array {prefix + 'offsets'!r} must rise from 0 to "
                                  f"n_samples_fit_ = {n} in non-decreasing steps; got {off}")


def check_fitted(model, source):
    """The relations the rebuilt ``model`` must satisfy between its parts (a nested
    operator's or clusterer's shape against the estimator's)."""
    name = type(model).__name__
    if name == "QKMeans":
        want = tuple(model.cluster_centers_.shape)
        if tuple(model.factors_.shape) != want:
            _refuse(source, name, f"its factors 'factors_*' have shape "
                                  f"{tuple(model.factors_.shape)}, expected {want}")
    elif name == "ClusterIndex":
        k, d = np.shape(model._centers)
        if model.index_.offsets.size != k + 1 or d != model.n_features_in_:
            _refuse(source, name, f"array 'offsets' has {model.index_.offsets.size} entries "
                                  f"and the clusterer {k} centers of {d} features; expected "
                                  f"n_clusters + 1 = {k + 1} entries and "
                                  f"{model.n_features_in_} features")
    elif name == "FactorNystroem":
        op = model.landmark_operator_
        want = (model.n_components_, model.n_features_in_)
        if tuple(np.shape(op) if isinstance(op, np.ndarray) else op.shape) != want:
            _refuse(source, name, f"its landmark operator has shape {tuple(op.shape)}, "
                                  f"expected (n_components_, n_features_in_) = {want}")
