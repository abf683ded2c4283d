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
KNOWN_FILE_IO = {
    "dqkm.parallel.kmm": "K-Multiple-Means spills its neighbour rows to a Zarr group; "
                         "being moved into the data layer with the KMM split.",
}


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
    """Kernels and graph code touch no file: stores, models and factor files go
    through dqkm.data."""
    bad = {m: sorted(h) for m, tree in TREES.items()
           if m.startswith(("dqkm.kernels", "dqkm.parallel")) and m not in KNOWN_FILE_IO
           for h in [_file_io(tree)] if h}
    assert bad == {}, bad


def test_the_file_check_sees_file_io():
    tree = ast.parse("import zarr\nimport numpy as np\n"
                     "def f(p):\n    np.savez(p)\n    with open(p) as f:\n        pass\n")
    assert _file_io(tree) == {"zarr", "np.savez()", "open()"}
