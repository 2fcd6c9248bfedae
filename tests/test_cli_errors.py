"""Refusals against bugs: bad input exits 2 with its fix; a bug in fred exits 3 and keeps its traceback."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from fred.scenario import registry
from fred.scenario.errors import Refusal
from fred.scenario.loading import validate
from fred.tools.cli import main
from fred.tools.refusals import INTERNAL, is_refusal
from fred.tools.sweep_jobs import run_one
from tests.conftest import tiny


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def numpy_bug() -> None:
    np.zeros(3).reshape(2)  # a ValueError raised inside numpy: a bug of the caller, not bad input


@pytest.fixture
def traceback_folder(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_an_internal_value_error_exits_3_and_keeps_its_traceback_in_a_file(
    traceback_folder, monkeypatch, capsys
):
    monkeypatch.setattr(registry, "all_strategies", numpy_bug)
    assert main(["list"]) == INTERNAL == 3
    err = capsys.readouterr().err
    [kept] = traceback_folder.glob("fred-traceback-*.txt")
    assert err.startswith(
        "fred: internal error, a bug in fred and not in your input (ValueError: cannot reshape"
    )
    assert str(kept) in err and len(err.splitlines()) == 1 and "Traceback" not in err
    text = kept.read_text()
    assert "Traceback (most recent call last)" in text and "numpy_bug" in text and "reshape" in text


def test_debug_prints_the_traceback_of_a_bug(traceback_folder, monkeypatch, capsys):
    monkeypatch.setattr(registry, "all_strategies", lambda: {}["missing"])
    for argv in (["--debug", "list"], ["list", "--debug"]):
        assert main(argv) == 3
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "KeyError: 'missing'" in err
        assert err.splitlines()[-1].endswith("its traceback is above")
    assert list(traceback_folder.iterdir()) == []


def test_a_bad_scenario_and_a_refused_path_still_exit_2(tmp_path, traceback_folder, capsys):
    assert (
        main(["run", str(write(tmp_path, tiny(cluster={"wrokers": 3}))), "--out", str(tmp_path / "o")]) == 2
    )
    assert "did you mean 'workers'" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert (
        main(["run", str(write(tmp_path, tiny())), "--out", str(tmp_path / "file" / "run"), "--quiet"]) == 2
    )
    assert (
        "is a file: choose another --out" in capsys.readouterr().err
    )  # a plain ValueError of fred.runs.paths
    assert main(["run", "--memory-limit-gb", "-1"]) == 2  # a Refusal of the command line's own
    assert list(traceback_folder.iterdir()) == []


def test_a_refusal_is_told_from_a_bug_by_its_class_or_where_it_was_raised(tmp_path):
    from fred.runs.paths import output_dir

    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError) as raised:
        output_dir(tmp_path / "file")  # `raise ValueError(...)` in fred.runs: on purpose
    assert is_refusal(raised.value) and is_refusal(Refusal("no")) and is_refusal(FileNotFoundError("x"))
    with pytest.raises(ValueError) as raised:
        numpy_bug()
    assert not is_refusal(raised.value)
    with pytest.raises(ValueError) as raised:
        int("x")  # a built-in's ValueError, raised in this test's frame
    assert not is_refusal(raised.value) and not is_refusal(KeyError("k"))


def test_a_sweep_worker_sends_a_refusal_back_as_one(tmp_path):
    (tmp_path / "file").write_text("")
    resolved = validate(tiny()).resolved()
    with pytest.raises(Refusal, match="is a file: choose another --out"):  # the class survives the pickling
        run_one(resolved, str(tmp_path / "file" / "run"))


@pytest.mark.parametrize("place", ["mount point", "read-only"])
def test_an_out_that_cannot_take_the_run_is_refused_before_the_run(place, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    if place == "mount point":
        monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == out)
    else:  # what access(2) says of a read-only file system, even to root (chmod does not stop root)
        real = os.access
        monkeypatch.setattr(
            os, "access", lambda path, mode: real(path, mode) and not (Path(path) == out and mode & os.W_OK)
        )
    import fred.runs.api

    monkeypatch.setattr(fred.runs.api, "run", lambda *a, **k: pytest.fail("the run started"))
    assert main(["run", str(write(tmp_path, tiny())), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"fred: --out {out} is ")
        and place.split()[-1].replace("read-only", "not writable") in err
    )
