"""Sweeps: every combination once, resumable, the same table in one process or several."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from fred.cli import main
from fred.loading import ScenarioError
from fred.sweep import parse_grid, sweep
from tests.conftest import tiny


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(stop={"max_updates": 6})))
    return path


def test_the_grid_parses_values_as_yaml():
    assert parse_grid(["strategy.lr=0.01,0.1", "seed=0,1,2"]) == {"strategy.lr": [0.01, 0.1], "seed": [0, 1, 2]}
    with pytest.raises(ScenarioError, match="path.to.key=value1,value2"):
        parse_grid(["strategy.lr"])


def test_a_sweep_runs_every_combination_once_and_resumes(scenario, tmp_path):
    grid = {"strategy.lr": [0.05, 0.1], "seed": [0, 1]}
    table, ran = sweep(scenario, grid, tmp_path / "runs")
    assert ran == 4 and len(table) == 4 and table["params_sha256"].nunique() == 4
    assert sorted(zip(table["strategy.lr"], table["seed"])) == [(0.05, 0), (0.05, 1), (0.1, 0), (0.1, 1)]
    bigger = {"strategy.lr": [0.05, 0.1, 0.2], "seed": [0, 1]}
    table2, ran2 = sweep(scenario, bigger, tmp_path / "runs")
    assert ran2 == 2 and len(table2) == 6  # only the new learning rate's runs
    pd.testing.assert_frame_equal(
        table.drop(columns=["wall_time_s"]), table2[table2["strategy.lr"] != 0.2].drop(columns=["wall_time_s"]).reset_index(drop=True)
    )


def test_parallel_processes_give_the_same_table(scenario, tmp_path):
    grid = {"seed": [3, 4]}
    serial, _ = sweep(scenario, grid, tmp_path / "a")
    parallel, ran = sweep(scenario, grid, tmp_path / "b", jobs=2)
    assert ran == 2
    assert list(serial["params_sha256"]) == list(parallel["params_sha256"])


def test_fred_sweep_writes_the_table(scenario, tmp_path, capsys):
    out = tmp_path / "sweep.parquet"
    args = ["sweep", str(scenario), "--grid", "seed=5,6", "--runs", str(tmp_path / "runs"), "--out", str(out)]
    assert main(args) == 0
    assert len(pd.read_parquet(out)) == 2 and "2 run, 0 reused" in capsys.readouterr().out


def test_a_bad_grid_value_is_named(scenario, tmp_path, capsys):
    assert main(["sweep", str(scenario), "--grid", "cluster.workers=2,-1", "--runs", str(tmp_path / "r")]) == 2
    assert "cluster.workers: got -1" in capsys.readouterr().err
