"""Benchmark scripts that reach into dqkm's private kernels still run against them.

Most benchmarks use dqkm's public API; one that times a private kernel on its own
(``bench_qk_pruning.py``: Hamerly's bound test without the rest of the step) breaks
silently when that kernel's signature changes, until someone runs it. Each such
script's measuring function is run here on a tiny case.
"""

from __future__ import annotations

import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")


@pytest.fixture
def bench_path(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_qk_pruning_replays_the_bounds_through_the_private_kernel(bench_path):
    """On well separated blobs nearly every row passes Hamerly's test once the centers
    settle (the share the page reports), and each timing is a positive number."""
    import bench_qk_pruning

    d, k, iterations, shares, t_assign, t_book = bench_qk_pruning.case(
        3000, 8, 8, repeat=1, spread=20.0)
    assert (d, k) == (8, 8) and iterations >= 2
    assert len(shares) == iterations - 1
    assert all(0.0 <= s <= 1.0 for s in shares)
    assert shares[-1] > 0.9
    assert t_assign > 0 and t_book > 0
