"""Every array-like a Dask user has: Dask DataFrames, xarray objects, pandas
DataFrames — fitted as the same NumPy data, lazy input giving lazy, chunk-aligned
output, and nothing of X brought to the driver."""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs

import dqkm
from dqkm.exceptions import DataError

pd = pytest.importorskip("pandas", reason="pandas is needed for DataFrame inputs")
dd = pytest.importorskip("dask.dataframe", reason="dask[dataframe] is needed for these inputs")
xr = pytest.importorskip("xarray", reason="xarray is needed for DataArray/Dataset inputs")

COLUMNS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(600, 3, centers=4, random_state=0)
    return X


@pytest.fixture(scope="module")
def reference(blobs):
    return dqkm.KMeans(4, random_state=0).fit(blobs)


def _frame(X):
    return pd.DataFrame(X, columns=COLUMNS)


def _assert_same_fit(model, reference):
    np.testing.assert_allclose(model.cluster_centers_, reference.cluster_centers_)
    assert model.inertia_ == pytest.approx(reference.inertia_)


def _graph_bytes(arr):
    """The pickled size of a Dask array's graph: what a scheduler would be sent."""
    return len(pickle.dumps(dict(arr.__dask_graph__())))


# ----------------------------------------------------------------------------- Dask DataFrame
def test_dask_dataframe_fits_as_numpy_and_stays_lazy(blobs, reference):
    ddf = dd.from_pandas(_frame(blobs), npartitions=3)
    model = dqkm.KMeans(4, random_state=0).fit(ddf)
    _assert_same_fit(model, reference)
    assert list(model.feature_names_in_) == COLUMNS
    assert isinstance(model.labels_, da.Array)
    assert model.labels_.chunks == ((200, 200, 200),)  # aligned with the partitions
    np.testing.assert_array_equal(model.labels_.compute(), reference.labels_)
    pred = model.predict(ddf)
    assert isinstance(pred, da.Array) and pred.chunks == ((200, 200, 200),)
    np.testing.assert_array_equal(pred.compute(), reference.labels_)
    dist = model.transform(ddf)
    assert isinstance(dist, da.Array) and dist.chunks[0] == (200, 200, 200)
    np.testing.assert_allclose(dist.compute(), reference.transform(blobs))


def test_parquet_backed_dataframe_labels_carry_no_data(tmp_path, blobs):
    """Read from Parquet, the fitted labels' graph reads the file: none of X rides in it."""
    X = np.tile(blobs, (20, 1))  # 12000 × 3 float64: 288 kB
    _frame(X).to_parquet(tmp_path / "x.parquet", row_group_size=3000)
    ddf = dd.read_parquet(tmp_path / "x.parquet", split_row_groups=True)
    model = dqkm.KMeans(4, random_state=0, persist=False, max_iter=5).fit(ddf)
    assert isinstance(model.labels_, da.Array)
    assert _graph_bytes(model.labels_) < X.nbytes / 10


@pytest.mark.distributed
def test_dask_dataframe_fit_brings_only_small_results_to_the_driver(dist_client, tmp_path,
                                                                     blobs):
    """Everything the client gathers during the fit (row counts, K×D sums, the
    k-means++ sample) is small: X itself (5.8 MB of Parquet) never comes to the driver."""
    X = np.tile(blobs, (400, 1))
    _frame(X).to_parquet(tmp_path / "x.parquet", row_group_size=60000)
    ddf = dd.read_parquet(tmp_path / "x.parquet", split_row_groups=True)
    gathered = []
    gather = dist_client.gather

    def spy(futures, *args, **kwargs):
        out = gather(futures, *args, **kwargs)
        gathered.append(dask.sizeof.sizeof(out))
        return out

    dist_client.gather = spy
    try:
        model = dqkm.KMeans(4, random_state=0, persist=False, max_iter=3).fit(ddf)
    finally:
        del dist_client.gather
    assert gathered and max(gathered) < X.nbytes / 10
    assert isinstance(model.labels_, da.Array)
    assert model.labels_.shape == (X.shape[0],)


def test_dask_dataframe_names_are_checked_at_predict(blobs):
    ddf = dd.from_pandas(_frame(blobs), npartitions=2)
    model = dqkm.KMeans(4, random_state=0, max_iter=3).fit(ddf)
    renamed = ddf.rename(columns={"a": "z"})
    with pytest.raises(ValueError, match="feature names should match"):
        model.predict(renamed)
    with pytest.raises(ValueError, match=r"seen at fit time, yet now missing:\n- c"):
        model.predict(ddf[["a", "b"]])
    with pytest.warns(UserWarning, match="does not have valid feature names"), \
            pytest.raises(ValueError, match="X has 2 features, but KMeans is expecting 3"):
        model.predict(da.zeros((10, 2), chunks=5))


def test_dask_dataframe_non_numeric_and_series_are_refused(blobs):
    df = _frame(blobs).assign(name="x")
    with pytest.raises(DataError, match=r"numeric columns only.*'name' \(.*select_dtypes"):
        dqkm.KMeans(4).fit(dd.from_pandas(df, npartitions=2))
    with pytest.raises(DataError, match=r"Dask Series.*to_frame\(\)"):
        dqkm.KMeans(4).fit(dd.from_pandas(_frame(blobs), npartitions=2)["a"])


def test_dask_dataframe_nullable_columns_become_float(blobs):
    df = _frame(np.round(blobs)).astype({"a": "Int64"})
    model = dqkm.KMeans(4, random_state=0).fit(dd.from_pandas(df, npartitions=2))
    ref = dqkm.KMeans(4, random_state=0).fit(np.round(blobs))
    _assert_same_fit(model, ref)


# ----------------------------------------------------------------------------- pandas
def test_pandas_dataframe_gives_feature_names_and_numpy_out(blobs, reference):
    model = dqkm.KMeans(4, random_state=0).fit(_frame(blobs))
    _assert_same_fit(model, reference)
    assert list(model.feature_names_in_) == COLUMNS
    assert isinstance(model.labels_, np.ndarray)
    np.testing.assert_array_equal(model.predict(_frame(blobs)), reference.labels_)


# ----------------------------------------------------------------------------- xarray
def test_dask_backed_dataarray_stays_lazy(blobs, reference):
    xa = xr.DataArray(da.from_array(blobs, chunks=(150, 3)), dims=("sample", "feature"),
                      coords={"feature": COLUMNS})
    model = dqkm.KMeans(4, random_state=0).fit(xa)
    _assert_same_fit(model, reference)
    assert list(model.feature_names_in_) == COLUMNS
    assert isinstance(model.labels_, da.Array) and model.labels_.chunks == ((150,) * 4,)
    np.testing.assert_array_equal(model.predict(xa).compute(), reference.labels_)


def test_numpy_backed_dataarray_is_numpy(blobs, reference):
    xa = xr.DataArray(blobs, dims=("sample", "feature"))
    model = dqkm.KMeans(4, random_state=0).fit(xa)
    _assert_same_fit(model, reference)
    assert isinstance(model.labels_, np.ndarray)
    assert not hasattr(model, "feature_names_in_")


@pytest.mark.parametrize("backed", ["dask", "numpy"])
def test_dataset_variables_are_named_columns(blobs, reference, backed):
    ds = xr.Dataset({c: ("sample", blobs[:, j]) for j, c in enumerate(COLUMNS)})
    if backed == "dask":
        ds = ds.chunk({"sample": 200})
    model = dqkm.KMeans(4, random_state=0).fit(ds)
    _assert_same_fit(model, reference)
    assert list(model.feature_names_in_) == COLUMNS
    assert isinstance(model.labels_, da.Array if backed == "dask" else np.ndarray)
    np.testing.assert_array_equal(np.asarray(model.predict(ds)), reference.labels_)


def test_dataset_of_other_shapes_is_refused_with_the_call(blobs):
    ds = xr.Dataset({"X": (("sample", "feature"), blobs)}).chunk({"sample": 200})
    with pytest.raises(DataError, match=r"not all 1-D.*X\['<variable>'\].*to_dataarray"):
        dqkm.KMeans(4).fit(ds)
    with pytest.raises(DataError, match="2-D DataArray"):
        dqkm.KMeans(4).fit(xr.DataArray(da.zeros((4, 3, 2)), dims=("a", "b", "c")))


def test_as_dask_array_takes_frames_and_xarray(blobs):
    ddf = dd.from_pandas(_frame(blobs), npartitions=3)
    out = dqkm.io.as_dask_array(ddf)
    assert out.chunks == ((200, 200, 200), (3,))
    np.testing.assert_array_equal(out.compute(), blobs)
    xa = xr.DataArray(da.from_array(blobs, chunks=(300, 1)), dims=("s", "f"))
    out = dqkm.io.as_dask_array(xa)
    assert out.chunks == ((300, 300), (3,))
