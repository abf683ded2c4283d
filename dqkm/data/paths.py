"""Store locations as a graph may carry them: fsspec URLs as they are, local paths
absolute (a worker started in another directory then reads the same files)."""

from __future__ import annotations

import os

__all__ = ["is_url", "local_path"]


def is_url(path) -> bool:
    """True for an fsspec URL (``s3://...``), false for a local path."""
    return isinstance(path, str) and "://" in path


def local_path(path) -> str:
    """A local path as an absolute one (what a graph may carry to workers started
    elsewhere); a URL as it is."""
    return str(path) if is_url(path) else os.path.abspath(os.fspath(path))
