"""Persistence of :class:`~dqkm.kernels.SparseFactors`: plain arrays and ``.npz`` files.

The functions below are ``SparseFactors``'s methods ``to_arrays``, ``save`` and
its class methods ``from_arrays``, ``load`` (bound in the class body); the file
format (a JSON header with a format name and version, then each factor's CSR
arrays) is defined here.
"""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp

from ..data.formats import SPARSE_FACTORS_FORMAT_NAME as FORMAT_NAME
from ..data.formats import SPARSE_FACTORS_FORMAT_VERSION as FORMAT_VERSION
from ..data.npz import read_arrays, write_arrays


def to_arrays(self):
    """The operator as plain arrays: ``header`` (JSON as uint8 bytes, with the
    format version, λ, dtype and shapes) and each factor's CSR arrays.

    Fits in any array container (``.npz``, a Zarr group); see :meth:`from_arrays`.

    Returns
    -------
    dict of str to ndarray
        ``header`` and ``factor{q}_data``, ``factor{q}_indices``,
        ``factor{q}_indptr`` for every factor ``q`` (0-based).

    Examples
    --------
    >>> from dqkm.kernels import SparseFactors
    >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
    >>> sorted(V.to_arrays())[:3]
    ['factor0_data', 'factor0_indices', 'factor0_indptr']
    """
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "lam": self._lam,
              "dtype": self._dtype.name, "n_factors": self.n_factors,
              "shapes": [list(S.shape) for S in self._factors]}
    arrays = {"header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)}
    for q, S in enumerate(self._factors):
        arrays[f"factor{q}_data"] = S.data
        arrays[f"factor{q}_indices"] = S.indices
        arrays[f"factor{q}_indptr"] = S.indptr
    return arrays

def from_arrays(cls, arrays, source="arrays"):
    """Rebuild an operator from :meth:`to_arrays`' output (checked: format, version).

    Parameters
    ----------
    arrays : mapping of str to array-like
        What :meth:`to_arrays` returned (or an ``NpzFile``, a Zarr group).
    source : str, default="arrays"
        Named in the ``ValueError`` raised for a wrong format or version.

    Returns
    -------
    SparseFactors
        The operator the arrays describe.

    Examples
    --------
    >>> from dqkm.kernels import SparseFactors
    >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
    >>> SparseFactors.from_arrays(V.to_arrays()).allclose(V)
    True
    """
    try:
        raw = np.asarray(arrays["header"])
        text = bytes(raw).decode() if raw.dtype == np.uint8 else str(raw[()])
        header = json.loads(text)
    except (KeyError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{source!r} is not a SparseFactors file (no valid JSON "
                         f"header).") from e
    if header.get("format") != FORMAT_NAME:
        raise ValueError(f"{source!r} is not a SparseFactors file: format is "
                         f"{header.get('format')!r}, expected {FORMAT_NAME!r}.")
    if header.get("version") != FORMAT_VERSION:
        raise ValueError(f"{source!r} has SparseFactors format version "
                         f"{header.get('version')!r}; this dqkm reads version "
                         f"{FORMAT_VERSION}.")
    mats = [sp.csr_matrix((np.asarray(arrays[f"factor{q}_data"]),
                           np.asarray(arrays[f"factor{q}_indices"]),
                           np.asarray(arrays[f"factor{q}_indptr"])), shape=tuple(shape))
            for q, shape in enumerate(header["shapes"])]
    return cls(mats, lam=float(header["lam"]))

def save(self, path):
    """Write ``.npz`` arrays (no pickle) with a JSON header carrying a format version.

    Parameters
    ----------
    path : str, path-like or binary file object
        A filename (used as given, no suffix added) or a binary file.

    Returns
    -------
    None

    Examples
    --------
    >>> import io
    >>> from dqkm.kernels import SparseFactors
    >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
    >>> buffer = io.BytesIO()
    >>> V.save(buffer)
    >>> _ = buffer.seek(0)
    >>> SparseFactors.load(buffer).allclose(V)
    True
    """
    write_arrays(path, self.to_arrays())

def load(cls, path):
    """Read a file written by :meth:`save` (``allow_pickle=False``).

    Parameters
    ----------
    path : str, path-like or binary file object
        What :meth:`save` wrote.

    Returns
    -------
    SparseFactors
        The saved operator (``ValueError`` naming ``path`` otherwise).

    Examples
    --------
    >>> import io
    >>> from dqkm.kernels import SparseFactors
    >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
    >>> buffer = io.BytesIO()
    >>> V.save(buffer)
    >>> _ = buffer.seek(0)
    >>> SparseFactors.load(buffer)
    SparseFactors(shape=(2, 3), n_factors=2, nnz=5, dtype=float64, lam=2.0)
    """
    return cls.from_arrays(read_arrays(path), source=path)
