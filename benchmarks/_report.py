"""Write a benchmark's current table to its page under ``docs/benchmarks/``.

Every benchmark prints its table and, with ``--markdown``, replaces its own page
``docs/benchmarks/<name>.md`` with that table under a header naming the machine
(CPU cores, BLAS, library versions), the date and the exact command. The page
holds only the latest run; history lives in git. A script with two kinds of run
writes one page per kind (``bench_kmm.py``: ``kmm`` and, with ``--search``,
``kmm_search``). What a reader needs to know about a run (what is measured, the
sizes it covers, where an older full-size table is) goes into ``notes``: a page is
never edited by hand, and ``tests/test_docs.py`` checks that every page holds the
one header :func:`machine_header` writes.

Usage in a benchmark::

    from _report import add_markdown_option, write_page
    add_markdown_option(parser)
    ...
    if args.markdown:
        write_page("kmeans", "K-means per iteration", table_markdown, notes="...")
"""

import contextlib
import datetime
import os
import platform
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = os.path.join(ROOT, "docs", "benchmarks")

_LIBRARIES = ("numpy", "scipy", "numba", "dask", "distributed", "zarr", "scikit-learn",
              "dask-ml", "faiss-cpu", "pyfaust")


def add_markdown_option(parser):
    """Add ``--markdown`` (write the page) to an ``argparse`` parser."""
    parser.add_argument("--markdown", action="store_true",
                        help="replace this benchmark's page under docs/benchmarks/ with "
                             "the table of this run")
    return parser


def _versions():
    from importlib import metadata
    out = []
    for name in _LIBRARIES:
        try:
            out.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(out)


def _blas():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - scikit-learn depends on threadpoolctl
        return "unknown"
    import numpy  # noqa: F401  (load numpy's BLAS so threadpoolctl sees it)
    libs = [f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(libs) or "unknown"


def _load():
    try:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover - not available on this platform
        return "unknown"


def machine_header(command=None):
    """Markdown lines describing this run: machine, BLAS, versions, date, command."""
    # The script's path from the repository root, wherever the run was started.
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    command = command or " ".join(shlex.quote(a) for a in [script] + sys.argv[1:])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"- machine: {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{platform.system()} {platform.release()}",
        f"- BLAS: {_blas()}",
        f"- Python {platform.python_version()}; {_versions()}",
        f"- run: {now}; load average {_load()} (1 / 5 / 15 min; the machine may be shared)",
        f"- command: `{command}`",
    ]


def write_page(name, title, table, *, notes=None, command=None):
    """Replace ``docs/benchmarks/<name>.md`` with ``table`` (Markdown text).

    ``notes`` (Markdown) is placed between the header and the table: what is
    measured and how to read the ratios.
    """
    os.makedirs(PAGES, exist_ok=True)
    lines = [f"# {title}", "", *machine_header(command), ""]
    if notes:
        lines += [notes.strip(), ""]
    lines += [table.rstrip(), ""]
    path = os.path.join(PAGES, f"{name}.md")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)
    print(f"wrote {os.path.relpath(path)}")
    return path


def markdown_table(headers, rows):
    """A Markdown table from a header list and rows of already formatted cells."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


class _Tee:
    """A text stream that writes to the real stdout and keeps a copy."""

    def __init__(self, stream):
        self._stream = stream
        self._parts = []

    def write(self, text):
        self._parts.append(text)
        return self._stream.write(text)

    def flush(self):
        self._stream.flush()

    def getvalue(self):
        return "".join(self._parts)


@contextlib.contextmanager
def capture_stdout():
    """Keep a copy of what the block prints (it is still printed).

    Yields an object whose ``getvalue()`` returns the text printed so far.
    """
    tee = _Tee(sys.stdout)
    old, sys.stdout = sys.stdout, tee
    try:
        yield tee
    finally:
        sys.stdout = old


def printed_as_markdown(text, *, fenced=False):
    """Turn a benchmark's printed output into Markdown.

    ``fenced=True`` keeps it verbatim in a ``text`` code block (column-aligned
    tables); otherwise Markdown table rows stay as they are, ``#`` headings
    are shifted so that the highest is level 2 (under the page's title), and
    every other line becomes a paragraph of its own.
    """
    if fenced:
        return "```text\n" + text.strip("\n") + "\n```\n"
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    levels = [len(h) - len(h.lstrip("#")) for h in lines if h.startswith("#")]
    shift = 2 - min(levels) if levels else 0  # the page title is the only level-1 heading
    out, in_table = [], False
    for line in lines:
        if line.startswith("#"):
            line = "#" * max(2, len(line) - len(line.lstrip("#")) + shift) + line.lstrip("#")
        is_row = line.startswith("|")
        if not line:
            in_table = False
            out.append("")
        elif is_row:
            if not in_table and out and out[-1] != "":
                out.append("")
            out.append(line)
            in_table = True
        else:
            if in_table or (out and out[-1] != ""):
                out.append("")
            out.append(line)
            in_table = False
    return "\n".join(out) + "\n"
