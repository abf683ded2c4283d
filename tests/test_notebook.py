"""examples/monitoring.ipynb runs end to end with nbclient, in both modes, and is committed
with its outputs."""

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "monitoring.ipynb"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _execute(tmp_path, monkeypatch, small, n_samples=None):
    monkeypatch.setenv("DQKM_NOTEBOOK_SMALL", "1" if small else "0")
    if n_samples is not None:
        monkeypatch.setenv("DQKM_NOTEBOOK_N_SAMPLES", str(n_samples))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # ipykernel's built-in "python3" kernel runs with this interpreter (the .venv)
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _widget_models(nb, name):
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return [m["state"] for m in state.values() if m.get("model_name") == name]


def _widget_views(nb, code):
    """How many widgets the code cell containing ``code`` displayed."""
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and code in c.source]
    return sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for o in cell.outputs)


def _check(nb):
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "dashboard: http" in text
    found = re.search(r"QK-means: objective \S+, (\d+) iterations", text)
    assert found, text
    n_iter = int(found.group(1))
    assert "objective ratio QK-means / K-means" in text
    # live plot (in its Output widget), convergence plot, centroids
    pngs = sum("image/png" in o.get("data", {}) for o in outputs)
    pngs += sum("image/png" in o.get("data", {}) for m in _widget_models(nb, "OutputModel")
                for o in m.get("outputs", []))
    assert pngs >= 3
    # the fit's progress widget was updated in place up to the last iteration
    bars = [b for b in _widget_models(nb, "IntProgressModel") if b.get("description") ==
            "QKMeans"]
    assert len(bars) == 1 and bars[0]["value"] == n_iter, bars
    labels = [h["value"] for h in _widget_models(nb, "HTMLModel")
              if h.get("value", "").startswith("QKMeans: ")]
    assert any(re.match(rf"QKMeans: (converged|stopped at max_iter) after {n_iter} "
                        rf"iterations", v) for v in labels), labels
    return text


# Both executions run on 5000 rows: what they check (the widgets, the log lines, the
# plots, the monotone objective) does not depend on the data's size.
N_SAMPLES = 5_000


def test_monitoring_notebook_small_mode(tmp_path, monkeypatch):
    nb = _execute(tmp_path, monkeypatch, small=True, n_samples=N_SAMPLES)
    _check(nb)
    assert _widget_views(nb, "qk.fit(") == 2  # verbose=1: no per-pass bars


def test_monitoring_notebook_large_mode_on_reduced_data(tmp_path, monkeypatch):
    nb = _execute(tmp_path, monkeypatch, small=False, n_samples=N_SAMPLES)
    text = _check(nb)
    assert "QKMeans run 1 iteration" in text  # the dqkm logger's INFO lines reach stderr
    # verbose=2: Dask's per-pass progress widgets are displayed too, beside the fit's own
    # widget and the live plot's Output (the only two at verbose=1)
    assert _widget_views(nb, "qk.fit(") > 2


def test_committed_notebook_has_its_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("dashboard: http" in o.get("text", "") for o in outputs)
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2
    if not _widget_models(nb, "IntProgressModel"):
        pytest.fail("the committed notebook lacks its widget state: run 'make notebook'")
