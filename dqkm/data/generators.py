"""Generated and bundled data sets, as Dask arrays (dense, and sparse CSR blobs).

Generators build every chunk on the workers from its own seed, derived from
one ``numpy.random.SeedSequence(random_state)`` by the chunk's index, so the
whole array is never in one memory and a chunk is the same whoever computes it.
"""

from __future__ import annotations

import numbers

import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn import datasets as skd

from ..exceptions import InvalidParameterError
from ..kernels.tiles import row_tiles
from .chunks import auto_sparse_rows, check_positive_int, root_entropy, row_chunks
from .csr import csr_meta, load_csr, save_csr
from .stores import load_array, save_arrays

__all__ = ["make_blobs", "make_sparse_blobs", "make_moons", "make_circles", "load_digits",
           "load_breast_cancer", "load_wine", "load_iris"]


def _blobs_chunk(block_id, *, sizes, centers, cluster_std, entropy, out_dtype, which):
    """Chunk ``i``: its labels, then its rows ``center + std · N(0, 1)``, written into
    the output tile by tile (float64 temporaries of one row tile, not of the chunk).

    The normal draws of consecutive tiles continue one stream, so the chunk
    does not depend on the tile size.
    """
    i = block_id[0]
    rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(i,)))
    n = sizes[i]
    labels = rng.integers(0, centers.shape[0], size=n)
    if which == "y":
        return labels.astype(np.int32)
    d = centers.shape[1]
    out = np.empty((n, d), dtype=out_dtype)
    for lo, hi in row_tiles(n, 3 * 8 * d):  # noise, gathered centers, their sum
        lab = labels[lo:hi]
        noise = rng.standard_normal((hi - lo, d), dtype=np.float64)
        noise *= cluster_std[lab, None]
        noise += centers[lab]
        out[lo:hi] = noise
    return out


def make_blobs(n_samples=100_000, n_features=2, centers=8, *, cluster_std=1.0,
               center_box=(-10.0, 10.0), chunks=None, random_state=None, dtype=np.float32,
               path=None, overwrite=False, return_centers=False, compressors=None):
    """Isotropic Gaussian blobs, generated chunk by chunk on the workers.

    Parameters
    ----------
    n_samples, n_features : int
    centers : int or ndarray of shape (n_centers, n_features)
        Number of centers (drawn uniformly in ``center_box``) or the centers.
    cluster_std : float or array of shape (n_centers,)
    chunks : int or tuple of ints, optional
        Rows per chunk (default ~64 MB chunks).
    random_state : int or None
        Root of the ``SeedSequence``; chunk ``i`` uses child ``(i,)``.
    dtype : float32 (default) or float64
    path : str, optional
        If given, X and y are written to a Zarr v3 group there (arrays ``X``,
        ``y``) and the returned arrays read from it.
    compressors : None (default), "auto" or Zarr compressors
        For ``path``: Gaussian blobs barely compress (zstd saves ~8 %) while
        decompressing costs ~4× the read, so they are stored uncompressed by
        default; "auto" is Zarr's default (zstd).

    Returns
    -------
    X : dask array of shape (n_samples, n_features)
    y : dask array of shape (n_samples,), int32
    centers : ndarray of shape (n_centers, n_features), only if ``return_centers``

    Examples
    --------
    >>> from dqkm.datasets import make_blobs
    >>> X, y = make_blobs(1000, 4, centers=3, chunks=250, random_state=0)
    >>> X.shape, X.dtype, X.numblocks
    ((1000, 4), dtype('float32'), (4, 1))
    >>> sorted(set(y.compute().tolist()))
    [0, 1, 2]
    """
    n_samples = check_positive_int("n_samples", n_samples)
    n_features = check_positive_int("n_features", n_features)
    entropy = root_entropy(random_state)
    if isinstance(centers, numbers.Integral):
        k = check_positive_int("centers", centers)
        crng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(2**32,)))
        centers = crng.uniform(center_box[0], center_box[1], size=(k, n_features))
    centers = np.asarray(centers, dtype=np.float64)
    if centers.ndim != 2 or centers.shape[1] != n_features:
        raise InvalidParameterError(f"The 'centers' parameter must be an int or an array of shape "
                         f"(n_centers, {n_features}). Got shape {centers.shape}.")
    std = np.broadcast_to(np.asarray(cluster_std, dtype=np.float64), (centers.shape[0],)).copy()
    dtype = np.dtype(dtype)
    sizes = row_chunks(n_samples, chunks, n_features, dtype.itemsize)
    kw = dict(sizes=sizes, centers=centers, cluster_std=std, entropy=entropy, out_dtype=dtype)
    X = da.map_blocks(_blobs_chunk, chunks=(sizes, (n_features,)), dtype=dtype,
                      meta=np.empty((0, 0), dtype), which="X", **kw)
    y = da.map_blocks(_blobs_chunk, chunks=(sizes,), dtype=np.int32,
                      meta=np.empty((0,), np.int32), which="y", **kw)
    if path is not None:
        save_arrays({"X": X, "y": y}, path, overwrite=overwrite, compressors=compressors,
                    attrs={"generator": "dqkm.datasets.make_blobs", "random_state": entropy,
                           "n_centers": int(centers.shape[0])})
        X, y = load_array(path, "X"), load_array(path, "y")
    return (X, y, centers) if return_centers else (X, y)


# ----------------------------------------------------------------------------- sparse
def _check_int(name, value, low):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise InvalidParameterError(f"The {name!r} parameter of make_sparse_blobs must be an int in the "
                         f"range [{low}, inf). Got {value!r} instead.")
    return int(value)


def _check_real(name, value, low, high, low_open=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or value > high or value < low or (low_open and value == low):
        lb = "(" if low_open else "["
        raise InvalidParameterError(f"The {name!r} parameter of make_sparse_blobs must be a float in the "
                         f"range {lb}{low}, {high}]. Got {value!r} instead.")
    return float(value)


def _sparse_blobs_chunk(block_id, *, sizes, vocab, vocab_p, n_features, nnz_per_row, signal,
                        entropy, out_dtype, which):
    """Chunk ``i`` from its own seed: labels, then the non-zeros of every row.

    Each row draws ``1 + Poisson(nnz_per_row − 1)`` term positions: with
    probability ``signal`` from its cluster's vocabulary (Zipf weights), else
    uniformly from all features; the term weights are ``1 + Exp(1)``
    (repeated terms add up), and the row is scaled to unit ℓ2 norm, as a
    tf-idf vectoriser does.
    """
    i = block_id[0]
    rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(i,)))
    n = sizes[i]
    k = vocab.shape[0]
    labels = rng.integers(0, k, size=n)
    if which == "y":
        return labels.astype(np.int32)
    m = np.minimum(1 + rng.poisson(max(nnz_per_row - 1.0, 0.0), size=n), n_features)
    rows = np.repeat(np.arange(n), m)
    total = rows.shape[0]
    from_topic = rng.random(total) < signal
    cols = rng.integers(0, n_features, size=total)
    row_label = labels[rows]
    for c in range(k):
        sel = np.flatnonzero(from_topic & (row_label == c))
        if sel.size:
            cols[sel] = vocab[c][rng.choice(vocab.shape[1], size=sel.size, p=vocab_p)]
    vals = 1.0 + rng.exponential(1.0, size=total)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, n_features))
    X.sum_duplicates()
    norms = np.sqrt(np.add.reduceat(X.data**2, X.indptr[:-1])) if X.nnz else np.ones(0)
    X.data /= np.repeat(norms, np.diff(X.indptr))
    return X.astype(out_dtype)


def make_sparse_blobs(n_samples=100_000, n_features=10_000, density=0.001, centers=8, *,
                      signal=0.5, vocabulary_size=None, chunks=None, random_state=None,
                      dtype=np.float32, path=None, overwrite=False):
    """tf-idf-like sparse clustered data, generated chunk by chunk (CSR chunks).

    Every cluster c has a vocabulary of ``vocabulary_size`` features drawn
    without replacement, with Zipf weights ``∝ 1/(rank + 1)``.  A row of
    cluster c has about ``density × n_features`` non-zeros (1 + Poisson):
    each term comes from c's vocabulary with probability ``signal``,
    otherwise uniformly from all features; weights are ``1 + Exp(1)``, and
    rows have unit ℓ2 norm.

    Chunk ``i`` is built from ``SeedSequence(random_state, spawn_key=(i,))``
    alone (the vocabularies from ``spawn_key=(2**32,)``), so the array is
    never in one memory and a chunk is the same whoever computes it.

    Parameters
    ----------
    n_samples, n_features : int
    density : float in (0, 1]
        Expected fraction of non-zeros per row (before repeated terms merge).
    centers : int
        Number of clusters.
    signal : float in [0, 1], default=0.5
        Fraction of a row's terms drawn from its cluster's vocabulary.
    vocabulary_size : int, optional
        Default: ``min(n_features, max(50, 10 × density × n_features))``.
    chunks : int or tuple of ints, optional
        Rows per chunk (default about 64 MB of non-zeros, ≥ 4 chunks when large).
    random_state : int or None
    dtype : float32 (default) or float64
    path : str, optional
        If given, X is written there as a Zarr CSR group (:func:`save_csr`)
        and the returned X reads from it; y stays lazy (from the generator).
    overwrite : bool, default=False
        Replace an existing store at ``path`` (as in :func:`save_csr`).

    Returns
    -------
    X : dask array of shape (n_samples, n_features), CSR chunks
    y : dask array of shape (n_samples,), int32

    Examples
    --------
    >>> from dqkm.sparse import make_sparse_blobs
    >>> X, y = make_sparse_blobs(1000, 500, density=0.02, centers=3, random_state=0)
    >>> X.blocks[0].compute().format
    'csr'
    """
    n_samples = _check_int("n_samples", n_samples, 1)
    n_features = _check_int("n_features", n_features, 1)
    k = _check_int("centers", centers, 1)
    density = _check_real("density", density, 0.0, 1.0, low_open=True)
    signal = _check_real("signal", signal, 0.0, 1.0)
    nnz_per_row = max(1.0, density * n_features)
    if vocabulary_size is None:
        vocabulary_size = int(min(n_features, max(50, 10 * nnz_per_row)))
    vocabulary_size = _check_int("vocabulary_size", vocabulary_size, 1)
    if vocabulary_size > n_features:
        raise InvalidParameterError(f"The 'vocabulary_size' parameter of make_sparse_blobs must be an int "
                         f"in the range [1, n_features={n_features}]. Got {vocabulary_size} "
                         "instead.")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise InvalidParameterError(f"The 'dtype' parameter of make_sparse_blobs must be float32 or "
                         f"float64. Got {dtype} instead.")
    entropy = root_entropy(random_state)
    vrng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(2**32,)))
    vocab = np.stack([vrng.choice(n_features, size=vocabulary_size, replace=False)
                      for _ in range(k)])
    p = 1.0 / np.arange(1, vocabulary_size + 1)
    p /= p.sum()
    if chunks is None:
        chunks = auto_sparse_rows(n_samples, int(n_samples * nnz_per_row), dtype.itemsize)
    sizes = row_chunks(n_samples, chunks, n_features, dtype.itemsize)
    kw = dict(sizes=sizes, vocab=vocab, vocab_p=p, n_features=n_features,
              nnz_per_row=nnz_per_row, signal=signal, entropy=entropy, out_dtype=dtype)
    X = da.map_blocks(_sparse_blobs_chunk, chunks=(sizes, (n_features,)), dtype=dtype,
                      meta=csr_meta(dtype), which="X", **kw)
    y = da.map_blocks(_sparse_blobs_chunk, chunks=(sizes,), dtype=np.int32,
                      meta=np.empty((0,), np.int32), which="y", **kw)
    if path is not None:
        save_csr(X, path, overwrite=overwrite,
                 attrs={"generator": "dqkm.sparse.make_sparse_blobs", "random_state": entropy,
                        "n_centers": k})
        X = load_csr(path)
    return X, y


def _sk_chunk(block_id, *, sizes, entropy, which, kind, noise, factor, out_dtype):
    i = block_id[0]
    seed = np.random.SeedSequence(entropy, spawn_key=(i,)).generate_state(1)[0]
    if kind == "moons":
        X, y = skd.make_moons(sizes[i], noise=noise, random_state=int(seed))
    else:
        X, y = skd.make_circles(sizes[i], noise=noise, factor=factor, random_state=int(seed))
    return X.astype(out_dtype) if which == "X" else y.astype(np.int32)


def _sk_generated(kind, n_samples, noise, factor, chunks, random_state, dtype):
    n_samples = check_positive_int("n_samples", n_samples, low=2)
    entropy = root_entropy(random_state)
    sizes = row_chunks(n_samples, chunks if chunks is not None else n_samples, 2, 8)
    if min(sizes) < 2:
        raise ValueError(f"Every chunk of {kind} needs at least 2 rows; got chunks {sizes}.")
    kw = dict(sizes=sizes, entropy=entropy, kind=kind, noise=noise, factor=factor,
              out_dtype=np.dtype(dtype))
    X = da.map_blocks(_sk_chunk, chunks=(sizes, (2,)), dtype=dtype,
                      meta=np.empty((0, 0), dtype), which="X", **kw)
    y = da.map_blocks(_sk_chunk, chunks=(sizes,), dtype=np.int32,
                      meta=np.empty((0,), np.int32), which="y", **kw)
    return X, y


def make_moons(n_samples=2000, *, noise=None, chunks=None, random_state=None, dtype=np.float64):
    """Two interleaving half circles (scikit-learn's generator, run per chunk).

    Parameters
    ----------
    n_samples : int
        Number of points.
    noise : float or None
        Standard deviation of the Gaussian noise added to the points.
    chunks : int, optional
        Rows per chunk (default: one chunk).
    random_state : int or None
        Root of the ``SeedSequence``; every chunk draws from its own child.
    dtype : float64 (default) or float32

    Returns
    -------
    X : dask array of shape (n_samples, 2)
    y : dask array of shape (n_samples,), int32

    Examples
    --------
    >>> from dqkm.datasets import make_moons
    >>> X, y = make_moons(200, noise=0.05, random_state=0)
    >>> X.shape, int(y.sum().compute())
    ((200, 2), 100)
    """
    return _sk_generated("moons", n_samples, noise, None, chunks, random_state, dtype)


def make_circles(n_samples=2000, *, noise=None, factor=0.8, chunks=None, random_state=None,
                 dtype=np.float64):
    """A large circle containing a smaller one (scikit-learn's generator, run per chunk).

    Parameters
    ----------
    n_samples : int
        Number of points.
    noise : float or None
        Standard deviation of the Gaussian noise added to the points.
    factor : float, default=0.8
        Scale of the inner circle against the outer one.
    chunks : int, optional
        Rows per chunk (default: one chunk).
    random_state : int or None
        Root of the ``SeedSequence``; every chunk draws from its own child.
    dtype : float64 (default) or float32

    Returns
    -------
    X : dask array of shape (n_samples, 2)
    y : dask array of shape (n_samples,), int32

    Examples
    --------
    >>> from dqkm.datasets import make_circles
    >>> X, y = make_circles(200, noise=0.05, random_state=0)
    >>> X.shape, int(y.sum().compute())
    ((200, 2), 100)
    """
    return _sk_generated("circles", n_samples, noise, factor, chunks, random_state, dtype)


def _bundled(loader, chunks):
    data = loader()
    X = np.asarray(data.data, dtype=np.float64)
    c = chunks if chunks is not None else X.shape[0]
    return (da.from_array(X, chunks=(c, -1)),
            da.from_array(np.asarray(data.target, dtype=np.int32), chunks=(c,)))


def load_digits(*, chunks=None):
    """scikit-learn's bundled 8×8 digits: X (1797 × 64, float64), y.

    Parameters
    ----------
    chunks : int, optional
        Rows per chunk (default: one chunk).

    Returns
    -------
    X : dask array of shape (1797, 64), float64
    y : dask array of shape (1797,), int32

    Examples
    --------
    >>> from dqkm.datasets import load_digits
    >>> X, y = load_digits(chunks=100)
    >>> X.shape
    (1797, 64)
    """
    return _bundled(skd.load_digits, chunks)


def load_breast_cancer(*, chunks=None):
    """scikit-learn's bundled breast cancer data: X (569 × 30), y.

    Parameters
    ----------
    chunks : int, optional
        Rows per chunk (default: one chunk).

    Returns
    -------
    X : dask array of shape (569, 30), float64
    y : dask array of shape (569,), int32

    Examples
    --------
    >>> from dqkm.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(chunks=100)
    >>> X.shape
    (569, 30)
    """
    return _bundled(skd.load_breast_cancer, chunks)


def load_wine(*, chunks=None):
    """scikit-learn's bundled wine data: X (178 × 13), y.

    Parameters
    ----------
    chunks : int, optional
        Rows per chunk (default: one chunk).

    Returns
    -------
    X : dask array of shape (178, 13), float64
    y : dask array of shape (178,), int32

    Examples
    --------
    >>> from dqkm.datasets import load_wine
    >>> X, y = load_wine(chunks=100)
    >>> X.shape
    (178, 13)
    """
    return _bundled(skd.load_wine, chunks)


def load_iris(*, chunks=None):
    """scikit-learn's bundled iris data: X (150 × 4), y.

    Parameters
    ----------
    chunks : int, optional
        Rows per chunk (default: one chunk).

    Returns
    -------
    X : dask array of shape (150, 4), float64
    y : dask array of shape (150,), int32

    Examples
    --------
    >>> from dqkm.datasets import load_iris
    >>> X, y = load_iris(chunks=100)
    >>> X.shape
    (150, 4)
    """
    return _bundled(skd.load_iris, chunks)
