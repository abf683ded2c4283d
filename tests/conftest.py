"""Shared fixtures: a real distributed.LocalCluster (worker processes) and data;
the ``distributed`` and ``slow`` markers, put on by construction.

``distributed``: the test, a fixture it uses, or a function of its module that
either calls, starts a ``LocalCluster``, a ``MultiprocessCluster`` or a
``Client``, runs the CLI with ``--scheduler``, or uses the ``local_cluster`` /
``dist_client`` fixtures.
``slow`` (over ~10 s): the test starts worker processes of its own
(``MultiprocessCluster``, ``LocalCluster(processes=True)``, the CLI with
``--scheduler``), or lies in a module of ``_SLOW_MODULES``.
``pytest -m "not slow and not distributed"`` (``make test-fast``) runs the
quick rest; ``make test`` runs everything.
"""

import ast
import logging
from functools import lru_cache
from pathlib import Path

import dask
import pytest

_CLUSTER_CALLS = {"LocalCluster", "MultiprocessCluster", "Client"}
_CLUSTER_FIXTURES = {"local_cluster", "dist_client"}
# Modules whose tests start a Jupyter kernel or a script's whole pipeline.
_SLOW_MODULES = {"test_notebook.py"}


def _facts(node):
    """What a function does: ``"cluster"`` (starts one) and/or ``"processes"``
    (starts worker processes of its own), and the names it calls."""
    facts, calls = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and n.value == "--scheduler":
            facts |= {"cluster", "processes"}
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
            else None
        calls.add(name)
        if name in _CLUSTER_CALLS:
            facts.add("cluster")
        if name == "MultiprocessCluster" or name == "LocalCluster" and any(
                k.arg == "processes" and isinstance(k.value, ast.Constant) and k.value.value
                for k in n.keywords):
            facts.add("processes")
    return facts, calls


@lru_cache(maxsize=None)
def _module_facts(path: str) -> dict:
    """``{function name: facts}`` of a test module, each function inheriting the
    facts of the module's functions it calls."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return {}
    funcs = {n.name: _facts(n) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    facts = {name: set(f) for name, (f, _) in funcs.items()}
    grew = True
    while grew:
        grew = False
        for name, (_, calls) in funcs.items():
            for callee in calls & set(funcs):
                if not facts[callee] <= facts[name]:
                    facts[name] |= facts[callee]
                    grew = True
    return facts


def pytest_collection_modifyitems(config, items):
    here = _module_facts(str(Path(__file__)))
    for item in items:
        # the session's cluster is started once: its users are distributed, not slow
        known = {**here, **_module_facts(str(item.path)),
                 **{name: {"cluster"} for name in _CLUSTER_FIXTURES}}
        names = {getattr(item, "originalname", item.name), *getattr(item, "fixturenames", ())}
        facts = set().union(*(known.get(n, set()) for n in names))
        if "cluster" in facts and "distributed" not in item.keywords:
            item.add_marker(pytest.mark.distributed)
        if ("processes" in facts or item.path.name in _SLOW_MODULES) \
                and "slow" not in item.keywords:
            item.add_marker(pytest.mark.slow)


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
