"""The results file the reproduction scripts share (``--results FILE``).

A JSON list of records, each with a ``key`` (what was computed: data set, K,
seed, ...) and its values.  Several runs may write the same file: each write
merges by key with what is on disk and replaces the file in one rename, so a
reader never sees it half-written.
"""

import json
import os

__all__ = ["load_results", "save_results"]


def load_results(path):
    """The records stored in ``path`` (none when it does not exist)."""
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _key_text(record):
    return json.dumps(record["key"], sort_keys=True)


def save_results(path, records):
    """Write the whole file under a temporary name, then rename: never half-written.

    Records another run wrote to the file since this one read it are kept
    (merged by key), so runs of other cases may share one file.
    """
    merged = {_key_text(r): r for r in load_results(path)}
    merged.update((_key_text(r), r) for r in records)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(list(merged.values()), f, indent=1, ensure_ascii=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
