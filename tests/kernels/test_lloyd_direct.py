"""The low-dimension assignment (direct distances) against the GEMM kernel.

Below ``_DIRECT_MAX_D`` features :func:`lloyd_partials` and :func:`assign_labels`
compute ``Σ (x − c)²`` directly; above it they use ``X·Cᵀ``.  Both must give the
same labels (lowest index on ties) and the same float64 sums; on data far from
the origin, where ``‖x‖² − 2x·c + ‖c‖²`` cancels catastrophically, the direct
distances must give the labels of an exact float64 reference.
"""

import numpy as np
import pytest

from dqkm.kernels import lloyd as L
from dqkm.kernels._direct import transpose_tile


def _gemm(X, C, monkeypatch):
    """The (uncertified) GEMM kernel's output for any dimension."""
    with monkeypatch.context() as m:
        m.setattr(L, "_DIRECT_MAX_D", 0)
        m.setattr(L, "_GEMM_MIN_D", 0)
        m.setattr(L, "_GEMM_MIN_D_F32", 0)
        m.setattr(L, "_GEMM_MIN_D_MANY", 0)
        return L.lloyd_partials(X, C)


def _exact(X, C):
    """Labels by exact float64 distances (lowest index on ties) and the float64
    per-cluster sums of those labels, accumulated row by row."""
    X64, C64 = X.astype(np.float64), C.astype(np.float64)
    d = ((X64[:, None, :] - C64[None]) ** 2).sum(-1)
    lab = d.argmin(1)
    sums = np.zeros(C.shape)
    np.add.at(sums, lab, X64)
    return lab, sums, np.bincount(lab, minlength=len(C))


def _assert_same(out, ref):
    sums, counts, obj, labels, mind = out
    np.testing.assert_array_equal(labels, ref[3])
    np.testing.assert_array_equal(sums, ref[0])
    np.testing.assert_array_equal(counts, ref[1])
    np.testing.assert_array_equal(mind, ref[4])
    assert obj == pytest.approx(ref[2], rel=1e-13)  # per-row terms equal; order of the total differs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 8, 13, 24, 30, 32])
def test_direct_equals_gemm_on_ties(dtype, d, monkeypatch):
    """Integer grid data and centers: many exact ties, duplicated centers; all
    products are exact in both kernels, so labels and sums must be identical."""
    assert d <= L._DIRECT_MAX_D
    rng = np.random.default_rng(d)
    X = rng.integers(-3, 4, size=(1100, d)).astype(dtype)  # spans several tiles
    C = rng.integers(-3, 4, size=(9, d)).astype(dtype)
    C[5] = C[2]                                            # duplicate: index 2 must win
    C[7] = C[0] + 1.0
    C[8] = C[0] - 1.0                                      # ties at equal distance around C[0]
    out = L.lloyd_partials(X, C)
    ref = _gemm(X, C, monkeypatch)
    _assert_same(out, ref)
    assert not np.any(out[3] == 5)
    lab, sums, counts = _exact(X, C)
    np.testing.assert_array_equal(out[3], lab)
    lab2, mind2 = L.assign_labels(X, C)
    np.testing.assert_array_equal(lab2, lab)
    np.testing.assert_array_equal(mind2, out[4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [2, 3, 8, 16, 31])
def test_direct_equals_gemm_on_blobs(dtype, d, monkeypatch):
    """Separated blobs near the origin: the GEMM is accurate, both agree exactly."""
    rng = np.random.default_rng(10 + d)
    centers = rng.uniform(-20, 20, size=(12, d))
    X = (centers[rng.integers(0, 12, 3000)] + rng.standard_normal((3000, d))).astype(dtype)
    C = X[rng.choice(3000, 12, replace=False)]
    _assert_same(L.lloyd_partials(X, C), _gemm(X, C, monkeypatch))


@pytest.mark.parametrize("dtype,offset", [(np.float32, 1e4), (np.float64, 1e9)])
@pytest.mark.parametrize("d", [2, 3, 8])
def test_direct_exact_far_from_origin(dtype, offset, d, monkeypatch):
    """Blobs of spread ~1 shifted by ``offset``: ‖x‖² − 2x·c + ‖c‖² loses the
    distances to cancellation (the GEMM kernel mislabels rows); the direct
    kernel gives the labels and sums of exact float64 distances."""
    rng = np.random.default_rng(d)
    centers = rng.uniform(-4, 4, size=(6, d))
    X = (centers[rng.integers(0, 6, 2000)] + 0.5 * rng.standard_normal((2000, d)) + offset)
    X = X.astype(dtype)
    C = (centers + offset).astype(dtype)
    sums, counts, obj, labels, mind = L.lloyd_partials(X, C)
    lab, ref_sums, ref_counts = _exact(X, C)
    np.testing.assert_array_equal(labels, lab)
    np.testing.assert_array_equal(counts, ref_counts)
    np.testing.assert_allclose(sums, ref_sums, rtol=1e-15)
    d_ref = ((X.astype(np.float64) - C.astype(np.float64)[lab]) ** 2).sum(1)
    np.testing.assert_allclose(mind, d_ref, rtol=1e-12)
    gemm_labels = _gemm(X, C, monkeypatch)[3]
    if dtype == np.float32:
        assert (gemm_labels != lab).any()  # the case is one the float32 GEMM kernel gets wrong
    else:  # the float64 GEMM kernel certifies its labels: its near-ties are decided exactly
        np.testing.assert_array_equal(gemm_labels, lab)


def test_direct_nonfinite_and_overflow():
    """NaN rows get distance +inf (the callers refuse them); float32 squares that
    overflow float32 are assigned again in float64, as in the GEMM kernel."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 3)).astype(np.float32)
    C = X[:4].copy()
    lab, mind = L.assign_labels(X, C)
    big = np.float32(1e21)
    lab_s, mind_s = L.assign_labels(X * big, C * big)
    np.testing.assert_array_equal(lab_s, lab)
    assert np.isfinite(mind_s).all()
    Xn = X.copy()
    Xn[300, 1] = np.nan
    _, _, obj, _, mind_n = L.lloyd_partials(Xn, C)
    assert not np.isfinite(obj) and mind_n[300] == np.inf
    assert np.isfinite(np.delete(mind_n, 300)).all()


def test_choice_by_dimension():
    """The direct kernel serves n_features ≤ _DIRECT_MAX_D, the GEMM above it."""
    calls = []
    real = L._run_direct

    def spy(*a, **k):
        calls.append(a[0].shape[1])
        return real(*a, **k)

    rng = np.random.default_rng(0)
    mp = pytest.MonkeyPatch()
    with mp.context() as m:
        m.setattr(L, "_run_direct", spy)
        for d in (L._DIRECT_MAX_D, L._DIRECT_MAX_D + 1):
            X = rng.standard_normal((50, d))
            L.lloyd_partials(X, X[:3])
    assert calls == [L._DIRECT_MAX_D]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 7])
def test_transpose_tile_copies_the_rows_and_keeps_the_padding(dtype, d):
    """The direct kernel's tile: rows ``start … start + t`` of X as columns, written
    out for two to four features; the padding row (odd d) and columns past ``t`` stay."""
    X = np.random.default_rng(d).standard_normal((50, d)).astype(dtype)
    XT = np.full((d + d % 2, 16), -7.0, dtype=dtype)
    XT[d:] = 0.0
    transpose_tile(X, 30, 11, XT)
    np.testing.assert_array_equal(XT[:d, :11], X[30:41].T)
    assert np.all(XT[:d, 11:] == -7.0) and np.all(XT[d:] == 0.0)
