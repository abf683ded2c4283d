"""The data layer: everything dqkm reads from or writes to disk, and how data is chunked.

Modules (imports run one way: nothing here imports estimators, the command
line, :mod:`dqkm.io` or :mod:`dqkm.parallel`; see ``tests/test_layering.py``):

* :mod:`dqkm.data.formats` — the one registry of on-disk format names and versions.
* :mod:`dqkm.data.chunks` — rows per chunk, per-chunk seeds, chunk-size checks.
* :mod:`dqkm.data.execute` — the active Dask client, the progress flag, and
  :func:`~dqkm.data.execute.compute_settled` (what the atomic writers compute with).
* :mod:`dqkm.data.atomic` — atomic, exclusive replacement of a file or directory.
* :mod:`dqkm.data.zarr_reader` — the fast local Zarr chunk reader and the store checks.
* :mod:`dqkm.data.stores` — Zarr array stores: open, load, save.
* :mod:`dqkm.data.csr` — sparse (CSR) data: checks, Zarr CSR groups.
* :mod:`dqkm.data.generators` — generated and bundled data sets.
* :mod:`dqkm.data.npz` — ``.npz`` archives without pickle (sparse-factor files).
* :mod:`dqkm.data.index_store` — the cluster index's Zarr group.
* :mod:`dqkm.data.serialize` — fitted models without pickle (``dqkm.save``/``dqkm.load``).

This package's ``__init__`` imports nothing, so that the leaf modules
:mod:`~dqkm.data.formats` and :mod:`~dqkm.data.npz`, which :mod:`dqkm.kernels`
reads, keep ``import dqkm.kernels`` free of Dask.
"""
