"""Files besides Zarr: Parquet, CSV, HDF5 and NetCDF through ``dqkm.io.load_array``,
``fit(path)`` and the command line; and the stores dqkm writes opened by xarray."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.datasets import make_blobs

import dqkm
from dqkm.cli import main
from dqkm.exceptions import DataError, InvalidParameterError, StoreError
from dqkm.io import load_array, save_array, save_arrays

pd = pytest.importorskip("pandas", reason="pandas is needed to write Parquet/CSV test files")
pytest.importorskip("pyarrow", reason="pyarrow is needed for Parquet")
h5py = pytest.importorskip("h5py", reason="h5py is needed for HDF5/NetCDF files")
xr = pytest.importorskip("xarray", reason="xarray is needed for NetCDF and open_zarr")

COLUMNS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(500, 3, centers=4, random_state=1)
    return X


def _write(tmp_path, X, fmt):
    """X written as a file of format ``fmt``; returns its path."""
    df = pd.DataFrame(X, columns=COLUMNS[:X.shape[1]])
    if fmt == "parquet":
        path = tmp_path / "x.parquet"
        df.to_parquet(path, row_group_size=200)
    elif fmt == "csv":
        path = tmp_path / "x.csv"
        df.to_csv(path, index=False)
    elif fmt == "hdf5":
        path = tmp_path / "x.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=X, chunks=(100, 3))
            f["other"] = np.zeros(5)  # 1-D: not a candidate for X
    elif fmt == "netcdf":  # classic NetCDF (xarray's scipy backend)
        path = tmp_path / "x.nc"
        xr.Dataset({"X": (("sample", "feature"), X)}).to_netcdf(path)
    else:
        path = tmp_path / "x.zarr"
        save_array(X, path)
    return path


@pytest.mark.parametrize("fmt", ["parquet", "csv", "hdf5", "netcdf", "zarr"])
def test_load_array_reads_each_format_lazily(tmp_path, blobs, fmt):
    path = _write(tmp_path, blobs, fmt)
    X = load_array(path)
    assert isinstance(X, da.Array) and X.shape == blobs.shape
    assert not any(np.isnan(c) for c in X.chunks[0])  # row counts known
    np.testing.assert_allclose(X.compute(), blobs)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "hdf5", "netcdf", "zarr"])
def test_fit_on_a_path_equals_numpy_and_gives_dask(tmp_path, blobs, fmt):
    ref = dqkm.KMeans(4, random_state=0).fit(blobs)
    model = dqkm.KMeans(4, random_state=0).fit(str(_write(tmp_path, blobs, fmt)))
    np.testing.assert_allclose(model.cluster_centers_, ref.cluster_centers_)
    assert isinstance(model.labels_, da.Array)
    np.testing.assert_array_equal(model.labels_.compute(), ref.labels_)
    if fmt in ("parquet", "csv"):
        assert list(model.feature_names_in_) == COLUMNS


def test_format_columns_and_component_options(tmp_path, blobs):
    csv = _write(tmp_path, blobs, "csv")
    renamed = tmp_path / "x.data"
    csv.rename(renamed)
    with pytest.raises(StoreError, match=r"cannot tell the format.*format=\.\.\."):
        load_array(renamed)
    np.testing.assert_allclose(load_array(renamed, format="csv").compute(), blobs)
    sub = load_array(renamed, format="csv", columns=["c", "a"]).compute()
    np.testing.assert_allclose(sub, blobs[:, [2, 0]])
    with pytest.raises(InvalidParameterError, match="format must be one of"):
        load_array(renamed, format="xls")
    h5 = _write(tmp_path, blobs, "hdf5")
    with pytest.raises(InvalidParameterError, match="columns= selects columns.*component="):
        load_array(h5, columns=["a"])
    with h5py.File(h5, "a") as f:
        f["second"] = blobs[:, :2]
    with pytest.raises(StoreError, match=r"2-D datasets \['data', 'second'\].*component="):
        load_array(h5)
    np.testing.assert_allclose(load_array(h5, "second").compute(), blobs[:, :2])
    with pytest.raises(StoreError, match=r"no dataset 'nope'.*Pass component="):
        load_array(h5, "nope")


def test_text_columns_are_refused_naming_them(tmp_path, blobs):
    path = tmp_path / "mixed.csv"
    pd.DataFrame(blobs, columns=COLUMNS).assign(city="x").to_csv(path, index=False)
    with pytest.raises(DataError, match=r"numeric columns only.*'city'.*select_dtypes"):
        dqkm.KMeans(4).fit(str(path))
    with pytest.raises(DataError, match=r"numeric columns only.*'city'"):
        load_array(path)
    assert load_array(path, columns=COLUMNS).shape == blobs.shape


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No parquet file at .*nope\.parquet"):
        dqkm.KMeans(2).fit(str(tmp_path / "nope.parquet"))
    with pytest.raises(FileNotFoundError, match=r"No Zarr store at .*nope\.zarr"):
        dqkm.KMeans(2).fit(str(tmp_path / "nope.zarr"))


def test_cli_fits_and_predicts_a_parquet_file(tmp_path, blobs, capsys):
    path = _write(tmp_path, blobs, "parquet")
    model_path = tmp_path / "model.npz"
    main(["fit", str(path), "--n-clusters", "4", "--columns", "a,b", "--out", str(model_path)])
    model = dqkm.load(model_path)
    assert model.n_features_in_ == 2
    ref = dqkm.KMeans(4, random_state=0).fit(blobs[:, :2])
    np.testing.assert_allclose(np.sort(model.cluster_centers_, axis=0),
                               np.sort(ref.cluster_centers_, axis=0))
    csv = _write(tmp_path, blobs[:, :2], "csv")
    renamed = tmp_path / "rows.txt"
    csv.rename(renamed)
    labels = tmp_path / "labels.zarr"
    main(["predict", str(model_path), str(renamed), "--format", "csv", "--out", str(labels)])
    np.testing.assert_array_equal(zarr.open_array(labels, mode="r")[:],
                                  model.predict(blobs[:, :2]))


# ----------------------------------------------------------------------------- xarray reads
def test_stores_dqkm_writes_open_with_xarray(tmp_path, blobs):
    y = np.arange(len(blobs)) % 3
    path = save_arrays({"X": da.from_array(blobs, chunks=100), "y": y}, tmp_path / "g.zarr")
    ds = xr.open_zarr(path, consolidated=False)
    assert ds["X"].dims == ("sample", "feature") and ds["y"].dims == ("sample",)
    np.testing.assert_allclose(ds["X"].values, blobs)
    np.testing.assert_array_equal(ds["y"].values, y)
    # a fitted model: arrays of other lengths get dimensions of their own
    model_path = dqkm.save(dqkm.KMeans(4, random_state=0).fit(blobs), tmp_path / "m.zarr")
    model = xr.open_zarr(model_path, consolidated=False)
    assert model["cluster_centers_"].shape == (4, 3)
    single = save_array(blobs, tmp_path / "a.zarr")
    assert zarr.open_array(single, mode="r").metadata.dimension_names == ("sample", "feature")


@pytest.mark.parametrize("fmt", ["zarr", "parquet", "csv"])
def test_fit_on_a_url_equals_the_path(tmp_path, blobs, fmt):
    path = _write(tmp_path, blobs, fmt)
    by_path = dqkm.KMeans(4, random_state=0).fit(str(path))
    by_url = dqkm.KMeans(4, random_state=0).fit(path.as_uri())
    assert isinstance(by_url.labels_, da.Array)
    np.testing.assert_array_equal(by_url.cluster_centers_, by_path.cluster_centers_)
    np.testing.assert_array_equal(by_url.labels_.compute(), by_path.labels_.compute())


def test_hdf5_url_is_refused_saying_to_use_a_local_path(tmp_path, blobs):
    url = _write(tmp_path, blobs, "hdf5").as_uri()
    with pytest.raises(StoreError, match=r"hdf5 files are read from a local path; got the URL"):
        dqkm.KMeans(4).fit(url)
