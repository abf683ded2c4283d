"""palm4MSA: approximate a matrix by ``λ · [F0] · S1 · S2 ··· SQ`` with sparse factors.

The solver minimises ``‖A − λ·F0·S1···SQ‖²_F`` over factors ``Sq`` in their
constraint sets (sparse support, unit Frobenius norm) and the scalar ``λ``,
by proximal alternating linearised minimisation (PALM).  ``F0`` is an optional
fixed diagonal factor (QuicK-means's ``D_√n``).

How one sweep is computed (``A`` is K×D; factor ``q`` is ``r_q × c_q``)
-------------------------------------------------------------------------
For factor ``q`` with left part ``L = F0·S1···S_{q-1}`` and right part
``R = S_{q+1}···SQ``, everything the update needs lives in the small
``r_q × c_q`` space:

    GL = Lᵀ L,  GR = R Rᵀ,  C = Lᵀ A Rᵀ
    ½∇f(S) = λ² GL S GR − λ C
    f(S)   = ‖A‖² − 2λ⟨C, S⟩ + λ² ⟨GL S, S GR⟩

Factors are updated right to left (``q = Q … 1``, Algorithm 2), so ``R`` is
made of already updated factors and ``L`` of old ones.  At the start of a
sweep the left quantities ``Lᵀ`` (r_q × K) and ``GL`` are built for every
``q`` by one sparse product each (``Lᵀ_{q+1} = S_qᵀ Lᵀ_q``,
``GL_{q+1} = S_qᵀ GL_q S_q``); during the sweep ``Rᵀ`` is folded into
``T = A Rᵀ`` (K × c_q, one sparse product per factor: ``Tᵀ ← S_q Tᵀ``) and
``GR ← S_q GR S_qᵀ``.  The only dense BLAS products per factor are
``C = Lᵀ·T`` and ``GL·(S GR)`` (r×K×c and r×r×c), run in float32 because
they only feed the gradient (the objective, which decides every update and
every reported error, is evaluated in float64); every product with a sparse
factor uses a CSR kernel.

Through the factors (``method="factors"``, the default)
------------------------------------------------------
The two GEMMs above cost r·K·c + r²·c per factor, Q·A³ per sweep for K = D =
A.  The default path replaces them by applying the left chain as sparse
operators: ``½∇f = λ Lᵀ(λ L·(S·GR) − A Rᵀ)`` costs ``2·c·Σ_{j<q} nnz(S_j)``
multiply-adds (O(Q²·s·A²) per sweep) in one tiled numba kernel
(:mod:`._palm_chains`): column tiles of ``S·GR`` go through ``L``, the
subtraction and ``Lᵀ`` inside two cache-resident buffers, in float32 like the
reference's GEMMs.  It is chosen per factor when that is below the GEMMs'
flops divided by ``_GEMM_GAIN`` (a GEMM flop is cheaper than a CSR row-add's).
The Grams that remain dense (``GL``, ``GR``, needed by the float64 objective)
and the parts ``Lᵀ``, ``A Rᵀ`` are updated by products with one CSR factor formed
as gathers (each output row adds a few rows of the operand; ``Sᵀ`` through its
own transposed CSR arrays, never a scatter).  A Splincol candidate
``P(S − ∇/c')`` is one fused kernel (``_palm_chains.splincol_step``): the
row and column top-``s`` of ``|S − ∇/c'|`` with the projection's ties, its CSR
arrays and its norm, without forming the dense step, a mask or a CSR conversion.
The objective's quadratic term is ``⟨GL, S·GR·Sᵀ⟩``, formed with ``S·GR·Sᵀ`` by
one fused kernel (``_palm_chains.sandwich``: no ``S·GR`` or transposed copy is
written), and ``S·GR·Sᵀ`` is the next right Gram when the candidate is accepted;
the same kernel forms the left Grams ``GL_{q+1} = S_qᵀ GL_q S_q``.  For the last
factor the objective is ``‖A − λ L S‖²`` with ``L S`` through the chain where
that is cheaper, the errors are the product formed right to left through the
factors, and ``‖L‖₂²``, ``‖R‖₂²`` are power iterations through the chains
(``chain_gram_top_eig``).  Every factor of the QuicK-means layout (also the
rectangular first ``K × A`` or last ``A × D`` one) is Splincol-sparse and goes
through the same kernels; a factor denser than ``_DENSE_ABOVE`` (hierarchical
residuals) is multiplied with BLAS.  Same iterates as ``method="dense"`` (the
reference, kept as it was) to rounding.

References
----------
Le Magoarou, L. and Gribonval, R. (2016). Flexible multilayer sparse
approximations of matrices and applications. IEEE JSTSP 10(4), Algorithm 2.
Giffon, Emiya, Ralaivola, Kadri (2019/2021). QuicK-means, Appendix A,
Algorithm 2; journal version Sect. 4.1 (factor shapes and initialisation).
Bolte, Sabach, Teboulle (2014). Proximal alternating linearized minimization.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._factor_apply import _Factor, _chain_top_eig, _top_eig, transpose
from ._palm_chains import fmul, fsandwich, ftmul, splincol_step, support_step
from ._palm_support import rows_of, support_cg as _support_cg
from ._palm_terms import _Ctx, _gradient, _objective, _tiled
from ._palm_checks import (_check_fixed_left, _check_method, _check_target, _check_tol_lam,
                           _initial_factors)
from .projections import (_SORT_ABOVE, Splincol, _as_constraints, _check_bool, _check_int,
                          default_constraints, default_shapes)
from .sparse_factors import SparseFactors

__all__ = ["Palm4MSAResult", "palm4msa", "default_shapes", "default_constraints"]

_STEP_MARGIN = 1.001  # c = 1.001 · λ² · ‖L‖₂² · ‖R‖₂² (Algorithm 2, line 7)
_BACKTRACKS = 2  # c is doubled up to 2**_BACKTRACKS times the bound before an update is refused
_MIN_STEP_SCALE = 2.0**-6  # smallest multiplier of c tried by the adaptive step (safeguard on)


@dataclass(frozen=True)
class Palm4MSAResult:
    """Result of :func:`palm4msa` / :func:`hierarchical_palm4msa`.

    Parameters
    ----------
    factors, lam, errors, n_iter
        The attributes below, in this order (built by :func:`palm4msa` and
        :func:`hierarchical_palm4msa`).

    Attributes
    ----------
    factors : SparseFactors
        ``λ · S1 ··· SQ`` (``fixed_left`` excluded); every ``Sq`` has unit
        Frobenius norm and ``factors.lam == lam``.
    lam : float
        The scale λ.
    errors : ndarray of shape (n_iter + 1,), float64
        ``errors[t] = ‖A − λ·[F0]·S1···SQ‖_F`` after iteration ``t``
        (``errors[0]``: the initial factors).
    n_iter : int
        Number of iterations run (sweeps over all factors).

    Examples
    --------
    >>> res = palm4msa(np.random.default_rng(0).standard_normal((4, 8)), n_iter=5)
    >>> res.n_iter, res.errors.shape, res.factors.shape, res.factors.lam == res.lam
    (5, (6,), (4, 8), True)
    """

    factors: SparseFactors
    lam: float
    errors: np.ndarray
    n_iter: int


def _chain_error(A, d, facs, lam):
    """``‖A − λ·diag(d)·S1···SQ‖_F``, the product formed right to left through the factors."""
    P = facs[-1].dense
    for f in reversed(facs[:-1]):
        P = fmul(f, P)
    return float(np.linalg.norm(A - lam * (d[:, None] * P)))


def _exact_error(A, d, mats, lam):
    P = d[:, None] * mats[0]
    for M in mats[1:]:
        P = P @ M
    return float(np.linalg.norm(A - lam * P))


# --------------------------------------------------------------------------- solver


class _State:
    """Mutable solver state (private): factors, λ, current objective, warm vectors."""

    chains = None  # the sweep's left factors as _Chains (method="factors")

    support_cg = 0  # conjugate-gradient iterations on each accepted update's support

    def __init__(self, A, d, constraints, mats, lam, safeguard, adaptive, method="factors"):
        self.A = A
        self.At = np.ascontiguousarray(A.T)
        self.d = d
        self.constraints = constraints
        self.facs = [_Factor(M) for M in mats]
        self.lam = lam
        self.normA2 = float(np.vdot(A, A))
        self.through = method == "factors"
        if self.through:
            self.f = _chain_error(A, d, self.facs, lam) ** 2
        else:
            self.f = _exact_error(A, d, mats, lam) ** 2
        self.safeguard = safeguard
        # adaptive step (safeguarded updates only): factor q first tries c·scale[q]
        self.scale = [1.0] * len(constraints)
        self.min_scale = _MIN_STEP_SCALE if adaptive else 1.0
        # the descent guarantee needs the current factor in its set; the default
        # init and palm4msa results are, an arbitrary warm start may not be
        self.feasible = [c._contains(M) for c, M in zip(constraints, mats)]
        rng = np.random.default_rng(0)  # fixed start vectors: deterministic, no global state
        self.vL = [rng.standard_normal(s.shape[0]) for s in constraints]
        self.vR = [rng.standard_normal(s.shape[1]) for s in constraints]
        for v in self.vL + self.vR:
            v /= np.linalg.norm(v)

    def mul(self, fac, X):
        """``S @ X``: the gather kernel on the through path, the reference's otherwise."""
        return fmul(fac, X) if self.through else fac.mul(X)

    def tmul(self, fac, X):
        """``Sᵀ @ X``, as :meth:`mul`."""
        return ftmul(fac, X) if self.through else fac.tmul(X)


def _project(cons, D, support=None):
    """``cons(D)``, or ``D`` restricted to a given boolean ``support``; unit norm."""
    mask = cons._mask(np.abs(D)) if support is None else support
    P = np.where(mask, D, 0.0)
    norm = np.linalg.norm(P)
    if norm > 0:
        P /= norm
    return P


def _step(st, q, fac, grad, cm, support=False):
    """The candidate ``P_q(S − grad/cm)`` (``support``: on the support of ``S``) as a
    :class:`_Factor`; on the through path a Splincol step is one fused kernel that
    forms neither ``D`` nor a mask (same entries, values to rounding)."""
    cons = st.constraints[q]
    if (st.through and grad.dtype == np.float64 and type(cons) is Splincol
            and cons.s < min(cons.shape) and cons.s <= _SORT_ABOVE):
        out = np.zeros(fac.dense.shape)
        if support:
            csr = support_step(fac.dense, grad, cm, *fac.csr_all()[:2], out)
        else:
            csr = splincol_step(fac.dense, grad, cm, cons.s, out)
        return _Factor.from_parts(out, csr)
    D = fac.dense - grad / cm
    return _Factor(_project(cons, D, (fac.dense != 0.0) if support else None))


def _guarded_update(st, q, fac, grad, c, ctx):
    """A factor update that never increases the objective, with an adaptive step.

    Candidates, in order, for ``c' = c·scale[q], 2c', 4c', …`` up to
    ``2**_BACKTRACKS · c``: the projection of ``D = S − ∇/c'``; for a
    non-exact projection (Splincol), ``D`` on the current support of ``S``
    (for unit-norm ``S`` this is never farther from ``D`` than ``S``, the
    inequality PALM's descent proof needs).  The first candidate whose
    objective is <= the current one is taken and ``scale[q]`` becomes half
    its ``c'/c`` (at least ``_MIN_STEP_SCALE``): the next update of this
    factor tries a step twice as long.  If none is taken, ``S`` is kept and
    ``scale[q]`` is reset to 1.
    """
    cons = st.constraints[q]
    supports = [False] if cons.is_exact else [False, True]
    mult = st.scale[q]
    while True:
        for support in supports:
            new = _step(st, q, fac, grad, c * mult, support)
            f_new, _, _, SGR = _objective(st, ctx, new)
            if f_new <= st.f:
                st.f = f_new
                st.scale[q] = max(0.5 * mult, st.min_scale)
                return new, SGR
        if mult >= 2.0**_BACKTRACKS:
            st.scale[q] = 1.0
            return fac, None
        mult *= 2.0


def _refine_on_support(st, q, fac, ctx, extra):
    """``fac`` (an accepted update) after ``st.support_cg`` conjugate-gradient
    iterations on its support (:mod:`._palm_support`): λ takes the norm of
    ``λ·S``, the factor is renormalised, and the result is kept only when the
    objective does not increase.  Returns the factor and what :func:`_objective`
    gives the fold (``extra``, unchanged when the refinement is not kept)."""
    if fac.csr is None or type(st.constraints[q]) is not Splincol:
        return fac, extra
    indptr, indices, values = fac.csr
    x = _support_cg(indptr, indices, values, fac.dense.shape, ctx.GL, ctx.GR, ctx.Lt,
                    ctx.Rt, st.lam, st.support_cg)
    lam = float(np.linalg.norm(x))
    if not (lam > 0.0 and np.isfinite(lam)):
        return fac, extra
    x /= lam
    dense = np.zeros(fac.dense.shape)
    dense[rows_of(indptr), indices] = x
    new = _Factor.from_parts(dense, (indptr, indices, x))
    old_lam, st.lam = st.lam, lam
    f_new, _, _, new_extra = _objective(st, ctx, new)
    if f_new <= st.f:
        st.f = f_new
        return new, new_extra
    st.lam = old_lam
    return fac, extra


def _sweep(st, guard):
    """One palm4MSA iteration: factors Q…1 (right to left), then λ.

    ``guard``: refuse any factor update that increases the objective.
    """
    facs, d, lam = st.facs, st.d, st.lam
    Q = len(facs)
    if st.through:
        st.chains = None  # built when a gradient first goes through the chain
    # left parts with the old factors: Lᵀ_q (r_q × K) and GL_q = Lᵀ_q L_q
    Lt = [None] * Q
    GL = [None] * Q
    GL[0] = d * d
    for q in range(Q):
        if q == 0:
            Lt[0] = d
        else:
            prev = facs[q - 1]
            if q == 1:
                Lt[1] = np.ascontiguousarray(prev.dense.T * d[None, :])
                GL[1] = st.tmul(prev, GL[0][:, None] * prev.dense)
            else:
                Lt[q] = st.tmul(prev, Lt[q - 1])
                if st.through and prev.csr is not None:
                    GL[q] = fsandwich(prev, GL[q - 1], transposed=True)[0]
                    continue
                Y = st.tmul(prev, GL[q - 1])  # Sᵀ GL, then Sᵀ GL S = Y·S
                GL[q] = st.tmul(prev, transpose(Y) if _tiled(st, Y) else Y.T)
    Tt = None  # (A Rᵀ)ᵀ, c_q × K (None: Aᵀ)
    GR = None  # R Rᵀ (None: identity)
    for q in range(Q - 1, -1, -1):
        fac = facs[q]
        ctx = _Ctx(Lt[q], st.At if Tt is None else Tt, GL[q], GR, q)
        few = guard and st.feasible[q]  # the update is safeguarded
        if st.through and GL[q].ndim == 2:
            rhoL, st.vL[q] = _chain_top_eig(facs[:q], d * d, st.vL[q], True, few)
        else:
            rhoL, st.vL[q] = _top_eig(GL[q], st.vL[q], few)
        if GR is None:
            rhoR = 1.0
        elif st.through:
            rhoR, st.vR[q] = _chain_top_eig(facs[q + 1:], d, st.vR[q], False, few)
        else:
            rhoR, st.vR[q] = _top_eig(GR, st.vR[q], few)
        c = _STEP_MARGIN * lam * lam * rhoL * rhoR
        SGR_new = None  # S_new · GR, when already computed
        if c > 0.0:
            SGR = fac.dense if GR is None else st.mul(fac, GR)
            grad = _gradient(st, q, fac, SGR, ctx)
            if guard and st.feasible[q]:
                prev, (fac, SGR_new) = fac, _guarded_update(st, q, fac, grad, c, ctx)
                if st.support_cg and fac is not prev:  # an accepted update
                    fac, SGR_new = _refine_on_support(st, q, fac, ctx, SGR_new)
            else:
                fac = _step(st, q, fac, grad, c)
                st.feasible[q] = True
                if guard:
                    st.f, _, _, SGR_new = _objective(st, ctx, fac)
            facs[q] = fac
        elif not st.feasible[q]:
            # λ·L or R is zero: the objective does not depend on this factor
            fac = facs[q] = _Factor(_project(st.constraints[q], fac.dense))
            st.feasible[q] = True
        if q > 0:
            # fold the (new) factor into the right part for factor q − 1
            if GR is None:
                if SGR_new is None:
                    SGR_new = (st.mul(fac, st.At), fac.times_t(fac.dense) if _tiled(st, fac.dense)
                               else st.mul(fac, np.ascontiguousarray(fac.dense.T)))
                Tt, GR = SGR_new
            else:
                Tt = st.mul(fac, Tt)
                if isinstance(SGR_new, tuple):  # S GR Sᵀ formed by the objective
                    GR = SGR_new[1]
                elif SGR_new is None and st.through and fac.csr is not None:
                    GR = fsandwich(fac, GR)[0]
                else:
                    if SGR_new is None:
                        SGR_new = st.mul(fac, GR)
                    # S·GR·Sᵀ = (S GR)·Sᵀ (the through path: tiled, no transposed copy)
                    GR = (fac.times_t(SGR_new) if _tiled(st, SGR_new)
                          else st.mul(fac, np.ascontiguousarray(SGR_new.T)))
        last_ctx = ctx
    # λ = ⟨A, Â⟩ / ‖Â‖² with Â = F0·S1···SQ (Algorithm 2, line 12)
    f0, lin, quad, _ = _objective(st, last_ctx, facs[0])
    if quad > 0.0:
        st.lam = lin / quad
        st.f = max(st.normA2 - lin * lin / quad, 0.0)
    else:
        st.f = f0
    return math.sqrt(max(st.f, 0.0))


def _run(A, d, constraints, mats, lam, n_iter, tol, callback, safeguard, adaptive=False,
         method="factors", support_cg=0):
    """Core loop shared with the hierarchical solver; returns (mats, lam, errors).

    ``adaptive=False``: every guarded update starts from the bound ``c``.
    """
    st = _State(A, d, constraints, mats, lam, safeguard, adaptive, method)
    st.support_cg = support_cg
    errors = [math.sqrt(st.f)]
    for t in range(1, n_iter + 1):
        err = _sweep(st, guard=safeguard)
        errors.append(err)
        if callback is not None:
            callback(t, err)
        prev = errors[-2]
        if err == 0.0 or (prev > 0 and abs(prev - err) <= tol * prev):
            break
    mats = [f.dense for f in st.facs]
    if len(errors) > 1:
        errors[-1] = (_chain_error(A, d, st.facs, st.lam) if st.through
                      else _exact_error(A, d, mats, st.lam))
    return mats, st.lam, np.asarray(errors)


def _result(mats, lam, errors, dtype):
    csr = [sp.csr_matrix(M.astype(dtype)) for M in mats]
    return Palm4MSAResult(
        factors=SparseFactors(csr, lam=float(lam)),
        lam=float(lam),
        errors=errors,
        n_iter=len(errors) - 1,
    )


def palm4msa(
    A,
    shapes_or_constraints=None,
    *,
    n_iter=300,
    tol=1e-6,
    init=None,
    fixed_left=None,
    lam_init=None,
    callback=None,
    safeguard=True,
    adaptive_step=False,
    method="factors",
    support_cg=0,
):
    """Approximate ``A`` by ``λ · [diag(fixed_left)] · S1 ··· SQ`` (palm4MSA).

    Parameters
    ----------
    A : array-like of shape (K, D)
        Target, finite.  Computation is in float64; the factors are returned
        in A's float dtype (float64 for integer input).
    shapes_or_constraints : None or list of (rows, cols) / projection objects
        One entry per factor, chaining from K rows to D columns.  None: the
        QuicK-means layout :func:`default_constraints` (``Splincol(5)``).  A
        bare shape means ``Splincol(min(5, min(shape)))``.
    n_iter : int >= 0, default 300
        Maximum number of iterations (sweeps over all factors).
    tol : float >= 0, default 1e-6
        Stop when ``|e_{t-1} − e_t| <= tol · e_{t-1}`` (relative change of the
        error), or when the error is 0.
    init : None, Palm4MSAResult, SparseFactors or list of arrays
        Warm start.  None: ``S1 = 0``, every other factor the (rectangular)
        identity, λ = 1 (Le Magoarou & Gribonval 2016).  The factors are
        rescaled to unit norm with the scale moved into λ, so the starting
        operator is exactly ``λ_init · Π init``.
    fixed_left : None or array-like of shape (K,)
        Diagonal of a fixed left factor F0 (zeros allowed: empty clusters).
    lam_init : float or None
        Starting λ; default: ``init``'s ``lam`` (1 for arrays or no init).
    callback : callable ``callback(t, error)`` or None
        Called after every iteration ``t >= 1`` with ``errors[t]``.
    safeguard : bool, default True
        Refuse a factor update that would increase the objective: the step
        constant ``c`` is doubled (up to 4× the bound) and, if the objective
        still increases, the previous factor is kept.  With it the objective
        never increases, also for the ``Splincol`` heuristic, which is not an
        exact projection.  False: plain PALM at the bound ``c`` (for comparison).
    method : {"factors", "dense"}, default "factors"
        ``"factors"``: gradients, errors and spectral norms through the sparse
        factor chains where the cost estimate says it is cheaper (see the
        module notes); ``"dense"``: the reference with the cached dense left
        parts (r×K×c GEMMs per factor).  Same iterates to rounding (the
        reference forms the gradient in float32).
    adaptive_step : bool, default False
        With the safeguard: each factor's update first tries ``c·scale``, with
        ``scale`` halved after every accepted step (down to 1/64) and reset to
        1 after a refusal; longer steps are kept only when the objective does
        not increase.  It reaches lower errors per iteration (digits 128×784,
        s = 5, 300 iterations: 0.210 instead of 0.260) at about 1.5× the time
        per iteration (the refused candidates cost an objective each); QK-means
        uses it.  False: every update starts from the bound ``c``
        (Algorithm 2 as published).
    support_cg : int >= 0, default 0
        With the safeguard: after every accepted update of a ``Splincol`` factor,
        up to this many conjugate-gradient iterations of least squares in λ·S on
        that update's support, the other factors fixed (λ takes the norm of the
        result, the factor stays unit-norm and in its set), kept when the objective
        does not increase.  Each costs about ``nnz·(r + c)`` multiply-adds (about
        a gradient step's time at K = D = 1024) and lowers the error per iteration
        much further on slowly converging targets (QK-means's refits: see
        docs/algorithms/palm4msa.md).  0: palm4MSA as above.

    Returns
    -------
    Palm4MSAResult
        ``factors`` excludes ``fixed_left``; ``factors.lam == lam``.

    Notes
    -----
    Iteration (Algorithm 2): for ``q = Q, …, 1``: ``S_q ← P_q(S_q − ∇/c)`` with
    ``c = 1.001·λ²·‖L‖₂²·‖R‖₂²``; then ``λ ← ⟨A, Â⟩ / ‖Â‖²``.  The spectral
    norms are Rayleigh quotients of power iterations on ``LᵀL`` and ``RRᵀ``
    (small r×r / c×c matrices), warm-started across iterations; they are lower
    bounds, and the safeguard is what guarantees descent.  With
    ``adaptive_step`` longer steps (``c/2 … c/64``) are tried first and kept
    only when the objective does not increase (see docs/ALGORITHMS.md).

    References
    ----------
    Le Magoarou & Gribonval (2016), Algorithm 2 (palm4MSA); Giffon et al.,
    QuicK-means, Appendix A, Algorithm 2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> res = palm4msa(rng.standard_normal((16, 64)), n_iter=50)
    >>> len(res.factors.factors), bool(res.errors[-1] <= res.errors[0])
    (6, True)
    """
    A64, dtype = _check_target(A, "palm4msa")
    K, D = A64.shape
    constraints = _as_constraints(shapes_or_constraints, K, D, "palm4msa")
    n_iter = _check_int(n_iter, "n_iter", "palm4msa", 0)
    _check_tol_lam(tol, lam_init, "palm4msa")
    if callback is not None and not callable(callback):
        raise TypeError(f"The 'callback' parameter of palm4msa must be callable or None. Got {callback!r}.")
    d = _check_fixed_left(fixed_left, K, "palm4msa")
    adaptive = _check_bool(adaptive_step, "adaptive_step", "palm4msa")
    if isinstance(init, Palm4MSAResult):
        init = init.factors
    mats, lam = _initial_factors(init, constraints, lam_init, "palm4msa")
    method = _check_method(method, "palm4msa")
    support_cg = _check_int(support_cg, "support_cg", "palm4msa", 0)
    if support_cg and not safeguard:
        raise ValueError("The 'support_cg' parameter of palm4msa needs safeguard=True (its "
                         f"refinements are kept only when the objective does not increase). "
                         f"Got support_cg={support_cg} with safeguard={safeguard!r}.")
    mats, lam, errors = _run(A64, d, constraints, mats, lam, n_iter, tol, callback, bool(safeguard),
                             adaptive=adaptive, method=method, support_cg=support_cg)
    return _result(mats, lam, errors, dtype)
