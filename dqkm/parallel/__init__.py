"""Dask graphs: blockwise passes, tree reductions, broadcast state, iteration drivers."""

from ._config import register_defaults
from .engine import (DEFAULT_SPLIT_EVERY, active_client, broadcast, compute, map_blocks_reduce,
                     progress, sum_partials, tree_reduce)
from .persist import maybe_persist

__all__ = ["DEFAULT_SPLIT_EVERY", "active_client", "broadcast", "compute", "map_blocks_reduce",
           "maybe_persist", "progress", "sum_partials", "tree_reduce"]

register_defaults()  # dqkm's dask config keys (dqkm/dqkm.yaml)
