"""The tree is formatted and linted by ruff, as pyproject.toml configures it (line length 110)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    command = [
        shutil.which("ruff") or sys.executable,
        *([] if shutil.which("ruff") else ["-m", "ruff"]),
        *args,
    ]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("args", [("format", "--check", "."), ("check", ".")], ids=["format", "lint"])
def test_ruff_passes(args):
    done = _ruff(*args)
    assert done.returncode == 0, (
        f"ruff {' '.join(args)} (run `ruff format . && ruff check --fix .`):\n{done.stdout}{done.stderr}"
    )
