"""The package is discoverable: submodules, estimators in the docstring, dask config keys."""

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dqkm

PACKAGE = Path(dqkm.__file__).resolve().parent
PUBLIC_SUBMODULES = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)])
                           if not m.name.startswith("_"))


def test_public_submodules_are_attributes_and_in_dir():
    for name in ("io", "datasets", "neighbors", "monitor", "cluster_config", "progress",
                 "kernel_approximation", "metrics", "cli"):
        assert name in PUBLIC_SUBMODULES
    listed = dir(dqkm)
    for name in PUBLIC_SUBMODULES:
        assert name in listed, name
        assert getattr(dqkm, name) is importlib.import_module(f"dqkm.{name}")
    with pytest.raises(AttributeError, match="module 'dqkm' has no attribute 'nope'"):
        dqkm.nope  # noqa: B018


def test_docstring_lists_every_estimator():
    from sklearn.base import BaseEstimator

    estimators = [n for n in dqkm.__all__ if isinstance(getattr(dqkm, n), type)
                  and issubclass(getattr(dqkm, n), BaseEstimator)]
    assert {"KMeans", "KMeansL1", "QKMeans", "SparseEmbeddedKMeans", "KMultipleMeans",
            "ClusterIndex", "FactorNystroem"} <= set(estimators)
    for name in estimators:
        assert f":class:`{name}`" in dqkm.__doc__, name


def test_import_dqkm_and_kernels_stays_free_of_dask():
    code = ("import sys, dqkm, dqkm.kernels; dir(dqkm); "
            "assert 'dask' not in sys.modules, sorted(m for m in sys.modules if 'dask' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_dask_config_keys_are_registered_with_their_defaults():
    import dask
    import yaml

    import dqkm.parallel  # noqa: F401 - registers the defaults

    shipped = yaml.safe_load((PACKAGE / "dqkm.yaml").read_text())
    assert dask.config.get("dqkm.fast-zarr-read") is True
    assert shipped == {"dqkm": {"fast-zarr-read": True, "keep-persisted": False,
                                 "settle-timeout": 30,
                                 "paused-timeout": 120}}
    with dask.config.set({"dqkm.fast-zarr-read": False}):
        assert dask.config.get("dqkm.fast-zarr-read") is False
    # every key dqkm reads has a registered default and is documented
    read = set()
    for path in PACKAGE.rglob("*.py"):
        read |= set(re.findall(r"dask\.config\.get\(\s*[\"'](dqkm\.[\w.-]+)", path.read_text()))
    assert read
    for key in read:
        assert dask.config.get(key, "unset") != "unset", key
        assert f"``{key}``" in dqkm.__doc__, key
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    assert '"dqkm.yaml"' in pyproject  # shipped as package data


def test_env_var_overrides_the_default():
    code = ("import dask, dqkm.parallel; "
            "assert dask.config.get('dqkm.fast-zarr-read') is False")
    env = {**__import__("os").environ, "DASK_DQKM__FAST_ZARR_READ": "False"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
