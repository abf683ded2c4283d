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
    """Base class of the errors dqkm raises for user input, files and paths.

    Examples
    --------
    One ``except`` clause catches every such error (the ``dqkm`` command
    prints them as one line):

    >>> import numpy as np, dqkm
    >>> from dqkm.exceptions import DqkmError
    >>> try:
    ...     dqkm.KMeans(n_clusters=0).fit(np.zeros((4, 2)))
    ... except DqkmError as e:
    ...     print(type(e).__name__)
    InvalidParameterError
    """


class InvalidParameterError(DqkmError, ValueError, TypeError):
    """A parameter of an estimator or function has the wrong type or value.

    Both a ``ValueError`` and a ``TypeError`` (as scikit-learn's
    ``InvalidParameterError``), so a wrong type and a wrong value are one
    error wherever they are made (see ``dqkm._validation``).

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> dqkm.KMeans(n_clusters=0).fit(np.zeros((4, 2)))
    Traceback (most recent call last):
    ...
    dqkm.exceptions.InvalidParameterError: The 'n_clusters' parameter of KMeans must be ...
    """


class DataError(DqkmError, ValueError):
    """X cannot be clustered as given (non-finite values, values whose squares
    overflow, unknown chunk sizes, ...), or its sample weights are not usable.

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> dqkm.KMeans(2).fit(np.eye(3), sample_weight=[1.0, -1.0, 1.0])
    Traceback (most recent call last):
    ...
    dqkm.exceptions.DataError: KMeans: sample_weight must be non-negative; got negative values ...
    """


class StoreError(DqkmError, OSError):
    """A Zarr store or file is missing, unreadable or damaged, or a path is
    refused because dqkm would overwrite or delete what it did not write.

    Examples
    --------
    ``overwrite=True`` replaces only what dqkm wrote, not a folder of notes:

    >>> import os, tempfile
    >>> import numpy as np, dqkm
    >>> with tempfile.TemporaryDirectory() as d:
    ...     open(os.path.join(d, "notes.txt"), "w").close()
    ...     dqkm.io.save_array(np.eye(2), d, overwrite=True)
    Traceback (most recent call last):
    ...
    dqkm.exceptions.StoreError: overwrite=True would replace '...', a directory that is not ...
    """


class CheckpointError(StoreError):
    """A checkpoint cannot be used: not dqkm's, damaged, locked by another fit,
    or at a path dqkm refuses to write to.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np, dqkm
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = os.path.join(d, "notes.txt")
    ...     open(path, "w").close()
    ...     dqkm.KMeans(2).fit(np.eye(3), checkpoint=path)
    Traceback (most recent call last):
    ...
    dqkm.exceptions.CheckpointError: checkpoint '...notes.txt' is a file, not a directory; ...
    """


class ModelFileError(DqkmError, ValueError):
    """A saved model file is damaged, of another format, or does not match
    what its estimator declares.

    Examples
    --------
    A data store is not a model:

    >>> import os, tempfile
    >>> import numpy as np, dqkm
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = dqkm.io.save_array(np.eye(2), os.path.join(d, "X.zarr"))
    ...     dqkm.load(os.path.join(d, "X.zarr"))
    Traceback (most recent call last):
    ...
    dqkm.exceptions.ModelFileError: '...X.zarr' is a Zarr store but not a dqkm model ...
    """


class WorkersPausedError(DqkmError, MemoryError):
    """Every worker of the Dask cluster stayed paused (its process memory above
    distributed's pause threshold), so a computation could not go on.

    Raised by every wait on a cluster once all its workers stayed paused for
    the ``dqkm.paused-timeout`` Dask config value (seconds).

    Examples
    --------
    A ``MemoryError`` as well, so a caller that handles running out of memory
    handles it:

    >>> from dqkm.exceptions import DqkmError, WorkersPausedError
    >>> issubclass(WorkersPausedError, MemoryError), issubclass(WorkersPausedError, DqkmError)
    (True, True)
    """
