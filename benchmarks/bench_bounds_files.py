"""CPU time of the bounds' files per pass beside a Lloyd pass, out of core.

``KMeans(algorithm='hamerly', persist=False)`` keeps each row block's bounds in
a Zarr sidecar (:mod:`dqkm.data.row_state`): one array per fit, each block's
chunk rewritten by every pass with the pass's stamp.  This measures, in one
process and in CPU time (so that a loaded machine does not hide it), what the
files add to one pass: reading, checking and unpacking every block's previous
state (the chunk of the previous pass's stamp), packing its new state and
writing it over the chunk (a temporary file renamed into place); against a
Lloyd pass over the same X: reading every block from its Zarr store and
:func:`dqkm.kernels.lloyd.lloyd_partials`.  The two are timed alternately,
``--repeat`` times, and the fastest of each is kept.  Run::

    .venv/bin/python benchmarks/bench_bounds_files.py [--rows 200000] [--features 16]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _report import add_markdown_option, markdown_table, write_page  # noqa: E402

from dqkm.data import row_state  # noqa: E402
from dqkm.kernels.bounds import pack_state  # noqa: E402
from dqkm.kernels.lloyd import lloyd_partials  # noqa: E402
from dqkm.parallel.bounds import _unpack  # noqa: E402


def _cpu(fn):
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def measure(n, d, k, n_blocks, repeat, tmp):
    import zarr

    rng = np.random.default_rng(0)
    X = (rng.normal(scale=4.0, size=(k, d))[rng.integers(k, size=n)]
         + rng.normal(size=(n, d))).astype(np.float32)
    c = -(-n // n_blocks)
    chunks = [min(c, n - i) for i in range(0, n, c)]
    z = zarr.create_array(store=f"{tmp}/x.zarr", shape=X.shape, chunks=(c, d), dtype="float32")
    z[:] = X
    z = zarr.open_array(f"{tmp}/x.zarr", mode="r")
    C = X[:k].copy()
    starts = np.concatenate([[0], np.cumsum(chunks)])
    directory = row_state.create_state_directory(tmp)
    array = row_state.create_state_array(directory, chunks, 3, "float32")  # once per fit
    new = [(rng.integers(0, k, m).astype(np.int32), rng.random(m) * 10, rng.random(m))
           for m in chunks]
    stamp = [0]

    def lloyd_pass():
        for i in range(len(chunks)):
            lloyd_partials(z[starts[i]:starts[i + 1]], C)

    def files_pass():
        g = stamp[0]
        for i, m in enumerate(chunks):
            if g:  # what the kernel is given (it copies it, with or without files)
                state = row_state.read_block_state(array, i, m, g)
                assert state is not None
                _unpack(state, m, k, "hamerly")
            # what the kernel returns: int32 labels, float64 bounds
            row_state.write_block_state(array, i, pack_state(*new[i]), g + 1)
        stamp[0] = g + 1

    lloyd_pass()
    files_pass()
    a, b = [], []
    for _ in range(repeat):
        a.append(_cpu(lloyd_pass))
        b.append(_cpu(files_pass))
    row_state.remove_state_array(array, len(chunks))
    row_state.remove_state_directory(directory)
    return min(a), min(b)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--repeat", type=int, default=15)
    add_markdown_option(p)
    args = p.parse_args()
    from threadpoolctl import threadpool_limits
    tmp = tempfile.mkdtemp(prefix="dqkm-bench-files-")
    try:
        with threadpool_limits(1):
            lloyd, files = measure(args.rows, args.features, args.k, args.blocks, args.repeat,
                                   tmp)
    finally:
        shutil.rmtree(tmp)
    print(f"{args.rows:,} × {args.features} float32, K = {args.k}, {args.blocks} blocks, one "
          f"thread, CPU ms per pass (fastest of {args.repeat})")
    print("| Lloyd pass (read X + kernel) | bounds' files | files ÷ Lloyd pass |")
    print("|---|---|---|")
    print(f"| {lloyd * 1e3:.2f} | {files * 1e3:.2f} | {files / lloyd:.1%} |")
    if args.markdown:
        write_page("bounds_files", "K-means out of core: CPU cost of the bounds' files",
                   markdown_table(["X", "K", "blocks", "Lloyd pass ms (read X + kernel)",
                                   "bounds' files ms", "files ÷ Lloyd pass"],
                                  [[f"{args.rows:,} × {args.features}", args.k, args.blocks,
                                    f"{lloyd * 1e3:.2f}", f"{files * 1e3:.2f}",
                                    f"{files / lloyd:.1%}"]]), notes=(
                       "CPU time in one process, one thread, of what 'hamerly's files add to "
                       "one pass over X re-read from Zarr (read, check the checksum and stamp "
                       "of, and unpack every block's previous state; pack the new one and "
                       "write it over the block's chunk through a temporary file renamed "
                       "into place), against a Lloyd pass over the same X "
                       f"(read every block, the kernel); fastest of {args.repeat}, timed "
                       "alternately. CPU time, so that other jobs on the machine do not hide "
                       "the files' cost; the wall-clock view is on the "
                       "[out-of-core page](kmeans_ooc.md)."))


if __name__ == "__main__":
    main()
