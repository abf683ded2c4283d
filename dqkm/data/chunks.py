"""How data is cut into row chunks, and the seed of every chunk.

Plain arithmetic on shapes and seeds (no graph is built here):

* :func:`auto_row_chunks` / :func:`auto_sparse_rows` — rows per chunk for
  dense and sparse data (about 64 MB per chunk).
* :func:`row_chunks` — the row chunk sizes asked for (int, tuple or None).
* :func:`root_entropy` — the root of a generator's ``SeedSequence``; chunk
  ``i`` draws from ``SeedSequence(root, spawn_key=(i,))``.
* :func:`check_known_chunks` — refuse a Dask array whose chunk sizes are unknown.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..exceptions import DataError, InvalidParameterError
from .execute import cpu_count

__all__ = ["SMALL_RECHUNK_BYTES", "TARGET_CHUNK_BYTES", "auto_row_chunks", "auto_sparse_rows",
           "check_known_chunks", "check_positive_int", "describe_row_chunks", "root_entropy",
           "row_chunks"]

# A feature-chunked array at most this large is rechunked silently; larger ones
# are rejected with the rechunk call to run (rechunking moves the whole array).
SMALL_RECHUNK_BYTES = 256 * 2**20
TARGET_CHUNK_BYTES = 64 * 2**20


def auto_row_chunks(n_samples: int, n_features: int, itemsize: int = 4) -> int:
    """Rows per chunk: about 64 MB per chunk, and at least 2 chunks per core when
    the data is large enough that splitting pays (≥ 4096 rows per chunk)."""
    rows = max(1, TARGET_CHUNK_BYTES // max(1, n_features * itemsize))
    per_core = math.ceil(n_samples / (2 * cpu_count()))
    if per_core >= 4096:
        rows = min(rows, per_core)
    return int(max(1, min(rows, n_samples)))


def auto_sparse_rows(n_samples, nnz, itemsize):
    """Rows per CSR chunk: about 64 MB of non-zeros per chunk; ≥ 4 chunks when each
    keeps ≥ 4096 rows."""
    per_row = max(1.0, nnz / max(1, n_samples)) * (itemsize + 4)
    rows = int(TARGET_CHUNK_BYTES // per_row)
    quarter = math.ceil(n_samples / 4)
    if quarter >= 4096:
        rows = min(rows, quarter)
    return int(max(1, min(rows, n_samples)))


def check_positive_int(name, value, low=1):
    """``value`` as an int, or a ``ValueError`` naming the parameter ``name``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise InvalidParameterError(f"The {name!r} parameter must be an int >= {low}. Got "
                                    f"{value!r} instead.")
    return int(value)


def root_entropy(random_state):
    """The root entropy of a generator: ``random_state`` itself, or fresh entropy for None."""
    if random_state is None:
        return np.random.SeedSequence().entropy
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) \
            and random_state >= 0:
        return int(random_state)
    raise InvalidParameterError(f"The 'random_state' parameter must be a non-negative int or "
                                f"None. Got {random_state!r} instead.")


def row_chunks(n, chunks, n_features, itemsize):
    """Row chunk sizes for ``n`` rows: ``chunks`` rows each (int), the sizes given
    (tuple, summing to ``n``), or :func:`auto_row_chunks` (None)."""
    if chunks is None:
        chunks = auto_row_chunks(n, n_features, itemsize)
    if isinstance(chunks, numbers.Integral):
        c = check_positive_int("chunks", chunks)
        return tuple([c] * (n // c) + ([n % c] if n % c else []))
    chunks = tuple(int(c) for c in chunks)
    if sum(chunks) != n:
        raise InvalidParameterError(f"The 'chunks' parameter must sum to n_samples={n}. "
                                    f"Got {chunks}.")
    return chunks


def check_known_chunks(X, name="X"):
    """Raise :class:`~dqkm.exceptions.DataError` if a chunk size of ``X`` is unknown.

    Dask does not know the chunk sizes of an array after boolean masking
    (``X[X[:, 0] > 0]``) or from ``ddf.values``; every dqkm pass needs them
    (to lay out its blocks and results), so such input is refused up front
    with the call that computes them.
    """
    for axis, sizes in enumerate(X.chunks):
        if any(math.isnan(s) for s in sizes):
            what = "rows" if axis == 0 else "features"
            raise DataError(
                f"{name} has unknown chunk sizes along axis {axis} ({what}; shape "
                f"{X.shape}), as after boolean masking or DataFrame.values; dqkm needs them "
                f"to plan its passes. Compute them once: {name} = "
                f"{name}.compute_chunk_sizes() (from a Dask DataFrame, use "
                "ddf.to_dask_array(lengths=True)).")
    return X


def describe_row_chunks(sizes):
    """``'6 row chunks of 500'`` or ``'3 row chunks (500, 500, 200)'`` (shortened)."""
    sizes = [int(x) for x in sizes]
    n = f"{len(sizes)} row chunk{'s' if len(sizes) != 1 else ''}"
    if sizes and len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0]:
        tail = "" if sizes[-1] == sizes[0] else f", the last {sizes[-1]}"
        return f"{n} of {sizes[0]}{tail}"
    shown = ", ".join(map(str, sizes[:6])) + (", ..." if len(sizes) > 6 else "")
    return f"{n} ({shown})"
