"""How arrays are handed to the numba kernels.

numba compiles one machine-code version per argument type, and a read-only
array (a block of a read-only memory map, a NumPy view of an immutable buffer)
is a type of its own: the first read-only input would compile every kernel it
reaches once more (tens of seconds for K-Multiple-Means's search). Kernels
receive C-contiguous writable arrays instead; a read-only one is copied
(the kernels never write to their inputs, so the copy changes no result).
"""

from __future__ import annotations

import numpy as np

__all__ = ["kernel_array"]


def kernel_array(a, dtype=None):
    """``a`` as a C-contiguous, writable array (copied only when it is not already).

    Parameters
    ----------
    a : array_like
    dtype : dtype, optional
        Converted to it when given.

    Returns
    -------
    ndarray

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(4.0)
    >>> x.flags.writeable = False
    >>> y = kernel_array(x)
    >>> bool(y.flags.writeable), bool(np.shares_memory(x, y))
    (True, False)
    >>> z = np.arange(4.0)
    >>> kernel_array(z) is z
    True
    """
    out = np.ascontiguousarray(a, dtype=dtype)
    return out if out.flags.writeable else out.copy()
