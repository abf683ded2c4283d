"""Docstring pieces the estimators share, and :func:`fill_doc`, which puts them in.

A docstring names a piece of :data:`PIECES` on a line of its own, in braces
(``{X_infer}`` under ``Parameters``, ``{labels}`` under ``Returns``), indented
as the text around it.  :func:`fill_doc` replaces each such line with the
piece, every line of it indented as the placeholder was, so the rendered
docstring is plain numpydoc.  Only whole-line placeholders are replaced:
braces elsewhere (a dict in an example) are left alone, and a placeholder
that names no piece is an error at import, not a hole in the rendered page.

Examples
--------
>>> @fill_doc
... def predict(X):
...     '''Cluster of each sample.
...
...     Parameters
...     ----------
...     {X_infer}
...     '''
>>> print(predict.__doc__.splitlines()[4].strip())
X : array-like, Dask array, Zarr array or store path of shape (n_samples, n_features)
"""

from __future__ import annotations

import re

__all__ = ["PIECES", "fill_doc"]

_X_SHAPE = "Zarr array or store path of shape (n_samples, n_features)"
_X_OUTPUT = """
    NumPy in gives NumPy out; Dask in gives a lazy Dask array aligned with
    X's row chunks."""

#: name -> text of the piece (numpydoc: a name line unindented, its text by 4)
PIECES = {
    # X of predict, transform and fit_predict
    "X_infer": f"X : array-like, Dask array, {_X_SHAPE}{_X_OUTPUT}",
    "X_infer_sparse": f"X : array-like, scipy.sparse, Dask array, {_X_SHAPE}{_X_OUTPUT}",
    # X and y of fit (dense input)
    "X_fit": "X : array-like, Dask array or Zarr array of shape (n_samples, n_features)\n"
             "y : ignored",
    # what predict and fit_predict return
    "labels": """labels : ndarray or Dask array of shape (n_samples,), int
    Index of the cluster of each sample.""",
    # the start of the method examples: a small fitted model of each estimator
    "fitted_kmeans": """>>> import numpy as np, dqkm
>>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
>>> km = dqkm.KMeans(n_clusters=2, random_state=0).fit(X)""",
    "fitted_qkmeans": """>>> import numpy as np, dqkm
>>> X = np.repeat(np.eye(4) * 10, 10, axis=0)  # four groups of 10 equal rows
>>> qk = dqkm.QKMeans(4, sparsity=2, palm_iter_init=10, palm_iter=2, random_state=0).fit(X)""",
    "fitted_mbqkmeans": """>>> import numpy as np, dqkm
>>> X = np.repeat(np.eye(4) * 10, 10, axis=0)  # four groups of 10 equal rows
>>> # sparse centroids (one-hot): no offset row, which would make the rest dense
>>> mb = dqkm.MiniBatchQKMeans(4, sparsity=2, batch_size=10, max_iter=2, offset=False,
...                            palm_iter_init=10, palm_iter=2, random_state=0).fit(X)""",
    "fitted_sekmeans": """>>> import numpy as np, dqkm
>>> rng = np.random.default_rng(0)
>>> X = np.vstack([rng.normal(0, 1, (20, 50)), rng.normal(6, 1, (20, 50))])
>>> se = dqkm.SparseEmbeddedKMeans(2, n_components=8, random_state=0).fit(X)""",
    "fitted_kmm": """>>> import dqkm
>>> from sklearn.datasets import make_moons
>>> X, _ = make_moons(100, noise=0.05, random_state=0)
>>> kmm = dqkm.KMultipleMeans(2, n_prototypes=10, random_state=0).fit(X)""",
    # the arguments of score after X
    "score_y_weights": """y : ignored
sample_weight : array-like or Dask array of shape (n_samples,), optional
    Non-negative weight of every row (checked as in ``fit``); None weighs
    every row 1.""",
}

_PLACEHOLDER = re.compile(r"^([ \t]*)\{(\w+)\}[ \t]*$", re.MULTILINE)


def _indent(match):
    indent, name = match.groups()
    if name not in PIECES:
        raise KeyError(f"docstring placeholder {{{name}}} names no piece of "
                       f"dqkm._docstrings.PIECES ({', '.join(sorted(PIECES))}); add it there "
                       f"or fix the name.")
    return "\n".join(indent + line if line else line for line in PIECES[name].split("\n"))


def fill_doc(obj):
    """Replace the whole-line ``{name}`` placeholders of ``obj``'s docstring.

    Parameters
    ----------
    obj : function or class
        Its ``__doc__`` is rewritten in place (left alone when None, as under
        ``python -OO``).

    Returns
    -------
    function or class
        ``obj`` itself, so that it serves as a decorator.

    Raises
    ------
    KeyError
        A placeholder names no entry of :data:`PIECES`.

    Examples
    --------
    >>> @fill_doc
    ... def labels():
    ...     '''Returns
    ...     -------
    ...     {labels}
    ...     '''
    >>> "Index of the cluster of each sample." in labels.__doc__
    True
    """
    if obj.__doc__:
        obj.__doc__ = _PLACEHOLDER.sub(_indent, obj.__doc__)
    return obj
