"""Row tiles of bounded bytes: how a chunk kernel keeps its temporaries small.

A chunk task that makes float64 copies, projections or per-row scratch of its
whole chunk needs several times the chunk's memory; processing the chunk in
consecutive row tiles bounds those temporaries by one tile's, whatever the
chunk size.  The kernels that tile take the bytes one row needs and call
:func:`row_tiles`.
"""

from __future__ import annotations

__all__ = ["TILE_BYTES", "row_tiles"]

#: Default bytes of temporaries one row tile may hold.
TILE_BYTES = 8 * 2**20


def row_tiles(n_rows, row_bytes, tile_bytes=None):
    """``(start, stop)`` of consecutive row tiles of at most ``tile_bytes`` bytes.

    Parameters
    ----------
    n_rows : int
    row_bytes : int
        Bytes of temporaries one row needs.
    tile_bytes : int, optional
        Default :data:`TILE_BYTES`.  A tile has at least one row.

    Returns
    -------
    list of (int, int)
        Covering ``range(n_rows)`` in order; empty when ``n_rows`` is 0.
    """
    tile_bytes = TILE_BYTES if tile_bytes is None else int(tile_bytes)
    step = max(1, tile_bytes // max(1, int(row_bytes)))
    return [(lo, min(lo + step, n_rows)) for lo in range(0, n_rows, step)]
