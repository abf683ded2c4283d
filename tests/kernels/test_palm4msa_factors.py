"""palm4MSA through the sparse factors (``method="factors"``) against the dense reference."""

import sys

import numpy as np
import pytest

import dqkm.kernels.palm4msa  # noqa: F401  (the module, for monkeypatching below)
from dqkm.kernels.hierarchical import hierarchical_palm4msa
from dqkm.kernels.palm4msa import default_constraints, palm4msa

_palm_module = sys.modules["dqkm.kernels.palm4msa"]


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float64)


def _target(kind, K, D, digits):
    rng = np.random.default_rng(K * 1000 + D)
    if kind == "random":
        return rng.standard_normal((K, D))
    # digits-derived: cluster means of digits (64 features), tiled/cut to D columns
    from sklearn.cluster import KMeans

    C = KMeans(K, n_init=1, random_state=0).fit(digits[:600]).cluster_centers_
    return np.tile(C, (1, -(-D // 64)))[:, :D] + 0.01 * rng.standard_normal((K, D))


def _same(a, b, rtol=1e-5, atol=1e-5):
    # "to rounding": the reference forms the gradient's GEMMs in float32, so the factors
    # (unit Frobenius norm) agree to ~1e-6 absolute; supports and iteration counts exactly
    assert a.n_iter == b.n_iter
    assert a.lam == pytest.approx(b.lam, rel=rtol)
    for Sa, Sb in zip(a.factors.factors, b.factors.factors):
        np.testing.assert_array_equal(Sa.toarray() != 0, Sb.toarray() != 0)
        np.testing.assert_allclose(Sa.toarray(), Sb.toarray(), rtol=0, atol=atol)
    np.testing.assert_allclose(a.errors, b.errors, rtol=rtol)


@pytest.mark.parametrize("kind", ["random", "digits"])
@pytest.mark.parametrize("shape", [(24, 80), (48, 48), (80, 24)], ids=["K<D", "K=D", "K>D"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_through_factors_equals_dense_reference(digits, kind, shape, adaptive):
    A = _target(kind, *shape, digits)
    cons = default_constraints(*shape, sparsity=3)
    kw = dict(n_iter=12, tol=0, adaptive_step=adaptive)
    _same(palm4msa(A, cons, method="factors", **kw), palm4msa(A, cons, method="dense", **kw))


@pytest.mark.parametrize("shape", [(24, 80), (80, 24)], ids=["K<D", "K>D"])
def test_through_factors_equals_dense_unguarded_and_weighted(digits, shape):
    A = _target("digits", *shape, digits)
    cons = default_constraints(*shape, sparsity=3)
    w = np.sqrt(np.random.default_rng(0).integers(0, 5, shape[0]).astype(float))  # zeros: empty
    for kw in (dict(safeguard=False), dict(fixed_left=w, adaptive_step=True)):
        kw.update(n_iter=10, tol=0)
        _same(palm4msa(A, cons, method="factors", **kw), palm4msa(A, cons, method="dense", **kw))


def test_hierarchical_through_factors_equals_dense(digits):
    A = _target("digits", 32, 64, digits)
    cons = default_constraints(32, 64, sparsity=3)
    # 2(Q - 1) runs chained: the float32 rounding of the reference compounds (~1e-4), and
    # with longer runs it can flip a near-tie of a Splincol projection, after which the
    # two paths part (10 and 15 iterations per run on an AVX-512 Zen 4 machine: 783 vs
    # 792 non-zeros); 5 per run keep them within rounding
    kw = dict(n_iter=5, adaptive_step=True)
    _same(hierarchical_palm4msa(A, cons, method="factors", **kw),
          hierarchical_palm4msa(A, cons, method="dense", **kw), rtol=1e-3, atol=1e-4)


def test_no_dense_product_of_the_sparse_chains(monkeypatch):
    """Where the factors are sparse enough (here 256 × 256, s = 2: every chain is cheaper
    than the GEMMs by the cost estimate), the through-the-factors path never multiplies
    the dense left part by a dense right part (the r×K×c GEMM) nor forms the dense
    product for the error."""
    def refuse(*args, **kwargs):
        raise AssertionError("dense product of the factor chains")

    monkeypatch.setattr(_palm_module, "_exact_error", refuse)
    monkeypatch.setattr(_palm_module._Ctx, "C32",
                        lambda self: refuse() if self.Lt.ndim == 2 else self.C64())
    A = np.random.default_rng(3).standard_normal((256, 256))
    cons = default_constraints(256, 256, sparsity=2)
    res = palm4msa(A, cons, n_iter=3, tol=0, adaptive_step=True)
    assert res.errors[-1] < res.errors[0]
    with pytest.raises(AssertionError, match="dense product"):
        palm4msa(A, cons, n_iter=1, method="dense")


@pytest.mark.parametrize("adaptive", [False, True])
def test_objective_non_increasing_with_few_power_iterations(digits, adaptive):
    # the safeguarded updates estimate ‖L‖₂², ‖R‖₂² with a few power iterations (an
    # underestimate is possible); backtracking keeps every iteration a descent
    A = _target("digits", 80, 24, digits)
    res = palm4msa(A, default_constraints(80, 24, sparsity=3), n_iter=60, tol=0,
                   adaptive_step=adaptive)
    assert np.all(np.diff(res.errors) <= 1e-9 * res.errors[0])
    assert res.errors[-1] < 0.7 * res.errors[0]


def test_bad_method():
    with pytest.raises(ValueError, match=r"'method' parameter of palm4msa must be one of "
                                         r"\['factors', 'dense'\]. Got 'gpu'"):
        palm4msa(np.ones((4, 4)), method="gpu")
    with pytest.raises(ValueError, match="'method' parameter of hierarchical_palm4msa"):
        hierarchical_palm4msa(np.ones((4, 4)), method=None)
    with pytest.raises(ValueError, match="'split_tol' parameter of hierarchical_palm4msa must "
                                         "be a float >= 0. Got -1"):
        hierarchical_palm4msa(np.ones((4, 4)), split_tol=-1)


def test_left_chain_gradient_kernel_equals_the_dense_formula(monkeypatch):
    """The tiled kernel computes ``λ·Lᵀ(λ·diag(d)·M·X − Ttᵀ)`` with ``M`` a chain of
    rectangular sparse factors (its transposes applied on the way back), and the
    tiled one-factor products ``X·Sᵀ``, ``X·S`` equal the dense ones."""
    from dqkm.kernels import _palm_chains
    from dqkm.kernels._factor_apply import _Factor

    monkeypatch.setattr(_palm_chains, "_GRAD_DTYPE", np.float64)  # exact to rounding

    rng = np.random.default_rng(7)
    shapes = [(40, 24), (24, 56), (56, 24)]  # K = 40, the chain maps 24 columns to 40 rows
    facs = []
    for r, c in shapes:
        M = rng.standard_normal((r, c)) * (rng.random((r, c)) < 0.15)
        facs.append(_Factor(M))
    X = rng.standard_normal((24, 70))  # more columns than one tile
    Tt = rng.standard_normal((70, 40))
    d = rng.random(40) + 0.5
    ch = _palm_chains._Chains(facs)
    fwd = np.array([2, 1, 0])
    got = ch.gradient(fwd, 3 + fwd[::-1], X, Tt, d, 0.7)
    L = d[:, None] * (facs[0].dense @ facs[1].dense @ facs[2].dense)
    want = 0.7 * L.T @ (0.7 * L @ X - Tt.T)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    Y = rng.standard_normal((33, 24))
    np.testing.assert_allclose(facs[1].times(Y), Y @ facs[1].dense, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(facs[0].times_t(Y), Y @ facs[0].dense.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(24, 80), (48, 48), (80, 24)], ids=["K<D", "K=D", "K>D"])
def test_tiled_kernels_equal_dense_reference(digits, shape, monkeypatch):
    """The tiled gradient kernel and the tiled Gram products (used from 128 × 128
    operands on) give the reference's iterates on small targets too, forced on here."""
    from dqkm.kernels import _palm_terms

    monkeypatch.setattr(_palm_terms, "_TILED_ABOVE", 0)
    cons = default_constraints(*shape, sparsity=3)
    for kind in ("random", "digits"):
        A = _target(kind, *shape, digits)
        kw = dict(n_iter=12, tol=0, adaptive_step=True)
        _same(palm4msa(A, cons, method="factors", **kw), palm4msa(A, cons, method="dense", **kw))


@pytest.mark.parametrize("shape,s", [((30, 50), 3), ((50, 30), 2), ((40, 40), 5)])
def test_fused_splincol_step_equals_the_projection_of_the_dense_step(shape, s):
    """``splincol_step`` keeps exactly ``Splincol._mask(|S − G/cm|)`` (ties included:
    integer-valued steps and all-zero rows and columns) and its values are the dense
    projection's to rounding; ``support_step`` restricts the step to ``S``'s support."""
    import scipy.sparse as sp

    from dqkm.kernels._palm_chains import splincol_step, support_step
    from dqkm.kernels.projections import Splincol

    rng = np.random.default_rng(sum(shape) + s)
    S = np.where(rng.random(shape) < 0.1, rng.standard_normal(shape), 0.0)
    for G in (rng.standard_normal(shape), rng.integers(-2, 3, shape).astype(float)):
        G[3] = 0.0
        G[:, 5] = 0.0
        cm = 1.7
        D = S - G / cm
        cons = Splincol(shape, s)
        mask = cons._mask(np.abs(D))
        want = np.where(mask, D, 0.0)
        want /= np.linalg.norm(want)
        out = np.zeros(shape)
        ip, ix, dv = splincol_step(S, G, cm, s, out)
        np.testing.assert_array_equal(out != 0, want != 0)
        np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-15)
        np.testing.assert_array_equal(sp.csr_matrix((dv, ix, ip), shape=shape).toarray(), out)
        Scsr = sp.csr_matrix(S)
        out2 = np.zeros(shape)
        ip2, ix2, dv2 = support_step(S, G, cm, Scsr.indptr.astype(np.int64),
                                     Scsr.indices.astype(np.int64), out2)
        want2 = np.where(S != 0, D, 0.0)
        np.testing.assert_allclose(out2, want2 / np.linalg.norm(want2), rtol=1e-13, atol=1e-15)
        np.testing.assert_array_equal(sp.csr_matrix((dv2, ix2, ip2), shape=shape).toarray(), out2)


def test_gather_products_equal_dense():
    from dqkm.kernels._factor_apply import _Factor
    from dqkm.kernels._palm_chains import fmul, ftmul

    rng = np.random.default_rng(11)
    M = rng.standard_normal((37, 53)) * (rng.random((37, 53)) < 0.1)
    f = _Factor(M)
    assert f.csr is not None
    X, Y = rng.standard_normal((53, 70)), rng.standard_normal((37, 3))
    np.testing.assert_allclose(fmul(f, X), M @ X, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ftmul(f, Y), M.T @ Y, rtol=1e-12, atol=1e-12)


def test_through_factors_equals_dense_reference_above_the_tiling_threshold():
    """At 160 × 160 (Q = 8, s = 3) the tiled chain gradient, the fused Splincol step and
    the Gram fold formed by the objective are all on: same iterates as the reference."""
    A = np.random.default_rng(160).standard_normal((160, 160))
    cons = default_constraints(160, 160, sparsity=3)
    start = palm4msa(A, cons, n_iter=2, adaptive_step=True, method="dense")
    kw = dict(n_iter=4, tol=0, adaptive_step=True, init=start)
    res = palm4msa(A, cons, method="factors", **kw)
    _same(res, palm4msa(A, cons, method="dense", **kw))
    assert np.all(np.diff(res.errors) <= 1e-9 * res.errors[0])  # the safeguard: monotone


@pytest.mark.parametrize("shape", [(37, 53), (70, 24), (150, 150)])
def test_sandwich_equals_the_dense_gram_product(shape):
    """``fsandwich`` forms ``S·G·Sᵀ`` (or ``Sᵀ·G·S``) of a CSR factor and a symmetric
    ``G`` and ``⟨W, S·G·Sᵀ⟩`` through the factor's CSR arrays (empty rows included;
    150 rows: more than one tile), the same as the dense products."""
    from dqkm.kernels._factor_apply import _Factor
    from dqkm.kernels._palm_chains import fsandwich

    rng = np.random.default_rng(sum(shape))
    M = rng.standard_normal(shape) * (rng.random(shape) < 0.1)
    M[2] = 0.0
    f = _Factor(M)
    assert f.csr is not None
    for transposed, n in ((False, shape[1]), (True, shape[0])):
        G = rng.standard_normal((n, n))
        G = G + G.T
        want = M.T @ G @ M if transposed else M @ G @ M.T
        W = rng.standard_normal(want.shape)
        W = W + W.T
        got, dot = fsandwich(f, G, W, transposed=transposed)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
        assert dot == pytest.approx(float(np.vdot(W, want)), rel=1e-12)
        got2, zero = fsandwich(f, G, transposed=transposed)
        np.testing.assert_array_equal(got2, got)
        assert zero == 0.0
