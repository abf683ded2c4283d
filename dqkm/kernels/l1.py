"""Projection on the ℓ1 ball with an ε tolerance (Sculley 2010).

``project_l1_ball(v, radius, tol)`` returns ``sign(v)·max(|v| − θ, 0)`` with θ
found by bisection so that the ℓ1 norm of the result lies in
``[radius, radius·(1 + tol)]`` — Sculley's ε-accurate projection, which
stops as soon as the norm is within the tolerance instead of sorting.
Vectors already inside ``radius·(1 + tol)`` are returned unchanged.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["project_l1_ball", "project_rows_l1_ball"]


@njit(nogil=True, cache=True)
def _project(v, radius, tol, out):  # OUT out
    n = v.shape[0]
    total = 0.0
    vmax = 0.0
    for i in range(n):
        a = abs(v[i])
        total += a
        if a > vmax:
            vmax = a
    if total <= radius * (1.0 + tol):
        for i in range(n):
            out[i] = v[i]
        return 0.0
    lo = 0.0
    hi = vmax
    theta = 0.0
    for _ in range(200):
        theta = 0.5 * (lo + hi)
        s = 0.0
        for i in range(n):
            a = abs(v[i]) - theta
            if a > 0:
                s += a
        if s > radius * (1.0 + tol):
            lo = theta
        elif s < radius:
            hi = theta
        else:
            break
    for i in range(n):
        a = abs(v[i]) - theta
        out[i] = np.sign(v[i]) * a if a > 0 else 0.0
    return theta


def project_l1_ball(v, radius, tol=1e-3):
    """ε-accurate Euclidean projection of a vector on ``{‖x‖₁ ≤ radius}``.

    Parameters
    ----------
    v : ndarray of shape (n,)
    radius : float > 0
    tol : float ≥ 0
        The result's ℓ1 norm is within ``[radius, radius·(1 + tol)]`` (when
        ``v`` is outside the ball).

    Returns
    -------
    ndarray of shape (n,), float64

    References
    ----------
    Sculley, "Web-scale k-means clustering", WWW 2010, Algorithm 2 (ε-accurate
    projection); Duchi et al. 2008 for the exact projection.
    """
    if not radius > 0:
        raise ValueError(f"radius must be > 0; got {radius!r}.")
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0; got {tol!r}.")
    v = np.ascontiguousarray(v, dtype=np.float64)
    out = np.empty_like(v)
    _project(v, float(radius), float(tol), out)
    return out


def project_rows_l1_ball(V, radius, tol=1e-3):
    """Project every row of ``V`` on the ℓ1 ball (a new array, float64)."""
    V = np.asarray(V, dtype=np.float64)
    return np.stack([project_l1_ball(row, radius, tol) for row in V]) if len(V) else V.copy()
