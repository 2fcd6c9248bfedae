"""The PyTorch DDP table's validation (scenarios/ddp/): its measurements as shipped, its scenarios,
and its predictions within the tolerances the section holds them to."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from fred.scenario.loading import load_scenario
from fred.tools.fit import Predictor, read_measurements

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "scenarios" / "ddp"


def validation():
    spec = importlib.util.spec_from_file_location("validation_ddp", DDP / "validation.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def test_the_measurement_files_are_the_tables_as_seconds_per_iteration():
    ddp = validation()
    shipped = {
        path: path.read_text()
        for path in (DDP / "measured.csv", DDP / "later" / "measured.csv", DDP / "dlperf" / "measured.csv")
    }
    ddp.write_measurements()
    for path, text in shipped.items():
        assert path.read_text() == text, path  # the shipped files are current
    rows = {row.label: row.measured_s for row in read_measurements(DDP / "measured.csv")}
    assert rows["resnet50_64.yaml"] == 0.113
    assert rows["resnet50_16_1mb.yaml"] == pytest.approx(0.109 / (1 - 0.054), rel=1e-5)
    assert ddp.dlperf_s(32) == pytest.approx(128 * 32 / 10032.72)


@pytest.mark.parametrize("path", sorted(DDP.rglob("*.yaml")), ids=lambda p: str(p.relative_to(DDP)))
def test_every_ddp_scenario_loads(path):
    if path.name == "cluster.yaml":
        return
    scenario = load_scenario(path)
    assert scenario.network.allreduce == "nccl" and scenario.workload.bucket_bytes


def test_the_shipped_constants_predict_a_held_out_entry_of_each_kind_within_its_tolerance():
    # cluster.yaml carries the fitted values: 8 GPUs were not fitted, with 25 MB or 1 MB buckets.
    ddp = validation()
    rows = [
        r
        for r in read_measurements(DDP / "measured.csv")
        if r.label in ("resnet50_8.yaml", "resnet50_8_1mb.yaml")
    ]
    predictor = Predictor(rows, [], 40, ddp.WARMUP)
    t25, t1 = (predictor.seconds(row, ()) for row in rows)
    assert ddp._within(ddp._over_ms(ddp.MEDIAN_S[8]), ddp._over_ms(t25))
    assert abs(ddp._loss(t25, t1) - ddp.LOSS_1MB[8]) <= 0.03


def test_nccls_picks_change_with_the_bucket_and_the_nodes():
    ddp = validation()
    assert ddp.picks(2).startswith("ring/Simple")
    assert "tree/LL128" in ddp.picks(64).split(" | ")[1]


@pytest.mark.slow
def test_the_section_meets_its_tolerances_on_every_held_out_entry():
    text = validation().section(quick=True)
    assert "Every predicted entry is within its tolerance." in text
