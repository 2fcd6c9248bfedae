"""The notebooks run top to bottom (small settings) without an error, and are stored executed
(full settings) so a reader sees the figures and tables without running them.

Re-execute them after changing one (the stored outputs are what GitHub and JupyterLab show):
``jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False
notebooks/*.ipynb``
"""

from __future__ import annotations

import ast
import json
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
MAX_BYTES = 400_000  # each stored notebook: small PNGs (dpi 80) and rounded tables


SLOW = {
    "quickstart",
    "staleness",
    "convergence_vs_time",
    "sweep",
}  # 5-17 s each, small settings and all: executed in `pytest -m slow`


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=(pytest.mark.slow,) if p.stem in SLOW else ()) for p in NOTEBOOKS],
    ids=[p.stem for p in NOTEBOOKS],
)
def test_notebook_executes(path, monkeypatch, tmp_path):
    monkeypatch.setenv("FRED_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The kernel's temporary folder is this test's own: another test running beside it (pytest -n)
    # may make and remove fred- folders in the shared one while this one looks for leftovers.
    kernel_tmp = tmp_path / "tmp"
    kernel_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(kernel_tmp))
    stored_bytes = path.read_bytes()
    notebook = nbformat.read(path, as_version=4)
    stored = json.loads(stored_bytes)["cells"]  # nbformat.read fills missing ids in, with a warning
    assert all("id" in cell for cell in stored), "every cell needs an id (nbformat 4.5)"
    before = set(kernel_tmp.iterdir())
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    said = [
        out.text for cell in notebook.cells for out in cell.get("outputs", []) if out.get("name") == "stderr"
    ]
    assert not [text for text in said if "Warning" in text], (
        said
    )  # a reader sees them (pandas deprecations were)
    assert not [p for p in set(kernel_tmp.iterdir()) - before if p.name.startswith("fred-")], (
        "temporary folders left"
    )
    assert path.read_bytes() == stored_bytes, "the small-settings run must not rewrite the stored notebook"


def _code(source: str) -> str:
    return "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith("%")
    )  # magics aside


def _shows(source: str, modules: set[str]) -> str | None:
    """What a cell's last statement shows: "print" for a print call; "value" for another
    expression not silenced by ';' (a table, a dict, a method's result), except a call of a
    module's function (shutil.rmtree, plt.show) which shows nothing; None for a statement."""
    code = _code(source)
    body = ast.parse(code).body
    if not body or not isinstance(body[-1], ast.Expr) or code.rstrip().endswith(";"):
        return None
    value = body[-1].value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
        return "print"
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
    ):
        if value.func.value.id in modules:
            return None
    return "value"


def _imported(sources: list[str]) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse("\n".join(_code(s) for s in sources))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_stored_executed_and_small(path):
    assert path.stat().st_size < MAX_BYTES, (
        f"{path.name}: {path.stat().st_size} bytes; store smaller figures or tables"
    )
    notebook = json.loads(path.read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    # executed top to bottom in one kernel, as a reader running it would
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), (
        "re-execute the whole notebook"
    )
    modules = _imported(["".join(cell["source"]) for cell in code])
    for cell in code:
        source = "".join(cell["source"])
        outputs = cell["outputs"]
        kinds = {kind for out in outputs for kind in out.get("data", {})}
        assert not [out for out in outputs if out["output_type"] == "error"], source
        assert not [out for out in outputs if out.get("name") == "stderr"], source
        if "plt.subplots(" in source:
            assert "image/png" in kinds, f"a figure is drawn but not stored:\n{source}"
        shows = _shows(source, modules)
        if shows == "print":
            assert [out for out in outputs if out.get("name") == "stdout"], (
                f"a print is not stored:\n{source}"
            )
        elif shows == "value":
            assert kinds & {"text/plain", "text/html"}, f"a value is shown but not stored:\n{source}"
        assert "execution" not in cell["metadata"], (
            "execution timestamps change on every run (record_timing=False)"
        )
        text = json.dumps([out for out in outputs if out["output_type"] != "display_data"])
        assert tempfile.gettempdir() + "/" not in text, f"a temporary path changes on every run:\n{source}"
