"""The kernels of scikit-learn's relocation of empty clusters (dqkm.kernels.relocate)."""

import numpy as np
import pytest

from dqkm.kernels.relocate import (average_centers, farthest_rows, merge_farthest,
                                   relocate_partials)


def test_farthest_rows_orders_by_distance_then_row():
    d = np.array([1.0, 4.0, 2.0, 4.0, 0.0, 2.0])
    labels = np.arange(6) % 2
    dist, rows, lab = farthest_rows(d, labels, 4, offset=100)
    assert dist.tolist() == [4.0, 4.0, 2.0, 2.0]
    assert rows.tolist() == [101, 103, 102, 105] and lab.tolist() == [1, 1, 0, 1]
    assert farthest_rows(d, labels, 10)[1].tolist() == [1, 3, 2, 5, 0, 4]


@pytest.mark.parametrize("n", [1, 3, 7])
def test_merged_chunk_tops_are_the_global_top(n):
    """The tree reduction's property: the top n of the chunks' top n lists is
    the top n of all rows, ties included (distances drawn from few values)."""
    rng = np.random.default_rng(n)
    d = rng.integers(0, 5, size=200).astype(np.float64)
    labels = rng.integers(0, 4, size=200)
    cuts = [0, 13, 70, 71, 150, 200]
    parts = [farthest_rows(d[a:b], labels[a:b], n, offset=a) for a, b in zip(cuts, cuts[1:])]
    merged = merge_farthest([merge_farthest(parts[:2], n), merge_farthest(parts[2:], n)], n)
    whole = farthest_rows(d, labels, n)
    for got, want in zip(merged, whole):
        np.testing.assert_array_equal(got, want)


def test_relocate_partials_moves_weighted_rows_out_of_their_clusters():
    sums = np.array([[6.0, 3.0], [0.0, 0.0], [10.0, 10.0], [0.0, 0.0]])
    weights = np.array([3.0, 0.0, 2.0, 0.0])
    far = np.array([[4.0, 1.0], [5.0, 5.0], [9.0, 9.0]])  # the third is not needed
    new_sums, new_w, relocated = relocate_partials(sums, weights, far, np.array([2.0, 1.0, 1.0]),
                                                   np.array([0, 2, 2]))
    assert relocated == [1, 3]
    np.testing.assert_array_equal(new_w, [1.0, 2.0, 1.0, 1.0])
    np.testing.assert_array_equal(new_sums, [[-2.0, 1.0], [8.0, 2.0], [5.0, 5.0], [5.0, 5.0]])
    np.testing.assert_array_equal(sums[1], [0.0, 0.0])  # inputs not mutated
    assert weights[1] == 0.0


def test_relocate_partials_needs_a_row_per_empty_cluster():
    with pytest.raises(ValueError, match="2 empty clusters need as many rows; got 1"):
        relocate_partials(np.zeros((3, 1)), np.array([1.0, 0.0, 0.0]), np.ones((1, 1)),
                          np.ones(1), np.zeros(1, dtype=int))


def test_average_centers_puts_weightless_clusters_at_the_heaviest():
    sums = np.array([[0.0, 0.0], [3.0, 6.0], [2.0, 2.0], [7.0, 7.0]])
    out = average_centers(sums, np.array([0.0, 3.0, 1.0, -1e-17]))
    np.testing.assert_array_equal(out, [[1.0, 2.0], [1.0, 2.0], [2.0, 2.0], [1.0, 2.0]])
