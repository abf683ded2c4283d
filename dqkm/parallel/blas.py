"""How many BLAS threads the passes and the driver's small algebra use.

:func:`dqkm.parallel.engine.compute` runs local passes under
:func:`blas_limit_context`; the driver's dense algebra runs under
:func:`driver_blas`.
"""

from __future__ import annotations

import contextlib
import sys

from threadpoolctl import ThreadpoolController

from ..data.execute import active_client

__all__ = ["blas_limit_context", "driver_blas", "one_blas_thread"]


def blas_limit_context():
    """Limit BLAS to one thread while local threads run the blocks.

    The threaded scheduler runs ``num_workers`` blocks at once in this
    process; letting each block's GEMM spawn its own BLAS threads on top of
    that oversubscribes the cores, and the kernels' GEMMs are small (a tile of
    rows), so extra BLAS threads would not help even with a single block —
    they only spin.  A distributed worker's nanny already sets
    ``OMP/OPENBLAS/MKL_NUM_THREADS=1`` in its processes.
    """
    if active_client() is not None:
        return contextlib.nullcontext()
    return one_blas_thread()


_CONTROLLER = {"n_modules": -1, "controller": None}


def one_blas_thread():
    """A context manager limiting the loaded BLAS libraries to one thread.

    ``threadpoolctl.threadpool_limits`` scans the process's shared libraries
    on every call (3–4 ms here, as much as a whole Lloyd pass on small data);
    the scan is kept in a ``ThreadpoolController`` and redone only when new
    modules were imported since (which may have loaded another BLAS).
    """
    if _CONTROLLER["n_modules"] != len(sys.modules):
        _CONTROLLER["controller"] = ThreadpoolController()
        _CONTROLLER["n_modules"] = len(sys.modules)
    return _CONTROLLER["controller"].limit(limits=1, user_api="blas")


def driver_blas():
    """One BLAS thread for the driver's small dense algebra (k-means++ on a
    sample or on the k-means‖ candidates).

    Its GEMMs are thin (a few rows against the candidates), where extra BLAS
    threads gain little, and a multi-threaded OpenBLAS spin-waits when the
    cores are busy: on a loaded 2-core machine the k-means‖ reduction took
    10× longer with the default threads (docs/BENCHMARKS.md, sparse-embedded
    K-means).  scikit-learn's own OpenMP threads are left as they are.
    """
    return one_blas_thread()
