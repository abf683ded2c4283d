"""Up to ``_DIRECT_MAX_D`` features every Lloyd label is exact: from ``_GEMM_MIN_D``
features the GEMM kernel serves blocks whose certification is cheap (a probe of
rows finds few near-ties: data near the origin), the direct kernel the others
(data far from the origin, where the GEMM's rounding would send most rows to the
exact rescan).  Either way the labels are those of exact float64 distances and the
sums, counts and distances are the direct kernel's, bit for bit."""

import numpy as np
import pytest

from dqkm.kernels import lloyd as L

_F32_MIN_D = L._GEMM_MIN_D_F32  # the rule's own value (the fixture below lowers it)


@pytest.fixture(autouse=True)
def _float32_gemm_eligible(monkeypatch):
    """These tests exercise the certified GEMM kernel on float32 X too, which the
    rule keeps for 64 centers or more (fewer: the direct kernel up to 32 features,
    the faster one there): float32 X here is eligible from ``_GEMM_MIN_D``, as
    float64 X is."""
    monkeypatch.setattr(L, "_GEMM_MIN_D_F32", L._GEMM_MIN_D)


def _blobs(n, d, k, offset, seed, spread=1.0):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-8, 8, size=(k, d))
    X = centers[rng.integers(0, k, n)] + spread * rng.standard_normal((n, d)) + offset
    return X, centers + offset


def _exact_labels(X, C):
    X64, C64 = X.astype(np.float64), C.astype(np.float64)
    return ((X64[:, None, :] - C64[None]) ** 2).sum(-1).argmin(1)


def _direct_only(X, C, monkeypatch):
    with monkeypatch.context() as m:
        for name in ("_GEMM_MIN_D", "_GEMM_MIN_D_F32", "_GEMM_MIN_D_MANY"):
            m.setattr(L, name, L._DIRECT_MAX_D + 1)
        return L.lloyd_partials(X, C)


def _spy_direct(monkeypatch):
    calls = []
    real = L._run_direct
    monkeypatch.setattr(L, "_run_direct", lambda *a, **k: calls.append(a[0].shape[1])
                        or real(*a, **k))
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d, k", [(20, 12), (24, 12), (32, 12), (12, 128), (16, 130)])
def test_gemm_serves_data_near_the_origin_with_the_direct_kernels_results(dtype, d, k,
                                                                          monkeypatch):
    # from _GEMM_MIN_D features, or _GEMM_MIN_D_MANY with _MANY_CENTERS centers or more
    assert L._gemm_min_d(k, np.dtype(dtype)) <= d
    assert d <= L._DIRECT_MAX_D
    X, C = _blobs(3000, d, k, 0.0, d)
    X, C = X.astype(dtype), C.astype(dtype)
    ref = _direct_only(X, C, monkeypatch)
    calls = _spy_direct(monkeypatch)
    out = L.lloyd_partials(X, C)
    assert calls == []  # the GEMM kernel served the block
    np.testing.assert_array_equal(out[3], _exact_labels(X, C))
    for a, b in zip(out, ref):
        np.testing.assert_array_equal(a, b)  # labels, sums, counts, distances, objective
    lab, mind = L.assign_labels(X, C)
    np.testing.assert_array_equal(lab, ref[3])
    np.testing.assert_array_equal(mind, ref[4])


@pytest.mark.parametrize("d", [20, 32])
def test_direct_kernel_serves_data_far_from_the_origin(d, monkeypatch):
    assert L._GEMM_MIN_D <= d <= L._DIRECT_MAX_D
    # float32 blobs of spread 0.5 at 1e4 from the origin: the float32 GEMM's rounding
    # bound covers most rows, so the probe sends the block to the direct kernel
    X, C = _blobs(3000, d, 6, 1e4, d, spread=0.5)
    X, C = X.astype(np.float32), C.astype(np.float32)
    calls = _spy_direct(monkeypatch)
    out = L.lloyd_partials(X, C)
    assert calls == [d]
    np.testing.assert_array_equal(out[3], _exact_labels(X, C))


def test_near_ties_in_a_gemm_block_are_decided_exactly(monkeypatch):
    # integer rows and centers: many exact ties (the lower index must win); the
    # GEMM kernel's certification must settle them as exact distances do.  (Duplicate
    # centers tie for every row near them: the probe would send the block to the
    # direct kernel, so the centers here are distinct.)
    rng = np.random.default_rng(5)
    X = (rng.standard_normal((4000, 24)) * 40).astype(np.float32)  # far from any tie
    probe = np.linspace(0, len(X) - 1, L._PROBE_ROWS).astype(int)
    ties = rng.choice(np.setdiff1d(np.arange(len(X)), probe), 1000, replace=False)
    X[ties] = rng.integers(-3, 4, size=(1000, 24))  # off the probe's rows
    C = rng.integers(-3, 4, size=(9, 24)).astype(np.float32)
    C[7], C[8] = C[0] + 1.0, C[0] - 1.0
    calls = _spy_direct(monkeypatch)
    labels = L.lloyd_partials(X, C)[3]
    assert calls == []
    np.testing.assert_array_equal(labels, _exact_labels(X, C))
    X64, C64 = X[ties].astype(np.float64), C.astype(np.float64)
    d2 = ((X64[:, None, :] - C64[None]) ** 2).sum(-1)
    assert ((d2 == d2.min(1, keepdims=True)).sum(1) > 1).sum() > 10  # ties were there


def test_rows_whose_float32_products_overflow_get_exact_labels(monkeypatch):
    # a block near the origin (the probe picks the GEMM kernel) with a few huge rows
    # off the probe's rows: their float32 products overflow, the tile is assigned
    # again in float64, and the labels are still those of exact distances
    X, C = _blobs(3000, 24, 6, 0.0, 3)
    X, C = X.astype(np.float32), C.astype(np.float32)
    probe = set(np.linspace(0, len(X) - 1, L._PROBE_ROWS).astype(int))
    huge = [r for r in (101, 102, 1337) if r not in probe]
    assert len(huge) == 3
    X[huge] = np.float32(3e37) * np.sign(X[huge] + 0.5)
    calls = _spy_direct(monkeypatch)
    _, _, obj, labels, mind = L.lloyd_partials(X, C)
    assert calls == []
    np.testing.assert_array_equal(labels, _exact_labels(X, C))
    assert np.isfinite(mind).all() and np.isfinite(obj)


def test_below_the_gemm_threshold_and_on_small_blocks_the_direct_kernel_serves(monkeypatch):
    calls = _spy_direct(monkeypatch)
    d = L._GEMM_MIN_D - 1
    X, C = _blobs(3000, d, 12, 0.0, 1)
    L.lloyd_partials(X.astype(np.float32), C.astype(np.float32))
    Xs, Cs = _blobs(8 * L._PROBE_ROWS - 1, 24, 12, 0.0, 1)  # too few rows for the probe
    L.lloyd_partials(Xs.astype(np.float32), Cs.astype(np.float32))
    dm = L._GEMM_MIN_D_MANY - 1  # many centers: direct below the lower threshold
    X, C = _blobs(3000, dm, L._MANY_CENTERS, 0.0, 1)
    L.lloyd_partials(X.astype(np.float32), C.astype(np.float32))
    assert calls == [d, 24, dm]


@pytest.mark.parametrize("d", [20, 24, 32])
def test_float32_with_few_centers_keeps_the_direct_kernel_up_to_32_features(d, monkeypatch):
    """The rule itself (no fixture): below 64 centers float32 X goes to the direct
    kernel up to ``_DIRECT_MAX_D`` features (measured faster there,
    benchmarks/bench_lloyd_kernel.py); float64 X from ``_GEMM_MIN_D``, and either
    dtype from ``_GEMM_MIN_D_MANY`` with 64 centers or more, to the GEMM kernel."""
    monkeypatch.setattr(L, "_GEMM_MIN_D_F32", _F32_MIN_D)
    calls = _spy_direct(monkeypatch)
    for dtype, k in ((np.float32, 16), (np.float64, 16), (np.float32, L._MANY_CENTERS)):
        X, C = _blobs(3000, d, k, 0.0, d)
        L.lloyd_partials(X.astype(dtype), C.astype(dtype))
    assert calls == [d]  # only the float32 block with few centers
    assert L._gemm_min_d(63, np.dtype(np.float32)) == L._DIRECT_MAX_D + 1
