"""One way to write a number for every command: bytes, seconds, counts with their plurals, mean ± sd."""

from __future__ import annotations

import json
import math

import fred
from fred.tools import formats
from fred.tools.cli import main
from tests.conftest import tiny


def test_bytes_seconds_and_counts():
    assert [formats.bytes_(x) for x in (0, 950, 1000, 419e6, 2.85082e11, math.nan)] == [
        "0 B",
        "950 B",
        "1 kB",
        "419 MB",
        "285 GB",
        "-",
    ]
    assert [formats.seconds(x) for x in (0.6, 0.030331, 1800.0, 12345.6, 3.2e-5)] == [
        "0.6 s",
        "0.03033 s",
        "1800 s",
        "12,346 s",
        "3.2e-05 s",
    ]
    assert [formats.count(n, "run") for n in (0, 1, 6, 1024)] == ["0 runs", "1 run", "6 runs", "1,024 runs"]
    assert formats.count(1, "combination") == "1 combination" and formats.count(2, "is", "are") == "2 are"
    assert formats.percent(0.973) == "97.3%" and formats.number(None) == "-"


def test_plus_minus_has_one_spacing():
    assert formats.plus_minus(0.316045, 0.0476, str) == "0.316 ± 0.048"
    assert formats.plus_minus(2.5, 0.0, lambda v: f"{v:g}") == "2.5"  # the same for every seed: alone


def test_the_run_summary_writes_its_numbers_as_compare_does(tmp_path, capsys):
    out = tmp_path / "run"
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(tiny()))
    assert main(["run", str(path), "--out", str(out)]) == 0
    lines = dict(
        line.split(None, 1) for line in capsys.readouterr().out.splitlines() if not line.startswith("run ")
    )
    summary = fred.load_run(out).summary
    assert lines["bytes_sent"] == formats.bytes_(summary["bytes_sent"]) and lines["bytes_sent"].endswith(
        " kB"
    )
    assert lines["sim_time_s"] == formats.seconds(summary["sim_time_s"])
    assert lines["final_eval_accuracy"] == formats.percent(summary["final_eval_accuracy"])
    assert lines["params_sha256"] == summary["params_sha256"]
