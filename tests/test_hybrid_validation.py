"""The grouped-hybrid section of docs/validation.md: its quick form computes every number it shows."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def validation():
    spec = importlib.util.spec_from_file_location(
        "validation_hybrid", ROOT / "scenarios" / "hybrid" / "validation.py"
    )
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)  # as docs/make_validation.py loads it: by path, not in sys.modules
    return loaded


@pytest.fixture(scope="module")
def quick() -> str:
    cache = ROOT / "scenarios" / "hybrid" / "validation_runs.json"
    before = cache.read_bytes() if cache.exists() else None
    text = validation().section(quick=True)
    assert (cache.read_bytes() if cache.exists() else None) == before  # the quick form never writes the cache
    return text


@pytest.mark.slow  # the quick section's runs: 8 s on 2 cores
def test_the_section_has_its_heading_tables_and_command(quick):
    assert quick.startswith("## ")
    assert "python scenarios/hybrid/validation.py --rerun" in quick
    for label in ("SSGD", "ASGD", "hybrid, mean", "hybrid, sum"):
        assert f"| {label} |" in quick


@pytest.mark.slow  # the quick section's runs: 8 s on 2 cores
def test_every_method_is_reported_as_mean_and_sd_over_three_seeds(quick):
    v = validation()
    assert len(v.QUICK.seeds) >= 3 and len(v.FULL.seeds) >= 3
    assert (
        v.TUNING_SEED not in v.FULL.seeds
    )  # the learning rates are tuned on a seed the comparison does not use
    rows = [
        line
        for line in quick.splitlines()
        if re.match(r"\| (SSGD|ASGD|hybrid, \w+) \| \d", line) and "±" in line
    ]
    assert len(rows) == 8  # four methods, at their tuned and at the paper's learning rate
    for row in rows:
        assert len(re.findall(r"\d+\.\d+ ± \d+\.\d+", row)) >= 3, row  # loss, accuracy, staleness at least


@pytest.mark.slow  # the quick section's runs: 8 s on 2 cores
def test_each_claim_gets_a_verdict_in_words_for_both_group_updates(quick):
    verdicts = [line for line in quick.splitlines() if line.startswith("- hybrid")]
    assert len(verdicts) == 2 * 2 * 3  # two learning-rate choices, two group updates, three claims
    for line in verdicts:
        assert "**reproduced**" in line or "**not reproduced on this problem**" in line, line
    assert re.search(r"[-+]\d+\.\d %", quick)  # signed differences, computed


def test_a_changed_scenario_is_not_read_from_the_cache(tmp_path, monkeypatch):
    v = validation()
    monkeypatch.setattr(v, "CACHE", tmp_path / "runs.json")
    setting = v.QUICK._replace(horizon_s=0.5)
    runs = v.Runs(use_cache=True, keep=True)
    first = runs.get("asgd", 0.03, 0, setting)
    runs.save()
    stored = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert list(stored.values()) == [first]
    again = v.Runs(use_cache=True, keep=False)
    assert (
        again.get("asgd", 0.03, 0, setting) == first and again.computed == 0
    )  # the same scenario: read back
    other = again.get("asgd", 0.03, 0, setting._replace(eval_every_s=0.25))
    assert again.computed == 1 and other["curve"] != first["curve"]  # another scenario: run, not read
