"""K-Multiple-Means, the small part done on the driver: M = S̃ᵀS̃, its connected
components (Algorithm 1), the block eigen-solver (Lemma 4.3, Lemma 4.5,
Algorithm 2), and the reference SVD of S̃ (eq. 8).

The chunk side produces the pieces summed over all rows: the sparse m × m
``SᵀS``, the column sums ``d[n+j] = Σ_i s_ij`` (eq. 22) and ``SᵀX``
(:func:`chunk_statistics`).  With ``D_n = I`` (rows of S sum to 1, eq. 12),

    M = S̃ᵀS̃ = D_m^{-1/2} SᵀS D_m^{-1/2}                       (eqs. 6, 15, 25)

Prototypes with no data point (``d[n+j] = 0``) have no edge in the bipartite
graph: they belong to no component, ``D_m^{-1/2}`` is taken as 0 for them (the
pseudo-inverse), and they are reported as empty.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(eqs. 6, 8, 15–18, 22, 29, 30, 40; Lemmas 4.1, 4.3, 4.5; Algorithms 1, 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import LinearOperator, eigsh, svds
from numba import njit

from ._numba_args import kernel_array

__all__ = [
    "ChunkStatistics", "Components", "EigenResult", "chunk_statistics", "merge_statistics",
    "components", "prototype_matrix", "block_eigen", "reference_svd", "ZERO_EIGENVALUE",
    "DENSE_EIGH_MAX", "SVD_ALGORITHMS",
]

#: eigenvalues (σ²) at or below this are treated as 0: their F column is zero
ZERO_EIGENVALUE = 1e-12
#: blocks up to this size are solved by LAPACK, larger ones by ARPACK (Lanczos)
DENSE_EIGH_MAX = 400


@dataclass(frozen=True)
class ChunkStatistics:
    """Sums over a set of rows, combined by :func:`merge_statistics`.

    Attributes
    ----------
    sts : scipy.sparse.csr_matrix of shape (m, m)
        ``SᵀS`` over the rows (only pairs with positive weights).
    colsum : ndarray of shape (m,)
        ``Σ_i s_ij``.
    stx : ndarray of shape (m, d)
        ``Σ_i s_ij x_i`` (float64).
    """

    sts: sp.csr_matrix
    colsum: np.ndarray
    stx: np.ndarray


@njit(cache=True, nogil=True)
def _sts_kernel(idx, w, X, m):
    """``SᵀS`` (CSR arrays, sorted columns, only products > 0), column sums and
    ``SᵀX`` of the rows of S given as ``(idx, w)`` (entries with idx < 0 or
    w <= 0 are not edges).  Gustavson's row-by-row product on Sᵀ, which is
    first built by a counting sort of the entries by column."""
    n, ell = idx.shape
    d = X.shape[1]
    colsum = np.zeros(m)
    stx = np.zeros((m, d))
    cnt = np.zeros(m + 1, np.int64)
    for i in range(n):
        for a in range(ell):
            j = idx[i, a]
            if j >= 0 and w[i, a] > 0.0:
                cnt[j + 1] += 1
    for j in range(m):
        cnt[j + 1] += cnt[j]
    t_row = np.empty(cnt[m], np.int64)
    t_val = np.empty(cnt[m])
    fill = cnt[:m].copy()
    for i in range(n):  # Sᵀ by columns of S, rows in ascending order
        for a in range(ell):
            j = idx[i, a]
            v = w[i, a]
            if j >= 0 and v > 0.0:
                t_row[fill[j]] = i
                t_val[fill[j]] = v
                fill[j] += 1
                colsum[j] += v
                for k in range(d):
                    stx[j, k] += v * X[i, k]
    indptr = np.zeros(m + 1, np.int64)
    # the output grows by doubling: at most min(m², entries·l) non-zeros, usually far fewer
    cap = max(16, min(2 * cnt[m], m * m))
    indices = np.empty(cap, np.int64)
    data = np.empty(cap)
    acc = np.zeros(m)
    mark = np.full(m, -1, np.int64)
    cols = np.empty(m, np.int64)
    nnz = 0
    for j in range(m):
        nc = 0
        for t in range(cnt[j], cnt[j + 1]):
            i = t_row[t]
            v = t_val[t]
            for a in range(ell):
                q = idx[i, a]
                u = w[i, a]
                if q >= 0 and u > 0.0:
                    if mark[q] != j:
                        mark[q] = j
                        acc[q] = 0.0
                        cols[nc] = q
                        nc += 1
                    acc[q] += v * u
        srt = np.sort(cols[:nc])
        if nnz + nc > indices.size:
            grown = max(2 * indices.size, nnz + nc)
            indices2 = np.empty(grown, np.int64)
            data2 = np.empty(grown)
            indices2[:nnz] = indices[:nnz]
            data2[:nnz] = data[:nnz]
            indices = indices2
            data = data2
        for t in range(nc):
            q = srt[t]
            if acc[q] != 0.0:
                indices[nnz] = q
                data[nnz] = acc[q]
                nnz += 1
        indptr[j + 1] = nnz
    return indptr, indices[:nnz].copy(), data[:nnz].copy(), colsum, stx


def chunk_statistics(X, indices, weights, m):
    """``SᵀS``, column sums and ``SᵀX`` of one chunk's rows of S.

    Parameters
    ----------
    X : ndarray of shape (n_rows, d)
    indices : ndarray of shape (n_rows, l), int
        Neighbour prototypes (−1 for rows outside the graph).
    weights : ndarray of shape (n_rows, l)
    m : int

    Returns
    -------
    ChunkStatistics
        ``sts`` has sorted column indices and no explicit zeros.
    """
    idx = np.ascontiguousarray(indices, dtype=np.int64)
    w = np.ascontiguousarray(weights, dtype=np.float64)
    Xa = np.asarray(X)
    if Xa.dtype not in (np.float32, np.float64):
        Xa = Xa.astype(np.float64)
    indptr, ind, data, colsum, stx = _sts_kernel(idx, w, kernel_array(Xa), int(m))
    sts = sp.csr_matrix((data, ind, indptr), shape=(m, m))
    return ChunkStatistics(sts, colsum, stx)


def merge_statistics(parts):
    """Sum a list of :class:`ChunkStatistics` (one node of the tree reduction)."""
    sts = parts[0].sts.copy()
    colsum = parts[0].colsum.copy()
    stx = parts[0].stx.copy()
    for p in parts[1:]:
        sts = sts + p.sts
        colsum += p.colsum
        stx += p.stx
    return ChunkStatistics(sts.tocsr(), colsum, stx)


@dataclass(frozen=True)
class Components:
    """Connected components of the bipartite graph, read on the prototype side.

    Attributes
    ----------
    n_components : int
        b: components that hold at least one data point.
    proto_comp : ndarray of shape (m,), int64
        Component of each prototype, numbered in the order of their lowest
        prototype index; −1 for a prototype with no data point.
    sizes : ndarray of shape (b,)
        n_k, the number of data points in component k, = Σ_{j∈k} d[n+j]
        (eq. 40), rounded to the nearest integer.
    empty : ndarray of int
        Prototypes with no data point.
    """

    n_components: int
    proto_comp: np.ndarray
    sizes: np.ndarray
    empty: np.ndarray


def components(sts, colsum):
    """b and the components (Algorithm 1, line 9) from the pattern of SᵀS.

    Two prototypes are joined when some data point has a positive weight on
    both, which is exactly connectivity in the bipartite graph of S; every
    data point has a positive weight on its nearest prototype, so each data
    point lies in the component of that prototype.
    """
    colsum = np.asarray(colsum, dtype=np.float64)
    m = colsum.shape[0]
    G = sp.csr_matrix(sts)
    G.eliminate_zeros()
    _, lab = connected_components(G, directed=False)
    nonempty = colsum > 0
    proto_comp = np.full(m, -1, np.int64)
    order = {}
    for j in np.flatnonzero(nonempty):
        k = order.setdefault(int(lab[j]), len(order))
        proto_comp[j] = k
    b = len(order)
    sizes = np.rint(np.bincount(proto_comp[nonempty], weights=colsum[nonempty], minlength=b))
    return Components(b, proto_comp, sizes, np.flatnonzero(~nonempty))


def prototype_matrix(sts, colsum):
    """M = D_m^{-1/2} SᵀS D_m^{-1/2} (eq. 25), sparse, with 0 for empty prototypes."""
    colsum = np.asarray(colsum, dtype=np.float64)
    inv = np.zeros_like(colsum)
    pos = colsum > 0
    inv[pos] = 1.0 / np.sqrt(colsum[pos])
    Dh = sp.diags(inv)
    return (Dh @ sp.csr_matrix(sts) @ Dh).tocsr()


@dataclass(frozen=True)
class EigenResult:
    """The c largest eigenpairs of M from its blocks (Algorithm 2).

    Attributes
    ----------
    values : ndarray of shape (c,)
        Descending; the b Lemma-4.3 eigenvalues (= 1) come first.
    vectors : ndarray of shape (m, c)
        Unit eigenvectors of M (eq. 18: zero outside their block).
    block : ndarray of shape (c,), int64
        Component of each eigenvector (−1 for a dummy: fewer than c positive
        eigenvalues exist; its vector and value are 0).
    is_lemma : ndarray of shape (c,), bool
        True for the b closed-form eigenpairs of Lemma 4.3.
    n_lemma : int
        Eigenpairs given in closed form by Lemma 4.3 (= b).
    n_computed : int
        Further eigenpairs computed (the paper's power-method calls).
    n_naive : int
        What the naive scheme computes by the power method: min(c, m_k)
        eigenpairs of every block k (Fig. 4's "Naive", b·c when blocks are
        large).
    """

    values: np.ndarray
    vectors: np.ndarray
    block: np.ndarray
    is_lemma: np.ndarray
    n_lemma: int
    n_computed: int
    n_naive: int


def _top_eigpair(Mk, found_vals, found_vecs, rng, cache, batch=1):
    """Largest eigenpair of ``Mk − Σ λ q qᵀ`` (the deflated block, Alg. 2 line 16).

    The paper uses the power method here; this solves the same problem to
    machine precision, so the result matches the SVD of S̃ and Theorem 4.14's
    equality does not depend on a power-method tolerance.  Blocks of at most
    ``DENSE_EIGH_MAX`` prototypes are decomposed once by LAPACK (``cache``) and
    their eigenpairs served in descending order — the eigenpairs of the
    deflated block are exactly the remaining ones.  Larger blocks are deflated
    explicitly and solved by Lanczos (ARPACK): the first request computes the
    ``batch`` largest eigenpairs of the deflated block in one run (the most the
    caller can still ask of this block), and later requests are served from
    them; a request beyond them deflates again.  One Lanczos run for several
    eigenpairs costs far less than as many deflated runs for one.
    """
    mk = Mk.shape[0]
    j = len(found_vals)  # eigenpairs of this block already known (≥ 1: Lemma 4.3)
    if mk <= DENSE_EIGH_MAX:
        if "w" not in cache:
            B = Mk.toarray() if sp.issparse(Mk) else np.array(Mk, dtype=np.float64)
            w, v = scipy.linalg.eigh(0.5 * (B + B.T))
            cache["w"], cache["v"] = w[::-1], v[:, ::-1]
        return float(cache["w"][j]), cache["v"][:, j]
    start = cache.get("start", -1)
    if 0 <= j - start < len(cache.get("w", ())):
        return float(cache["w"][j - start]), cache["v"][:, j - start]
    Q = np.array(found_vecs).T
    lam = np.array(found_vals)

    def mv(x):
        x = np.ravel(x)
        return Mk @ x - Q @ (lam * (Q.T @ x))

    op = LinearOperator((mk, mk), matvec=mv, dtype=np.float64)
    v0 = rng.standard_normal(mk)
    k = int(max(1, min(batch, mk - 2)))
    w, v = eigsh(op, k=k, which="LA", v0=v0, tol=0)
    order = np.argsort(-w, kind="stable")
    cache["start"], cache["w"], cache["v"] = j, w[order], v[:, order]
    return float(cache["w"][0]), cache["v"][:, 0]


def block_eigen(M, comps, colsum, n_clusters, rng=None):
    """The c largest eigenpairs of M by blocks (Algorithm 2).

    Each block's top eigenpair is ``λ = 1``, ``q = √d[n+j]`` normalised
    (Lemma 4.3, eq. 29).  If ``b < c`` the next eigenpairs of a block are
    computed one at a time, always in the block with the largest upper bound
    ``λ̄_{i,j} = min(λ_{i,j−1}, δ_{i,j})``, ``δ_{i,2} = tr(M′_i) − 1``,
    ``δ_{i,j} = δ_{i,j−1} − λ_{i,j−1}`` (eq. 30, Lemma 4.5), and only while
    that bound is not below the smallest of the c eigenvalues kept so far
    (which start as c dummy zeros).

    Parameters
    ----------
    M : sparse matrix of shape (m, m)
        From :func:`prototype_matrix`.
    comps : Components
    colsum : ndarray of shape (m,)
    n_clusters : int
        c.
    rng : numpy.random.Generator, optional
        Start vectors of the Lanczos solver on large blocks.

    Returns
    -------
    EigenResult
    """
    rng = np.random.default_rng(0) if rng is None else rng
    M = sp.csr_matrix(M)
    m = M.shape[0]
    c = int(n_clusters)
    b = comps.n_components
    members = [np.flatnonzero(comps.proto_comp == k) for k in range(b)]
    diag = M.diagonal()
    # E: the c largest so far, as (λ, order, block, vector on the block)
    E = [(0.0, (np.inf, i), -1, None) for i in range(c)]

    def add(lam, key, k, vec):
        pos = min(range(len(E)), key=lambda t: (E[t][0], -E[t][1][0], -E[t][1][1]))
        if lam >= E[pos][0]:
            E[pos] = (lam, key, k, vec)
            return True
        return False

    lemma = []
    for k in range(b):  # Lemma 4.3 (Algorithm 2, lines 3–10)
        q = np.sqrt(colsum[members[k]])
        q = q / np.linalg.norm(q)
        lemma.append(q)
        add(1.0, (k, 0), k, q)
    n_computed = 0
    if b < c:  # Algorithm 2, lines 11–21
        found = [([1.0], [lemma[k]]) for k in range(b)]
        size = np.array([len(mb) for mb in members])
        depth = np.ones(b, np.int64)        # eigenpairs known in block k
        last = np.ones(b)                   # λ_{k, depth}
        delta = np.array([diag[mb].sum() for mb in members]) - 1.0  # δ_{k, depth+1}
        blocks = {}
        caches = [{} for _ in range(b)]
        while True:
            bound = np.where(depth < size, np.minimum(last, delta), -np.inf)
            k = int(np.argmax(bound))
            min_e = min(e[0] for e in E)
            # Algorithm 2 line 14 computes while λ̄ ≥ min E; with λ̄ = λ_{j−1} = min E
            # that always costs one useless eigenpair, and its result could only
            # tie min E (an equally valid choice), so a bound equal to min E prunes.
            if not np.isfinite(bound[k]) or bound[k] <= min_e:
                break
            if k not in blocks:
                mk = members[k]
                blocks[k] = M[mk][:, mk]
            # a block can add at most c − b eigenpairs to the c kept (the b of
            # Lemma 4.3, λ = 1, are never displaced): its Lanczos batch
            lam, vec = _top_eigpair(blocks[k], found[k][0], found[k][1], rng, caches[k],
                                    batch=c - b)
            lam = max(lam, 0.0)
            n_computed += 1
            found[k][0].append(lam)
            found[k][1].append(vec)
            depth[k] += 1
            last[k] = lam
            delta[k] -= lam
            add(lam, (k, int(depth[k]) - 1), k, vec)
    E.sort(key=lambda e: (-e[0], e[1]))
    values = np.zeros(c)
    vectors = np.zeros((m, c))
    block = np.full(c, -1, np.int64)
    is_lemma = np.zeros(c, bool)
    for t, (lam, key, k, vec) in enumerate(E):
        if k < 0 or lam <= ZERO_EIGENVALUE:
            continue
        values[t] = lam
        vectors[members[k], t] = vec
        block[t] = k
        is_lemma[t] = key[1] == 0
    n_naive = sum(min(c, len(mb)) for mb in members)
    return EigenResult(values, vectors, block, is_lemma, b, n_computed, int(n_naive))


#: the SVD routines :func:`reference_svd` accepts
SVD_ALGORITHMS = ("auto", "dense", "arpack")


def _svd_arpack(S_tilde, c, rng):
    """Top-c singular triplets of a sparse S̃ by ARPACK, one connected block at a time.

    Lanczos from one start vector cannot be relied on to find every copy of a
    repeated singular value, and S̃ of a graph with b components has σ = 1
    b times (one per component): a single ``svds`` of the whole S̃ then misses
    some of them (seen on digits: 4 of 7).  Reordered by the connected
    components of its bipartite graph, S̃ is block diagonal, and the SVD of a
    block-diagonal matrix is the union of its blocks' SVDs, where a connected
    block's top singular value is simple.  So each block gets its own solve
    (``svds(k, tol=0)``, or LAPACK when ARPACK cannot take k < min of the
    block's sides) and the c largest triplets over all blocks are kept
    (ties: the block with the lowest prototype first, then the block's order).
    """
    S = sp.csr_matrix(S_tilde, dtype=np.float64, copy=True)
    S.eliminate_zeros()
    n, m = S.shape
    graph = sp.bmat([[None, S], [S.T, None]], format="csr")
    _, lab = connected_components(graph, directed=False)
    row_lab, col_lab = lab[:n], lab[n:]
    live_cols = np.asarray(S.getnnz(axis=0)) > 0
    blocks = []
    for k in np.unique(col_lab[live_cols]):  # np.unique sorts: lowest label first
        cols = np.flatnonzero(col_lab == k)
        blocks.append((int(cols[0]), k, cols))
    blocks.sort(key=lambda b: b[0])
    cand_s, cand_u, cand_v = [], [], []
    for _, k, cols in blocks:
        rows = np.flatnonzero(row_lab == k)
        Sk = S[rows][:, cols]
        kk = min(c, rows.size, cols.size)
        if kk >= min(rows.size, cols.size) - 1:
            Uk, sk, Vkt = scipy.linalg.svd(Sk.toarray(), full_matrices=False,
                                           lapack_driver="gesdd")
            Uk, sk, Vk = Uk[:, :kk], sk[:kk], Vkt[:kk].T
        else:
            Uk, sk, Vkt = svds(Sk, k=kk, tol=0, v0=rng.standard_normal(min(rows.size, cols.size)))
            order = np.argsort(-sk, kind="stable")
            Uk, sk, Vk = Uk[:, order], sk[order], Vkt[order].T
        for t in range(kk):
            cand_s.append(sk[t])
            cand_u.append((rows, Uk[:, t]))
            cand_v.append((cols, Vk[:, t]))
    order = np.argsort(-np.asarray(cand_s, dtype=np.float64), kind="stable")[:c]
    U = np.zeros((n, c))
    V = np.zeros((m, c))
    s = np.zeros(c)
    for t, o in enumerate(order):
        s[t] = cand_s[o]
        U[cand_u[o][0], t] = cand_u[o][1]
        V[cand_v[o][0], t] = cand_v[o][1]
    return U, s, V


def reference_svd(S_tilde, n_clusters, *, dense_max=40_000_000, rng=None, algorithm="auto"):
    """Top-c singular triplets of S̃ = D_n^{-1/2} S D_m^{-1/2} (eq. 6) — the reference.

    ``algorithm='dense'``: a dense LAPACK SVD (``gesdd``) of the whole n × m
    matrix, O(n·m²) time and 8·n·m bytes — the original K-Multiple-Means as the
    F-KMM paper measures it.  ``'arpack'``: ARPACK on the sparse S̃, one
    connected block of its bipartite graph at a time (:func:`_svd_arpack`:
    a single Lanczos run misses copies of the repeated σ = 1).  ``'auto'``:
    dense when ``n·m ≤ dense_max``, otherwise ARPACK.  Singular values with
    σ² ≤ ``ZERO_EIGENVALUE`` get zero vectors.

    Returns
    -------
    U : ndarray of shape (n, c)
    sigma : ndarray of shape (c,)
    V : ndarray of shape (m, c)
    """
    if algorithm not in SVD_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {list(SVD_ALGORITHMS)}. "
                         f"Got {algorithm!r} instead.")
    n, m = S_tilde.shape
    c = int(n_clusters)
    if algorithm == "auto":
        use_dense = n * m <= dense_max
    else:
        use_dense = algorithm == "dense"
    if use_dense:
        dense = S_tilde.toarray() if sp.issparse(S_tilde) else np.asarray(S_tilde)
        U, s, Vt = scipy.linalg.svd(dense, full_matrices=False, lapack_driver="gesdd")
        U, s, V = U[:, :c], s[:c], Vt[:c].T
    else:
        rng = np.random.default_rng(0) if rng is None else rng
        U, s, V = _svd_arpack(S_tilde, c, rng)
    zero = s ** 2 <= ZERO_EIGENVALUE
    U = np.where(zero[None, :], 0.0, U)
    V = np.where(zero[None, :], 0.0, V)
    return U, np.where(zero, 0.0, s), V
