"""The documentation: the Sphinx site builds with warnings as errors, it renders in
headless Chromium, every public object has an API page, nothing in the repository
points outside it, and the helpers that write benchmark pages and render stored
results produce what the pages show."""

import doctest
import importlib
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
sys.path.insert(0, DOCS)
sys.path.insert(0, os.path.join(DOCS, "results"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import check_rendered  # noqa: E402
import gallery  # noqa: E402

CHROMIUM = check_rendered.find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian package 'chromium'; "
                             ".ci/run installs it before `make test`)")


@pytest.fixture(scope="module", autouse=True)
def _site_build(request, tmp_path_factory):
    """The site built from scratch with -W (any warning fails), in a temporary folder.

    The build starts with the module's first test and runs beside the tests that do
    not need it (they come first in this file); :func:`site` waits for it.  A build
    no test waited for is stopped at the end of the module; none starts when no
    selected test of the module needs the site.
    """
    if not any(item.path == request.path and "site" in getattr(item, "fixturenames", ())
               for item in request.session.items):
        yield None
        return
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(out / "stdout.txt", "w") as stdout, open(out / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
             "-d", str(out / "doctrees"), DOCS, str(out / "html")],
            stdout=stdout, stderr=stderr, env=env)
    build = {"proc": proc, "out": out}
    yield build
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def site(_site_build):
    """``(completed process, html folder)`` of the module's one build."""
    proc, out = _site_build["proc"], _site_build["out"]
    if "result" not in _site_build:
        proc.wait(timeout=900)
        _site_build["result"] = subprocess.CompletedProcess(
            proc.args, proc.returncode, (out / "stdout.txt").read_text(),
            (out / "stderr.txt").read_text())
    return _site_build["result"], out / "html"


#: the public modules: dqkm itself and the submodules the API reference documents
PUBLIC_MODULES = ["dqkm", "dqkm.io", "dqkm.datasets", "dqkm.sparse", "dqkm.metrics",
                  "dqkm.exceptions", "dqkm.neighbors", "dqkm.kernel_approximation",
                  "dqkm.monitor", "dqkm.progress", "dqkm.kernels", "dqkm.cluster_config"]
#: modules whose doctests run although no public object is defined there (besides
#: every module that defines a public object or method: :func:`_defining_modules`)
EXTRA_DOCTEST_MODULES = ["dqkm.io", "dqkm.datasets", "dqkm.sparse", "dqkm.data.csr",
                         "dqkm.kernels._numba_args", "dqkm.kernels._sparse_factors_io",
                         "dqkm._docstrings"]
#: doctests that start a cluster (ClusterClient's example starts an in-process LocalCluster)
DISTRIBUTED_DOCTESTS = {"dqkm.cluster_config"}


def _is_dqkm(obj):
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "dqkm"


def _public_objects():
    """``{qualified name: object}`` of every public function and class of
    :data:`PUBLIC_MODULES` (an object exported twice appears once, under its first name)."""
    import dqkm  # noqa: F401

    seen, objs = set(), {}
    for modname in PUBLIC_MODULES:
        mod = importlib.import_module(modname)
        for n in mod.__all__:
            obj = getattr(mod, n)
            if n.startswith("_") or n.isupper() or not callable(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            objs[f"{modname}.{n}"] = obj
    return objs


def _public_methods(cls):
    """``{name: (defining class, function)}`` of the public methods dqkm defines for
    ``cls`` (in ``cls`` or a dqkm base class); methods that scikit-learn defines or
    generates (``get_params``, ``set_output``, ``set_fit_request``, ...) are not
    dqkm's and are left out, as are properties."""
    methods = {}
    for klass in cls.__mro__:
        if not _is_dqkm(klass):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or name in methods or isinstance(member, property):
                continue
            func = getattr(member, "__func__", member)
            if any(name in vars(k) for k in cls.__mro__[:cls.__mro__.index(klass)]):
                continue  # overridden by a class before klass (a non-dqkm one)
            if callable(func) and _is_dqkm(func):
                methods[name] = (klass, getattr(cls, name))
    return methods


def _defining_modules():
    """The modules that define a public object or one of their public methods."""
    mods = set()
    for obj in _public_objects().values():
        mods.add(obj.__module__)
        if inspect.isclass(obj):
            mods.update(klass.__module__ for klass, _ in _public_methods(obj).values())
    return mods


def _doctest_modules():
    mods = sorted(_defining_modules() | set(EXTRA_DOCTEST_MODULES))
    return [pytest.param(m, marks=pytest.mark.distributed) if m in DISTRIBUTED_DOCTESTS else m
            for m in mods]


def _numpydoc_gaps(name, obj):
    """What ``obj``'s docstring lacks: Parameters, Returns, an Example with a doctest."""
    from numpydoc.docscrape import FunctionDoc

    doc = inspect.getdoc(obj) or ""  # an override without a docstring inherits its base's
    parsed = FunctionDoc(obj, doc=doc) if not inspect.isclass(obj) else None
    params = []
    try:
        params = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
    except (TypeError, ValueError):
        pass
    gaps = []
    if params and "Parameters\n" not in doc:
        gaps.append("Parameters")
    if parsed is not None and not parsed["Returns"] and not parsed["Yields"]:
        gaps.append("Returns")
    if ">>> " not in doc or "Examples\n" not in doc:
        gaps.append("Examples")
    return [f"{name}: {g}" for g in gaps]


def test_every_public_object_and_method_has_parameters_returns_and_examples():
    """Every public function and class of the public modules, and every public
    method dqkm defines on them (fit, partial_fit, predict, transform, score,
    kneighbors, ...), has Parameters (when it takes any), Returns (functions and
    methods) and an Examples section with a doctest; error classes included."""
    gaps, methods = [], set()
    for name, obj in _public_objects().items():
        gaps += _numpydoc_gaps(name, obj)
        if inspect.isclass(obj):
            for m, (_, member) in _public_methods(obj).items():
                gaps += _numpydoc_gaps(f"{name}.{m}", member)
                methods.add(f"{name}.{m}")
    # the walk reaches the methods the API promises (and not scikit-learn's)
    assert {"dqkm.KMeans.fit", "dqkm.MiniBatchKMeans.partial_fit", "dqkm.KMeans.predict",
            "dqkm.QKMeans.transform", "dqkm.ClusterIndex.kneighbors", "dqkm.ClusterIndex.score",
            "dqkm.FactorNystroem.transform"} <= methods
    assert not methods & {"dqkm.KMeans.get_params", "dqkm.KMeans.set_output",
                          "dqkm.KMeans.set_fit_request"}
    assert not gaps, "docstrings without a section:\n" + "\n".join(gaps)


def test_every_public_example_runs_as_a_doctest():
    """The module of every public object and method is one whose doctests run."""
    ran = {getattr(p, "values", (p,))[0] for p in _doctest_modules()}
    assert _defining_modules() <= ran
    assert {"dqkm.cluster.minibatch", "dqkm.neighbors", "dqkm.exceptions"} <= ran


def test_shared_docstring_pieces_are_filled_in_every_estimator_method():
    """Every ``{piece}`` line of an estimator's method docstring is replaced by its
    text (numpydoc then sees plain sections), and an unknown piece is refused."""
    import re

    import dqkm
    from dqkm._docstrings import PIECES, fill_doc

    placeholder = re.compile(r"^\s*\{\w+\}\s*$", re.MULTILINE)
    filled = []
    for name in dqkm.__all__:
        obj = getattr(dqkm, name)
        if not inspect.isclass(obj):
            continue
        for m in ("fit", "predict", "transform", "score", "fit_predict"):
            doc = inspect.getdoc(getattr(obj, m, None)) or ""
            assert not placeholder.search(doc), f"{name}.{m} keeps a placeholder"
            filled += [f"{name}.{m}"] if PIECES["labels"].splitlines()[0] in doc else []
    assert {"KMeans.predict", "QKMeans.predict", "KMultipleMeans.predict",
            "SparseEmbeddedKMeans.predict"} <= set(filled)

    def method():
        """Returns
        -------
        {label}
        """

    with pytest.raises(KeyError, match=r"placeholder \{label\} names no piece .*labels"):
        fill_doc(method)


@pytest.mark.parametrize("module", _doctest_modules())
def test_docstring_examples_run(module):
    mod = importlib.import_module(module)
    tests = [t for t in doctest.DocTestFinder().find(mod, module) if t.examples]
    assert tests, f"{module} has no doctest"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    for t in tests:
        runner.run(t, out=report.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, report.getvalue()


def test_nothing_points_outside_the_repository():
    """No tracked file names the papers' folder or notes that are not in the repository."""
    forbidden = ["../" + "shared", "DESIGN" + ".md", "ANCHORS" + ".md"]
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    hits = []
    for name in filter(None, files):
        path = os.path.join(ROOT, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            hits += [f"{name}:{lineno}: {w}" for w in forbidden if w in line]
    assert not hits, "references outside the repository:\n" + "\n".join(hits)


def test_results_are_rendered_as_mean_and_std_per_case(tmp_path):
    import render

    records = [{"key": {"dataset": "digits", "K": 8, "seed": s, "settings": {"qk": True}},
                "values": [[["AMI", "K-means"], v], [["1-NN acc", "sklearn brute"], None]]}
               for s, v in ((0, 0.5), (1, 0.7))]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(records))
    out = render.write_page(str(tmp_path / "page.md"), [str(path)])
    text = open(out, encoding="utf-8").read()
    assert "### digits, K = 8 (2 seeds)" in text
    assert "| K-means |  |  |  |  |  | 0.600 ± 0.100 |" in text
    assert "| sklearn brute | N/A |" in text


def test_benchmark_page_holds_only_the_latest_table(tmp_path, monkeypatch):
    import _report

    monkeypatch.setattr(_report, "PAGES", str(tmp_path))
    with _report.capture_stdout() as out:
        print("data: 10 rows")
        print("| a | b |")
        print("|---|---|")
        print("| 1 | 2 |")
        print("ratio: 2.0x")
    body = _report.printed_as_markdown(out.getvalue())
    assert body == "data: 10 rows\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nratio: 2.0x\n"
    _report.write_page("demo", "Demo", "old table", command="bench_demo.py --quick")
    path = _report.write_page("demo", "Demo", body, notes="What is measured.",
                              command="bench_demo.py --quick")
    text = open(path, encoding="utf-8").read()
    assert text.startswith("# Demo\n\n- machine: ")
    assert "- command: `bench_demo.py --quick`" in text and "CPU cores" in text
    assert "old table" not in text and "| 1 | 2 |" in text
    assert sorted(os.listdir(tmp_path)) == ["demo.md"]
    assert _report.printed_as_markdown("x  y\n1  2\n", fenced=True) == "```text\nx  y\n1  2\n```\n"


BENCHMARK_PAGES = os.path.join(DOCS, "benchmarks")
#: the lines :func:`_report.machine_header` writes, in order (the command's group: the script)
HEADER_LINES = (
    r"- machine: \S+, \d+ CPU cores, .*",
    r"- BLAS: \S.*",
    r"- Python \d+\.\d+\.\d+\S*; .*",
    r"- run: \d{4}-\d\d-\d\d \d\d:\d\d UTC; load average (?:[\d.]+ / [\d.]+ / [\d.]+|unknown) "
    r"\(1 / 5 / 15 min; the machine may be shared\)",
    r"- command: `(?:\w+=\S* )*(?:\S*python\S* )?benchmarks/(bench_\w+)\.py(?: [^`]*)?`")
#: a fenced code block's opening line and its info string (```{toctree} is a directive)
FENCE = re.compile(r"^(```+|~~~+)\s*(\S*)")


def _code_blocks(lines):
    """``[(line number, info string)]`` of the fenced blocks that are not directives."""
    blocks, fence = [], None
    for i, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            if not m.group(2).startswith("{"):
                blocks.append((i, m.group(2)))
        elif fence is not None and line.strip() == fence:
            fence = None
    return blocks


def benchmark_page_problems(name, text, scripts=os.path.join(ROOT, "benchmarks")):
    """What in the page ``name`` (``docs/benchmarks/<name>``) was not written by
    ``benchmarks/_report.py``'s ``write_page``: the index holds no machine header and
    only directives and command blocks; every other page opens with its title and the
    one header of ``machine_header``, whose command names a ``benchmarks/*.py`` script
    that writes this page, and holds a code block only where that script prints its
    table verbatim (``fenced=True``, one block)."""
    lines = text.splitlines()
    commands = [i for i, line in enumerate(lines, 1) if line.startswith("- command:")]
    blocks = _code_blocks(lines)
    if name == "index.md":
        return ([f"index.md:{i}: a machine header" for i in commands]
                + [f"index.md:{i}: a code block of pasted output (```{info})"
                   for i, info in blocks if info not in ("bash", "sh")])
    problems = []
    if len(commands) != 1:
        problems.append(f"{name}: {len(commands)} machine headers ('- command:' lines at "
                        f"{commands}), expected the one write_page writes")
    if len(lines) < 8 or not lines[0].startswith("# ") or lines[1] or lines[7]:
        return problems + [f"{name}: does not open with '# title', a blank line, the "
                           "5 lines of _report.machine_header and a blank line"]
    for pattern, line in zip(HEADER_LINES, lines[2:7]):
        if not re.fullmatch(pattern, line):
            problems.append(f"{name}: header line not written by _report.machine_header: "
                            f"{line!r}")
    m = re.fullmatch(HEADER_LINES[-1], lines[6])
    source = ""
    if m:
        path = os.path.join(scripts, m.group(1) + ".py")
        source = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if not re.search(r"write_page\(\s*['\"]%s['\"]" % re.escape(name[:-3]), source):
            problems.append(f"{name}: its command names benchmarks/{m.group(1)}.py, which "
                            f"does not write this page (write_page({name[:-3]!r}, ...))")
    allowed = 1 if "fenced=True" in source else 0
    problems += [f"{name}:{i}: a code block of pasted output (```{info}); a page holds "
                 "the table its script writes" for i, info in blocks[allowed:]]
    return problems


def test_benchmark_pages_hold_one_header_written_by_report():
    """Every page under docs/benchmarks/ is its script's latest ``--markdown`` run: one
    machine header, written by ``_report.machine_header``, whose command names the
    ``benchmarks/*.py`` script that writes the page; no pasted output elsewhere."""
    problems = []
    for name in sorted(os.listdir(BENCHMARK_PAGES)):
        if name.endswith(".md"):
            with open(os.path.join(BENCHMARK_PAGES, name), encoding="utf-8") as f:
                problems += benchmark_page_problems(name, f.read())
    assert not problems, "benchmark pages not written by their script:\n" + "\n".join(problems)


def test_benchmark_page_check_accepts_write_page_and_refuses_hand_edits(tmp_path, monkeypatch):
    import _report

    monkeypatch.setattr(_report, "PAGES", str(tmp_path))
    path = _report.write_page("kmm", "K-Multiple-Means", "| a |\n|---|\n| 1 |",
                              notes="What is measured.",
                              command="benchmarks/bench_kmm.py --quick --markdown")
    page = open(path, encoding="utf-8").read()
    assert benchmark_page_problems("kmm.md", page) == []
    # two runs joined by hand: a second header below the first
    joined = page + "\n## Another run\n\n" + "\n".join(_report.machine_header(
        "benchmarks/bench_kmm.py --search --markdown")) + "\n"
    assert any("2 machine headers" in p for p in benchmark_page_problems("kmm.md", joined))
    # a note added by hand to the run line
    noted = page.replace("(1 / 5 / 15 min; the machine may be shared)", "about 20 (busy)")
    assert any("header line not written by _report.machine_header: '- run:" in p
               for p in benchmark_page_problems("kmm.md", noted))
    # pasted output in a code block, on a page whose script does not write one
    pasted = page + "\n```\nbench_kmm: quick=False\n| x |\n```\n"
    assert any("a code block of pasted output" in p
               for p in benchmark_page_problems("kmm.md", pasted))
    # a command that names no script, or a script that does not write this page
    for command, found in (("make bench", "header line not written"),
                           ("benchmarks/bench_sekmeans.py", "does not write this page")):
        other = page.replace("benchmarks/bench_kmm.py --quick --markdown", command)
        assert any(found in p for p in benchmark_page_problems("kmm.md", other)), command
    index = "# Benchmarks\n\n```bash\nmake bench\n```\n\n```{toctree}\n*\n```\n"
    assert benchmark_page_problems("index.md", index) == []
    assert benchmark_page_problems("index.md", index + "\n```text\n| 1 |\n```\n") == [
        "index.md:11: a code block of pasted output (```text)"]


def _git_show(commit, path):
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True,
                          text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.mark.parametrize("script, row", [
    ("bench_kmm", "| dqkm KMM reference, dense SVD      |    164.25 |   70.0x |"),
    ("bench_sekmeans", "| 256 | 0.084 | 1.505 | 0.261 | 17.9× |")], ids=["kmm", "sekmeans"])
def test_full_size_table_named_on_a_page_is_in_git_history(script, row):
    """A page whose run is smaller than the script's full size names the commit and file
    that hold the last full-size table; that file at that commit holds it."""
    bench = importlib.import_module(script)
    path, page_commit, code_commit, _ = bench.FULL_SIZE_PAGE
    if subprocess.run(["git", "cat-file", "-e", f"{page_commit}^{{commit}}"], cwd=ROOT,
                      capture_output=True).returncode != 0:
        pytest.skip(f"commit {page_commit} is not in this checkout's history (a shallow "
                    "clone); the check needs it")
    text = _git_show(page_commit, path)
    assert text is not None and row in text, f"{path} at {page_commit}"
    assert _git_show(code_commit, "dqkm/__init__.py") is not None, code_commit
    with open(os.path.join(BENCHMARK_PAGES, script[len("bench_"):] + ".md"),
              encoding="utf-8") as f:
        page = f.read()
    assert f"`{path}` at commit {page_commit}" in page


def test_gallery_page_shows_the_script_and_what_it_printed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.py").write_text('"""Say hello\n\nUses :class:`dqkm.KMeans` in its text."""\n\n'
                                  'print("hello", 6 * 7)\n')
    written = gallery.write_pages(str(src), str(tmp_path / "pages"))
    assert [os.path.basename(p) for p in written] == ["index.md", "hello.md"]
    text = (tmp_path / "pages" / "hello.md").read_text()
    assert text.startswith("# Say hello\n\nUses {py:class}`dqkm.KMeans` in its text.")
    assert '```python\nprint("hello", 6 * 7)\n```' in text
    assert "```text\nhello 42\n```" in text
    index = (tmp_path / "pages" / "index.md").read_text()
    assert "```{toctree}" in index and "\nhello\n" in index and "[Say hello](hello.md)" in index


def test_gallery_refuses_a_failing_script_and_one_without_docstring(tmp_path):
    (tmp_path / "broken.py").write_text('"""Broken"""\nraise ValueError("no data")\n')
    with pytest.raises(gallery.ExampleError, match=r"broken\.py failed: ValueError: no data"):
        gallery.write_pages(str(tmp_path), str(tmp_path / "pages"))
    with pytest.raises(ValueError, match="must open with a docstring"):
        gallery.split_script("print(1)\n")


# ---------------------------------------------------------------- the built site
# (last in the file: the tests above run while the build started by _site_build runs)

def test_site_builds_without_warnings(site):
    proc, html = site
    assert proc.returncode == 0, f"sphinx -W failed:\n{proc.stdout}\n{proc.stderr}"
    for page in ("index.html", "getting_started.html", "user_guide/choosing.html",
                 "algorithms/qkmeans.html", "reproducing/index.html", "benchmarks/index.html",
                 "api/index.html", "architecture.html"):
        assert (html / page).exists(), page


def _public_names():
    import dqkm

    names = [f"dqkm.{n}" for n in dqkm.__all__ if n != "__version__"]
    for mod in PUBLIC_MODULES[1:]:
        m = importlib.import_module(mod)
        names += [f"{mod}.{n}" for n in m.__all__ if not n.isupper()]
    return names


def test_api_reference_has_a_page_for_every_public_object(site):
    proc, html = site
    assert proc.returncode == 0, proc.stderr
    generated = html / "api" / "generated"

    def obj(name):
        module, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(module), attr)

    # an object exported in two places has one page (dqkm.save, not dqkm.io.save;
    # dqkm.datasets.make_sparse_blobs, not dqkm.sparse.make_sparse_blobs)
    pages = {p.stem for p in generated.glob("*.html")}
    documented = [obj(n) for n in pages if n.startswith("dqkm.")]
    missing = [n for n in _public_names()
               if n not in pages and not any(obj(n) is o for o in documented)]
    assert not missing, f"public objects without an API page: {missing}"


@needs_chromium
def test_pages_render_in_headless_chromium(site):
    proc, html = site
    assert proc.returncode == 0, proc.stderr
    assert check_rendered.check(str(html), CHROMIUM) == []


@needs_chromium
def test_render_check_fails_when_a_page_does_not_render(site, tmp_path):
    proc, html = site
    assert proc.returncode == 0, proc.stderr
    broken = tmp_path / "html"
    shutil.copytree(html, broken)
    (broken / "user_guide" / "choosing.html").write_text(
        "<html><head><title>x</title></head><body>"
        "<code class=\"xref py py-class docutils literal\">dqkm.Nothing</code>"
        "<script>undefinedFunction()</script></body></html>")
    (broken / "api" / "generated" / "dqkm.KMeans.html").unlink()
    found = check_rendered.check(str(broken), CHROMIUM)
    text = "\n".join(found)
    assert "user_guide/choosing.html: title 'x'" in text
    assert "user_guide/choosing.html: no <nav> element" in text
    assert "cross-reference(s) without a target" in text
    assert "uncaught: ReferenceError" in text
    assert "api/generated/dqkm.KMeans.html: not built" in text
    assert not any(line.startswith("index.html") for line in found)


def test_gallery_pages_are_built_with_their_output(site):
    proc, html = site
    assert proc.returncode == 0, proc.stderr
    scripts = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "examples", "gallery"))
                     if f.endswith(".py"))
    assert len(scripts) >= 3
    index = (html / "examples" / "index.html").read_text()
    for name in scripts:
        page = (html / "examples" / f"{name}.html").read_text()
        assert f'href="{name}.html"' in index, name
        assert "Output (printed when this page was built)" in page, name
    kmeans = (html / "examples" / "kmeans_zarr.html").read_text()
    assert "same labels as scikit-learn: True" in kmeans
    assert 'href="examples/index.html"' in (html / "index.html").read_text()
