"""Stream the row blocks of a Dask array to the driver, one at a time.

For algorithms whose small state changes after every batch of rows
(mini-batch K-means): the driver holds one block (plus the next one, read
while it works on the current), never X. Each block is checked for
non-finite values as it arrives, naming the first bad row.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from .engine import block_offsets, compute
from .finite import check_block

__all__ = ["iter_blocks"]


def _read(X, i):
    block = compute(X.blocks[i])[0]
    return block.tocsr() if sp.issparse(block) else np.asarray(block)


def iter_blocks(X, order=None, *, weights=None):
    """Yield ``(offset, block, weight_block)`` for the row blocks of ``X``.

    Parameters
    ----------
    X : dask array (n_samples, n_features), chunked along rows only
    order : sequence of block indices, optional (default: in order)
    weights : dask array (n_samples,) aligned with X's row chunks, optional
        (``weight_block`` is None without it)

    The next block is read in the background while the caller works on the
    current one. Raises :class:`~dqkm.exceptions.DataError` for a block with
    NaN, infinity or values whose squares overflow.
    """
    offsets = block_offsets(X.chunks[0])
    order = list(range(X.numblocks[0])) if order is None else [int(i) for i in order]
    if not order:
        return

    def read(i):
        block = _read(X, i)
        w = None if weights is None else np.asarray(compute(weights.blocks[i])[0])
        return block, w

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(read, order[0])
        for n, i in enumerate(order):
            block, w = pending.result()
            if n + 1 < len(order):
                pending = pool.submit(read, order[n + 1])
            if block.shape[0]:
                check_block(block, int(offsets[i]))
            yield int(offsets[i]), block, w
