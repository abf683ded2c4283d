"""The errors dqkm raises for a user's mistake or a damaged file.

Every error that means "your input, parameter, file or path is not usable" is
a :class:`DqkmError`; it also subclasses the builtin exception a caller
would expect (``ValueError``, ``TypeError``, ``OSError``), as scikit-learn's
``InvalidParameterError`` subclasses both ``ValueError`` and ``TypeError``.
The ``dqkm`` command prints a ``DqkmError`` as one line and exits with
status 2; any other exception is a bug in dqkm and shows its traceback.

This module imports nothing from dqkm, so every layer may use it.
"""

from __future__ import annotations

__all__ = ["DqkmError", "InvalidParameterError", "DataError", "StoreError", "CheckpointError",
           "ModelFileError", "WorkersPausedError"]


class DqkmError(Exception):
    """Base class of the errors dqkm raises for user input, files and paths."""


class InvalidParameterError(DqkmError, ValueError, TypeError):
    """A parameter of an estimator or function has the wrong type or value.

    Both a ``ValueError`` and a ``TypeError`` (as scikit-learn's
    ``InvalidParameterError``), so a wrong type and a wrong value are one
    error wherever they are made (see ``dqkm._validation``)."""


class DataError(DqkmError, ValueError):
    """X cannot be clustered as given (non-finite values, values whose squares
    overflow, unknown chunk sizes, ...)."""


class StoreError(DqkmError, OSError):
    """A Zarr store or file is missing, unreadable or damaged, or a path is
    refused because dqkm would overwrite or delete what it did not write."""


class CheckpointError(StoreError):
    """A checkpoint cannot be used: not dqkm's, damaged, locked by another fit,
    or at a path dqkm refuses to write to."""


class ModelFileError(DqkmError, ValueError):
    """A saved model file is damaged, of another format, or does not match
    what its estimator declares."""


class WorkersPausedError(DqkmError, MemoryError):
    """Every worker of the Dask cluster stayed paused (its process memory above
    distributed's pause threshold), so a computation could not go on."""
