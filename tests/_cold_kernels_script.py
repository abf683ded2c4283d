"""Run by tests/test_out_of_core_cluster.py in a fresh process whose numba cache
(``NUMBA_CACHE_DIR``, inherited by the workers) starts empty: QK-means passes on a
1-worker LocalCluster (a worker process of its own, as each of a larger cluster's),
then the worker's numba cache hits and misses for dqkm's
kernels, printed as JSON on the last line."""

import json
import logging
import sys

import numpy as np


def _cache_stats():
    """Cache hits and misses of every numba dispatcher of dqkm.kernels in this process."""
    hits = misses = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("dqkm.kernels") or mod is None:
            continue
        for obj in vars(mod).values():
            stats = getattr(obj, "stats", None) if hasattr(obj, "py_func") else None
            if stats is not None:
                hits += sum(stats.cache_hits.values())
                misses += sum(stats.cache_misses.values())
    return {"hits": hits, "misses": misses}


def main():
    import dask.array as da
    from distributed import Client, LocalCluster

    from dqkm.kernels.sparse_factors import SparseFactors
    from dqkm.parallel.qkmeans import assign_factors, factor_distances, qk_pass

    rng = np.random.default_rng(0)
    X = da.from_array(rng.random((4000, 8)).astype(np.float32), chunks=1000)
    V = SparseFactors([np.eye(4), rng.random((4, 8))])
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        res = qk_pass(X, V, with_moments=True)
        labels = assign_factors(X, V).compute()
        dist = factor_distances(X, V).compute()
        stats = client.run(_cache_stats)
    print(json.dumps({"counts": res["counts"].tolist(), "labels": int(labels.shape[0]),
                      "dist": list(dist.shape), "workers": list(stats.values())}))


if __name__ == "__main__":
    main()
