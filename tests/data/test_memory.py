"""What a fit leaves in memory: X persisted for the fit is released after it (the
labels kept as a small persisted array), unless ``dqkm.keep-persisted`` asks to
keep it; NumPy input with a distributed Client is scattered once, not embedded in
every graph."""

from __future__ import annotations

import time
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs

import dqkm

ESTIMATORS = {
    "KMeans": lambda: dqkm.KMeans(4, random_state=0, persist=True, max_iter=10),
    "QKMeans": lambda: dqkm.QKMeans(4, sparsity=2, random_state=0, persist=True, max_iter=3),
}


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(8000, 8, centers=4, random_state=0)
    return X


def _keys_on_workers(client):
    return {str(k) for keys in client.has_what().values() for k in keys}


def _x_chunks_on_workers(client, name, settle=True):
    """The chunks of the array ``name`` the workers hold, once the client's releases
    reached them (releases are asynchronous: waited for, up to a few seconds)."""
    deadline = time.monotonic() + (10 if settle else 0)
    while True:
        held = {k for k in _keys_on_workers(client) if name in k}
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.05)


@pytest.mark.distributed
def test_persisted_x_is_released_after_fit(dist_client, blobs):
    X = da.from_array(blobs, chunks=2000)
    model = ESTIMATORS["KMeans"]().fit(X)
    assert not _x_chunks_on_workers(dist_client, X.name)
    # the labels stay: persisted on the workers, one small int block per chunk of X
    labels = model.labels_
    assert isinstance(labels, da.Array) and labels.chunks == ((2000,) * 4,)
    assert len(labels.dask) == 4  # only the persisted blocks, no graph on X
    ref = ESTIMATORS["KMeans"]().fit(blobs)
    np.testing.assert_array_equal(labels.compute(), ref.labels_)


@pytest.mark.distributed
def test_keep_persisted_keeps_x_while_the_labels_live(dist_client, blobs):
    X = da.from_array(blobs, chunks=2000)
    with dask.config.set({"dqkm.keep-persisted": True}):
        model = ESTIMATORS["KMeans"]().fit(X)
    assert len(_x_chunks_on_workers(dist_client, X.name, settle=False)) == 4
    del model
    assert not _x_chunks_on_workers(dist_client, X.name)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_local_fit_keeps_no_graph_on_the_persisted_x(blobs, name):
    """With local threads the persisted X lives in this process: the labels must not
    hold it (their graph holds only their own small blocks)."""
    X = da.from_array(blobs, chunks=2000)
    model = ESTIMATORS[name]().fit(X)
    blocks = list(dict(model.labels_.dask).values())
    assert len(blocks) == 4
    assert sum(np.asarray(getattr(b, "value", b)).nbytes for b in blocks) == \
        blobs.shape[0] * model.labels_.dtype.itemsize
    with dask.config.set({"dqkm.keep-persisted": True}):
        kept = ESTIMATORS[name]().fit(X)
    assert len(kept.labels_.dask) > 4  # a graph on the persisted X


@pytest.mark.distributed
def test_numpy_input_is_scattered_once_not_sent_with_every_graph(dist_client):
    X, _ = make_blobs(15000, 10, centers=4, random_state=0)  # 1.2 MB: above SCATTER_BYTES
    ref = dqkm.KMeans(4, random_state=0, max_iter=5, persist=False)
    with warnings.catch_warnings(record=True) as caught, \
            dask.config.set({"distributed.admin.large-graph-warning-threshold": "1MB"}):
        warnings.simplefilter("always")
        model = dqkm.KMeans(4, random_state=0, max_iter=5, persist=False).fit(X)
        labels = model.predict(X)
    assert not [w for w in caught if "large graph" in str(w.message)]
    with dask.config.set(scheduler="threads"):
        ref.fit(X)
    np.testing.assert_allclose(model.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(labels, ref.labels_)
