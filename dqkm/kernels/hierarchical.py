"""Hierarchical palm4MSA: peel one sparse factor at a time off a residual.

For ``A ≈ λ·[F0]·S1···SQ`` the factors are split off from the left, the
residual ``T`` staying on the right (FAuST's default side):

    level 1:      A        ≈ λ₁ · F0 · S1 · T1                 (2-factor palm4MSA)
    level l:      λ·T_{l-1} ≈ λ' · S_l · T_l                   (2-factor palm4MSA)
                  A        ≈ λ_l · F0 · S1 ··· S_l · T_l       (global palm4MSA)
    level Q − 1:  T_{Q-1} is SQ

Each 2-factor split starts from ``S_l`` = identity and ``T_l`` = 0; the
residual, rightmost, is the first factor updated in palm4MSA's right-to-left
sweep.  The level-1 split uses ``fixed_left``; later splits are unweighted
(their residual sits to the right of ``S1 ··· S_{l-1}``).  After each split
palm4MSA re-optimises all factors found so far, warm-started from the split.

Residual constraint of level ``l`` (``T_l``, shape rows of ``S_{l+1}`` × D):
given explicitly by ``residual_constraints``, or — when every factor
constraint is ``Splincol`` — ``Splincol(min(s_{l+1} ··· s_Q, min(shape)))``:
the residual stands for the product of the ``Q − l`` factors still to be
split off, each with ``s_j`` non-zeros per row and column.  For the ``n × n``
Hadamard matrix with ``Splincol(2)`` factors this is ``Splincol(n / 2^l)``,
the residual constraint of Le Magoarou & Gribonval's Hadamard experiment.

References
----------
Le Magoarou, L. and Gribonval, R. (2016). Flexible multilayer sparse
approximations of matrices and applications. IEEE JSTSP 10(4), Algorithm 3
(hierarchical factorisation) and Sect. V-A (Hadamard).
Giffon et al. (2021). QuicK-means, Sect. 4.1 (hierarchical palm4MSA as the
initialisation of QK-means).
"""

from __future__ import annotations

import numpy as np

from .palm4msa import (
    _as_constraints,
    _check_bool,
    _check_fixed_left,
    _check_method,
    _check_int,
    _check_target,
    _check_tol_lam,
    _initial_factors,
    _result,
    _run,
)
from .projections import Splincol, _Projection

__all__ = ["hierarchical_palm4msa", "default_residual_constraints"]

# λ at the start of a split, relative to ‖target‖_F (see the module docstring)
_SPLIT_LAM = 1e-3


_RESIDUAL_RULES = ("product", "geometric")


def default_residual_constraints(constraints, rule="product"):
    """Residual constraints of levels ``1 … Q−2`` for ``Splincol`` factor constraints.

    The residual ``T_l`` (shape rows of ``S_{l+1}`` × D) stands for the
    ``Q − l`` factors still to be split off.

    - ``rule="product"`` (the default): ``s_l = min(s_{l+1} ··· s_Q, m)``,
      ``m = min(shape)`` — the product's own bound on non-zeros per row.
    - ``rule="geometric"``: ``s`` decreases geometrically from ``m`` (level 0)
      to the last factor's ``s_Q`` (level ``Q − 1``), never above the product:
      ``s_l = min(round(m · (s_Q / m) ** (l / (Q − 1))), s_{l+1} ··· s_Q, m)``.
      Lower errors (digits 128×784, s = 5: 0.146 instead of 0.198) at ~17 %
      more time (the partial top-k projections of the nearly dense residuals).

    For the ``n × n`` Hadamard matrix with ``Q = log2 n`` ``Splincol(2)``
    factors both rules give ``n / 2^l`` (Le Magoarou & Gribonval's residual
    rule); for the QuicK-means layout of digits (16×64, ``s = 3``, Q = 6) the
    product gives 16, 16, 16, 9 and the geometric rule 11, 8, 6, 4.

    Parameters
    ----------
    constraints : list of Splincol, one per factor (``S1 … SQ``)
        The factors' constraints, e.g. :func:`default_constraints`.
    rule : {"product", "geometric"}, default "product"
        How the residuals' sparsity decreases (above).

    Returns
    -------
    list of Splincol, length ``Q − 2``
        Level ``l``: shape ``(constraints[l].shape[0], D)``.

    Examples
    --------
    >>> from dqkm.kernels import default_constraints
    >>> levels = default_residual_constraints(default_constraints(16, 64, sparsity=3))
    >>> [P.s for P in levels]
    [16, 16, 16, 9]
    """
    if rule not in _RESIDUAL_RULES:
        raise ValueError(f"The 'rule' parameter of default_residual_constraints must be one of "
                         f"{list(_RESIDUAL_RULES)}. Got {rule!r} instead.")
    Q = len(constraints)
    if not all(isinstance(c, Splincol) for c in constraints):
        raise ValueError(
            "The 'residual_constraints' parameter of hierarchical_palm4msa is required when "
            "the factor constraints are not all Splincol (the default residual rule needs "
            f"each factor's 's'). Got {[type(c).__name__ for c in constraints]}."
        )
    D = constraints[-1].shape[1]
    s_last = constraints[-1].s
    out = []
    for level in range(1, Q - 1):
        shape = (constraints[level].shape[0], D)
        m = min(shape)
        prod = 1
        for c in constraints[level:]:
            prod = min(prod * c.s, m)
        s_l = prod
        if rule == "geometric":
            geo = int(np.floor(m * (s_last / m) ** (level / (Q - 1)) + 0.5 + 1e-9))
            s_l = min(geo, prod)
        out.append(Splincol(shape, max(1, min(s_l, m))))
    return out


def _check_residuals(residual_constraints, constraints):
    Q = len(constraints)
    if residual_constraints is None:
        return default_residual_constraints(constraints)
    res = list(residual_constraints)
    if len(res) != Q - 2:
        raise ValueError(
            f"The 'residual_constraints' parameter of hierarchical_palm4msa must hold Q - 2 = "
            f"{Q - 2} constraints (levels 1 to Q - 2; the last residual is SQ with the last "
            f"factor's constraint). Got {len(res)} instead."
        )
    D = constraints[-1].shape[1]
    for level, c in enumerate(res, start=1):
        want = (constraints[level].shape[0], D)
        if not isinstance(c, _Projection) or c.shape != want:
            raise ValueError(
                f"Residual constraint {level - 1} (level {level}) of hierarchical_palm4msa must "
                f"be a projection object of shape {want}. Got {c!r} instead."
            )
    return res


def hierarchical_palm4msa(
    A,
    shapes_or_constraints=None,
    *,
    residual_constraints=None,
    n_iter=300,
    n_iter_global=None,
    tol=1e-4,
    split_tol=1e-3,
    n_iter_last=None,
    fixed_left=None,
    callback=None,
    safeguard=True,
    adaptive_step=False,
    split_adaptive_step=False,
    method="factors",
):
    """Approximate ``A`` by ``λ · [diag(fixed_left)] · S1 ··· SQ``, hierarchically.

    Parameters
    ----------
    A : array-like of shape (K, D)
    shapes_or_constraints : None or list, one entry per factor
        As in :func:`palm4msa` (default: QuicK-means layout, ``Splincol(5)``).
    residual_constraints : None or list of Q − 2 projection objects
        Constraint of the residual after level ``l = 1 … Q−2`` (shape rows
        of ``S_{l+1}`` × D); the last residual is ``SQ`` itself.  None:
        :func:`default_residual_constraints` (Splincol factors only).
    n_iter : int >= 0, default 300
        Cap on the iterations of every 2-factor split (each split stops
        earlier on progress, ``split_tol``).
    n_iter_global : int >= 0 or None
        Cap on the iterations of the global re-optimisations of levels
        ``1 … Q−2`` (default: ``n_iter``; they stop earlier on ``split_tol``).
    n_iter_last : int >= 0 or None
        Cap on the iterations of the last global run (default:
        ``n_iter_global``); it stops earlier on ``tol``.
    tol : float >= 0, default 1e-4
        Progress-based stop of the last global palm4MSA run: it stops after
        the first iteration that lowers the error by at most ``tol``
        relatively (``|e_{t-1} − e_t| <= tol · e_{t-1}``); 0 runs it to
        ``n_iter_last``.
    split_tol : float >= 0, default 1e-3
        Relative-change stopping rule of every 2-factor split and of the global
        runs of levels ``1 … Q−2``: a run stops when an iteration lowers its
        error by at most ``split_tol`` relatively (caps: ``n_iter`` and
        ``n_iter_global``).
        Those runs only seed the next level, whose global run revisits every
        factor, so polishing them is wasted; with 1e-3 most splits stop
        after tens of iterations instead of ``n_iter`` (the cost of the
        whole factorisation is about ``Σ_l (iterations of level l) × (l + 1)``
        factor updates).  ``split_tol=0`` runs every split and every global
        run of those levels to its cap (``tol=split_tol=0`` with the caps
        ``n_iter`` is the fixed-budget algorithm of Le Magoarou & Gribonval).
    fixed_left : None or array-like of shape (K,)
        Diagonal of a fixed left factor (QuicK-means's ``D_√n``); used in
        the first split and every global run.  QuicK-means initialises without it
        (no counts yet): ``hierarchical_palm4msa(U)`` on the centroids.
    callback : callable ``callback(t, error)`` or None
        Called after every global iteration, ``t`` counting across levels.
    safeguard : bool, default True
        As in :func:`palm4msa` (every run is monotone; the error can still
        rise at a level boundary, where a split replaces the residual).
    adaptive_step : bool, default False
        As in :func:`palm4msa`, for the global runs.
    split_adaptive_step : bool, default False
        The adaptive step in the 2-factor splits too (False: every split
        steps at the bound ``c``).  Opt-in: it changes where the splits end
        (lower or higher depending on the target), the Hadamard factorisation
        stalls with it, and QK-means leaves it off.
    method : {"factors", "dense"}, default "factors"
        As in :func:`palm4msa` (``"dense"``: the reference products).

    Returns
    -------
    Palm4MSAResult
        ``errors``: the global runs' errors, concatenated (the first entry is
        the error right after the first split; the split runs are not
        recorded); ``n_iter``: the number of global iterations.

    References
    ----------
    Le Magoarou & Gribonval (2016), Algorithm 3; Giffon et al. (2021) Sect. 4.1.

    Examples
    --------
    >>> from scipy.linalg import hadamard
    >>> from dqkm.kernels.projections import Splincol
    >>> H = hadamard(32).astype(float)
    >>> res = hierarchical_palm4msa(H, [Splincol((32, 32), 2)] * 5)
    >>> bool(res.errors[-1] / np.linalg.norm(H) < 1e-3)
    True
    """
    owner = "hierarchical_palm4msa"
    A64, dtype = _check_target(A, owner)
    K, D = A64.shape
    constraints = _as_constraints(shapes_or_constraints, K, D, owner)
    n_iter = _check_int(n_iter, "n_iter", owner, 0)
    n_iter_global = n_iter if n_iter_global is None else _check_int(n_iter_global, "n_iter_global", owner, 0)
    n_iter_last = n_iter_global if n_iter_last is None else _check_int(n_iter_last, "n_iter_last", owner, 0)
    _check_tol_lam(tol, None, owner)
    _check_tol_lam(split_tol, None, owner, name="split_tol")
    method = _check_method(method, owner)
    if callback is not None and not callable(callback):
        raise TypeError(f"The 'callback' parameter of {owner} must be callable or None. Got {callback!r}.")
    d = _check_fixed_left(fixed_left, K, owner)
    Q = len(constraints)
    residuals = _check_residuals(residual_constraints, constraints) + [constraints[-1]]
    safeguard = bool(safeguard)
    adaptive = _check_bool(adaptive_step, "adaptive_step", owner)
    adaptive_split = _check_bool(split_adaptive_step, "split_adaptive_step", owner)
    if Q == 1:
        mats, lam = _initial_factors(None, constraints, None, owner)
        mats, lam, errors = _run(A64, d, constraints, mats, lam, n_iter_last, tol, callback, safeguard,
                                 adaptive=adaptive, method=method)
        return _result(mats, lam, errors, dtype)

    offset = [0]

    def global_callback(t, err):
        callback(offset[0] + t, err)

    target, weights = A64, d
    peeled, peeled_cons = [], []
    all_errors = []
    for level in range(1, Q):
        split_cons = [constraints[level - 1], residuals[level - 1]]
        eye = np.eye(*split_cons[0].shape)
        mats = [eye / np.linalg.norm(eye), np.zeros(split_cons[1].shape)]
        lam0 = _SPLIT_LAM * np.linalg.norm(weights[:, None] * target)
        mats, lam, _ = _run(target, weights, split_cons, mats, lam0, n_iter, split_tol, None,
                            safeguard, adaptive=adaptive_split, method=method)
        cons = peeled_cons + split_cons
        last = level == Q - 1
        mats, lam, errors = _run(
            A64, d, cons, peeled + mats, lam, n_iter_last if last else n_iter_global,
            tol if last else split_tol,
            None if callback is None else global_callback, safeguard, adaptive=adaptive,
            method=method,
        )
        all_errors.append(errors if level == 1 else errors[1:])
        offset[0] += len(errors) - 1
        peeled, peeled_cons = mats[:-1], cons[:-1]
        target = lam * mats[-1]
        weights = np.ones(target.shape[0])
    errors = np.concatenate(all_errors)
    return _result(mats, lam, errors, dtype)
