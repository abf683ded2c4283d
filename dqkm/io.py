"""Zarr v3 storage for data, labels and fitted models (the public facade).

* :func:`as_dask_array` — NumPy, Dask, a Zarr array, or a Zarr store path/URL
  → a 2-D float Dask array chunked along rows only.
* :func:`save_array` / :func:`save_arrays` — chunk-aligned Zarr v3 stores
  (with ``dimension_names``, so ``xarray.open_zarr`` opens a group), written
  under a temporary name and renamed into place, so a failed write never
  leaves a partial store under the target name.
* :func:`load_array` — a Zarr store, or a Parquet, CSV, HDF5 or NetCDF file
  (format told by the suffix, or ``format=``), as a lazy Dask array.
* :func:`save` / :func:`load` — fitted models without pickle (Zarr group or
  ``.npz`` + JSON, with a format version).

The code lives in the data layer (:mod:`dqkm.data.stores`, :mod:`dqkm.data.inputs`,
:mod:`dqkm.data.serialize`) and :mod:`dqkm.parallel.data`; this module only
re-exports it.

Examples
--------
>>> import os, tempfile
>>> import numpy as np
>>> from dqkm import io
>>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
>>> _ = io.save_array(np.arange(8.0).reshape(4, 2), path)
>>> io.load_array(path).compute().tolist()
[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
"""

from .data.serialize import _NESTED, _OPERATOR  # noqa: F401 - the markers dqkm.cli reads
from .data.serialize import (MODEL_FORMAT_VERSION, load, model_info, pack_model, pack_operator,
                             save, unpack_model, unpack_operator)
from .data.inputs import load_array
from .data.stores import check_writable, open_store, save_array, save_arrays
from .parallel.data import as_dask_array

__all__ = ["as_dask_array", "save_array", "save_arrays", "load_array", "open_store", "save",
           "load", "MODEL_FORMAT_VERSION", "check_writable", "model_info", "pack_model",
           "unpack_model", "pack_operator", "unpack_operator"]
