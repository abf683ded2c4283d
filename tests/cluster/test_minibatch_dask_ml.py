"""dqkm.MiniBatchKMeans under dask-ml's ``Incremental`` wrapper (partial_fit per block)."""

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs

import dqkm

wrappers = pytest.importorskip("dask_ml.wrappers",
                               reason="dask-ml is an optional test dependency (the 'test' extra)")


def test_incremental_fit_equals_partial_fit_on_the_same_blocks_in_order():
    X = make_blobs(900, 4, centers=5, random_state=0)[0]
    Xd = da.from_array(X, chunks=(200, 4))  # four blocks of 200 rows and one of 100
    model = dqkm.MiniBatchKMeans(5, batch_size=64, random_state=0, compute_labels=False)
    inc = wrappers.Incremental(model, shuffle_blocks=False).fit(Xd)
    ref = dqkm.MiniBatchKMeans(5, batch_size=64, random_state=0, compute_labels=False)
    for block in np.split(X, [200, 400, 600, 800]):
        ref.partial_fit(block)
    np.testing.assert_array_equal(inc.estimator_.cluster_centers_, ref.cluster_centers_)
    assert inc.estimator_.n_steps_ == ref.n_steps_ == 5
    labels = inc.predict(Xd)  # dask-ml's blockwise predict: lazy, aligned with X
    assert isinstance(labels, da.Array)
    np.testing.assert_array_equal(labels.compute(), ref.predict(X))
