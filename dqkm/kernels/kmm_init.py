"""F-KMM's initialisations: the rank-d′ SVD basis (Algorithm 4, lines 1–2),
k-means++ with SVD-pruned distance updates (Algorithm 5, "F-KMM++"), the
adaptive number of prototypes (Algorithm 6, "F-KMM#") and the outlier rule
(Algorithm 7, "F-KMM-OD").

These run on an in-memory array (the driver's sample of X); they never mutate
their inputs and take their random numbers as arguments.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(Definition 4.9, Lemma 4.10, Algorithms 4–7).
D. Arthur, S. Vassilvitskii, *k-means++: the advantages of careful seeding*,
SODA 2007.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ._numba_args import kernel_array
from .kmm_distances import LB_MARGIN, project

__all__ = ["SeedingResult", "svd_basis", "kmeanspp_pruned", "OUTLIER_SIGMAS", "outlier_threshold",
           "outlier_mask"]

#: θ of Algorithm 7 sits this many standard deviations above the mean
#: neighbour distance (a dqkm deviation, see :func:`outlier_threshold`).
OUTLIER_SIGMAS = 2.0


def svd_basis(sample, rank):
    """Centre and top ``rank`` right singular vectors of a sample of rows.

    Parameters
    ----------
    sample : ndarray of shape (s, d)
        Algorithm 4 takes m random data points (X′).
    rank : int
        d′ (clipped to [1, d]).

    Returns
    -------
    mu : ndarray of shape (d,)
        The sample mean (subtracted before projecting; see :func:`project`).
    V : ndarray of shape (d, d′), orthonormal columns
    """
    S = np.asarray(sample, dtype=np.float64)
    d = S.shape[1]
    r = int(min(max(rank, 1), d))
    mu = S.mean(axis=0)
    _, _, Vt = np.linalg.svd(S - mu, full_matrices=True)
    return mu, np.ascontiguousarray(Vt[:r].T)


@njit(cache=True, nogil=True)
def _kmpp_loop(X, xt, xperp, xn2, first, u, m_min, m_max, adaptive, margin,
               chosen, Dc, closest, counts):  # OUT chosen, Dc, closest, counts
    n, d = X.shape
    dp = xt.shape[1]
    chosen[0] = first
    n_exact = n
    for i in range(n):
        s = 0.0
        for k in range(d):
            t = np.float64(X[i, k]) - np.float64(X[first, k])
            s += t * t
        Dc[i] = s
        closest[i] = 0
    counts[0] = n
    used = 1
    for t in range(1, m_max):
        total = 0.0
        for i in range(n):
            total += Dc[i]
        if not total > 0.0:
            break  # every row coincides with a prototype
        target = u[t] * total
        cum = 0.0
        j = -1
        for i in range(n):
            if Dc[i] > 0.0:
                j = i
                cum += Dc[i]
                if cum > target:
                    break
        chosen[t] = j
        used = t + 1
        for i in range(n):
            s = 0.0
            for k in range(dp):
                v = xt[i, k] - xt[j, k]
                s += v * v
            v = xperp[i] - xperp[j]
            lb = s + v * v - margin * (xn2[i] + xn2[j])
            if lb <= Dc[i]:  # Algorithm 5, line 11
                e = 0.0
                for k in range(d):
                    v = np.float64(X[i, k]) - np.float64(X[j, k])
                    e += v * v
                n_exact += 1
                if e < Dc[i]:
                    counts[closest[i]] -= 1
                    closest[i] = t
                    counts[t] += 1
                    Dc[i] = e
        if adaptive and used >= m_min and counts[t] == 1:
            break  # Algorithm 6, line 6: the new prototype is closest to itself only
    return used, n_exact


@dataclass(frozen=True)
class SeedingResult:
    """Prototypes chosen by k-means++ seeding.

    Attributes
    ----------
    indices : ndarray of shape (m,), int64
        Rows of the sample chosen as prototypes, in order.
    n_exact : int
        Exact distances computed.
    n_pairs : int
        Distances an unpruned k-means++ computes (rows × prototypes).
    """

    indices: np.ndarray
    n_exact: int
    n_pairs: int


def kmeanspp_pruned(X, n_prototypes, rng, *, mu, V, adaptive=False, min_prototypes=2):
    """k-means++ seeding with the rank-d′ lower bound (Algorithm 5 / 6).

    Every new prototype ``a`` updates ``D_c[i] = min(D_c[i], ‖x_i − a‖²)``,
    but the exact distance is computed only when the bound of Lemma 4.10
    (minus the floating-point margin) is at most ``D_c[i]``.  With
    ``adaptive=True`` (Algorithm 6) prototypes are added until, after at least
    ``min_prototypes``, the newest one is the closest prototype of exactly one
    row (itself), or ``n_prototypes`` is reached.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    n_prototypes : int
        m (the cap when adaptive).
    rng : numpy.random.Generator
    mu, V : from :func:`svd_basis`
    adaptive : bool
    min_prototypes : int

    Returns
    -------
    SeedingResult
    """
    X = kernel_array(X)
    n = X.shape[0]
    m_max = int(min(n_prototypes, n))
    xt, xperp, xn2 = project(X, mu, V)
    first = int(rng.integers(n))
    u = rng.random(m_max)
    chosen = np.full(m_max, -1, np.int64)
    Dc = np.empty(n)
    closest = np.empty(n, np.int64)
    counts = np.zeros(m_max, np.int64)
    used, n_exact = _kmpp_loop(X, xt, xperp, xn2, first, u, int(min_prototypes), m_max,
                               bool(adaptive), LB_MARGIN, chosen, Dc, closest, counts)
    return SeedingResult(chosen[:used].copy(), int(n_exact), int(n * used))


def outlier_threshold(sum_dist, sum_de, count, n_sigmas=OUTLIER_SIGMAS):
    """θ of Algorithm 7 (line 3), as dqkm sets it: mean + ``n_sigmas`` standard
    deviations of the Euclidean distances between rows and their l nearest
    prototypes.

    The paper's θ is "the average distance between data points and their
    nearest prototypes"; compared with a row's own distances, a mean flags a
    fixed share of ordinary rows even on data without any noise (up to a
    third of clean moons, docs/ALGORITHMS.md), so dqkm moves θ from the
    centre of that distribution to its tail.

    Parameters
    ----------
    sum_dist : float
        Σ ‖x_i − a_j‖ over the counted pairs.
    sum_de : float
        Σ ‖x_i − a_j‖² (``D_E``) over the same pairs.
    count : int
        Number of pairs (n·l).
    n_sigmas : float, default=OUTLIER_SIGMAS

    Returns
    -------
    float
        θ, a Euclidean (not squared) distance; 0 when ``count`` is 0.
    """
    count = int(count)
    if count <= 0:
        return 0.0
    mean = float(sum_dist) / count
    var = max(float(sum_de) / count - mean * mean, 0.0)
    return mean + float(n_sigmas) * float(np.sqrt(var))


def outlier_mask(exact_de, theta, n_neighbors):
    """Algorithm 7, lines 6–13: rows far from their nearest prototypes.

    A neighbour whose Euclidean distance ``√D_E`` exceeds θ (from
    :func:`outlier_threshold`) is dropped; a row left with fewer than l/2
    neighbours is an outlier.

    Parameters
    ----------
    exact_de : ndarray of shape (n_rows, ≥ l)
        Squared Euclidean distances to the nearest prototypes, ascending.
    theta : float
        A Euclidean distance.
    n_neighbors : int

    Returns
    -------
    ndarray of shape (n_rows,), bool
    """
    ell = int(n_neighbors)
    near = np.sqrt(np.asarray(exact_de, dtype=np.float64)[:, :ell]) <= theta
    return near.sum(axis=1) < ell / 2.0
