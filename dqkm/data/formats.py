"""The one registry of dqkm's on-disk formats: each format's name and version.

Every writer stamps its files with the version given here and every reader
refuses another one, so a format changes in one place.  This module imports
nothing from dqkm: any layer may read it.

========================  ===================================================
format                    written by
========================  ===================================================
``model``                 ``dqkm.save`` (:mod:`dqkm.data.serialize`)
``csr``                   ``dqkm.sparse.save_csr`` (:mod:`dqkm.data.csr`)
``sparse_factors``        ``SparseFactors.save`` / ``to_arrays``
``cluster_index``         ``ClusterIndex`` stores (:mod:`dqkm.data.index_store`)
``checkpoint``            fit checkpoints (:mod:`dqkm.data.checkpoint`)
========================  ===================================================
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Format", "FORMATS", "MODEL_FORMAT_VERSION", "CSR_FORMAT_VERSION",
           "SPARSE_FACTORS_FORMAT_NAME", "SPARSE_FACTORS_FORMAT_VERSION",
           "INDEX_FORMAT_VERSION", "CHECKPOINT_FORMAT_VERSION", "version_of"]


@dataclass(frozen=True)
class Format:
    """One on-disk format: the name written into its files and its version."""

    name: str
    version: int


FORMATS = {
    "model": Format("dqkm.model", 1),
    "csr": Format("csr", 1),
    "sparse_factors": Format("dqkm.SparseFactors", 1),
    "cluster_index": Format("dqkm.ClusterIndex", 1),
    "checkpoint": Format("dqkm.checkpoint", 3),  # 3: the fit driver's layout
}


def version_of(key: str) -> int:
    """The version this dqkm writes and reads for the format ``key`` of :data:`FORMATS`."""
    return FORMATS[key].version


MODEL_FORMAT_VERSION = version_of("model")
CSR_FORMAT_VERSION = version_of("csr")
SPARSE_FACTORS_FORMAT_NAME = FORMATS["sparse_factors"].name
SPARSE_FACTORS_FORMAT_VERSION = version_of("sparse_factors")
INDEX_FORMAT_VERSION = version_of("cluster_index")
CHECKPOINT_FORMAT_VERSION = version_of("checkpoint")
