"""The documentation: the Sphinx site builds with warnings as errors, it renders in
headless Chromium, every public object has an API page, nothing in the repository
points outside it, and the helpers that write benchmark pages and render stored
results produce what the pages show."""

import doctest
import importlib
import io
import json
import os
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

CHROMIUM = check_rendered.find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian package 'chromium'; "
                             ".ci/run installs it before `make test`)")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from scratch with -W (any warning fails), in a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
         "-d", str(out / "doctrees"), DOCS, str(out / "html")],
        capture_output=True, text=True, env=env, timeout=900)
    return proc, out / "html"


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
    for mod in ("io", "datasets", "metrics", "exceptions", "neighbors", "kernel_approximation",
                "monitor", "progress", "kernels"):
        m = importlib.import_module(f"dqkm.{mod}")
        names += [f"dqkm.{mod}.{n}" for n in m.__all__ if not n.isupper()]
    return names


def test_api_reference_has_a_page_for_every_public_object(site):
    proc, html = site
    assert proc.returncode == 0, proc.stderr
    generated = html / "api" / "generated"
    # an object exported at the top level is documented there (dqkm.save, not dqkm.io.save)
    top = {n.split(".")[-1] for n in _public_names() if n.count(".") == 1}
    missing = [n for n in _public_names()
               if not (generated / f"{n}.html").exists()
               and not (n.startswith("dqkm.io.") and n.split(".")[-1] in top)
               and not (generated / f"dqkm.{n.split('.')[-1]}.html").exists()]
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


#: modules whose docstring examples run as doctests (each estimator class and each
#: public function of the user-facing modules has one)
DOCTEST_MODULES = ["dqkm.io", "dqkm.datasets", "dqkm.sparse", "dqkm.metrics", "dqkm.neighbors",
                   "dqkm.kernel_approximation", "dqkm.cluster.kmeans", "dqkm.cluster.qkmeans",
                   "dqkm.cluster.kmeans_l1", "dqkm.cluster.sekmeans", "dqkm.cluster.kmm"]
EXAMPLE_MODULES = ["dqkm.io", "dqkm.datasets", "dqkm.metrics", "dqkm.neighbors",
                   "dqkm.kernel_approximation"]


def test_every_estimator_and_public_function_has_an_example():
    import dqkm

    objs = {f"dqkm.{n}": getattr(dqkm, n) for n in dqkm.__all__ if n != "__version__"}
    for name in EXAMPLE_MODULES:
        mod = importlib.import_module(name)
        objs.update({f"{name}.{n}": getattr(mod, n) for n in mod.__all__
                     if callable(getattr(mod, n))})
    missing = [n for n, o in objs.items() if ">>> " not in (o.__doc__ or "")
               or "Examples\n" not in (o.__doc__ or "")]
    assert not missing, f"no Examples section with a doctest: {missing}"


@pytest.mark.parametrize("module", DOCTEST_MODULES)
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
