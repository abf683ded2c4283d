"""Render the stored reproduction results (``docs/results/*.json``) as Markdown.

Two kinds of file live here.  ``applications_*.json`` is what
``examples/reproduce_applications.py --results FILE`` stores: one record per
finished (data set, K, seed).  ``qkmeans_*.json`` is what
``examples/reproduce_qkmeans.py --results FILE`` stores: one record per
finished (case, K, seed, method), or a ``"summary": true`` record holding the
mean and std of an older run whose per-seed values were not kept.  This script
groups the records by data set, K and settings and prints one table per group
(mean ± std over the stored seeds), in the format of each script's own
tables.  The documentation build calls :func:`write_page` (the applications
records, on the *Stored reproduction results* page) and
:func:`write_qkmeans_pages` (each ``qkmeans_NAME.json`` into
``qkmeans_NAME.md`` beside it, which the QK-means reproduction page
includes), so the site always shows what the data files hold::

    python docs/results/render.py                 # print every file's tables
    python docs/results/render.py --out page.md   # write the applications tables as a page
"""

import argparse
import glob
import importlib
import json
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

METRICS = ["1-NN acc", "1-NN query s", "Nyström error", "SVM acc", "transform s", "AMI",
           "nnz", "flops", "fit s"]


def _script(name):
    """The module ``examples/<name>.py`` (its table formats are the ones rendered here)."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def _fmt(values):
    """Mean ± std of the non-missing values (the reproduction script's format)."""
    return _script("reproduce_applications").fmt(values)


def is_qkmeans(records):
    """Whether ``records`` are ``reproduce_qkmeans.py`` records (keyed by case and method)."""
    return any("method" in r["key"] for r in records)


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


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
        records = _load(path)
        if is_qkmeans(records):
            parts.append(f"## `{os.path.relpath(path, ROOT)}`\n\n{render_qkmeans(records)}")
            continue
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
    paths = [p for p in paths if not is_qkmeans(_load(p))]
    text = ("# Stored reproduction results\n\n"
            "Rendered from the data files under `docs/results/` by `docs/results/render.py`; "
            "mean ± std over the stored seeds.\n\n" + render(paths))
    return _write(out, text)


def _write(out, text):
    """Write ``text`` to ``out`` through a temporary file (left as it is when unchanged)."""
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            if f.read() == text:  # unchanged: keep the file (and Sphinx's cache) as it is
                return out
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out)
    return out


def _range(values, unit=""):
    lo, hi = min(values), max(values)
    return f"{lo}{unit}" if lo == hi else f"{lo}{unit} – {hi}{unit}"


def provenance_text(records):
    """One paragraph: the commands, code, dates and machine that measured ``records``."""
    prov = [r.get("provenance", {}) for r in records]
    commands = sorted({p["command"] for p in prov if p.get("command")})
    commits = sorted({str(p.get("commit")) for p in prov})
    dates = [p["date"] for p in prov if p.get("date")]
    cores = sorted({p.get("machine", {}).get("cores") for p in prov} - {None})
    loads = [p["machine"]["load average"][0] for p in prov
             if p.get("machine", {}).get("load average")]
    threads = sorted({p["omp_num_threads"] for p in prov if p.get("omp_num_threads")})
    where = (f"on the code of commit {', '.join(commits)}"
             + (f", dqkm {', '.join(sorted({p['dqkm'] for p in prov if p.get('dqkm')}))}"
                if any(p.get("dqkm") for p in prov) else "")
             + (f", {_range([d[:10] for d in dates])}" if dates else ""))
    machine = (f"{', '.join(map(str, cores))} cores" if cores else "")
    if loads:
        machine += f", load average (1 min) {_range(loads)} as the seeds finished"
    if threads:
        machine += f", OMP_NUM_THREADS={', '.join(threads)}"
    text = ("Measured by " + " and ".join(f"`{c}`" for c in commands) + f" {where}"
            + (f" ({machine})" if machine else "") + ".")
    if any(r.get("summary") for r in records):
        text += (" These are summary records: the mean ± std table that run printed, "
                 "transcribed (its per-seed values were not kept), so they measure that "
                 "commit's code, not the current one.")
    return text


def qkmeans_groups(records):
    """``{(summary, case, K, settings JSON): [record]}`` in the order first seen."""
    out = {}
    for r in records:
        key = r["key"]
        g = (bool(r.get("summary")), key["case"], key["K"],
             json.dumps(key["settings"], sort_keys=True))
        out.setdefault(g, []).append(r)
    return out


def qkmeans_cells(records):
    """``({(metric, method): cell text}, number of seeds)`` of one group's records."""
    rq = _script("reproduce_qkmeans")
    if records[0].get("summary"):
        cells = {(k, r["key"]["method"]): rq.fmt_stats(v["mean"], v["std"], k)
                 for r in records for k, v in r["values"].items()}
        return cells, max(r["n_seeds"] for r in records)
    values = rq.table_values(records)
    return ({k: rq.fmt(v, k[0]) for k, v in values.items()},
            len({r["key"]["seed"] for r in records}))


def render_qkmeans(records, level=3):
    """Markdown of ``reproduce_qkmeans.py`` records: their provenance, then one table per
    (case, K, settings) with a heading of ``level``."""
    rq = _script("reproduce_qkmeans")
    parts = [provenance_text(records) + "\n"]
    for (_, case, K, settings), group in qkmeans_groups(records).items():
        cells, n = qkmeans_cells(group)
        counts = {}
        for r in group:
            if not r.get("summary"):
                counts.setdefault(r["key"]["method"], set()).add(r["key"]["seed"])
        uneven = len({len(s) for s in counts.values()}) > 1
        radius = [r["method_settings"]["radius"] for r in group
                  if "radius" in r.get("method_settings", {})]
        st = json.loads(settings)
        text = ", ".join(f"{k} {v}" for k, v in st.items())
        if radius:
            text += f"; K-means ℓ1 radius {radius[0]:.4g}"
        parts.append(f"{'#' * level} {case}, K = {K} ({n} seed{'s' if n > 1 else ''})\n\n"
                     f"Settings: {text}."
                     + (" Not every method has every seed." if uneven else "")
                     + f"\n\n{rq.markdown_table(cells)}\n")
    return "\n".join(parts)


def write_qkmeans_pages(paths=None):
    """Render each ``qkmeans_*.json`` into the ``.md`` file beside it; the written paths."""
    paths = sorted(paths or glob.glob(os.path.join(HERE, "qkmeans_*.json")))
    return [_write(p[:-len(".json")] + ".md", render_qkmeans(_load(p)) + "\n")
            for p in paths]


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
