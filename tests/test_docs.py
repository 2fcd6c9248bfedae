"""The documentation site builds without a warning, and its reference is generated from the code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fred.docgen import cli_reference, scenario_reference
from fred.scenario import Scenario
from strategies import registry

ROOT = Path(__file__).resolve().parents[1]


def test_the_schema_reference_covers_every_field_and_strategy():
    page = scenario_reference()
    for field in Scenario.model_fields:
        assert f"| `{field}` |" in page
    for strategy in registry.all_strategies():
        assert f"### `{strategy.name}`" in page
        for field in strategy.config.model_fields:
            assert f"| `{field}` |" in page


def test_the_cli_reference_covers_every_command():
    page = cli_reference()
    for command in ["run", "list", "compare", "plot", "trace"]:
        assert f"## `fred {command}`" in page


def test_mkdocs_build_is_strict_clean(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "scenario-schema" / "index.html").exists()
