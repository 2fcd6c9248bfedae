"""Paths in a scenario are taken from the scenario file's folder, whatever the working directory;
a run directory's copy of the scenario names them absolutely, so resume and replay find them too."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import fred
from fred.scenario.loading import ScenarioError, load_scenario
from fred.tools.cli import main
from fred.tools.replay import replay
from tests.conftest import tiny

MODULE = "fred_test_paths_model"  # a module only the scenario's folder holds
FACTORY = """
import jax, jax.numpy as jnp

def make(feature_shape, outputs):
    size = 1
    for d in feature_shape:
        size *= d
    def init(key):
        return {"w": jax.random.normal(key, (size, outputs), jnp.float32) * 0.01}
    def apply(params, x):
        return x.reshape(x.shape[0], -1) @ params["w"]
    return init, apply
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """``mine/`` holding a scenario, its data file and its model's module, as a user keeps them."""
    folder = tmp_path / "mine"
    folder.mkdir()
    rng = np.random.default_rng(0)
    np.savez(
        folder / "blobs.npz", x=rng.standard_normal((64, 5)).astype(np.float32), y=rng.integers(0, 3, 64)
    )
    (folder / f"{MODULE}.py").write_text(FACTORY)
    data = tiny(
        name="mine", data={"source": {"kind": "arrays", "path": "blobs.npz"}}, stop={"max_updates": 4}
    )
    data["model"] = {"kind": "python", "factory": f"{MODULE}:make"}
    (folder / "mine.yaml").write_text(yaml.safe_dump(data))
    return folder


@pytest.fixture(autouse=True)
def _forget_the_module():
    yield
    sys.modules.pop(MODULE, None)


def test_a_scenario_run_from_another_folder_finds_its_data_and_code(project, monkeypatch, capsys):
    monkeypatch.chdir(project.parent)
    assert main(["run", "mine/mine.yaml", "--out", "run", "--quiet"]) == 0, capsys.readouterr().err
    saved = yaml.safe_load((project.parent / "run" / "scenario.yaml").read_text())
    assert saved["data"]["source"]["path"] == str(project / "blobs.npz")
    assert saved["model"]["code_dir"] == str(project)


def test_the_run_directorys_copy_finds_them_from_anywhere(project, tmp_path, monkeypatch):
    monkeypatch.chdir(project)
    run = fred.run("mine.yaml", out=tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    sys.modules.pop(MODULE, None)  # imported again, from model.code_dir
    assert replay(tmp_path / "run").passed
    again = fred.run(tmp_path / "run" / "scenario.yaml")
    assert again.summary["params_sha256"] == run.summary["params_sha256"]


def test_a_missing_file_names_the_absolute_path_looked_at(project, monkeypatch):
    monkeypatch.chdir(project.parent)
    with pytest.raises(ScenarioError) as refused:
        load_scenario("mine/mine.yaml", ["data.source.eval_path=held.npz"])
    assert (
        refused.value.problems
        == [  # a --set value is taken from the scenario's folder too, and the --set is named
            f"--set data.source.eval_path=held.npz: {project / 'held.npz'} does not exist ('held.npz' taken "
            f"from {project}); "
            "give an .npz file, a folder of .npy files, a .parquet file, or a folder written by datasets' "
            "save_to_disk"
        ]
    )


def test_a_missing_module_names_the_folder_looked_in(project, monkeypatch, capsys):
    monkeypatch.chdir(project.parent)
    assert main(["run", "mine/mine.yaml", "--set", "model.factory=fred_no_such_module:make", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        "cannot import 'fred_no_such_module'" in err and f"PYTHONPATH and {project} (model.code_dir)" in err
    )


def test_a_relative_code_dir_is_taken_from_the_scenario_folder(project, tmp_path, monkeypatch):
    code = project / "code"
    code.mkdir()
    (project / f"{MODULE}.py").rename(code / f"{MODULE}.py")
    monkeypatch.chdir(tmp_path)
    scenario = load_scenario(project / "mine.yaml", ["model.code_dir=code"])
    assert scenario.model.code_dir == str(code)
    assert fred.run(scenario).summary["status"] == "completed"


def test_a_scenario_built_in_python_takes_paths_from_the_working_directory(project, monkeypatch):
    monkeypatch.chdir(project)
    data = yaml.safe_load((project / "mine.yaml").read_text())
    resolved = fred.Scenario.model_validate(data)
    assert resolved.data.source.path == str(project / "blobs.npz") and resolved.model.code_dir == str(project)
    assert fred.run(data).summary["status"] == "completed"


def test_included_files_and_profiles_missing_are_named_absolutely(project, monkeypatch):
    monkeypatch.chdir(project.parent)
    with pytest.raises(ScenarioError, match=f"no such file: {project / 'fit.yaml'}"):
        load_scenario("mine/mine.yaml", ["include=fit.yaml"])
    with pytest.raises(ScenarioError, match=f"cluster.compute.profile: no such file: {project / 'p.yaml'}"):
        load_scenario("mine/mine.yaml", ["cluster.compute={profile: p.yaml}"])


def test_a_missing_scenario_file_is_named_by_its_absolute_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "mine/nope.yaml"]) == 2
    assert f"no such file: {tmp_path / 'mine' / 'nope.yaml'}" in capsys.readouterr().err
