"""The shape of the package, read from its source with ``ast``: layers, cycles, formats, files.

Layers, bottom to top (a module may import its own layer and the ones below):

0. ``data`` and ``kernels``: :mod:`dqkm.data` (with the facades :mod:`dqkm.sparse` and
   :mod:`dqkm.datasets`, which only re-export it), :mod:`dqkm.kernels`, the exceptions.
   Kernels import nothing from dqkm but other kernels, the exceptions and the data
   layer's two leaves that import nothing from dqkm themselves (the format registry,
   the ``.npz`` reader).
1. ``parallel``: :mod:`dqkm.parallel` (the only place that builds Dask graphs).
2. ``estimators``: :mod:`dqkm.cluster`, :mod:`dqkm.neighbors`,
   :mod:`dqkm.kernel_approximation`, :mod:`dqkm.metrics`.
3. ``surface``: the command line, :mod:`dqkm.io` (a facade over data and parallel),
   the monitor, cluster configurations, the demo, the package itself.

Every ``import`` statement counts, at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dqkm"

LAYERS = {"data": 0, "parallel": 1, "estimators": 2, "surface": 3}

# module (or package prefix) -> layer; the longest matching prefix wins
LAYER_OF = {
    "dqkm.data": "data",
    "dqkm.sparse": "data",          # facade: re-exports dqkm.data.csr/generators only
    "dqkm.datasets": "data",        # facade: re-exports dqkm.data.generators only
    "dqkm._json": "data",           # re-exports dqkm.data.jsonvalues (for checkpoints)
    "dqkm._model_check": "data",    # the checks dqkm.data.serialize runs on load
    "dqkm.exceptions": "data",
    "dqkm.progress": "data",        # the reporter interface the fit driver feeds
    "dqkm._progress_lines": "data",  # its base reporter and text views (imports no dqkm)
    "dqkm._validation": "data",     # parameter types and checks (estimators and generators)
    "dqkm._docstrings": "data",     # shared docstring pieces (imports nothing from dqkm)
    "dqkm.kernels": "data",
    "dqkm.parallel": "parallel",
    "dqkm.cluster": "estimators",
    "dqkm.neighbors": "estimators",
    "dqkm.kernel_approximation": "estimators",
    "dqkm.metrics": "estimators",
    "dqkm": "surface",              # the package (lazy names), cli, io, monitor, configs, demo
}

# What dqkm.kernels may import from dqkm besides other kernels.
KERNEL_IMPORTS = {"dqkm.exceptions", "dqkm.data", "dqkm.data.formats", "dqkm.data.npz"}

# Imports that break the rules above today, each with its reason.  Keep it empty: fix
# the import rather than add a line.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

# Modules that still read or write files outside the data layer, each with its reason.
# Keep it empty: move the file code into dqkm.data.
KNOWN_FILE_IO: dict[str, str] = {}

def _modules():
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(module, is_package, node):
    """The dqkm modules one import statement names."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = module if is_package else module.rpartition(".")[0]
        if node.level:
            parts = base.split(".")
            base = ".".join(parts[:len(parts) - (node.level - 1)])
            target = base + (f".{node.module}" if node.module else "")
        else:
            target = node.module or ""
        targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target
                   for a in node.names]
    out = set()
    for t in targets:
        if t != "dqkm" and not t.startswith("dqkm."):
            continue
        while t not in MODULES and "." in t:
            t = t.rpartition(".")[0]
        if t != module:
            out.add(t)
    return out


def _trees():
    return {m: ast.parse(p.read_text(), str(p)) for m, p in MODULES.items()}


TREES = _trees()


def import_graph():
    """module -> the dqkm modules it imports (module level and inside functions)."""
    graph = {}
    for m, tree in TREES.items():
        is_package = MODULES[m].name == "__init__.py"
        graph[m] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[m] |= _resolve(m, is_package, node)
    return graph


GRAPH = import_graph()


def layer(module):
    best = max((p for p in LAYER_OF if module == p or module.startswith(p + ".")), key=len)
    return LAYER_OF[best]


def test_the_graph_sees_module_and_function_level_imports():
    # a module-level and a function-level import the package is known to have
    assert "dqkm.data.execute" in GRAPH["dqkm.parallel.engine"]
    assert "dqkm.data.serialize" in GRAPH["dqkm.kernel_approximation"]  # inside methods


def _upward(graph):
    return sorted(f"{m} ({layer(m)}) imports {t} ({layer(t)})"
                  for m, targets in graph.items() for t in targets
                  if LAYERS[layer(t)] > LAYERS[layer(m)] and (m, t) not in KNOWN_UPWARD)


def test_the_upward_check_finds_an_upward_import():
    graph = {"dqkm.data.csr": {"dqkm.parallel.engine"}, "dqkm.parallel.engine": {"dqkm.data"},
             "dqkm.cluster.kmeans": {"dqkm.io"}}
    assert _upward(graph) == ["dqkm.cluster.kmeans (estimators) imports dqkm.io (surface)",
                              "dqkm.data.csr (data) imports dqkm.parallel.engine (parallel)"]


def test_no_module_imports_a_layer_above_it():
    upward = _upward(GRAPH)
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_kernels_import_only_kernels_exceptions_and_the_format_leaves():
    bad = sorted(f"{m} imports {t}" for m, targets in GRAPH.items()
                 if m.startswith("dqkm.kernels") for t in targets
                 if not t.startswith("dqkm.kernels") and t not in KERNEL_IMPORTS)
    assert not bad, "\n".join(bad)
    for leaf in KERNEL_IMPORTS - {"dqkm.exceptions", "dqkm.data"}:
        assert GRAPH[leaf] <= {"dqkm.exceptions"}, f"{leaf} must stay a leaf"
    assert GRAPH["dqkm.data"] == set(), "dqkm/data/__init__.py must import nothing"


def test_the_data_layer_imports_no_estimator_cli_io_or_parallel():
    bad = sorted(f"{m} imports {t}" for m, targets in GRAPH.items()
                 if m.startswith("dqkm.data") for t in targets
                 if not (t.startswith("dqkm.data") or t.startswith("dqkm.kernels")
                         or t in ("dqkm.exceptions", "dqkm._model_check", "dqkm.progress",
                                  "dqkm._validation")))
    assert not bad, "\n".join(bad)


def _cycles(graph):
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    assert _cycles(GRAPH) == []


FACADES = ("dqkm.io", "dqkm.sparse", "dqkm.datasets")


@pytest.mark.parametrize("facade", FACADES)
def test_the_public_facades_only_re_export(facade):
    tree = TREES[facade]
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert defined == [], f"{facade} defines {defined}; put them in the data layer"


def test_every_format_version_is_in_the_registry():
    """No module assigns a format version of its own: they all read dqkm.data.formats."""
    found = []
    for m, tree in TREES.items():
        if m == "dqkm.data.formats":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                found += [f"{m}.{n}" for n in names if "FORMAT" in n.upper()]
    assert found == [], f"format names/versions outside dqkm.data.formats: {found}"


_FILE_MODULES = {"zarr", "fsspec", "h5py", "shutil"}
_FILE_CALLS = {"open", "savez", "savez_compressed", "save", "load", "fromfile", "tofile",
               "replace", "rename", "remove", "unlink", "makedirs", "mkdir", "rmtree"}


def _file_io(tree):
    hits = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hits |= {a.name.split(".")[0] for a in node.names} & _FILE_MODULES
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            hits |= {node.module.split(".")[0]} & _FILE_MODULES
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            owner = f.value.id if isinstance(f, ast.Attribute) and \
                isinstance(f.value, ast.Name) else None
            if name == "open" and owner is None or (owner in ("np", "os", "shutil")
                                                    and name in _FILE_CALLS):
                hits.add(f"{owner + '.' if owner else ''}{name}()")
    return hits


def test_files_are_read_and_written_only_in_the_data_layer():
    """Kernels, graph code and estimators touch no file: stores, models, factor
    files and checkpoints go through dqkm.data."""
    bad = {m: sorted(h) for m, tree in TREES.items()
           if layer(m) in ("parallel", "estimators") or m.startswith("dqkm.kernels")
           if m not in KNOWN_FILE_IO
           for h in [_file_io(tree)] if h}
    assert bad == {}, bad


def test_the_file_check_sees_file_io():
    tree = ast.parse("import zarr\nimport numpy as np\n"
                     "def f(p):\n    np.savez(p)\n    with open(p) as f:\n        pass\n")
    assert _file_io(tree) == {"zarr", "np.savez()", "open()"}


# ----------------------------------------------------------------------------- size
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100  # a function's code, its docstring left out

# Modules over the limit, each with its reason.  Keep it empty: split the module.
KNOWN_LONG_MODULES = {
}


def _code_lines(node):
    """Lines of a function's code: from the statement after its docstring to its end."""
    body = node.body
    first = body[0]
    if len(body) > 1 and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        first = body[1]
    start = min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])])
    return node.end_lineno - start + 1


def _long_functions(tree, limit=MAX_FUNCTION_LINES):
    return sorted((n.name, _code_lines(n)) for n in ast.walk(tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and _code_lines(n) > limit)


def test_no_module_is_over_the_line_limit():
    long = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    long = {m: n for m, n in long.items() if n > MAX_MODULE_LINES and m not in KNOWN_LONG_MODULES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines (split them): {long}"


def test_no_function_is_over_the_line_limit():
    long = {m: f for m, tree in TREES.items() for f in [_long_functions(tree)] if f}
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines of code: {long}"


def test_the_length_check_counts_code_not_the_docstring():
    code = "\n".join(f"    x{i} = {i}" for i in range(5))
    tree = ast.parse(f'def f():\n    """Doc.\n\n    More.\n    """\n{code}\n\n'
                     f'def g():\n{code}\n')
    assert [_code_lines(n) for n in tree.body] == [5, 5]
    assert _long_functions(tree, limit=4) == [("f", 5), ("g", 5)]


# ------------------------------------------------------------------ graph keys
# Functions of dqkm.parallel that name graph keys with uuid4, each with its reason:
# everywhere else a key is dask's tokenize of what the task computes, so the same
# work gets the same key.
KNOWN_UUID_KEYS = {
    ("dqkm.parallel.data", "_row_views"):
        "the blocks are views of a NumPy array: tokenize would hash the data, the very "
        "cost the views avoid, and the memory's address cannot name the data",
    ("dqkm.parallel.neighbors", "__init__"):
        "an in-memory InvertedIndex's identity (its __dask_tokenize__): hashing its rows "
        "would cost a pass over them",
    ("dqkm.parallel.engine", "_pass_name"):
        "pure=False passes and tasks (they write files, read files that change between "
        "calls, or update their state in place): a fresh key per call, as dask gives a "
        "pure=False task; the bounds' passes and the KMM checkpoint rows use it",
}


def _uuid_calls(tree):
    """Names of the functions that call ``uuid.uuid4`` (innermost function)."""
    out = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nested = {id(n) for inner in ast.walk(fn) if inner is not fn
                  and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(inner)}
        for node in ast.walk(fn):
            if id(node) not in nested and isinstance(node, ast.Call) \
                    and isinstance(node.func, ast.Attribute) and node.func.attr == "uuid4":
                out.add(fn.name)
    return out


def test_graph_keys_are_tokenized_not_uuid4():
    found = {(m, f) for m, tree in TREES.items() if m.startswith("dqkm.parallel")
             for f in _uuid_calls(tree)}
    assert found <= set(KNOWN_UUID_KEYS), (
        f"uuid4 keys in {sorted(found - set(KNOWN_UUID_KEYS))}: name keys with "
        "dask.base.tokenize of the task's inputs (or give the reason here)")


def test_every_listed_uuid4_key_is_still_there():
    """A reason kept for a uuid4 key that no longer exists would hide a new one there."""
    found = {(m, f) for m, tree in TREES.items() if m.startswith("dqkm.parallel")
             for f in _uuid_calls(tree)}
    assert set(KNOWN_UUID_KEYS) - found == set()


def test_the_uuid_check_sees_a_uuid4_key():
    tree = ast.parse("import uuid\ndef f():\n    def g():\n        return uuid.uuid4().hex\n"
                     "    return g\ndef h():\n    return 1\n")
    assert _uuid_calls(tree) == {"g"}


# ------------------------------------------------------------------ graph building
# Dask graphs are built one way: by the helpers of dqkm.parallel.engine (task_spec
# tasks in a HighLevelGraph layer).  Elsewhere, code uses dask's collections (dask.array
# functions, ``to_delayed``, ``persist``, ``compute``) but builds no graph by hand.
GRAPH_MODULES = ("dask.delayed", "dask.highlevelgraph", "dask.task_spec")
# the engine, and the in-process runner of its graphs (it reads their task_spec nodes)
GRAPH_BUILDERS = {"dqkm.parallel.engine", "dqkm.parallel.local_run"}
# Other modules that may use them, each with its reason.  Keep it empty.
KNOWN_GRAPH_BUILDERS: dict[str, str] = {}


def _graph_uses(tree):
    """The graph-building modules of dask one module imports or reaches as attributes
    (``import dask.delayed``, ``from dask.task_spec import Task``, ``from dask import
    delayed``, ``dask.delayed(...)``), and ``da.Array(graph, ...)`` calls (an array
    made from a hand-built dict), sorted."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "Array" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in ("da", "array"):
            found.add("dask.highlevelgraph.<da.Array from a graph>")
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found.add(f"{node.value.id}.{node.attr}")
    return sorted(m for m in found if m.split(".")[0] == "dask" and any(
        m == g or m.startswith(g + ".") for g in GRAPH_MODULES))


def test_graphs_are_built_only_by_the_engine():
    found = {m: uses for m, tree in TREES.items() if m not in GRAPH_BUILDERS
             for uses in [_graph_uses(tree)] if uses}
    unexplained = {m: u for m, u in found.items() if m not in KNOWN_GRAPH_BUILDERS}
    assert unexplained == {}, (
        "modules that build Dask graphs outside dqkm.parallel.engine (use its helpers: "
        f"map_blocks_reduce, map_blocks_with_state, map_tasks, array_from_tasks, ...): "
        f"{unexplained}")


def test_the_graph_check_sees_every_way_of_reaching_dask_graphs():
    code = ("import dask\nimport dask.highlevelgraph\nfrom dask.task_spec import Task\n"
            "from dask import delayed\nfrom dask.base import tokenize\nimport dask.array as da\n"
            "def f(x):\n    return dask.delayed(len)(x), da.ones(3).to_delayed()\n"
            "y = da.Array({('y', 0): 1}, 'y', ((1,),), dtype=int)\n")
    assert _graph_uses(ast.parse(code)) == [
        "dask.delayed", "dask.highlevelgraph", "dask.highlevelgraph.<da.Array from a graph>",
        "dask.task_spec", "dask.task_spec.Task"]
    assert _graph_uses(ast.parse("import dask.array as da\nfrom dask.base import tokenize\n"
                                 "x = da.ones(3).persist()\n")) == []


# ------------------------------------------------------------ function-level imports
# A function-level import needs a reason.  Third-party modules imported inside
# functions on purpose:
LAZY_THIRD_PARTY = {
    "pandas": "optional (the dataframe extra)",
    "dask.dataframe": "optional (the dataframe extra)",
    "h5py": "optional (the hdf5 extra)",
    "xarray": "optional (the netcdf extra)",
    "matplotlib": "optional (the plot extra)",
    "ipywidgets": "optional (the jupyter extra)",
    "IPython": "present only in a Jupyter kernel",
    "distributed": "loaded only where a Client is in use: importing dqkm.parallel or an "
                   "estimator does not import distributed",
    "fsspec": "only a URL path needs it; local files go through os",
    "sklearn.cluster": "only k-means‖'s last step (a weighted k-means on the driver) uses it",
}
# Modules whose every import of dqkm may be deferred, with the reason.
LAZY_MODULES = {
    "dqkm.cli": "the command line imports what a subcommand needs when it runs "
                "(`dqkm --help` loads neither dask nor the estimators)",
    "dqkm._cli_common": "as dqkm.cli",
    "dqkm._cli_inspect": "as dqkm.cli",
}
# Other function-level imports, (module, imported module) -> reason.  Keep it short:
# move the import to the module's top instead of adding a line.
KNOWN_FUNCTION_IMPORTS = {
    ("dqkm.cluster._base", "dqkm.parallel.engine"): "no cycle: can move up (file owned by sk)",
    ("dqkm.cluster._base", "dqkm.parallel.lloyd"): "no cycle: can move up (file owned by sk)",
    ("dqkm.cluster.qkmeans", "dqkm.kernels"): "no cycle: can move up (file owned by hier)",
    ("dqkm.cluster.minibatch_qkmeans", "dqkm.kernels"):
        "no cycle: can move up (file owned by sk)",
    ("dqkm.neighbors", "dqkm.data.paths"): "no cycle: can move up (file owned by mem)",
    ("dqkm.neighbors", "dqkm.data.serialize"): "no cycle: can move up (file owned by mem)",
    ("dqkm.neighbors", "dqkm.data.stores"): "no cycle: can move up (file owned by mem)",
    ("dqkm.neighbors", "dqkm.exceptions"): "no cycle: can move up (file owned by mem)",
    ("dqkm.neighbors", "dqkm.parallel.neighbors"): "no cycle: can move up (file owned by mem)",
    ("dqkm.neighbors", "scipy.sparse"): "no cycle: can move up (file owned by mem)",
    ("dqkm.parallel.embedding", "dqkm.parallel.lloyd"): "no cycle: can move up (owned by mem)",
    ("dqkm.data.row_state", "zarr"): "can move up (file owned by bounds)",
    ("dqkm.data.row_state", "dask"): "can move up (file owned by bounds)",
    ("dqkm.kernels.sparse_factors", "numba"): "can move up (file owned by palm)",
}


def _function_imports(tree):
    """(function, imported module) of every import inside a function."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    out += [(fn.name, a.name) for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    out.append((fn.name, "." * node.level + (node.module or "")))
    return sorted(set(out))


def _absolute(module, is_package, target):
    if not target.startswith("."):
        return target
    level = len(target) - len(target.lstrip("."))
    parts = (module if is_package else module.rpartition(".")[0]).split(".")
    base = ".".join(parts[:len(parts) - (level - 1)])
    rest = target.lstrip(".")
    return f"{base}.{rest}" if rest else base


def _unexplained_imports():
    bad = []
    for m, tree in TREES.items():
        if m in LAZY_MODULES:
            continue
        for fn, target in _function_imports(tree):
            target = _absolute(m, MODULES[m].name == "__init__.py", target)
            if any(target == t or target.startswith(t + ".") for t in LAZY_THIRD_PARTY):
                continue
            if not any(k == m and (target == t or target.startswith(t + "."))
                       for k, t in KNOWN_FUNCTION_IMPORTS):
                bad.append(f"{m}.{fn} imports {target}")
    return bad


def test_every_function_level_import_has_a_reason():
    bad = _unexplained_imports()
    assert bad == [], ("function-level imports without a reason (move them to the module's "
                       "top, or say why here):\n" + "\n".join(bad))


def test_the_import_check_sees_function_level_imports():
    tree = ast.parse("import os\ndef f():\n    import numpy as np\n    from .x import y\n"
                     "    from .. import z\n")
    assert _function_imports(tree) == [("f", ".."), ("f", ".x"), ("f", "numpy")]
    assert _absolute("dqkm.cluster.kmeans", False, "..parallel") == "dqkm.parallel"
    assert _absolute("dqkm.cluster", True, ".kmeans") == "dqkm.cluster.kmeans"


# ------------------------------------------------------------------- tests mirror
TESTS = Path(__file__).resolve().parent

# Top-level test files that test the package as a whole rather than one module.
SUITE_TESTS = {
    "test_common": "scikit-learn's estimator checks over every estimator",
    "test_docs": "the documentation site and the docstrings",
    "test_package": "the package's names and imports",
    "test_layering": "the package's shape (this file)",
    "test_notebook": "the example notebooks",
    "test_out_of_core": "fits on data larger than the memory given",
    "test_out_of_core_cluster": "fits on data larger than a cluster's memory",
    "test_killed_worker_estimators": "every estimator when a worker dies",
    "test_reproduce_applications": "the applications of the papers",
    "test_reproduce_qkmeans": "the clustering tables of the papers",
    "test_benchmark_scripts": "benchmark scripts that call dqkm's private kernels",
}
# Test files not (yet) where the package says, each with its reason.
KNOWN_MISPLACED_TESTS: dict[str, str] = {}


def _module_stems(package_dir):
    """Names of a package directory's modules, without a leading underscore."""
    return {p.stem.lstrip("_") for p in package_dir.glob("*.py") if p.stem != "__init__"}


def _misplaced_tests():
    bad = []
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if rel.startswith("sklearn_suite/") or rel in KNOWN_MISPLACED_TESTS:
            continue
        stem = path.stem[len("test_"):]
        sub = path.parent.relative_to(TESTS).parts
        if not sub and path.stem in SUITE_TESTS:
            continue
        if len(sub) > 1 or (sub and not (PACKAGE / sub[0] / "__init__.py").exists()):
            bad.append(f"{rel}: tests/{'/'.join(sub)}/ mirrors no dqkm subpackage")
            continue
        stems = _module_stems(PACKAGE / sub[0]) if sub else _module_stems(PACKAGE)
        if not any(stem == m or stem.startswith(m + "_") for m in stems):
            bad.append(f"{rel}: no module dqkm/{sub[0] + '/' if sub else ''}{stem}.py")
    return bad


def test_tests_mirror_the_package():
    """tests/<subpackage>/test_<module>[_topic].py for dqkm/<subpackage>/<module>.py,
    tests/test_<module>.py for a top-level module, and the suite-wide files."""
    bad = _misplaced_tests()
    assert bad == [], "test files not where the package says:\n" + "\n".join(bad)


def _text_matches(tree):
    """``"…connect…" in <expr>`` tests: errors told apart by their message."""
    return sorted(n.left.value for n in ast.walk(tree)
                  if isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant)
                  and isinstance(n.left.value, str) and "connect" in n.left.value.lower()
                  and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops))


def test_a_lost_scheduler_is_told_by_type_not_by_message_text():
    """dqkm.parallel.engine.scheduler_lost reads the client's status and the error's
    type; no module matches "connection" in an error's text."""
    found = {m: t for m, tree in TREES.items() for t in [_text_matches(tree)] if t}
    assert found == {}
    assert _text_matches(ast.parse("ok = 'Connection' in str(e)")) == ["Connection"]
