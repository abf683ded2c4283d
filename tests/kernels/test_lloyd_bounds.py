"""Hamerly's and Elkan's bound-pruned Lloyd steps against plain Lloyd steps (kernel level).

A sequence of :func:`hamerly_partials` (or :func:`elkan_partials`) steps, each
chunk carrying its own labels and bounds, must give the labels, float64 sums, counts, per-row
distances and objective of :func:`lloyd_partials` at every step, bit for bit,
while skipping distance computations once the centers settle; without sums (a fit's
last pass), the labels and distances of :func:`~dqkm.kernels.lloyd.assign_labels`.

Hamerly's step rescans the rows whose bounds fail one by one, or — from
``_FULL_PASS_SHARE`` of a chunk's rows — runs the Lloyd pass over the whole chunk,
which yields every row's bounds: "hamerly" is the rule as shipped, "hamerly-rescan"
never takes the full pass, "hamerly-full" always does.
"""

import contextlib

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_blobs

from dqkm.kernels import bounds as B
from dqkm.kernels import lloyd as L
from dqkm.kernels.bounds import (center_geometry, center_separations, elkan_partials,
                                 hamerly_partials)
from dqkm.kernels.lloyd import lloyd_partials

_SHARES = {"hamerly": B._FULL_PASS_SHARE, "hamerly-rescan": 2.0, "hamerly-full": 0.0}


def _update(centers, sums, counts):
    """Lloyd's center update; an empty cluster keeps its center."""
    new = centers.astype(np.float64)
    nz = counts > 0
    new[nz] = sums[nz] / counts[nz, None]
    return new.astype(centers.dtype)


@contextlib.contextmanager
def _share(value):
    before = B._FULL_PASS_SHARE
    B._FULL_PASS_SHARE = value
    try:
        yield
    finally:
        B._FULL_PASS_SHARE = before


def _step(kind, chunk, C, state, shift, half_sep, with_sums=True):
    if kind in _SHARES:
        with _share(_SHARES[kind]):
            return hamerly_partials(chunk, C, *state, shift, half_sep, with_sums=with_sums)
    return elkan_partials(chunk, C, *state, shift, half_sep, center_separations(C),
                          with_sums=with_sums)


def _run_both(X, C0, n_steps, n_chunks, kind="hamerly"):
    chunks = np.array_split(X, n_chunks)
    lower_shape = (lambda n: n) if kind in _SHARES else (lambda n: (n, len(C0)))
    state = [(np.full(len(c), -1), np.zeros(len(c)), np.zeros(lower_shape(len(c))))
             for c in chunks]
    C, prev = C0.copy(), None
    skipped = []
    for _ in range(n_steps):
        half_sep, shift = center_geometry(C, prev)
        tot_ref = [np.zeros_like(C, dtype=np.float64), np.zeros(len(C), np.int64), 0.0]
        tot = [np.zeros_like(C, dtype=np.float64), np.zeros(len(C), np.int64), 0.0]
        n_skip = 0
        for q, chunk in enumerate(chunks):
            ref = lloyd_partials(chunk, C)
            out = _step(kind, chunk, C, state[q], shift, half_sep)
            sums, counts, obj, labels, mind, upper, lower, n_sk = out
            np.testing.assert_array_equal(labels, ref[3])
            np.testing.assert_array_equal(sums, ref[0])
            np.testing.assert_array_equal(counts, ref[1])
            np.testing.assert_array_equal(mind, ref[4])
            assert obj == ref[2]
            # a fit's last pass (no sums): assign_labels's labels and distances, bit for bit
            last = _step(kind, chunk, C, state[q], shift, half_sep, with_sums=False)
            np.testing.assert_array_equal(last[3], labels)
            np.testing.assert_array_equal(last[4], L.assign_labels(chunk, C)[1])
            assert last[0].size == 0 and last[1].size == 0 and last[7] == n_sk
            # the bounds hold for the exact distances
            d = np.sqrt(((chunk[:, None, :].astype(np.float64) - C[None].astype(np.float64)) ** 2
                         ).sum(-1))
            own = d[np.arange(len(chunk)), labels]
            assert np.all(upper >= own)
            d[np.arange(len(chunk)), labels] = np.inf
            if kind in _SHARES:
                assert np.all(lower <= d.min(1))
                if kind == "hamerly-full":  # fresh bounds: the second distance lowered by
                    second = d.min(1)       # the kernel's rounding margin (0 would pass above)
                    assert np.median(lower[second > 0] / second[second > 0]) > 0.999
            else:
                assert np.all(lower <= d)
            state[q] = (labels, upper, lower)
            n_skip += n_sk
            for t, r in zip(tot, (sums, counts, obj)):
                t += r
        skipped.append(n_skip / (len(X) * len(C)))
        prev = C
        C = _update(C, tot[0], tot[1])
    return skipped


KINDS = ["hamerly", "hamerly-rescan", "hamerly-full", "elkan"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [2, 16, 24])  # 24: the Lloyd pass's GEMM kernel
def test_bounds_equal_lloyd_on_blobs(dtype, d, kind):
    X, _ = make_blobs(3000, d, centers=8, cluster_std=1.5, random_state=0)
    X = X.astype(dtype)
    C0 = X[np.random.default_rng(0).choice(len(X), 8, replace=False)]
    skipped = _run_both(X, C0, 8, 3, kind)
    assert skipped[0] == 0.0            # first step: no bounds yet
    if kind == "hamerly-full":
        assert max(skipped) == 0.0      # every row assigned by the full pass
    else:
        assert max(skipped[1:]) > 0.5   # most distances skipped once the centers settle


@pytest.mark.parametrize("kind", KINDS)
def test_bounds_equal_lloyd_on_digits(kind):
    X = load_digits().data  # integer features: exact ties at the first step
    C0 = X[np.random.default_rng(1).choice(len(X), 10, replace=False)]
    skipped = _run_both(X, C0, 10, 4, kind)
    if kind != "hamerly-full":
        assert max(skipped[1:]) > 0.3


@pytest.mark.parametrize("kind", KINDS)
def test_bounds_equal_lloyd_with_empty_clusters_and_duplicate_centers(kind):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((900, 3))
    C0 = np.vstack([X[:4], X[:1], np.full((2, 3), 50.0)])  # a duplicate, two far centers
    skipped = _run_both(X, C0, 6, 2, kind)
    assert max(skipped[1:]) > 0.0 or kind == "hamerly-full"


def test_hamerly_single_cluster_and_empty_chunk():
    X = np.random.default_rng(3).standard_normal((50, 4))
    C = X[:1]
    half_sep, shift = center_geometry(C)
    out = hamerly_partials(X, C, np.full(50, -1), np.zeros(50), np.zeros(50), shift, half_sep)
    out2 = hamerly_partials(X, C, out[3], out[5], out[6], shift, half_sep)
    assert out2[7] == 50 and (out2[3] == 0).all()
    empty = hamerly_partials(X[:0], C, np.zeros(0), np.zeros(0), np.zeros(0), shift, half_sep)
    assert empty[1].sum() == 0 and empty[2] == 0.0


def test_hamerly_nan_row_refused_like_lloyd():
    X = np.random.default_rng(4).standard_normal((40, 3))
    X[7, 1] = np.nan
    C = X[10:13]
    half_sep, shift = center_geometry(C)
    out = hamerly_partials(X, C, np.full(40, -1), np.zeros(40), np.zeros(40), shift, half_sep)
    assert not np.isfinite(out[2]) and out[4][7] == np.inf


def test_hamerly_refuses_mismatched_state():
    X = np.zeros((5, 2))
    C = np.eye(2)
    half_sep, shift = center_geometry(C)
    with pytest.raises(ValueError, match=r"labels, upper and lower must have shapes \(5,\)"):
        hamerly_partials(X, C, np.zeros(4), np.zeros(5), np.zeros(5), shift, half_sep)
    with pytest.raises(ValueError, match=r"shift and half_sep must have shape \(n_clusters,\)"):
        hamerly_partials(X, C, np.zeros(5), np.zeros(5), np.zeros(5), shift[:1], half_sep)
    with pytest.raises(ValueError, match=r"labels must lie in \[-1, 2\)"):
        hamerly_partials(X, C, np.full(5, 2), np.zeros(5), np.zeros(5), shift, half_sep)
    with pytest.raises(ValueError, match="previous centers of shape"):
        center_geometry(C, np.eye(3))


def test_elkan_refuses_mismatched_separations():
    X = np.zeros((5, 2))
    C = np.eye(2)
    half_sep, shift = center_geometry(C)
    with pytest.raises(ValueError, match=r"separations must have shapes"):
        elkan_partials(X, C, np.zeros(5), np.zeros(5), np.zeros((5, 2)), shift, half_sep,
                       np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"must have shapes \(5,\), \(5,\) and \(5, 2\)"):
        elkan_partials(X, C, np.zeros(5), np.zeros(5), np.zeros(5), shift, half_sep,
                       center_separations(C))


@pytest.mark.parametrize("kind", ["hamerly-rescan", "hamerly-full", "elkan"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [8, 24])
def test_rescan_by_gemm_gives_the_exact_labels_on_near_ties_far_from_the_origin(kind, dtype, d,
                                                                              monkeypatch):
    """Rows without bounds are scanned by kernels whose rounding (float32 X:
    float32 products) is far above the gaps here: every row lies almost midway
    between two centers 1e4 from the origin.  The labels must still be those of
    the exact float64 distances (lowest index on exact ties), and the bounds
    valid for them.  At 24 features the full pass is made to run the Lloyd
    pass's GEMM kernel (whose probe would hand such data to the direct kernel),
    so its near-ties' exact second distances are the lower bounds."""
    gemm = []
    if d >= L._GEMM_MIN_D:  # float32 too (the rule keeps few centers on the direct kernel)
        monkeypatch.setattr(L, "_GEMM_MIN_D_F32", L._GEMM_MIN_D)
        monkeypatch.setattr(L, "_certifies_cheaply", lambda *a: True)
        real = L._tiled
        monkeypatch.setattr(L, "_tiled", lambda *a: gemm.append(1) or real(*a))
    rng = np.random.default_rng(7)
    k, n = 6, 3000
    C = (1e4 + rng.standard_normal((k, d))).astype(dtype)
    pair = rng.integers(0, k - 1, n)
    t = 0.5 + rng.choice([0.0, 1e-7, -1e-7, 1e-4], n)
    X = (C[pair] * (1 - t[:, None]) + C[pair + 1] * t[:, None]).astype(dtype)
    X[:5] = C[2]  # exact ties with the duplicate below
    C[3] = C[2]
    x64, c64 = X.astype(np.float64), C.astype(np.float64)
    exact = np.array([np.argmin([((x - c) ** 2).sum() for c in c64]) for x in x64])
    lower0 = np.zeros(n) if kind in _SHARES else np.zeros((n, k))
    half_sep, shift = center_geometry(C)
    out = _step(kind, X, C, (np.full(n, -1), np.zeros(n), lower0), shift, half_sep)
    labels, upper, lower = out[3], out[5], out[6]
    np.testing.assert_array_equal(labels, exact)
    dist = np.sqrt(((x64[:, None, :] - c64[None]) ** 2).sum(-1))
    assert np.all(upper >= dist[np.arange(n), labels])
    if kind in _SHARES:
        dist[np.arange(n), labels] = np.inf
        assert np.all(lower <= dist.min(1))
    else:
        assert np.all(lower <= dist)
    assert len(gemm) == (kind == "hamerly-full" and d >= L._GEMM_MIN_D)
