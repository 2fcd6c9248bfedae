"""docs/validation.md's sections run, in their quick form, and report computed predictions."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def make_validation():
    spec = importlib.util.spec_from_file_location("make_validation", ROOT / "docs" / "make_validation.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules["make_validation"] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def test_the_sgp_table_is_fitted_on_two_entries_and_predicts_the_rest_within_15_percent():
    sgp = make_validation().module("sgp")
    result = sgp.predict(quick=True)
    fitted = [row.label for row in result.rows if not row.held_out]
    assert sorted(fitted) == sorted(sgp.FITTED_ON) and len(result.values) == 2
    for row, predicted in zip(result.rows, result.predicted_s):
        limit = 1e-3 if not row.held_out else 15.0  # two constants on two entries meet them exactly
        assert abs(result.error_pct(row, predicted)) < limit, (row.label, predicted, row.measured_s)
    assert result.warnings == []  # plausible values, each determined


def test_the_measurements_file_is_the_papers_table_as_seconds_per_iteration():
    sgp = make_validation().module("sgp")
    text = (ROOT / "scenarios" / "sgp" / "paper" / "measured.csv").read_text()
    rows = {line.split(",")[0]: line.split(",") for line in text.splitlines()[1:]}
    assert len(rows) == 13
    assert float(rows["sgp_4.yaml"][1]) == pytest.approx(11.8 * 3600 / 112_603, rel=1e-5)
    sgp.write_measurements()
    assert (
        ROOT / "scenarios" / "sgp" / "paper" / "measured.csv"
    ).read_text() == text  # the shipped file is current


OWN_TESTS = {
    "ddp",
    "hpsgd",
    "pipe_sgd",
    "fasgd",
    "hybrid",
}  # their quick sections run in tests/test_<paper>_*.py too


@pytest.mark.parametrize(
    "paper",
    [pytest.param(p, marks=(pytest.mark.slow,) if p in OWN_TESTS else ()) for p in make_validation().PAPERS],
)
def test_each_section_has_the_papers_figures_freds_predictions_and_the_command(paper):
    text = make_validation().module(paper).section(quick=True)
    assert text.startswith("## ")
    assert re.search(r"^\| .* \|$", text, re.MULTILINE)  # a table of the paper's figures against fred's
    assert re.search(r"[-+]\d+(\.\d+)? ?%", text)  # signed differences, computed
    assert "reproduce" in text.lower()
