"""The wide-area study (scenarios/wide_area/): its scenarios load, and its one command runs end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fred.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "scenarios" / "wide_area"


@pytest.mark.parametrize(
    "path", sorted(p for p in HERE.glob("*.yaml") if p.name != "sites.yaml"), ids=lambda p: p.name
)
def test_every_study_scenario_spans_two_sites_of_eight_workers(path):
    scenario = load_scenario(path)
    assert scenario.network.sites is not None and scenario.network.sites.nodes == [1, 1]
    assert scenario.cluster.workers == 16 and scenario.network.sharing == "rtt"


@pytest.mark.slow
def test_the_study_runs_from_one_command_and_writes_its_page(tmp_path):
    done = subprocess.run(
        [sys.executable, str(HERE / "study.py"), "--quick", "--jobs", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| DiLoCo, H = 500 | 4 |" in done.stdout and "## What it shows" in done.stdout
