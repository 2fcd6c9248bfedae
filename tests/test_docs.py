"""The documentation site builds without a warning, and its reference is generated from the code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fred.scenario import registry
from fred.scenario.schema import Scenario
from fred.tools.docgen import cli_reference, scenario_reference

ROOT = Path(__file__).resolve().parents[1]


def test_the_schema_reference_covers_every_field_and_strategy():
    page = scenario_reference()
    for field in Scenario.model_fields:
        assert f"| `{field}` |" in page
    for strategy in registry.all_strategies():
        assert f"### `{strategy.name}`" in page
        for field in strategy.config.model_fields:
            assert f"| `{field}` |" in page


def test_the_schema_reference_reads_types_and_bounds_not_pydantic_internals():
    page = scenario_reference()
    assert "FieldInfo" not in page and "Annotated" not in page and "Optional" not in page
    assert "| `hidden` | list[int] | `[64]` | each > 0 |" in page
    assert "| `eval_examples` | int or null | — | >= 1 |" in page


def test_the_cli_reference_covers_every_command():
    page = cli_reference()
    for command in ["run", "list", "compare", "plot", "trace"]:
        assert f"## `fred {command}`" in page


def test_mkdocs_build_is_strict_clean(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "scenario-schema" / "index.html").exists()


def engine_page_asgd() -> registry.Start:
    """The ``start`` of the ASGD that docs/engine.md writes out with the primitives alone."""
    page = (ROOT / "docs" / "engine.md").read_text()
    code = page.split("Here is ASGD written", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    started: list[registry.Start] = []
    namespace = {"register": lambda config, timing_only=False: lambda start: started.append(start) or start}
    exec(
        compile(code.replace("from fred.scenario.registry import register\n", ""), "docs/engine.md", "exec"),
        namespace,
    )  # noqa: S102
    return started[0]


def test_the_asgd_the_engine_page_writes_out_is_the_shipped_asgd(monkeypatch):
    # Also under a server crash, which the page's strategy leaves to the server's default
    # checkpoint (its parameters): the shipped one saves its rule's state too, which ASGD has none of.
    import fred
    from tests.conftest import tiny

    crash = {"server_crash": {"checkpoint_every_s": 0.03, "crashes": [{"at_s": 0.05, "restart_s": 0.02}]}}
    runs = {}
    for source in ["shipped", "page"]:
        if source == "page":
            monkeypatch.setitem(
                registry._REGISTRY, "asgd", registry.get("asgd")._replace(start=engine_page_asgd())
            )
        runs[source] = [
            fred.run(tiny(strategy={"name": "asgd"}, stop={"max_updates": 40}, faults=faults))
            for faults in [{}, crash]
        ]
    for shipped, page in zip(runs["shipped"], runs["page"]):
        assert page.summary["params_sha256"] == shipped.summary["params_sha256"]
        assert page.updates.equals(shipped.updates)
    assert runs["page"][1].summary["updates_lost"] == runs["shipped"][1].summary["updates_lost"] > 0


def test_every_test_the_reliability_page_names_exists():
    # The page says which test holds each promise: a renamed or deleted test would leave a promise unchecked.
    import re

    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", (ROOT / "docs" / "reliability.md").read_text())
    assert len(named) >= 20
    missing = [f"{file}::{test}" for file, test in named if f"def {test}(" not in (ROOT / file).read_text()]
    assert not missing


def test_the_docs_extra_has_what_mkdocs_serve_needs_and_the_readme_says_so():
    # mkdocs came only with [test]: serving the site meant installing the test suite's tools.
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [r.split(">")[0] for r in extras["docs"]] == ["mkdocs-material"]  # mkdocs itself comes with it
    assert "name: material" in (ROOT / "mkdocs.yml").read_text()  # the theme the extra brings
    for page in ("README.md", "docs/index.md"):
        assert 'pip install -e ".[docs]" && mkdocs serve' in (ROOT / page).read_text()
