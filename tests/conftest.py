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
import os
import resource
import time
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


# ``make test`` runs two pytest-xdist processes with ``--dist loadfile
# --no-loadscope-reorder``: a module's tests run together in one process (its module
# fixtures set up once), and each process takes the next module in the order set here
# when it is free.  The heaviest modules (by the CPU seconds ``--cpu-durations``
# reports) go first, so that no long module starts last while the other process idles;
# then the other modules as collected; last the two modules of many short tests, whose
# time the free process absorbs.  (xdist's default reorders the modules by their number
# of tests, which put the heavy modules, with few tests each, at the end.)
_HEAVY_FIRST = (
    "tests/cluster/test_qkmeans.py",
    "tests/test_out_of_core_cluster.py",
    "tests/test_notebook.py",
    "tests/cluster/test_checkpoint.py",
    "tests/test_killed_worker_estimators.py",
    "tests/test_out_of_core.py",
    "tests/test_cli.py",
    "tests/test_docs.py",
    "tests/cluster/test_kmm_checkpoint.py",
    "tests/cluster/test_kmm.py",
    "tests/test_neighbors.py",
    "tests/cluster/test_checkpoint_safety.py",
)
_LAST = ("tests/test_common.py", "tests/sklearn_suite/test_sklearn_k_means.py")


def _module_rank(item):
    module = item.nodeid.split("::")[0]
    if module in _HEAVY_FIRST:
        return _HEAVY_FIRST.index(module)
    return len(_HEAVY_FIRST) + (module in _LAST)


def pytest_collection_modifyitems(config, items):
    items[:] = sorted(items, key=_module_rank)  # stable: a module's own order is kept
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


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="list the N tests that took the most CPU time (0: all): wall seconds, CPU "
             "seconds of this process, of the child processes it reaped during the test "
             "(subprocesses, worker processes of clusters the test closed), and the "
             "CPU seconds this process spent compiling numba kernels (a cold cache compiles "
             "each signature once per run, in whichever test first calls it)")


class _CpuDurations:
    """The ``--cpu-durations`` report.  CPU time does not grow with the machine's load
    as wall time does, and compile time shows where a cold numba cache costs."""

    def __init__(self, n):
        from numba.core import event

        self.n, self.rows, self.depth, self.t0, self.compiled = n, [], 0, 0.0, 0.0
        report = self

        class Listener(event.Listener):  # a compile's callees count once, in their caller
            def on_start(self, ev):
                report.depth += 1
                if report.depth == 1:
                    report.t0 = time.process_time()

            def on_end(self, ev):
                report.depth -= 1
                if report.depth == 0:
                    report.compiled += time.process_time() - report.t0

        event.register("numba:compile", Listener())

    @staticmethod
    def _cpu():
        own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
        return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """Measured from the start of a test's setup to the end of its teardown; the row
        rides on the teardown report, so that pytest-xdist's workers send it to the
        process that prints the summary."""
        if call.when == "setup":
            item._dqkm_cpu_start = (self._cpu(), time.perf_counter(), self.compiled)
        outcome = yield
        start = getattr(item, "_dqkm_cpu_start", None)
        if call.when == "teardown" and start is not None:
            (own, children), wall, compiled = start
            own1, children1 = self._cpu()
            outcome.get_result().user_properties.append(
                ("dqkm_cpu", (time.perf_counter() - wall, own1 - own, children1 - children,
                              self.compiled - compiled, item.nodeid)))

    def pytest_runtest_logreport(self, report):
        if report.when == "teardown":
            self.rows.extend(row for key, row in report.user_properties if key == "dqkm_cpu")

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        rows = sorted(self.rows, key=lambda r: -(r[1] + r[2]))
        tr.section("CPU durations (seconds)")
        tr.write_line("  wall    cpu  child  numba-compile  test")
        for row in rows[:self.n or None]:
            tr.write_line("%6.1f %6.1f %6.1f %14.1f  %s" % row)
        tr.write_line("%6.1f %6.1f %6.1f %14.1f  (all %d tests)"
                      % (*(sum(r[i] for r in self.rows) for i in range(4)), len(self.rows)))
        tr.write_line("dqkm kernels this process compiled or loaded for several signatures "
                      "(each one compiles once on a cold cache):")
        for name, sigs in self._signatures():
            shown = " | ".join("(" + ", ".join(map(str, sig)) + ")" for sig in sigs)
            tr.write_line(f"  {len(sigs):3d} {name}: {shown[:400]}")

    @staticmethod
    def _signatures():
        import sys

        from numba.extending import is_jitted

        found = {}
        for mod_name, mod in list(sys.modules.items()):
            if mod_name.startswith("dqkm.") and mod is not None:
                for attr, obj in list(vars(mod).items()):
                    if is_jitted(obj) and len(obj.signatures) > 1:
                        found[f"{obj.py_func.__module__}.{obj.py_func.__name__}"] = \
                            obj.signatures
        return sorted(found.items(), key=lambda kv: -len(kv[1]))


def pytest_configure(config):
    n = config.getoption("--cpu-durations")
    if n is not None:  # in pytest-xdist's workers too: they measure, the controller prints
        config.pluginmanager.register(_CpuDurations(n), "dqkm-cpu-durations")


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


@pytest.fixture
def hierarchical_budgets(monkeypatch):
    """``(split_tol, tol)`` of every ``dqkm.kernels.hierarchical_palm4msa`` call during
    the test, in call order (QK-means looks its kernels up there at call time)."""
    import dqkm.kernels as kernels

    calls, real = [], kernels.hierarchical_palm4msa

    def spy(*a, **kw):
        calls.append((kw["split_tol"], kw["tol"]))
        return real(*a, **kw)

    monkeypatch.setattr(kernels, "hierarchical_palm4msa", spy)
    return calls
