"""The notebooks run top to bottom (small settings) without an error."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("FRED_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(path, as_version=4)
    stored = json.loads(path.read_text())["cells"]  # nbformat.read fills missing ids in, with a warning
    assert all("id" in cell for cell in stored), "every cell needs an id (nbformat 4.5)"
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), "store without outputs"
    before = set(Path(tempfile.gettempdir()).iterdir())
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    said = [out.text for cell in notebook.cells for out in cell.get("outputs", []) if out.get("name") == "stderr"]
    assert not [text for text in said if "Warning" in text], said  # a reader sees them (pandas deprecations were)
    assert not [p for p in set(Path(tempfile.gettempdir()).iterdir()) - before if p.name.startswith("fred-")], "temporary folders left"
