"""Driver-side kernels split over threads (dqkm.kernels._split): the ranges cover the
output exactly once, errors surface, and palm4MSA's split kernels give the same bits
on one thread and on several."""

import threading

import numpy as np
import pytest

from dqkm.kernels import _split, default_constraints, palm4msa


@pytest.mark.parametrize("n, parts, step", [(10, 3, 1), (1000, 2, 128), (1000, 8, 128),
                                            (5, 8, 1), (0, 2, 1), (129, 2, 128), (7, 1, 4)])
def test_ranges_cover_every_item_once_on_step_boundaries(n, parts, step):
    ranges = _split.split_ranges(n, parts, step)
    assert len(ranges) <= max(1, parts)
    covered = [i for lo, hi in ranges for i in range(lo, hi)]
    assert covered == list(range(n))
    assert all(lo % step == 0 for lo, _ in ranges)


def test_small_work_stays_on_the_calling_thread(monkeypatch):
    seen = []
    _split.run_split(lambda lo, hi: seen.append(threading.current_thread()), 100,
                     _split._MIN_WORK - 1)
    assert seen == [threading.current_thread()]
    seen.clear()
    with _split.limit_threads(4):
        out = _split.run_split(lambda lo, hi: (lo, hi, seen.append(threading.current_thread())),
                               100, _split._MIN_WORK)
        with _split.limit_threads(1):
            assert _split.run_split(lambda lo, hi: (lo, hi), 100, _split._MIN_WORK) == [(0, 100)]
    assert [o[:2] for o in out] == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert len(set(seen)) > 1
    assert _split._threads_wanted() == _split.numba.config.NUMBA_NUM_THREADS  # restored


def test_an_error_in_one_range_is_raised_after_every_range_ended():
    ended = []

    def fn(lo, hi):
        if lo > 0:
            raise ValueError("second range")
        threading.Event().wait(0.05)
        ended.append(lo)

    with pytest.raises(ValueError, match="second range"), _split.limit_threads(2):
        _split.run_split(fn, 10, _split._MIN_WORK)
    assert ended == [0]


def _palm(n_threads, monkeypatch, shape):
    monkeypatch.setattr(_split, "_MIN_WORK", 1)
    A = np.random.default_rng(3).standard_normal(shape)
    cons = default_constraints(*shape, sparsity=3)
    with _split.limit_threads(n_threads):
        return palm4msa(A, cons, n_iter=4, adaptive_step=True, tol=0)


@pytest.mark.parametrize("shape", [(300, 200), (256, 256), (96, 400)])
def test_palm4msa_is_bit_identical_on_one_and_several_threads(monkeypatch, shape):
    """The split gradient, Gram sandwiches and gathers (every size split: the work
    threshold set to 1) give the same factors and λ as one thread, to the bit."""
    one = _palm(1, monkeypatch, shape)
    for n in (2, 3):
        many = _palm(n, monkeypatch, shape)
        assert many.lam == one.lam
        for a, b in zip(many.factors.factors, one.factors.factors):
            np.testing.assert_array_equal(a.toarray(), b.toarray())


@pytest.mark.parametrize("shape, s", [((60, 40), 3), ((41, 90), 2), ((50, 50), 5)])
def test_split_splincol_step_keeps_the_one_thread_picks_and_bits(monkeypatch, shape, s):
    """The Splincol step split over row ranges (each with its own column buffers,
    merged in range order) picks the same entries — ties included: integer-valued
    steps, all-zero rows and columns, where an equal value must keep the earlier row
    — and gives the same values and norm as one thread, to the bit."""
    from dqkm.kernels._palm_chains import splincol_step

    monkeypatch.setattr(_split, "_MIN_WORK", 1)
    rng = np.random.default_rng(sum(shape) + s)
    S = np.where(rng.random(shape) < 0.1, rng.standard_normal(shape), 0.0)
    for G in (rng.standard_normal(shape), rng.integers(-2, 3, shape).astype(float),
              np.ones(shape)):
        G[3] = 0.0
        G[:, 5] = 0.0
        outs = []
        for n in (1, 2, 3, 7):
            out = np.zeros(shape)
            with _split.limit_threads(n):
                outs.append((out, *splincol_step(S, G, 1.7, s, out)))
        for other in outs[1:]:
            for a, b in zip(other, outs[0]):
                np.testing.assert_array_equal(a, b)
