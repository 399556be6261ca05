"""The example notebook runs top to bottom (real kfp.local run, real training) on tiny data."""
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.test_pipeline_local import _our_processes, _tiny_raw

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "ctr_pipeline.ipynb"


@pytest.fixture
def short_tmpdir(monkeypatch):
    """A short TMPDIR for the kernel, so the training gang's scratch files are removed afterwards
    (short: the gang puts AF_UNIX sockets there, whose paths are limited to 108 bytes)."""
    path = tempfile.mkdtemp(prefix="ctr-nb-")
    monkeypatch.setenv("TMPDIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_example_notebook_executes(tmp_path, sample_dir, monkeypatch, short_tmpdir):
    raw = _tiny_raw(sample_dir, tmp_path / "raw", rows=3000)
    monkeypatch.setenv("CTR_NOTEBOOK_DATA", str(raw))
    monkeypatch.setenv("CTR_NOTEBOOK_EPOCHS", "1")
    monkeypatch.setenv("CTR_NOTEBOOK_DIR", str(tmp_path))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "commit the notebook without outputs"
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "test AUC" in text and "gate passed: " in text, text[-2000:]
    (run_dir,) = tmp_path.glob("ctr-notebook-*")
    assert list(run_dir.glob("outputs/*/evaluate-ctr/report"))  # the run's outputs stayed in tmp_path
    html = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "text/html" in o.get("data", {})]
    assert html and "<svg" in html[0]["data"]["text/html"]  # the report rendered inline
    assert "ctr_notebook.yaml" in text
    assert _our_processes(str(run_dir)) == []
