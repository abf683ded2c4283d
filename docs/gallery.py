"""Render the examples gallery: run every ``examples/gallery/*.py``, write its page.

Each script opens with a docstring: its first line is the page's title, the rest
(Markdown; ``:class:`` and ``:func:`` roles become cross-references) the text
above the code.  The documentation build (``docs/conf.py``) calls
:func:`write_pages`, which runs every script in the build's process (small data:
a few seconds each), with its standard output captured and a temporary working
directory, and writes ``docs/examples/<name>.md`` (text, code, output) and
``docs/examples/index.md``.  A script that raises fails the build, so the pages
always show what the current code prints::

    python docs/gallery.py            # run the scripts, write the pages
    python examples/gallery/NAME.py   # one example on its own
"""

import ast
import contextlib
import io
import os
import re
import runpy
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCES = os.path.join(ROOT, "examples", "gallery")
PAGES = os.path.join(HERE, "examples")

_ROLE = re.compile(r":(class|func|meth|mod|attr):`")


class ExampleError(RuntimeError):
    """An example script raised: the page would not show what the code does."""


def split_script(text):
    """``(title, description, code)`` of a script whose first statement is its docstring."""
    tree = ast.parse(text)
    doc = ast.get_docstring(tree, clean=True)
    if not doc or not tree.body:
        raise ValueError("an example script must open with a docstring (its first line is "
                         "the page's title)")
    title, _, description = doc.partition("\n")
    code = "\n".join(text.splitlines()[tree.body[0].end_lineno:]).strip("\n")
    return title.strip(), _ROLE.sub(r"{py:\1}`", description.strip()), code


def run_script(path):
    """Run ``path`` as ``__main__`` in a temporary working directory; return its stdout."""
    out = io.StringIO()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(path, run_name="__main__")
        except BaseException as e:
            raise ExampleError(f"example {os.path.relpath(path, ROOT)} failed: "
                               f"{type(e).__name__}: {e}") from e
        finally:
            os.chdir(cwd)
    return out.getvalue()


def page(name, title, description, code, output):
    """The Markdown page of one example."""
    return "\n".join([
        f"# {title}", "", description, "",
        f"Run it with `python examples/gallery/{name}.py`.", "",
        "```python", code, "```", "",
        "Output (printed when this page was built):", "",
        "```text", output.rstrip("\n"), "```", ""])


def write_pages(sources=SOURCES, pages=PAGES):
    """Run every ``*.py`` under ``sources``; write its page and the index under ``pages``.

    Returns the paths written, the index first.
    """
    os.makedirs(pages, exist_ok=True)
    entries, written = [], []
    for fname in sorted(f for f in os.listdir(sources) if f.endswith(".py")):
        name = fname[:-3]
        path = os.path.join(sources, fname)
        with open(path, encoding="utf-8") as f:
            title, description, code = split_script(f.read())
        target = os.path.join(pages, f"{name}.md")
        _write(target, page(name, title, description, code, run_script(path)))
        entries.append((name, title, description.split("\n\n")[0].replace("\n", " ")))
        written.append(target)
    index = ["# Examples", "",
             "Short scripts on small data, run when the site is built: each page shows the "
             "code and what it printed. The scripts are in `examples/gallery/`.", "",
             "```{toctree}", ":maxdepth: 1", ""]
    index += [name for name, _, _ in entries] + ["```", ""]
    index += [f"- [{title}]({name}.md): {summary}" for name, title, summary in entries]
    target = os.path.join(pages, "index.md")
    _write(target, "\n".join(index) + "\n")
    return [target] + written


def _write(path, text):
    """Write ``path`` only when its text changes (Sphinx then re-reads only what changed)."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    for p in write_pages():
        print(p)
