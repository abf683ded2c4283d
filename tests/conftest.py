"""Shared fixtures: a real distributed.LocalCluster (worker processes) and data."""

import logging

import dask
import pytest


@pytest.fixture(scope="session")
def local_cluster():
    """A real LocalCluster: 2 worker processes × 1 thread, started once per session."""
    from distributed import LocalCluster

    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
    yield cluster
    cluster.close()


@pytest.fixture
def dist_client(local_cluster):
    """A Client on the session's LocalCluster, the default client during one test."""
    from distributed import Client

    with Client(local_cluster) as client:
        yield client


@pytest.fixture
def blobs64():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(3000, 8, centers=5, cluster_std=1.5, random_state=0)
    return X, y
