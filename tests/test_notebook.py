"""examples/monitoring.ipynb runs end to end (small data) with nbclient."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "monitoring.ipynb"


def test_monitoring_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("DQKM_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # ipykernel's built-in "python3" kernel runs with this interpreter (the .venv)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "dashboard: http" in text
    assert "QK-means: objective" in text
    assert "objective ratio QK-means / K-means" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2  # live plot + centroids
    assert not [o for o in outputs if o.get("output_type") == "error"]
