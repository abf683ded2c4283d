import numpy as np
import pytest

from dqkm.kernels.l1 import project_l1_ball, project_rows_l1_ball


def _exact(v, r):
    """Duchi et al.'s sort-based exact projection, for reference."""
    u = np.sort(np.abs(v))[::-1]
    css = np.cumsum(u)
    rho = np.nonzero(u * np.arange(1, len(u) + 1) > (css - r))[0][-1]
    theta = (css[rho] - r) / (rho + 1.0)
    return np.sign(v) * np.maximum(np.abs(v) - theta, 0)


def test_hand_worked():
    out = project_l1_ball(np.array([3.0, -1.0, 0.5, 2.0]), 2.0, tol=1e-9)
    np.testing.assert_allclose(out, [1.5, 0.0, 0.0, 0.5], atol=1e-7)
    inside = np.array([0.1, -0.2])
    np.testing.assert_array_equal(project_l1_ball(inside, 1.0), inside)


@pytest.mark.parametrize("tol", [1e-3, 1e-1])
def test_tolerance_and_closeness_to_exact(tol):
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = rng.standard_normal(50) * 3
        r = rng.uniform(0.5, 10)
        out = project_l1_ball(v, r, tol)
        assert r * (1 - 1e-12) <= np.abs(out).sum() <= r * (1 + tol) + 1e-12
        assert np.all(np.sign(out[out != 0]) == np.sign(v[out != 0]))
        # the projection threshold is between the exact ones at r and r(1+tol)
        assert np.all(np.abs(out) <= np.abs(_exact(v, r * (1 + tol))) + 1e-9)
        assert np.all(np.abs(out) >= np.abs(_exact(v, r)) - 1e-9)


def test_rows_and_bad_input():
    V = np.random.default_rng(1).standard_normal((4, 10))
    V0 = V.copy()
    P = project_rows_l1_ball(V, 1.0)
    np.testing.assert_array_equal(V, V0)
    assert np.all(np.abs(P).sum(1) <= 1.001)
    with pytest.raises(ValueError, match="radius must be > 0"):
        project_l1_ball(V[0], 0.0)
    with pytest.raises(ValueError, match="tol must be >= 0"):
        project_l1_ball(V[0], 1.0, -1.0)
