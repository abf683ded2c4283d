"""The terms of one palm4MSA factor update (private to ``palm4msa``).

For factor ``S`` (r × c) with left part ``L`` and right part ``R`` (see the notes of
:mod:`.palm4msa`): the context of the update (:class:`_Ctx`: ``Lᵀ``, ``A Rᵀ`` and the
Grams ``GL``, ``GR``), the half gradient ``λ² GL·S·GR − λ C`` (:func:`_gradient`)
and the objective ``‖A‖² − 2λ⟨C, S⟩ + λ²⟨GL S, S GR⟩`` (:func:`_objective`), each
through the factor chains or with the cached dense parts as the cost estimate says.
The solver state ``st`` is :class:`.palm4msa._State`.
"""

from __future__ import annotations

import numpy as np

from ._factor_apply import _support_dot, transpose
from ._palm_chains import _Chains, fsandwich

# a flop of a float32 GEMM against a flop of a CSR row-add kernel (float64): the cost
# estimate that picks the through-the-factors product or the cached dense one
_GEMM_GAIN = 8.0
_TILED_ABOVE = 128 * 128  # operand size from which _tiled products are used


class _Ctx:
    """What one factor update needs: ``Lᵀ`` (r × K), ``(A Rᵀ)ᵀ`` (c × K), GL, GR.

    ``C = Lᵀ A Rᵀ`` is formed in float32 for the gradient only (one r×K×c
    GEMM at twice the float64 speed); the objective's ``⟨C, S⟩`` is computed
    exactly in float64 on the support of ``S`` (nnz·K flops), or from a
    float64 ``C`` when ``S`` is dense or ``L`` is the diagonal ``F0``.
    """

    __slots__ = ("Lt", "Rt", "GL", "GR", "_C64", "q")

    def __init__(self, Lt, Rt, GL, GR, q=0):
        self.Lt, self.Rt, self.GL, self.GR = Lt, Rt, GL, GR
        self._C64 = None
        self.q = q

    def C64(self):
        if self._C64 is None:
            if self.Lt.ndim == 1:
                self._C64 = self.Lt[:, None] * self.Rt.T
            else:
                self._C64 = self.Lt @ self.Rt.T
        return self._C64

    def C32(self):
        if self.Lt.ndim == 1:
            return self.C64()
        return self.Lt.astype(np.float32) @ self.Rt.astype(np.float32).T

    def lin(self, fac):
        if fac.csr is None or self.Lt.ndim == 1:
            return float(np.vdot(self.C64(), fac.dense))
        return float(_support_dot(*fac.csr, self.Lt, self.Rt))


def _left_apply(st, q, X):
    """``L X`` with ``L = diag(d)·S1···S_{q-1}`` (the current left factors), X dense."""
    for j in range(q - 1, -1, -1):
        X = st.mul(st.facs[j], X)
    return st.d[:, None] * X


def _left_tapply(st, q, Y):
    """``Lᵀ Y`` through the left factors, Y dense (K × p)."""
    Y = st.d[:, None] * Y
    for j in range(q):
        Y = st.tmul(st.facs[j], Y)
    return Y


def _tiled(st, X):
    """Whether the through path forms a product with a transposed operand by the tiled
    kernels (large operands: no transposed copy) rather than copy-then-multiply (small
    ones, where the kernels' set-up costs more than the copy)."""
    return st.through and X.size >= _TILED_ABOVE


def _left_cheaper(st, q, fac, p):
    """Whether ``L·X`` (X of shape r_q × p) through the factors costs less than the
    products with the cached dense ``Lᵀ`` / ``GL`` (the cost estimate of the
    ``method="factors"`` path; a GEMM flop counts ``1/_GEMM_GAIN``)."""
    r, K = fac.dense.shape[0], st.A.shape[0]
    chain = 2.0 * p * sum(f.cost for f in st.facs[:q]) + K * p
    gemm = (r * r * p + r * K * p) / _GEMM_GAIN
    return chain < gemm


def _last_through_cheaper(st, q, fac):
    """For the last factor S (r × D): whether ``L·S`` through the factors costs less
    than the products ``S·Aᵀ`` and ``S·Sᵀ`` of :func:`_objective`."""
    r, D = fac.dense.shape
    K = st.A.shape[0]
    chain = 2.0 * D * sum(f.cost for f in st.facs[:q]) + 3.0 * K * D
    direct = fac.cost * (K + r) / (1.0 if fac.csr is not None else _GEMM_GAIN)
    return chain < direct


def _gradient(st, q, fac, SGR, ctx):
    """``½∇f(S) = λ² GL·S·GR − λ C``: through the factors (``λ Lᵀ(λ L·S·GR − A Rᵀ)``)
    when the cost estimate says so, else with the cached ``GL`` and ``Lᵀ``."""
    lam, GL = st.lam, ctx.GL
    if GL.ndim == 1:
        return lam * lam * (GL[:, None] * SGR) - lam * ctx.C32()
    if st.through and _left_cheaper(st, q, fac, 2 * SGR.shape[1]):
        if not _tiled(st, SGR):  # small: the plain products, no kernel set-up
            Y = lam * _left_apply(st, q, SGR) - (st.A if ctx.GR is None else ctx.Rt.T)
            return lam * _left_tapply(st, q, Y)
        if st.chains is None:  # the left factors are the old ones for the whole sweep
            st.chains = _Chains(st.facs[:q])
        fwd = np.arange(q - 1, -1, -1)
        return st.chains.gradient(fwd, st.chains.n + fwd[::-1], SGR, ctx.Rt, st.d, lam)
    return lam * lam * (GL.astype(np.float32) @ SGR.astype(np.float32)) - lam * ctx.C32()


def _objective(st, ctx, fac):
    """f(S) = ‖A‖² − 2λ⟨C,S⟩ + λ²⟨GL S, S GR⟩, with ⟨C,S⟩ and ⟨GL S, S GR⟩.

    Also returns what the fold into the next right part needs: ``S·GR``, or
    for the last factor (``GR`` = identity) the pair ``(S Aᵀ, S Sᵀ)``, which
    then give both terms: ``⟨C,S⟩ = ⟨Lᵀ, S Aᵀ⟩`` and ``⟨GL S, S⟩ = ⟨GL, S Sᵀ⟩``.
    """
    S = fac.dense
    if ctx.GR is None and st.through and _last_through_cheaper(st, ctx.q, fac):
        # ⟨C,S⟩ = ⟨A, L S⟩ and ⟨GL S, S⟩ = ‖L S‖²: L S through the left factors
        LS = _left_apply(st, ctx.q, S)
        lin, quad = float(np.vdot(st.A, LS)), float(np.vdot(LS, LS))
        return st.normA2 - 2.0 * st.lam * lin + st.lam**2 * quad, lin, quad, None
    if ctx.GR is None:
        SAt = st.mul(fac, ctx.Rt)
        SSt = fac.times_t(S) if _tiled(st, S) else st.mul(fac, np.ascontiguousarray(S.T))
        if ctx.Lt.ndim == 1:
            lin = float(np.dot(ctx.Lt, np.diagonal(SAt)))
        else:
            lin = float(np.vdot(ctx.Lt, SAt))
        if ctx.GL.ndim == 1:
            quad = float(np.dot(ctx.GL, np.diagonal(SSt)))
        else:
            quad = float(np.vdot(ctx.GL, SSt))
        extra = (SAt, SSt)
    elif st.through and fac.csr is not None and ctx.GL.ndim == 2:
        # ⟨GL S, S GR⟩ = ⟨GL, S GR Sᵀ⟩: one fused kernel; S GR Sᵀ is the next GR
        G2, quad = fsandwich(fac, ctx.GR, ctx.GL)
        lin = ctx.lin(fac)
        return st.normA2 - 2.0 * st.lam * lin + st.lam**2 * quad, lin, quad, (None, G2)
    else:
        SGR = st.mul(fac, ctx.GR)
        lin = ctx.lin(fac)
        if ctx.GL.ndim == 1:
            quad = float(np.vdot(ctx.GL[:, None] * S, SGR))
        elif st.through:  # ⟨GL S, S GR⟩ = ⟨GL, S GR Sᵀ⟩: the next GR, kept for the fold
            G2 = st.mul(fac, transpose(SGR) if _tiled(st, SGR) else np.ascontiguousarray(SGR.T))
            quad = float(np.vdot(ctx.GL, G2))
            return st.normA2 - 2.0 * st.lam * lin + st.lam**2 * quad, lin, quad, (SGR, G2)
        else:
            quad = float(np.vdot(st.tmul(fac, ctx.GL).T, SGR))
        extra = SGR
    return st.normA2 - 2.0 * st.lam * lin + st.lam**2 * quad, lin, quad, extra
