"""Generated and bundled data sets, as Dask arrays (public facade).

Generators build every chunk on the workers from its own seed, derived from
one ``numpy.random.SeedSequence(random_state)`` by the chunk's index, so the
whole array is never in one memory and a chunk is the same whoever computes it.
The code lives in :mod:`dqkm.data.generators`; this module only re-exports it.

Examples
--------
>>> from dqkm import datasets
>>> X, y = datasets.make_blobs(1000, 4, 3, random_state=0)
>>> X.shape, y.shape
((1000, 4), (1000,))
"""

from .data.generators import (load_breast_cancer, load_digits, load_iris, load_wine,
                              make_blobs, make_circles, make_moons, make_sparse_blobs)

__all__ = ["make_blobs", "make_sparse_blobs", "make_moons", "make_circles", "load_digits",
           "load_breast_cancer", "load_wine", "load_iris"]
