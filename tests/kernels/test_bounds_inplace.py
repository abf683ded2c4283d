"""elkan_partials(copy=False): the n × K lower bounds updated in place, same results.

The Dask pass (dqkm.parallel.bounds) updates its own state in place; a task run
twice (a retried task) then starts from bounds already moved by this step's
shifts, which are looser but still valid, so the step's results do not change.
"""

import numpy as np
from sklearn.datasets import make_blobs

from dqkm.kernels.bounds import center_geometry, center_separations, elkan_partials
from dqkm.kernels.lloyd import lloyd_partials


def _two_steps():
    X, _ = make_blobs(1500, 5, centers=6, cluster_std=2.0, random_state=3)
    C0 = X[np.random.default_rng(0).choice(len(X), 6, replace=False)]
    half, shift = center_geometry(C0)
    first = elkan_partials(X, C0, np.full(len(X), -1), np.zeros(len(X)),
                           np.zeros((len(X), 6)), shift, half, center_separations(C0))
    sums, counts = first[0], first[1]
    C1 = C0.copy()
    C1[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
    half, shift = center_geometry(C1, C0)
    return X, C1, first, shift, half, center_separations(C1)


def test_copy_false_updates_lower_in_place_with_the_same_results():
    X, C1, first, shift, half, sep = _two_steps()
    labels, upper, lower = first[3], first[5], first[6]
    kept = lower.copy()
    copied = elkan_partials(X, C1, labels, upper, lower, shift, half, sep)
    np.testing.assert_array_equal(lower, kept)  # copy=True leaves the input alone
    inplace = elkan_partials(X, C1, labels, upper, lower, shift, half, sep, copy=False)
    assert inplace[6] is lower  # the caller's array, updated
    for a, b in zip(copied, inplace):
        np.testing.assert_array_equal(a, b)
    ref = lloyd_partials(X, C1)
    np.testing.assert_array_equal(inplace[3], ref[3])
    np.testing.assert_array_equal(inplace[0], ref[0])


def test_rerun_on_bounds_already_moved_gives_the_same_step():
    X, C1, first, shift, half, sep = _two_steps()
    labels, upper, lower = first[3], first[5], first[6]
    once = elkan_partials(X, C1, labels, upper, lower, shift, half, sep, copy=False)
    # ``lower`` now holds this step's moved bounds; run the same step on it again
    again = elkan_partials(X, C1, labels, upper, lower, shift, half, sep, copy=False)
    for i in range(5):  # sums, counts, objective, labels, distances
        np.testing.assert_array_equal(np.asarray(once[i]), np.asarray(again[i]))
    d = np.sqrt(((X[:, None, :] - C1[None]) ** 2).sum(-1))
    assert np.all(again[6] <= d)  # still lower bounds for the exact distances
