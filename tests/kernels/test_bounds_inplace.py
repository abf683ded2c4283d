"""elkan_partials(copy=False): the n × K lower bounds updated in place, same results;
hamerly_partials(copy=False): the labels and both bounds updated in place, same results.

The Dask pass (dqkm.parallel.bounds) updates its own state in place; a task run
twice (a retried task) then starts from bounds already moved by this step's
shifts, which are looser but still valid, so the step's results do not change.
"""

import numpy as np
from sklearn.datasets import make_blobs

import pytest

from dqkm.kernels import bounds as B
from dqkm.kernels.bounds import (center_geometry, center_separations, elkan_partials,
                                 hamerly_partials)
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
    assert inplace[6] is lower  # the caller's arrays, updated
    assert inplace[3] is labels and inplace[5] is upper
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


def _hamerly_two_steps():
    X, _ = make_blobs(1500, 5, centers=6, cluster_std=2.0, random_state=3)
    C0 = X[np.random.default_rng(0).choice(len(X), 6, replace=False)]
    half, shift = center_geometry(C0)
    n = len(X)
    first = hamerly_partials(X, C0, np.full(n, -1, np.int32), np.zeros(n), np.zeros(n), shift,
                             half)
    sums, counts = first[0], first[1]
    C1 = C0.copy()
    C1[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
    half, shift = center_geometry(C1, C0)
    return X, C1, first, shift, half


@pytest.mark.parametrize("full_share", [B._FULL_PASS_SHARE, 2.0, 0.0])  # as shipped, rescans
def test_hamerly_copy_false_updates_the_state_in_place(monkeypatch, full_share):  # , full pass
    monkeypatch.setattr(B, "_FULL_PASS_SHARE", full_share)
    X, C1, first, shift, half = _hamerly_two_steps()
    state = [first[3], first[5], first[6]]
    kept = [a.copy() for a in state]
    copied = hamerly_partials(X, C1, *state, shift, half)
    for a, b in zip(state, kept):
        np.testing.assert_array_equal(a, b)  # copy=True leaves the input alone
    inplace = hamerly_partials(X, C1, *state, shift, half, copy=False)
    assert all(inplace[i] is a for i, a in zip((3, 5, 6), state))  # the caller's arrays
    for a, b in zip(copied, inplace):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ref = lloyd_partials(X, C1)
    np.testing.assert_array_equal(inplace[3], ref[3])
    np.testing.assert_array_equal(inplace[0], ref[0])
    # the same step again on the state it updated: the same step, bounds still bounds
    again = hamerly_partials(X, C1, *state, shift, half, copy=False)
    for i in range(5):
        np.testing.assert_array_equal(np.asarray(again[i]), np.asarray(ref[i]))
    d = np.sqrt(((X[:, None, :] - C1[None]) ** 2).sum(-1))
    rows = np.arange(len(X))
    assert np.all(again[5] >= d[rows, again[3]])
    d[rows, again[3]] = np.inf
    assert np.all(again[6] <= d.min(1))


def test_hamerly_copy_false_copies_a_state_it_may_not_write():
    X, C1, first, shift, half = _hamerly_two_steps()
    labels = first[3].astype(np.int64)  # another dtype
    upper = first[5].copy()
    upper.setflags(write=False)  # read-only (a view of a sidecar chunk)
    lower = np.asfortranarray(first[6])
    out = hamerly_partials(X, C1, labels, upper, lower, shift, half, copy=False)
    assert out[3] is not labels and out[5] is not upper
    np.testing.assert_array_equal(upper, first[5])
    np.testing.assert_array_equal(out[3], lloyd_partials(X, C1)[3])


def test_full_scan_bounds_are_the_numpy_expressions_bit_for_bit():
    rng = np.random.default_rng(0)
    d2 = rng.uniform(0, 1e6, 1000) ** 2
    low2 = d2 + rng.uniform(0, 10, 1000)
    d2[:3] = [0.0, np.inf, np.nan]
    upper, low = np.empty(1000), low2.copy()
    with np.errstate(invalid="ignore"):
        B._bounds_from_squares(d2, low, upper, B._EPS)
        np.testing.assert_array_equal(upper, np.sqrt(d2) * (1.0 + B._EPS))
        np.testing.assert_array_equal(low, np.sqrt(low2) * (1.0 - B._EPS))
