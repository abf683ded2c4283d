"""Generated and bundled data sets, as Dask arrays.

Generators build every chunk on the workers from its own seed, derived from
one ``numpy.random.SeedSequence(random_state)`` by the chunk's index, so the
whole array is never in one memory and a chunk is the same whoever computes it.
"""

from __future__ import annotations

import numbers

import dask.array as da
import numpy as np

from .kernels.tiles import row_tiles
from .parallel.data import auto_row_chunks
from .sparse import make_sparse_blobs

__all__ = ["make_blobs", "make_sparse_blobs", "make_moons", "make_circles", "load_digits",
           "load_breast_cancer", "load_wine", "load_iris"]


def _check_positive_int(name, value, low=1):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"The {name!r} parameter must be an int >= {low}. Got {value!r} instead.")
    return int(value)


def _root_entropy(random_state):
    if random_state is None:
        return np.random.SeedSequence().entropy
    if isinstance(random_state, numbers.Integral) and random_state >= 0:
        return int(random_state)
    raise ValueError(f"The 'random_state' parameter must be a non-negative int or None. "
                     f"Got {random_state!r} instead.")


def _row_chunks(n, chunks, n_features, itemsize):
    if chunks is None:
        chunks = auto_row_chunks(n, n_features, itemsize)
    if isinstance(chunks, numbers.Integral):
        c = _check_positive_int("chunks", chunks)
        return tuple([c] * (n // c) + ([n % c] if n % c else []))
    chunks = tuple(int(c) for c in chunks)
    if sum(chunks) != n:
        raise ValueError(f"The 'chunks' parameter must sum to n_samples={n}. Got {chunks}.")
    return chunks


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
    """
    n_samples = _check_positive_int("n_samples", n_samples)
    n_features = _check_positive_int("n_features", n_features)
    entropy = _root_entropy(random_state)
    if isinstance(centers, numbers.Integral):
        k = _check_positive_int("centers", centers)
        crng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(2**32,)))
        centers = crng.uniform(center_box[0], center_box[1], size=(k, n_features))
    centers = np.asarray(centers, dtype=np.float64)
    if centers.ndim != 2 or centers.shape[1] != n_features:
        raise ValueError(f"The 'centers' parameter must be an int or an array of shape "
                         f"(n_centers, {n_features}). Got shape {centers.shape}.")
    std = np.broadcast_to(np.asarray(cluster_std, dtype=np.float64), (centers.shape[0],)).copy()
    dtype = np.dtype(dtype)
    sizes = _row_chunks(n_samples, chunks, n_features, dtype.itemsize)
    kw = dict(sizes=sizes, centers=centers, cluster_std=std, entropy=entropy, out_dtype=dtype)
    X = da.map_blocks(_blobs_chunk, chunks=(sizes, (n_features,)), dtype=dtype,
                      meta=np.empty((0, 0), dtype), which="X", **kw)
    y = da.map_blocks(_blobs_chunk, chunks=(sizes,), dtype=np.int32,
                      meta=np.empty((0,), np.int32), which="y", **kw)
    if path is not None:
        from .io import load_array, save_arrays

        save_arrays({"X": X, "y": y}, path, overwrite=overwrite, compressors=compressors,
                    attrs={"generator": "dqkm.datasets.make_blobs", "random_state": entropy,
                           "n_centers": int(centers.shape[0])})
        X, y = load_array(path, "X"), load_array(path, "y")
    return (X, y, centers) if return_centers else (X, y)


def _sk_chunk(block_id, *, sizes, entropy, which, kind, noise, factor, out_dtype):
    from sklearn import datasets as skd

    i = block_id[0]
    seed = np.random.SeedSequence(entropy, spawn_key=(i,)).generate_state(1)[0]
    if kind == "moons":
        X, y = skd.make_moons(sizes[i], noise=noise, random_state=int(seed))
    else:
        X, y = skd.make_circles(sizes[i], noise=noise, factor=factor, random_state=int(seed))
    return X.astype(out_dtype) if which == "X" else y.astype(np.int32)


def _sk_generated(kind, n_samples, noise, factor, chunks, random_state, dtype):
    n_samples = _check_positive_int("n_samples", n_samples, low=2)
    entropy = _root_entropy(random_state)
    sizes = _row_chunks(n_samples, chunks if chunks is not None else n_samples, 2, 8)
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
    """Two interleaving half circles (scikit-learn's generator, run per chunk)."""
    return _sk_generated("moons", n_samples, noise, None, chunks, random_state, dtype)


def make_circles(n_samples=2000, *, noise=None, factor=0.8, chunks=None, random_state=None,
                 dtype=np.float64):
    """A large circle containing a smaller one (scikit-learn's generator, run per chunk)."""
    return _sk_generated("circles", n_samples, noise, factor, chunks, random_state, dtype)


def _bundled(loader, chunks):
    data = loader()
    X = np.asarray(data.data, dtype=np.float64)
    c = chunks if chunks is not None else X.shape[0]
    return (da.from_array(X, chunks=(c, -1)),
            da.from_array(np.asarray(data.target, dtype=np.int32), chunks=(c,)))


def load_digits(*, chunks=None):
    """scikit-learn's bundled 8×8 digits: X (1797 × 64, float64), y."""
    from sklearn.datasets import load_digits as f

    return _bundled(f, chunks)


def load_breast_cancer(*, chunks=None):
    """scikit-learn's bundled breast cancer data: X (569 × 30), y."""
    from sklearn.datasets import load_breast_cancer as f

    return _bundled(f, chunks)


def load_wine(*, chunks=None):
    """scikit-learn's bundled wine data: X (178 × 13), y."""
    from sklearn.datasets import load_wine as f

    return _bundled(f, chunks)


def load_iris(*, chunks=None):
    """scikit-learn's bundled iris data: X (150 × 4), y."""
    from sklearn.datasets import load_iris as f

    return _bundled(f, chunks)
