"""mkdocs hook: write the generated reference pages before the build reads the docs."""

from pathlib import Path

from fred.tools.docgen import cli_reference, scenario_reference


def on_pre_build(config, **kwargs):
    reference = Path(config["docs_dir"]) / "reference"
    reference.mkdir(exist_ok=True)
    (reference / "scenario-schema.md").write_text(scenario_reference())
    (reference / "cli.md").write_text(cli_reference())
