"""JSON values for checkpoints: see :mod:`dqkm.data.jsonvalues` (re-exported here)."""

from .data.jsonvalues import json_default

__all__ = ["json_default"]
