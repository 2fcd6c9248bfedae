"""Run directories are named by the scenario's name, its seed and its hash; runs an earlier fred
wrote without the seed in the name are still found and reused."""

from __future__ import annotations

import json
import shutil

import pandas as pd

import fred
from fred.runs.api import default_run_dir, earlier_run_dir, finished_run
from fred.scenario.loading import validate
from fred.tools.compare import compare
from fred.tools.sweep import sweep
from tests.conftest import tiny


def test_the_seed_is_in_the_name_and_the_hash_tells_scenarios_apart(tmp_path):
    names = {default_run_dir(validate(tiny(seed=seed)), tmp_path).name for seed in (0, 1, 2)}
    assert sorted(n.rsplit("-", 1)[0] for n in names) == ["tiny-s0", "tiny-s1", "tiny-s2"]
    digest = validate(tiny(seed=1)).digest()
    assert default_run_dir(validate(tiny(seed=1)), tmp_path) == tmp_path / f"tiny-s1-{digest[:8]}"
    huge = validate(tiny(seed=10**60))  # a file name has at most 255 bytes
    assert default_run_dir(huge, tmp_path).name == f"tiny-s{'1' + '0' * 19}-{huge.digest()[:8]}"


def written_as_before(scenario_data: dict, runs) -> tuple:
    """A finished run of ``scenario_data`` in the directory an earlier fred named, ``<name>-<hash>``."""
    scenario = validate(scenario_data)
    fred.run(scenario, out=earlier_run_dir(scenario, runs))
    return scenario, earlier_run_dir(scenario, runs)


def test_compare_reuses_a_run_an_earlier_fred_named_without_the_seed(tmp_path):
    data = tiny(name="a")
    scenario, before = written_as_before(data, tmp_path / "runs")
    assert finished_run(scenario, tmp_path / "runs").path == before
    path = tmp_path / "a.yaml"
    path.write_text(json.dumps(data))
    table, ran = compare([str(path)], tmp_path / "out", tmp_path / "runs")
    assert ran == 0 and len(table) == 1
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [before.name]


def test_sweep_reuses_them_and_its_table_says_where_they_are(tmp_path):
    data = tiny(name="g", stop={"max_updates": 6})
    path = tmp_path / "g.yaml"
    path.write_text(json.dumps(data))
    _, before = written_as_before(tiny(name="g", stop={"max_updates": 6}, seed=0), tmp_path / "runs")
    table, ran = sweep(path, {"seed": [0, 1]}, tmp_path / "runs")
    assert ran == 1
    assert table["run_dir"].tolist()[0] == str(before)
    assert table["run_dir"].tolist()[1] == str(
        default_run_dir(validate(tiny(name="g", stop={"max_updates": 6}, seed=1)), tmp_path / "runs")
    )
    assert all(pd.notna(table["final_eval_loss"]))


def test_a_run_directory_of_another_scenario_under_the_earlier_name_is_not_reused(tmp_path):
    scenario, before = written_as_before(tiny(name="a"), tmp_path / "runs")
    other = validate(tiny(name="a", seed=3))
    shutil.copytree(before, earlier_run_dir(other, tmp_path / "runs"))  # its summary is of seed 7's scenario
    assert finished_run(other, tmp_path / "runs") is None
