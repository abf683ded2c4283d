"""Every input a Dask user has, as a lazy array chunked along rows.

* :func:`is_lazy_input` — whether an input stays out of core: a Dask array, a
  Zarr array, a Dask DataFrame, a Dask-backed xarray object, or a file path.
* :func:`lazy_input` — such an input as ``(array, feature_names)``: a Dask
  (or Zarr) array and the column names it had (or None), reading nothing but
  the row counts of a Dask DataFrame (``to_dask_array(lengths=True)``, one
  pass over its partitions).
* :func:`in_memory_input` — an in-memory xarray ``Dataset`` as a pandas
  DataFrame (its variables as named columns); anything else unchanged.
* :func:`load_array` — a file as a lazy Dask array, its format told by the
  suffix or named: Zarr, Parquet and CSV (through ``dask.dataframe``),
  HDF5 (through ``h5py``) and NetCDF (HDF5-based through ``h5py``,
  classic through ``xarray``).

Format readers are imported only when used, so each stays an optional extra
(``pip install dqkm[dataframe]``, ``dqkm[hdf5]``, ``dqkm[netcdf]``).
"""

from __future__ import annotations

import os
from pathlib import Path

import dask.array as da
import numpy as np

from ..exceptions import DataError, InvalidParameterError, StoreError
from .chunks import auto_row_chunks
from .paths import is_url, local_path
from .stores import load_array as load_zarr

__all__ = ["FORMATS", "input_format", "is_lazy_input", "lazy_input", "in_memory_input",
           "load_array", "open_input"]

#: The formats :func:`load_array` reads and the suffixes that name them.
FORMATS = {
    "zarr": (".zarr", ".zarr.zip"),
    "parquet": (".parquet", ".pq", ".parq"),
    "csv": (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".csv.bz2", ".csv.zst"),
    "hdf5": (".h5", ".hdf5", ".hdf", ".he5"),
    "netcdf": (".nc", ".nc4", ".netcdf", ".cdf"),
}

_EXTRA = {"parquet": ("dask.dataframe", "dataframe"), "csv": ("dask.dataframe", "dataframe"),
          "hdf5": ("h5py", "hdf5"), "netcdf": ("xarray", "netcdf")}
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


# ----------------------------------------------------------------------------- kinds
def _module(X) -> str:
    return type(X).__module__ or ""


def is_dask_frame(X) -> bool:
    """A Dask DataFrame or Series (``dask.dataframe``, also its expression classes)."""
    return _module(X).startswith("dask") and hasattr(X, "npartitions") \
        and hasattr(X, "to_dask_array")


def is_xarray(X) -> bool:
    """An xarray DataArray or Dataset."""
    return _module(X).startswith("xarray") and hasattr(X, "dims")


def _xarray_is_dask(X) -> bool:
    if hasattr(X, "data_vars"):
        return any(isinstance(v.data, da.Array) for v in X.data_vars.values())
    return isinstance(X.data, da.Array)


def is_lazy_input(X) -> bool:
    """True for inputs that stay out of core.

    Dask arrays, Zarr arrays, Dask DataFrames and Series, Dask-backed xarray
    DataArrays and Datasets, and paths (``str`` or ``PathLike``: a file or
    store that :func:`load_array` reads).  NumPy, pandas and NumPy-backed
    xarray objects are in memory.
    """
    if isinstance(X, (da.Array, str, os.PathLike)):
        return True
    if _module(X).startswith("zarr") or is_dask_frame(X):
        return True
    return is_xarray(X) and _xarray_is_dask(X)


# ----------------------------------------------------------------------------- frames
def _column_names(columns):
    """Column names as scikit-learn keeps them: all strings, else None."""
    names = [c for c in columns]
    return np.asarray(names, dtype=object) if names and all(isinstance(c, str)
                                                           for c in names) else None


def _numeric_frame(df, name):
    """Refuse non-numeric columns (naming them and the call that drops them);
    pandas' nullable numeric columns become float64 (a missing value is NaN)."""
    import pandas as pd

    bad, nullable = [], []
    for col, dtype in df.dtypes.items():
        if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
            continue
        if pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
            nullable.append(col)
        else:
            bad.append((col, str(dtype)))
    if bad:
        shown = ", ".join(f"{c!r} ({t})" for c, t in bad[:5]) + (" …" if len(bad) > 5 else "")
        raise DataError(
            f"{name} must hold numeric columns only; got {len(bad)} other column(s): {shown}. "
            f"Select the numeric ones: {name} = {name}.select_dtypes('number') (or encode "
            "the others as numbers first).")
    if nullable:
        df = df.astype({c: "float64" for c in nullable})
    return df


def frame_to_array(df, name="X"):
    """A Dask DataFrame as ``(dask array, column names or None)``.

    Its row counts are computed by ``to_dask_array(lengths=True)``: one pass
    over the partitions, returning only their lengths.  A Series is refused
    (as scikit-learn refuses a pandas Series for X) with the call to use.
    """
    if df.ndim == 1:
        raise DataError(f"{name} is a Dask Series, but X must be 2-D (n_samples, n_features); "
                        f"pass a one-column DataFrame: {name}.to_frame().")
    df = _numeric_frame(df, name)
    return df.to_dask_array(lengths=True), _column_names(df.columns)


def _xarray_to_array(X, name):
    """A DataArray (2-D) or Dataset (1-D variables over one dimension, one column each)
    as ``(array, names)``; Dask-backed data stays lazy."""
    if hasattr(X, "data_vars"):
        variables = list(X.data_vars)
        dims = {X[v].dims for v in variables}
        if not variables or len(dims) != 1 or len(next(iter(dims))) != 1:
            raise DataError(
                f"{name} is an xarray Dataset whose variables are not all 1-D over one "
                f"dimension (variables {variables}, dimensions {sorted(map(str, dims))}). "
                f"Pass one 2-D variable ({name}['<variable>']) or stack them: "
                f"{name}.to_dataarray('feature').transpose(..., 'feature').")
        cols = [X[v].data for v in variables]
        if any(isinstance(c, da.Array) for c in cols):
            first = next(c for c in cols if isinstance(c, da.Array))
            cols = [da.asarray(c).rechunk(first.chunks) for c in cols]
            return da.stack(cols, axis=1).rechunk({1: -1}), _column_names(variables)
        return np.stack(cols, axis=1), _column_names(variables)
    if X.ndim != 2:
        raise DataError(f"{name} must be a 2-D DataArray (n_samples, n_features); got "
                        f"dimensions {X.dims} with shape {X.shape}. Select or stack "
                        f"dimensions first, e.g. {name}.stack(feature=[...]).")
    coord = X.coords.get(X.dims[1])
    names = _column_names(coord.values.tolist()) if coord is not None else None
    return X.data, names


def lazy_input(X, name="X"):
    """A lazy input (see :func:`is_lazy_input`) as ``(array, feature_names)``.

    ``array`` is a Dask array, a Zarr array or (for a NumPy-backed xarray
    object) a NumPy array; ``feature_names`` is an object array of column
    names (Dask DataFrame columns, Dataset variables, a DataArray's string
    coordinate along its second dimension, Parquet or CSV columns) or None.
    A path is read by :func:`open_input`.
    """
    if isinstance(X, (str, os.PathLike)):
        X = open_input(X)
    if is_dask_frame(X):
        return frame_to_array(X, name)
    if is_xarray(X):
        return _xarray_to_array(X, name)
    return X, None


def in_memory_input(X):
    """An in-memory xarray Dataset as a pandas DataFrame (columns named by its
    variables, as scikit-learn keeps them); a DataArray as its NumPy data;
    anything else unchanged."""
    if is_xarray(X) and not _xarray_is_dask(X):
        arr, names = _xarray_to_array(X, "X")
        if names is None:
            return np.asarray(arr)
        import pandas as pd

        return pd.DataFrame(np.asarray(arr), columns=list(names))
    return X


# ----------------------------------------------------------------------------- files
def input_format(path, format=None) -> str:
    """The format of ``path``: ``format`` when given, else told by its suffix.

    A directory with no known suffix is a Zarr store when it holds Zarr
    metadata and a Parquet data set when it holds ``.parquet`` files.
    """
    if format is not None:
        if format not in FORMATS:
            raise InvalidParameterError(f"format must be one of {sorted(FORMATS)}; got "
                                        f"{format!r}.")
        return format
    text = str(path).rstrip("/").lower()
    for fmt, suffixes in FORMATS.items():
        if text.endswith(suffixes):
            return fmt
    if not is_url(path) and Path(path).is_dir():
        p = Path(path)
        if any((p / m).exists() for m in ("zarr.json", ".zarray", ".zgroup")):
            return "zarr"
        if any(p.glob("*.parquet")):
            return "parquet"
    if not is_url(path) and Path(path).is_file():
        with open(path, "rb") as f:
            if f.read(8) == _HDF5_SIGNATURE:
                return "hdf5"
        raise StoreError(
            f"cannot tell the format of {str(path)!r} from its name; name it: "
            f"dqkm.io.load_array(path, format=...) with one of {sorted(FORMATS)} (on the "
            "command line: --format).")
    return "zarr"


def _require(fmt):
    module, extra = _EXTRA[fmt]
    try:
        __import__(module)
    except ImportError as e:
        raise ImportError(f"reading {fmt} files needs {module.split('.')[0]}: "
                          f"pip install 'dqkm[{extra}]'.") from e


def open_input(path, *, format=None, component=None, columns=None, chunks=None,
               storage_options=None):
    """The data at ``path`` as it is read: a Dask DataFrame (Parquet, CSV) or array.

    Parameters
    ----------
    path : str or PathLike
        A local path or an fsspec URL (Zarr, Parquet, CSV).
    format : {'zarr', 'parquet', 'csv', 'hdf5', 'netcdf'}, optional
        Default: told by the suffix (see :func:`input_format`).
    component : str, optional
        The array of a Zarr group, the dataset of an HDF5 file or the variable
        of a NetCDF file (default: ``"X"``, or the only 2-D one).
    columns : list of str, optional
        The columns of a Parquet or CSV file to read (default: all).
    chunks : int, optional
        Rows per chunk of an array (default: the file's own, or ~64 MB).
    storage_options : dict, optional
        Passed to fsspec for URLs.
    """
    fmt = input_format(path, format)
    if columns is not None and fmt not in ("parquet", "csv"):
        raise InvalidParameterError(f"columns= selects columns of a Parquet or CSV file; "
                                    f"{str(path)!r} is read as {fmt}. Use component= to "
                                    "choose an array.")
    if fmt == "zarr":
        return load_zarr(path, component, chunks=chunks, storage_options=storage_options)
    _require(fmt)
    if fmt in ("parquet", "csv"):
        if not is_url(path) and not Path(path).exists():
            raise FileNotFoundError(f"No {fmt} file at {str(path)!r}.")
        import dask.dataframe as dd

        src = str(path) if is_url(path) else local_path(path)
        if fmt == "parquet":
            return dd.read_parquet(src, columns=columns, storage_options=storage_options)
        sep = "\t" if ".tsv" in str(path).lower() else ","
        df = dd.read_csv(src, usecols=columns, sep=sep, storage_options=storage_options)
        return df if columns is None else df[list(columns)]  # in the order asked
    if is_url(path):
        raise StoreError(f"{fmt} files are read from a local path; got the URL {path!r}. "
                         "Copy the file to a local or shared disk first.")
    if not Path(path).is_file():
        raise FileNotFoundError(f"No {fmt} file at {str(path)!r}.")
    with open(path, "rb") as f:
        hdf5 = f.read(8) == _HDF5_SIGNATURE
    if fmt == "hdf5" or hdf5:
        _require("hdf5")
        return _hdf5_array(local_path(path), component, chunks)
    return _netcdf_classic(local_path(path), component, chunks)


def load_array(path, component=None, *, chunks=None, storage_options=None, format=None,
               columns=None):
    """A file or store as a lazy Dask array chunked along rows.

    Zarr (any dtype and ndim; a CSR group as CSR chunks), Parquet and CSV
    (numeric columns; their row counts are computed once, in one pass over
    the partitions), HDF5 and NetCDF (a dataset or variable read by the
    tasks, each opening the file).

    Parameters
    ----------
    path : str or PathLike
        A local path or an fsspec URL (Zarr, Parquet, CSV).
    component : str, optional
        The array of a Zarr group, the dataset of an HDF5 file or the variable
        of a NetCDF file (default: ``"X"``, or the only 2-D one).
    chunks : int, optional
        Rows per chunk (default: the file's own, or ~64 MB).
    storage_options : dict, optional
        Passed to fsspec for URLs.
    format : {'zarr', 'parquet', 'csv', 'hdf5', 'netcdf'}, optional
        Default: told by the suffix (``.zarr``, ``.parquet``, ``.csv``/``.tsv``,
        ``.h5``/``.hdf5``, ``.nc``); a file with another name is refused
        with a :class:`~dqkm.exceptions.StoreError` asking for it.
    columns : list of str, optional
        The columns of a Parquet or CSV file to read, in this order
        (default: all; the columns must be numeric).

    Returns
    -------
    dask.array.Array
        Lazy; each task reads its rows.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import pandas as pd
    >>> from dqkm.io import load_array
    >>> tmp = tempfile.mkdtemp()
    >>> path = os.path.join(tmp, "x.csv")
    >>> pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]}).to_csv(path, index=False)
    >>> load_array(path).compute().tolist()
    [[1.0, 3.0], [2.0, 4.0]]
    >>> shutil.rmtree(tmp)
    """
    X = open_input(path, format=format, component=component, columns=columns, chunks=chunks,
                   storage_options=storage_options)
    if is_dask_frame(X):
        X, _ = frame_to_array(X, "the data at " + repr(str(path)))
        if chunks is not None:
            X = X.rechunk({0: chunks})
    elif is_xarray(X):
        X, _ = _xarray_to_array(X, "the data at " + repr(str(path)))
    return X


# ----------------------------------------------------------------------------- HDF5/NetCDF
class _HDF5Rows:
    """An HDF5 dataset read row-range by row-range, each read opening the file.

    Small and picklable (a path and a name), so the tasks of a distributed
    graph carry it to workers that open the file themselves.
    """

    def __init__(self, path, dataset, shape, dtype):
        self.path, self.dataset = path, dataset
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)

    def __getitem__(self, key):
        import h5py

        try:
            with h5py.File(self.path, "r") as f:
                return f[self.dataset][key]
        except OSError as e:
            raise StoreError(f"cannot read the HDF5 dataset {self.dataset!r} of "
                             f"{self.path!r}: {e}") from e

    def __dask_tokenize__(self):
        stat = os.stat(self.path)
        return ("dqkm-hdf5", self.path, self.dataset, stat.st_size, stat.st_mtime_ns)


def _choose(names_2d, all_names, component, path, kind):
    if component is not None:
        if component not in all_names:
            raise StoreError(f"{str(path)!r} has no {kind} {component!r}; it holds "
                             f"{sorted(all_names)}. Pass component=<name>.")
        return component
    if "X" in names_2d:
        return "X"
    if len(names_2d) == 1:
        return names_2d[0]
    raise StoreError(f"{str(path)!r} holds the 2-D {kind}s {sorted(names_2d)}; name one "
                     f"with component=<name> (on the command line: --component).")


def _hdf5_array(path, component, chunks):
    import h5py

    found = {}

    def visit(name, obj):  # returns None: visititems goes on to the next item
        if isinstance(obj, h5py.Dataset):
            found[name] = (obj.shape, obj.dtype, obj.chunks)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    name = _choose([n for n, (s, _, _) in found.items() if len(s) == 2], found, component,
                   path, "dataset")
    shape, dtype, stored = found[name]
    if chunks is None:
        rows = auto_row_chunks(shape[0], int(np.prod(shape[1:], dtype=np.int64)),
                               np.dtype(dtype).itemsize) if len(shape) else ()
        if stored and len(shape):  # whole stored chunks per block
            rows = max(stored[0], rows // stored[0] * stored[0])
        chunks = rows
    block = (chunks,) + (-1,) * (len(shape) - 1) if len(shape) else ()
    return da.from_array(_HDF5Rows(path, name, shape, dtype), chunks=block, lock=False,
                         asarray=True, fancy=False)


def _netcdf_classic(path, component, chunks):
    _require("netcdf")
    import xarray as xr

    ds = xr.open_dataset(path, chunks={})
    names_2d = [v for v in ds.data_vars if ds[v].ndim == 2]
    name = _choose(names_2d, list(ds.data_vars), component, path, "variable")
    X = ds[name].data
    return X if chunks is None or not isinstance(X, da.Array) else X.rechunk({0: chunks})
