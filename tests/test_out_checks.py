"""A run directory's place is checked before the run by every way of running one (fred.run,
fred compare, fred sweep, fred run), not only by the command line; model kinds are named by
their own modules only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fred.scenario.errors import Refusal
from fred.scenario.loading import absolute_paths, validate
from fred.scenario.schema import KINDS
from fred.tools.cli_parser import build_parser
from fred.tools.sweep_jobs import run_one
from tests.conftest import tiny


@pytest.fixture
def mounted(tmp_path, monkeypatch) -> Path:
    """An existing folder that os.path.ismount says is a mount point."""
    out = tmp_path / "out"
    out.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == out or real(path))
    return out


def test_fred_run_refuses_a_mount_point_before_the_run(mounted, monkeypatch):
    import fred.runs.api

    monkeypatch.setattr(fred.runs.api, "execute", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(ValueError, match=f"--out {mounted} is a mount point"):
        fred.run(tiny(), out=mounted)


def test_a_sweep_or_compare_run_refuses_a_read_only_out_before_the_run(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: real(path, mode) and not (Path(path) == out and mode & os.W_OK)
    )
    import fred.runs.api

    monkeypatch.setattr(fred.runs.api, "execute", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(Refusal, match="is not writable"):
        run_one(validate(tiny()).resolved(), str(out))


def test_the_model_help_lists_every_kind():
    parser = build_parser()
    calibrate = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[
        "calibrate"
    ]
    said = " ".join(calibrate.format_help().split())
    for section in KINDS:
        assert section.model_fields["kind"].default in said


def test_code_dir_is_filled_in_for_the_kinds_that_have_one(tmp_path):
    for section in KINDS:
        kind = section.model_fields["kind"].default
        out = absolute_paths({"model": {"kind": kind}}, tmp_path)
        assert ("code_dir" in out["model"]) == ("code_dir" in section.model_fields), kind
