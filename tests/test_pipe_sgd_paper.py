"""The Pipe-SGD paper's section of docs/validation.md, and the codec charged at every ring hop.

The section's numbers are read off simulated runs: changing what the simulation does changes
them (the wire-bytes test), so they cannot have been typed in.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fred
from fred.numerics.codecs import int8
from fred.simulation.network import ring_allreduce_time_s
from scenarios.pipe_sgd import validation
from strategies import pipe_sgd


def speedups(section: str) -> dict[str, float]:
    """Row label -> fred's largest speed-up over AR-SGD, from the section's table."""
    found = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and (match := re.search(r"\*\*([0-9.]+)x\*\*", cells[3])):
            found[cells[0]] = float(match.group(1))
    return found


@pytest.fixture(scope="module")
def quick() -> str:
    return validation.section(quick=True)


def test_the_section_is_a_markdown_section_with_a_row_per_variant_and_its_command(quick):
    assert quick.startswith("## Pipe-SGD") and quick.endswith("\n")
    assert "| Pipe-SGD k = 1 |" in quick and "|---|" in quick
    rows = speedups(quick)
    assert set(rows) == {v.label for v in validation.VARIANTS if v.key in validation.QUICK}
    for v in validation.VARIANTS:
        if v.key in validation.QUICK:
            assert f"`python scenarios/pipe_sgd/validation.py --row {v.key}`" in quick
    assert "5.4x" in quick and "3.2x" in quick and "Constants" in quick


def test_the_ceilings_are_what_hiding_compute_and_shrinking_bytes_allow(quick):
    rows = speedups(quick)
    # Pipelining hides at most all compute: 2x. A quarter of the bytes allows at most 1 + 4 = 5x;
    # the ring's latency and the min/max per tensor keep it a little under.
    assert 1.95 <= rows["no compression"] <= 2.0
    assert 4.6 <= rows["8-bit quantisation, free codec"] < 5.0
    assert rows["8-bit, GPU-class codec at every hop"] < rows["8-bit quantisation, free codec"]


def test_the_numbers_come_from_the_simulation(monkeypatch, quick):
    # Send int8 gradients at full size: its ceiling falls to the uncompressed one.
    full_size = int8()._replace(wire_bytes=lambda param_bytes, tensors: float(param_bytes))
    monkeypatch.setattr(pipe_sgd, "quantizer", lambda compression: full_size)
    rows = speedups(validation.section(quick=True))
    assert rows["8-bit quantisation, free codec"] == pytest.approx(rows["no compression"], rel=0.01)
    assert rows["8-bit quantisation, free codec"] < speedups(quick)["8-bit quantisation, free codec"] / 2


def period_s(result: fred.RunResult) -> float:
    events = result.events
    starts = events[(events["entity"] == "worker0") & (events["kind"] == "compute")]["start_s"].to_numpy()
    return float(np.median(np.diff(starts)[-8:]))


@pytest.mark.parametrize("codec_at", ["ends", "every_hop"])
@pytest.mark.parametrize("compute_s", [0.001, 0.05])
def test_every_hop_adds_the_rings_decompress_add_recompress_to_the_communication_thread(codec_at, compute_s):
    n, p, codec = 40_000_000, 4, 2e-10
    scenario = fred.load_scenario("scenarios/pipe_sgd/paper_pipe_int8.yaml")
    result = fred.run(
        "scenarios/pipe_sgd/paper_pipe_int8.yaml",
        workload={"timing_only": True, "param_bytes": n},
        cluster={"compute": {"step_time_s": compute_s}},
        strategy={"codec_s_per_byte": codec, "codec_at": codec_at},
        stop={"max_updates": 24},
    )
    hops_s = 2 * (p - 1) / p * n * codec if codec_at == "every_hop" else 0.0
    tensors = 2 * len(scenario.model.hidden) + 2  # the MLP's weights and biases
    ring_s = ring_allreduce_time_s(p, int8().wire_bytes(n, tensors), scenario.network)
    assert period_s(result) == pytest.approx(max(compute_s + 2 * n * codec, ring_s + hops_s), rel=1e-9)
    codec_events = result.events[(result.events["entity"] == "worker0") & (result.events["kind"] == "codec")]
    durations = (codec_events["end_s"] - codec_events["start_s"]).to_numpy()
    assert len(durations) >= (20 if codec_at == "every_hop" else 0) and durations == pytest.approx(
        np.full(len(durations), hops_s)
    )
    assert codec_at == "every_hop" or durations.size == 0


def test_every_hop_without_compression_or_codec_cost_changes_nothing():
    base = {"workload": {"timing_only": True}, "stop": {"max_updates": 12}}
    plain = fred.run("scenarios/pipe_sgd/paper_pipe.yaml", **base)
    hops = fred.run(
        "scenarios/pipe_sgd/paper_pipe.yaml",
        strategy={"codec_at": "every_hop", "codec_s_per_byte": 1e-9},
        **base,
    )
    assert plain.events.equals(hops.events)
