"""Sphinx configuration of dqkm's documentation site (``make docs``).

Built with warnings as errors (``-W --keep-going``) and nitpicky references for
dqkm's own objects; no intersphinx (the build needs no network).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import dqkm  # noqa: E402

project = "dqkm"
author = "dqkm developers"
copyright = "dqkm developers"
version = release = dqkm.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "ALGORITHMS.md", "BENCHMARKS.md", "ARCHITECTURE.md",
                    "results/*.md"]
templates_path = ["_templates"]

# Markdown: headings become link targets; `{math}` and $…$ stay as written.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# API reference: one page per public object, generated at build time.
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"
autoclass_content = "class"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks = set()

# A reference to one of dqkm's objects that does not resolve is an error; a
# reference to another package's object is plain text (no intersphinx).
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!dqkm\b).*")]

html_theme = "pydata_sphinx_theme"
html_title = "dqkm"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_context = {"default_mode": "light"}
html_static_path = []
html_show_sourcelink = False
html_last_updated_fmt = None


def _architecture(app, docname, source):
    """The Architecture page is ``docs/ARCHITECTURE.md``, kept where maintainers read it."""
    if docname != "architecture":
        return
    path = os.path.join(HERE, "ARCHITECTURE.md")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            source[0] = f.read()


def _skip_member(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated metadata-routing setters (``set_*_request``)."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return None


def _render_results(app):
    """Render ``docs/results/*.json`` before reading: the applications records into
    ``reproducing/results.md``, each ``qkmeans_*.json`` into the ``.md`` beside it (which
    ``reproducing/qkmeans.md`` includes)."""
    sys.path.insert(0, os.path.join(HERE, "results"))
    try:
        import render
    finally:
        sys.path.pop(0)
    render.write_page(os.path.join(HERE, "reproducing", "results.md"))
    render.write_qkmeans_pages()


def _render_gallery(app):
    """Run ``examples/gallery/*.py`` and write ``examples/*.md`` before reading."""
    sys.path.insert(0, HERE)
    try:
        import gallery
    finally:
        sys.path.pop(0)
    gallery.write_pages()


def setup(app):
    app.connect("builder-inited", _render_results)
    app.connect("builder-inited", _render_gallery)
    app.connect("source-read", _architecture)
    app.connect("autodoc-skip-member", _skip_member)
