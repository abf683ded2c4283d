"""The Lloyd pass's uncertified float32 GEMM path with NumPy's BLAS per tile
(``_tiled_blas``) against numba's tiles (``_tiled``).

Away from near-ties both give the same labels, sums, counts, distances and
objective bit for bit; near a tie an uncertified float32 label follows the
GEMM's rounding, which depends on the BLAS: there each label is within that
rounding of the exact argmin, and the sums, counts, distances and objective
are exactly those of the labels given."""

import numpy as np
import pytest

from dqkm.kernels import _gemm
from dqkm.kernels import lloyd as lloyd_kernels
from dqkm.kernels.lloyd import assign_labels, lloyd_partials, partials_from_labels


def _both(monkeypatch, fn, *args):
    out = []
    for blas in (True, False):
        monkeypatch.setattr(lloyd_kernels, "_BLAS_TILES", blas)
        out.append(fn(*args))
    return out


def _same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("n,d,k", [(5000, 33, 3), (4099, 64, 64), (2500, 256, 300),
                                   (700, 40, 1)])
def test_blas_tiles_equal_numba_tiles_away_from_ties(monkeypatch, n, d, k):
    rng = np.random.default_rng(d + k)
    C = (rng.normal(size=(k, d)) * 20).astype(np.float32)
    X = (C[rng.integers(0, k, n)] + rng.normal(size=(n, d))).astype(np.float32)
    X[7] = 1e37  # its float32 products overflow: its tile is assigned in float64
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(X[7] @ C.T).all()
    assert n % _gemm._blas_tile(k, d, 4)  # the last tile is short
    blas, numba = _both(monkeypatch, lloyd_partials, X, C)
    _same(blas, numba)
    assert np.isfinite(blas[2])
    _same(*_both(monkeypatch, assign_labels, X, C))


def test_blas_tiles_near_ties_follow_the_rounding_and_sum_their_labels(monkeypatch):
    rng = np.random.default_rng(3)
    n, d, k = 6000, 64, 64
    X = (rng.normal(size=(n, d)) * 3 + rng.normal(size=d) * 50).astype(np.float32)
    C = X[rng.choice(n, k, replace=False)] + np.float32(0.5)
    monkeypatch.setattr(lloyd_kernels, "_BLAS_TILES", True)
    sums, counts, obj, labels, mind = lloyd_partials(X, C)
    _same((sums, counts, obj, labels, mind), partials_from_labels(X, labels, C))
    d2 = ((X.astype(np.float64)[:, None] - C.astype(np.float64)[None]) ** 2).sum(-1)
    norms = (X.astype(np.float64) ** 2).sum(1) + (C.astype(np.float64) ** 2).sum(1).max()
    slack = 8 * (d + 4) * np.finfo(np.float32).eps * norms
    assert (d2[np.arange(n), labels] <= d2.min(1) + slack).all()
    assert (labels == d2.argmin(1)).mean() > 0.9


def test_blas_tiles_keep_nonfinite_rows_refused(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 48)).astype(np.float32)
    X[2100, 5] = np.nan
    blas, numba = _both(monkeypatch, lloyd_partials, X, X[:10].copy())
    _same(blas, numba)
    assert blas[2] == np.inf and blas[4][2100] == np.inf


def test_blas_tiles_are_large_and_bounded():
    assert _gemm._blas_tile(64, 256, 4) == 2048
    assert _gemm._blas_tile(512, 1024, 4) == 512  # 2 MB of rows, 1 MB of products
    assert _gemm._blas_tile(4096, 4096, 8) == _gemm._TILE
