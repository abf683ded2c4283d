"""pack_state: the float32 rows a bounds sidecar holds stay valid bounds."""

import numpy as np

from dqkm.kernels.bounds import pack_state


def _edge_values(rng, n):
    v = rng.lognormal(0.0, 8.0, n)
    v[:8] = [0.0, np.inf, np.nan, 1e300, 1e-320, 3.4e38, np.nextafter(1.0, 2.0), 1.0]
    return v


def test_packed_bounds_round_outward_and_labels_are_exact():
    rng = np.random.default_rng(0)
    n = 4000
    labels = rng.integers(0, 2 ** 24, n).astype(np.int32)
    upper, lower = _edge_values(rng, n), rng.permutation(_edge_values(rng, n))
    out = pack_state(labels, upper, lower)
    assert out.dtype == np.float32 and out.shape == (n, 3)
    np.testing.assert_array_equal(out[:, 0].astype(np.int64), labels)
    with np.errstate(invalid="ignore"):
        up, lo = out[:, 1].astype(np.float64), out[:, 2].astype(np.float64)
        ok_up, ok_lo = ~np.isnan(upper), ~np.isnan(lower)
        assert (up[ok_up] >= upper[ok_up]).all() and (lo[ok_lo] <= lower[ok_lo]).all()
    assert np.isnan(up[~ok_up]).all() and np.isnan(lo[~ok_lo]).all()
    # tight: at most one float32 step outward of the nearest float32
    with np.errstate(over="ignore"):
        near = upper.astype(np.float32)
    finite = np.isfinite(near)
    assert (np.abs(out[finite, 1] - near[finite]) <= np.spacing(near[finite])).all()


def test_elkan_rows_pack_every_lower_bound():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 5, 50)
    upper, lower = rng.random(50) * 10, rng.random((50, 5)) * 10
    out = pack_state(labels, upper, lower)
    assert out.shape == (50, 7)
    assert (out[:, 2:].astype(np.float64) <= lower).all()
    assert (out[:, 1].astype(np.float64) >= upper).all()
