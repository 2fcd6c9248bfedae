"""scenarios/fasgd/validation.py's section, in its quick form: every claim judged from numbers it computed."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def validation():
    spec = importlib.util.spec_from_file_location(
        "validation_fasgd", ROOT / "scenarios" / "fasgd" / "validation.py"
    )
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def rows(page: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading``."""
    part = page.split(heading, 1)[1]
    table = [line for line in part.split("\n\n", 2)[1].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]


@pytest.mark.slow  # 7 s on 2 cores
def test_the_quick_section_judges_each_claim_from_runs_it_made(tmp_path, monkeypatch):
    module = validation()
    computed = []
    original = module.record
    monkeypatch.setattr(module, "record", lambda *args: computed.append(args[1:4]) or original(*args))
    page = module.section(quick=True)
    assert page.startswith("## ")
    for heading in [
        "### Claim: FASGD converges faster",
        "### Claim: FASGD's lead",
        "### Does FASGD's zero start",
        "### Claim: B-FASGD",
    ]:
        assert heading in page
    plan = module.QUICK
    # every method, the bias-corrected FASGD too, was run on both clocks at every scale: nothing is read from
    # a file
    assert {(m, n, c) for m, n, c in computed if m != "bfasgd"} == {
        (m, n, c) for m in module.TUNED for n in plan.clients for c in module.CLOCKS
    }
    # one chosen rate per method and clock, each from its own grid
    lr_rows = [r for r in rows(page, "the winner is in bold:") if r[0] in module.CLOCKS]
    assert len(lr_rows) == len(module.TUNED) * len(module.CLOCKS)
    for _clock, _, chosen, grid, place in lr_rows:
        assert f"**{chosen}:" in grid and place in {"inside", "on the low edge", "on the high edge"}
    # the comparison: a number (or 'diverged') per method, clock and scale, and a verdict per row
    faster = rows(page, "'lower cost' as the final eval loss.")
    assert len(faster) == len(module.CLOCKS) * len(plan.clients)
    for row in faster:
        assert all(re.match(r"^(\d|diverged)", cell) for cell in row[3:8]), row
        assert "final:" in row[8] and "over the run:" in row[8]
    assert re.search(r"Simulated clock: \*\*[a-z ]+\*\*", page) and re.search(
        r"Logical clock: \*\*[a-z ]+\*\*", page
    )
    # the corrected FASGD: a row per clock and scale, judged against SASGD and against FASGD as published
    corrected = rows(page, "The same seeds, measures and spread rule:")
    assert len(corrected) == len(module.CLOCKS) * len(plan.clients)
    for row in corrected:
        assert all(re.match(r"^(\d|diverged)", cell) for cell in row[2:8]), row
        assert row[9] in {"corrected lower", "uncorrected lower", "tie"}
    assert re.search(
        r"\*\*Does the zero start explain the claims not reproducing\?\*\* \*\*(Yes|In part|No)\*\*", page
    )
    assert "÷" in page and "python scenarios/fasgd/validation.py" in page


def test_the_cache_is_keyed_by_the_resolved_scenario(tmp_path):
    module = validation()
    plan = module.Plan(
        clients=(4,),
        seeds=(1,),
        updates=10,
        eval_every=10,
        grid_half=0,
        max_widen=0,
        c_grid=(),
        bfasgd_clocks=(),
    )
    cache = tmp_path / "runs.json"
    runs = module.Runs(plan, cache)
    first = runs.get("asgd", 4, "logical", 0.01, 1)
    runs.save()
    stored = json.loads(cache.read_text())["runs"]
    assert list(stored.values()) == [first]
    # the same scenario is read back without running; another (a different rate) is not answered from it
    again = module.Runs(plan, cache)
    assert again.get("asgd", 4, "logical", 0.01, 1) == first and again.computed == 0
    other = again.get("asgd", 4, "logical", 0.02, 1)
    assert (
        again.computed == 1 and other["lr"] == 0.02 and other["final_eval_loss"] != first["final_eval_loss"]
    )
    # --rerun ignores the file
    assert module.Runs(plan, cache, rerun=True).stored == {}
