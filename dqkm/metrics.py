"""Metrics of the QuicK-means papers: objective, AMI/NMI/purity, flops and
non-zeros of a fitted model, and the Nyström approximation error (eq. 15).

Label arguments may be NumPy or Dask arrays (Dask ones are computed: labels
are one integer per sample).
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from sklearn.metrics import adjusted_mutual_info_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.metrics.pairwise import linear_kernel, rbf_kernel
from sklearn.utils.validation import check_is_fitted

from .cluster._base import is_lazy
from .parallel.data import to_dask
from .parallel.engine import compute
from .parallel.lloyd import inertia

__all__ = ["objective", "ami", "nmi", "purity", "model_nnz", "model_flops", "nystroem_error"]


def _labels(a, name):
    if isinstance(a, da.Array):
        a = compute(a)[0]
    elif is_lazy(a) and type(a).__module__.startswith("zarr"):  # a zarr array
        a = a[...]
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n_samples,); got shape {a.shape}.")
    return a


def _pair(labels_true, labels_pred):
    t, p = _labels(labels_true, "labels_true"), _labels(labels_pred, "labels_pred")
    if t.shape != p.shape:
        raise ValueError(f"labels_true and labels_pred must have the same length; got "
                         f"{t.shape[0]} and {p.shape[0]}.")
    return t, p


def objective(model, X):
    """The K-means objective (inertia) of X for a fitted model: Σ‖x − c(x)‖².

    Parameters
    ----------
    model : fitted clusterer whose ``score`` is minus the objective (dqkm
        ``KMeans``/``QKMeans``/``KMeansL1``, scikit-learn ``KMeans``), or an
        ndarray of centers of shape (K, n_features)
    X : array-like, Dask or Zarr array of shape (n_samples, n_features)

    Returns
    -------
    float
        For QK-means the distances are to the rows of V = λ·S1···SQ (eq. 5).

    References
    ----------
    Giffon et al., QuicK-means (Machine Learning, 2021), eq. (1) and (5).

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.metrics import objective
    >>> X = np.array([[0., 0.], [0., 2.], [10., 0.]])
    >>> objective(np.array([[0., 1.], [10., 0.]]), X)
    2.0
    """
    if hasattr(model, "score") and hasattr(model, "fit"):
        check_is_fitted(model)
        return -float(model.score(X))

    C = np.asarray(model)
    Xd = to_dask(X)
    return float(inertia(Xd, C.astype(Xd.dtype)))


def ami(labels_true, labels_pred):
    """Adjusted mutual information (scikit-learn's, arithmetic normalisation).

    Parameters
    ----------
    labels_true : array-like or Dask array of shape (n_samples,)
        Reference labels.
    labels_pred : array-like or Dask array of shape (n_samples,)
        Cluster labels to compare with them.

    Returns
    -------
    float

    Examples
    --------
    >>> from dqkm.metrics import ami
    >>> ami([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    """
    return float(adjusted_mutual_info_score(*_pair(labels_true, labels_pred)))


def nmi(labels_true, labels_pred):
    """Normalised mutual information (scikit-learn's).

    Parameters
    ----------
    labels_true : array-like or Dask array of shape (n_samples,)
        Reference labels.
    labels_pred : array-like or Dask array of shape (n_samples,)
        Cluster labels to compare with them.

    Returns
    -------
    float

    Examples
    --------
    >>> from dqkm.metrics import nmi
    >>> nmi([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    """
    return float(normalized_mutual_info_score(*_pair(labels_true, labels_pred)))


def purity(labels_true, labels_pred):
    """Purity: the fraction of samples in the majority class of their cluster,
    ``Σ_clusters max_class n(class, cluster) / n``.

    Parameters
    ----------
    labels_true : array-like or Dask array of shape (n_samples,)
        Reference labels.
    labels_pred : array-like or Dask array of shape (n_samples,)
        Cluster labels to compare with them.

    Returns
    -------
    float

    Examples
    --------
    >>> from dqkm.metrics import purity
    >>> purity([0, 0, 1, 1], [0, 0, 0, 1])
    0.75
    """
    t, p = _pair(labels_true, labels_pred)
    if t.size == 0:
        raise ValueError("purity needs at least one sample; got 0.")
    m = contingency_matrix(t, p)
    return float(m.max(axis=0).sum() / t.size)


def _operator_of(model):
    """``(model, operator)``: the fitted model whose centroid (or landmark)
    operator inference applies (a ClusterIndex's clusterer), and that operator."""
    if hasattr(model, "clusterer_"):
        model = model.clusterer_
    for attr in ("factors_", "landmark_operator_"):
        op = getattr(model, attr, None)
        if op is not None:
            return model, op
    check_is_fitted(model)
    return model, None


def model_nnz(model):
    """Stored non-zeros of a fitted model's centroid (or landmark) operator.

    QK-means: the non-zeros of its sparse factors; K-means ℓ1 (Sculley):
    its non-zero centroid entries (``nnz_``); K-means: the dense K·D;
    ``FactorNystroem``: its landmark operator's (Hadamard: the seeds);
    ``ClusterIndex``: its clusterer's.

    References
    ----------
    Giffon et al., QuicK-means (Machine Learning, 2021), Table 4, Sect. 4.4.

    Parameters
    ----------
    model : fitted estimator
        A dqkm or scikit-learn K-means model, a ``QKMeans``, a ``KMeansL1``, a
        ``FactorNystroem`` or a ``ClusterIndex``.

    Returns
    -------
    int

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.metrics import model_nnz
    >>> X = np.random.default_rng(0).normal(size=(100, 8))
    >>> model_nnz(dqkm.KMeans(4, random_state=0).fit(X))
    32
    """
    model, op = _operator_of(model)
    if op is not None and not isinstance(op, np.ndarray):
        return int(op.nnz)
    if op is None and hasattr(model, "nnz_"):
        return int(model.nnz_)
    C = np.asarray(op if op is not None else model.cluster_centers_)
    return int(C.shape[0] * C.shape[1])


def model_flops(model):
    """Flops to apply a fitted model's centroid (or landmark) operator to one vector.

    Dense K×D: ``2·K·D``; K-means ℓ1: ``2·nnz``; sparse factors:
    ``2·nnz`` (their ``flops``); Hadamard landmarks: S·(D + N·log2 N).
    The paper counts the flops as twice the non-zeros (Sect. 4.4).

    Parameters
    ----------
    model : fitted estimator
        A dqkm or scikit-learn K-means model, a ``QKMeans``, a ``KMeansL1``, a
        ``FactorNystroem`` or a ``ClusterIndex``.

    Returns
    -------
    int

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.metrics import model_flops
    >>> X = np.random.default_rng(0).normal(size=(100, 8))
    >>> model_flops(dqkm.KMeans(4, random_state=0).fit(X))
    64
    """
    model, op = _operator_of(model)
    if op is not None and not isinstance(op, np.ndarray):
        return int(op.flops)
    return 2 * model_nnz(model)


def nystroem_error(X_sample, transformer):
    """Relative Nyström error ``‖K − K̃‖_F / ‖K‖_F`` on a sample (eq. 15).

    Parameters
    ----------
    X_sample : array-like or Dask array of shape (m, n_features)
        A sample small enough for the m×m kernel matrix (the paper uses
        m = 5000).
    transformer : fitted ``FactorNystroem`` or ``sklearn.kernel_approximation.Nystroem``
        (kernel 'rbf' or 'linear').  ``K̃ = Φ·Φᵀ`` with ``Φ = transform(X_sample)``,
        which equals ``C·W⁺·Cᵀ`` (eq. 13).

    Returns
    -------
    float

    References
    ----------
    Giffon et al., QuicK-means (Machine Learning, 2021), eq. (15).

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.kernel_approximation import FactorNystroem
    >>> from dqkm.metrics import nystroem_error
    >>> X = np.random.default_rng(0).normal(size=(50, 4))
    >>> ny = FactorNystroem(X, gamma=0.1).fit(X)
    >>> round(nystroem_error(X, ny), 6)
    0.0
    """
    check_is_fitted(transformer)
    X = np.asarray(compute(X_sample)[0] if isinstance(X_sample, da.Array) else X_sample,
                   dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X_sample must be 2-D (m, n_features); got shape {X.shape}.")
    kernel = getattr(transformer, "kernel_", None) or getattr(transformer, "kernel", None)
    if kernel == "rbf":
        gamma = getattr(transformer, "gamma_", None) or getattr(transformer, "gamma", None)
        K = rbf_kernel(X, gamma=gamma if gamma is not None else 1.0 / X.shape[1])
    elif kernel == "linear":
        K = linear_kernel(X)
    else:
        raise ValueError(f"nystroem_error supports transformers with kernel 'rbf' or 'linear'. "
                         f"Got {kernel!r} instead.")
    Phi = np.asarray(transformer.transform(X), dtype=np.float64)
    norm = np.linalg.norm(K)
    if norm == 0:
        raise ValueError("The kernel matrix of X_sample is zero; the relative error is "
                         "undefined.")
    return float(np.linalg.norm(K - Phi @ Phi.T) / norm)
