"""scenarios/collectives: the nccl-tests tables, fred's prediction of them, docs/validation.md's section."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from fred.simulation import nccl

ROOT = Path(__file__).resolve().parents[1]


def validation():
    spec = importlib.util.spec_from_file_location(
        "validation_collectives", ROOT / "scenarios" / "collectives" / "validation.py"
    )
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


V = validation()


@pytest.fixture(scope="module")
def fitted():
    return V.fit(V.read_table(V.FITTED_ON))


@pytest.mark.parametrize("name", list(V.HARDWARE))
def test_each_table_names_its_source_and_hardware_and_its_bandwidths_follow_from_its_times(name):
    table = V.read_table(name)
    header = "\n".join(table.header)
    assert "source:" in header and "hardware:" in header
    hw = V.HARDWARE[name]
    assert f"ranks: {hw.ranks}" in header and f"nodes: {hw.nodes}" in header
    sizes = [row.size_bytes for row in table.rows]
    assert sizes == sorted(sizes) and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))  # -f 2 sweeps
    factor = 2 * (hw.ranks - 1) / hw.ranks  # nccl-tests' all-reduce busbw = algbw x 2(n-1)/n
    for row in table.rows:
        algbw = row.size_bytes / (row.time_us * 1e-6) / 1e9
        assert row.algbw_gbps == pytest.approx(algbw, abs=0.006, rel=2e-3), row
        assert row.busbw_gbps == pytest.approx(algbw * factor, abs=0.011, rel=2e-3), row


def test_the_geometric_mean_error_is_exp_of_the_mean_absolute_log_ratio():
    assert V.geomean_error([math.log(1.1), -math.log(1.1)]) == pytest.approx(0.1)
    assert V.geomean_error([math.log(2.0), 0.0]) == pytest.approx(math.sqrt(2) - 1)
    assert [V.regime(s) for s in (8, 65535, 65536, 64 << 20, (64 << 20) + 1)] == [
        "latency",
        "latency",
        "middle",
        "middle",
        "bandwidth",
    ]


def test_the_prediction_is_freds_nccl_clock_built_from_the_stated_hardware(fitted):
    hw = V.HARDWARE["h100_tcpxo_2x8"]
    cfg = V.network(hw, fitted.share, fitted.launch_s)
    assert cfg.intra_node.busbw_bps == pytest.approx(fitted.share * 450e9)
    fabric = nccl.Fabric(16, 2, cfg.intra_node.rate_bps(), cfg.bandwidth_bps * cfg.efficiency, "nvlink")
    for nbytes in (8, 1 << 20, 1 << 30):
        expected = nccl.choose(nbytes, fabric, ["ring", "tree"], list(hw.protocols)).time_s + fitted.launch_s
        fred_s = V.fred_times_s(hw, [nbytes], fitted.share, fitted.launch_s)[0]
        assert fred_s == pytest.approx(expected, rel=1e-12)


def test_the_two_constants_are_fitted_on_the_named_table_only_and_minimise_its_error(fitted):
    assert V.FITTED_ON == "a100_nvswitch_8" and len(fitted) == 3  # share, launch latency, and its error
    assert 0.3 < fitted.share < 1.0 and 0.0 <= fitted.launch_s < 100e-6  # a share of line rate, µs of launch
    table = V.read_table(V.FITTED_ON)
    loss = sum(abs(x) for x in V.log_errors(table, fitted.share, fitted.launch_s))
    nearby = (
        (fitted.share * 1.02, fitted.launch_s),
        (fitted.share * 0.98, fitted.launch_s),
        (fitted.share, fitted.launch_s + 1e-6),
        (fitted.share, max(fitted.launch_s - 1e-6, 0.0)),
    )
    for share, launch_s in nearby:
        assert sum(abs(x) for x in V.log_errors(table, share, launch_s)) >= loss - 1e-9
    other = V.fit(V.read_table("rtx4090_pcie_8"))  # another table would give other constants
    assert abs(other.share - fitted.share) > 0.05


def test_the_docs_section_is_the_one_the_script_computes(fitted):
    section = V.section(quick=True)
    page = (ROOT / "docs" / "validation.md").read_text()
    assert section in page
    assert f"| {fitted.share:.3f} |" in section and f"| {fitted.launch_s * 1e6:.1f} µs |" in section
    for name in V.HARDWARE:
        e = V.errors(V.read_table(name), fitted)
        cells = [V._pct(e.by_regime[r]) for r in ("latency", "middle", "bandwidth")] + [V._pct(e.overall)]
        assert " | ".join(cells) + " |" in section
    assert (ROOT / "docs" / "img" / V.FIGURE.name).exists()
