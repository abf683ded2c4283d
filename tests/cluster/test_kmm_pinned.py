"""KMultipleMeans gives, bit for bit, the results it gave before its code was split.

The expected values were computed on the code before the split of the
K-Multiple-Means modules (kernels: neighbour search, CAN weights, spectral
blocks, chunk step; parallel: the graphs) and are stored here: SHA-256 prefixes
of the labels (int64) and prototypes (float64) bytes, the objective of every
outer iteration and every β as exact hexadecimal floats, the numbers of exact
distances.  A refactoring that changes a single bit of any of them fails.

The prototypes and objectives depend in their last bits on the machine (the
kernels numba compiles for the host CPU and the BLAS kernel OpenBLAS picks: a
relative 1e-16–1e-14 apart between the machine the pins were computed on and an
AVX-512 Zen 4 one); the labels, βs and counts do not.  ``MACHINE_BITS`` holds those
two for other machines, by (OpenBLAS kernel, LLVM host CPU), computed there on the
same code; any other machine is compared with ``EXPECTED`` whole.
"""

import hashlib
import warnings

import dask.array as da
import llvmlite.binding as llvm
import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_moons
from threadpoolctl import threadpool_info

import dqkm


@pytest.fixture(autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


CASES = {
    "fast-moons": ("moons", dict(n_clusters=2, solver="fast")),
    "svd-moons": ("moons", dict(n_clusters=2, solver="svd")),
    "fast-blobs-outliers-pp": ("blobs", dict(n_clusters=3, solver="fast", detect_outliers=True,
                                            init="k-means++")),
    "fast-blobs-auto": ("blobs", dict(n_clusters=3, solver="fast", n_prototypes="auto")),
}

EXPECTED = {'fast-blobs-auto': {'betas': ['0x0.0p+0',
                               '0x1.7b5568295ad14p+4',
                               '0x1.7b5568295ad14p+5',
                               '0x1.7b5568295ad14p+6',
                               '0x1.7b5568295ad14p+7',
                               '0x1.7b5568295ad14p+8',
                               '0x1.7b5568295ad14p+9',
                               '0x1.7b5568295ad14p+10',
                               '0x1.7b5568295ad14p+11',
                               '0x1.7b5568295ad14p+12',
                               '0x1.7b5568295ad14p+13',
                               '0x1.7b5568295ad14p+14',
                               '0x1.7b5568295ad14p+14',
                               '0x1.7b5568295ad14p+14',
                               '0x1.7b5568295ad14p+14',
                               '0x1.7b5568295ad14p+14',
                               '0x1.7b5568295ad14p+14'],
                     'exact': [73305, 8582, 8314, 7995, 7969, 7949],
                     'labels': '35e96b6259ef4023',
                     'n_components': 3,
                     'n_iter': 6,
                     'n_outliers': 0,
                     'objective': ['0x1.16bac7848e4c4p+12',
                                   '0x1.dfa9144f85d0ep+11',
                                   '0x1.d7000f02cd9e7p+11',
                                   '0x1.d3d07a09331d6p+11',
                                   '0x1.d1e8403ba56d0p+11',
                                   '0x1.d0b08436842f0p+11'],
                     'prototypes': 'df078509e9784d89'},
 'fast-blobs-outliers-pp': {'betas': ['0x0.0p+0',
                                      '0x1.0263ca0afa15dp+5',
                                      '0x1.0263ca0afa15dp+6',
                                      '0x1.0263ca0afa15dp+7',
                                      '0x1.0263ca0afa15dp+8',
                                      '0x1.0263ca0afa15dp+9',
                                      '0x1.0263ca0afa15dp+10',
                                      '0x1.0263ca0afa15dp+11',
                                      '0x1.0263ca0afa15dp+12',
                                      '0x1.0263ca0afa15dp+13',
                                      '0x1.0263ca0afa15dp+14',
                                      '0x1.0263ca0afa15dp+15',
                                      '0x1.0263ca0afa15dp+15',
                                      '0x1.0263ca0afa15dp+15',
                                      '0x1.0263ca0afa15dp+15',
                                      '0x1.0263ca0afa15dp+15',
                                      '0x1.0263ca0afa15dp+15'],
                            'exact': [68420, 6680, 6773, 6488, 6406, 6399],
                            'labels': 'dd8e8d0eebd3904e',
                            'n_components': 3,
                            'n_iter': 6,
                            'n_outliers': 7,
                            'objective': ['0x1.60baceba3a6bcp+12',
                                          '0x1.2c4230c150a02p+12',
                                          '0x1.2806d910af1f7p+12',
                                          '0x1.25b224f585486p+12',
                                          '0x1.24d3d16a84e82p+12',
                                          '0x1.240ec8af08a93p+12'],
                            'prototypes': 'eb6af25415b064d8'},
 'fast-moons': {'betas': ['0x0.0p+0',
                          '0x1.6b9526c743aa8p+0',
                          '0x1.6b9526c743aa8p+1',
                          '0x1.6b9526c743aa8p+2',
                          '0x1.6b9526c743aa8p+3',
                          '0x1.6b9526c743aa8p+4',
                          '0x1.6b9526c743aa8p+5',
                          '0x1.6b9526c743aa8p+6',
                          '0x1.6b9526c743aa8p+7',
                          '0x1.6b9526c743aa8p+8',
                          '0x1.6b9526c743aa8p+9',
                          '0x1.6b9526c743aa8p+10',
                          '0x1.6b9526c743aa8p+10',
                          '0x1.6b9526c743aa8p+10',
                          '0x1.6b9526c743aa8p+10',
                          '0x1.6b9526c743aa8p+10',
                          '0x1.6b9526c743aa8p+10'],
                'exact': [55808, 5226, 5454, 5605, 5407, 5281],
                'labels': '11173313e20d8f5d',
                'n_components': 2,
                'n_iter': 6,
                'n_outliers': 0,
                'objective': ['0x1.0297240d1a8bap+7',
                              '0x1.a3d6e601e5283p+6',
                              '0x1.9da4ab0a225c2p+6',
                              '0x1.9cee40413f324p+6',
                              '0x1.9c7a1119cabddp+6',
                              '0x1.9c518c8e8834cp+6'],
                'prototypes': '6753421dd9c5e9a0'},
 'svd-moons': {'betas': ['0x0.0p+0',
                         '0x1.6b9526c743aa8p+0',
                         '0x1.6b9526c743aa8p+1',
                         '0x1.6b9526c743aa8p+2',
                         '0x1.6b9526c743aa8p+3',
                         '0x1.6b9526c743aa8p+4',
                         '0x1.6b9526c743aa8p+5',
                         '0x1.6b9526c743aa8p+6',
                         '0x1.6b9526c743aa8p+7',
                         '0x1.6b9526c743aa8p+8',
                         '0x1.6b9526c743aa8p+9',
                         '0x1.6b9526c743aa8p+10',
                         '0x1.6b9526c743aa8p+10',
                         '0x1.6b9526c743aa8p+10',
                         '0x1.6b9526c743aa8p+10',
                         '0x1.6b9526c743aa8p+10',
                         '0x1.6b9526c743aa8p+10'],
               'exact': [134400, 11200, 11200, 11200, 11200, 11200],
               'labels': '11173313e20d8f5d',
               'n_components': 2,
               'n_iter': 6,
               'n_outliers': 0,
               'objective': ['0x1.0297240d1a8e3p+7',
                             '0x1.a3d6e601e5284p+6',
                             '0x1.9da4ab0a225bep+6',
                             '0x1.9cee40413f322p+6',
                             '0x1.9c7a1119cabdap+6',
                             '0x1.9c518c8e8834ap+6'],
               'prototypes': 'f76f4ac7c24a5d49'}}


# (OpenBLAS architecture, LLVM host CPU) -> case -> the machine-dependent bits
MACHINE_BITS = {('SkylakeX', 'znver4'): {   'fast-blobs-auto': {   'objective': [   '0x1.16bac7848e4c5p+12',
                                            '0x1.dfa9144f85d0ep+11',
                                            '0x1.d7000f02cd9e6p+11',
                                            '0x1.d3d07a09331d8p+11',
                                            '0x1.d1e8403ba56d0p+11',
                                            '0x1.d0b08436842f0p+11'],
                           'prototypes': '495bf6ef5885b447'},
    'fast-blobs-outliers-pp': {   'objective': [   '0x1.60baceba3a6bbp+12',
                                                   '0x1.2c4230c150a02p+12',
                                                   '0x1.2806d910af1f7p+12',
                                                   '0x1.25b224f585486p+12',
                                                   '0x1.24d3d16a84e82p+12',
                                                   '0x1.240ec8af08a92p+12'],
                                  'prototypes': 'f06ae2ddf6df2aac'},
    'fast-moons': {   'objective': [   '0x1.0297240d1a8bep+7',
                                       '0x1.a3d6e601e5280p+6',
                                       '0x1.9da4ab0a225c2p+6',
                                       '0x1.9cee40413f326p+6',
                                       '0x1.9c7a1119cabdep+6',
                                       '0x1.9c518c8e8834cp+6'],
                      'prototypes': 'b84a6b046383bbbc'},
    'svd-moons': {   'objective': [   '0x1.0297240d1a8ffp+7',
                                      '0x1.a3d6e601e5286p+6',
                                      '0x1.9da4ab0a225c0p+6',
                                      '0x1.9cee40413f322p+6',
                                      '0x1.9c7a1119cabdap+6',
                                      '0x1.9c518c8e8834ap+6'],
                     'prototypes': 'fdde77a07e248767'}}}


def _machine():
    arch = sorted({i.get('architecture') for i in threadpool_info()
                   if i.get('internal_api') == 'openblas'} - {None})
    return (arch[0] if len(arch) == 1 else None, llvm.get_host_cpu_name())


def _digest(a):
    return hashlib.sha256(np.ascontiguousarray(np.asarray(a)).tobytes()).hexdigest()[:16]


def _data(name):
    if name == "moons":
        return make_moons(400, noise=0.07, random_state=3)[0]
    return make_blobs(500, 4, centers=3, cluster_std=1.5, random_state=2)[0]


@pytest.mark.parametrize("case", list(CASES))
def test_fit_is_bit_identical_to_the_code_before_the_split(case):
    data, kw = CASES[case]
    Xd = da.from_array(_data(data), chunks=130)  # 4 row chunks, the last shorter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        km = dqkm.KMultipleMeans(random_state=0, max_iter=6, **kw).fit(Xd)
    got = dict(labels=_digest(np.asarray(km.labels_.compute()).astype(np.int64)),
               prototypes=_digest(km.prototypes_),
               objective=[float(h["objective"]).hex() for h in km.history_],
               betas=[float(b).hex() for h in km.history_ for b in h["beta_steps"]],
               n_iter=km.n_iter_, n_components=km.n_components_, n_outliers=km.n_outliers_,
               exact=[h["distances_exact"] for h in km.history_])
    assert got == {**EXPECTED[case], **MACHINE_BITS.get(_machine(), {}).get(case, {})}
