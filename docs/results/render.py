"""Render the stored reproduction results (``docs/results/*.json``) as Markdown.

Each JSON file is what ``examples/reproduce_applications.py --results FILE``
stores: one record per finished (data set, K, seed) with its settings and
values.  This script groups the records by data set, K and settings and prints
one table per group (mean ± std over the stored seeds), in the format of the
script's own tables.  The documentation build calls :func:`write_page`, so the
site always shows what the data files hold::

    python docs/results/render.py                 # print the tables
    python docs/results/render.py --out page.md   # write them as a page
"""

import argparse
import glob
import json
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

METRICS = ["1-NN acc", "1-NN query s", "Nyström error", "SVM acc", "transform s", "AMI",
           "nnz", "flops", "fit s"]


def _fmt(values):
    """Mean ± std of the non-missing values (the reproduction script's format)."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        from reproduce_applications import fmt
    finally:
        sys.path.pop(0)
    return fmt(values)


def groups(records):
    """``{(dataset, K, settings JSON): {(metric, method): [value per seed]}}``."""
    out = defaultdict(lambda: defaultdict(list))
    seeds = defaultdict(set)
    for r in records:
        key = r["key"]
        g = (key["dataset"], key["K"], json.dumps(key["settings"], sort_keys=True))
        seeds[g].add(key["seed"])
        for (metric, method), v in r["values"]:
            out[g][(metric, method)].append(float("nan") if v is None else v)
    return out, seeds


def table(values):
    """One Markdown table: a row per method, a column per metric."""
    methods = []
    for (_, m) in values:
        if m not in methods:
            methods.append(m)
    lines = ["| method | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
    for m in methods:
        cells = [_fmt(values[(k, m)]) if (k, m) in values else "" for k in METRICS]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(paths):
    """Markdown text of every group of every file in ``paths``."""
    parts = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
        grouped, seeds = groups(records)
        parts.append(f"## `{os.path.relpath(path, ROOT)}`\n")
        for (dataset, K, settings), values in sorted(grouped.items()):
            n = len(seeds[(dataset, K, settings)])
            settings_text = ", ".join(f"{k} {v}" for k, v in json.loads(settings).items())
            parts.append(f"### {dataset}, K = {K} ({n} seed{'s' if n > 1 else ''})\n\n"
                         f"Settings: {settings_text}.\n\n{table(values)}\n")
    return "\n".join(parts)


def write_page(out, paths=None):
    """Write the rendered tables of ``paths`` (default: every stored file) to ``out``."""
    paths = sorted(paths or glob.glob(os.path.join(HERE, "*.json")))
    text = ("# Stored reproduction results\n\n"
            "Rendered from the data files under `docs/results/` by `docs/results/render.py`; "
            "mean ± std over the stored seeds.\n\n" + render(paths))
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            if f.read() == text:  # unchanged: keep the file (and Sphinx's cache) as it is
                return out
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="results files (default: docs/results/*.json)")
    p.add_argument("--out", help="write a Markdown page here instead of printing")
    a = p.parse_args(argv)
    paths = sorted(a.files or glob.glob(os.path.join(HERE, "*.json")))
    if a.out:
        print(f"wrote {write_page(a.out, paths)}")
    else:
        print(render(paths))


if __name__ == "__main__":
    main()
