"""Hand-written YAML goes wrong in every way; fred must answer with a message, never a traceback."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fred.scenario.loading import ScenarioError, merge, validate
from fred.tools.cli import main
from tests.conftest import tiny

BASE = tiny(
    cluster={"jitter": {"kind": "lognormal", "sigma": 0.1}, "stragglers": [{"worker": 1, "slow_factor": 2}]},
    network={"server": {"latency_s": 1e-4, "bandwidth_bps": 1e8}},
    workload={"param_bytes": 1000},
    faults={
        "worker_crash": [{"worker": 2, "at_s": 0.05, "rejoin_at_s": 0.08}],
        "sync_timeout_s": 0.01,
        "link_degrade": [{"entity": "worker1", "at_s": 0.0, "duration_s": 0.02, "bandwidth_factor": 0.5}],
        "message_loss": {"probability": 0.1, "retransmit_timeout_s": 0.001, "entities": ["worker0"]},
        "server_crash": {"checkpoint_every_s": 0.02, "crashes": [{"at_s": 0.03, "restart_s": 0.01}]},
    },
)
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def paths(tree, prefix=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield prefix + (key,)
            yield from paths(value, prefix + (key,))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield prefix + (i,)
            yield from paths(value, prefix + (i,))


ALL_PATHS = list(paths(BASE))


@st.composite
def broken_scenarios(draw):
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        node = data
        try:
            for key in path[:-1]:
                node = node[key]
            action = draw(st.sampled_from(["replace", "delete", "unknown"]))
            if action == "replace":
                node[path[-1]] = draw(WEIRD)
            elif action == "delete" and isinstance(node, dict):
                node.pop(path[-1], None)
            elif isinstance(node, dict):
                node[draw(st.text(min_size=1, max_size=6))] = draw(WEIRD)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed or replaced the parent: fine, still broken input
    return data


def run_cli(tmp_path, text: bytes, capsys):
    path = tmp_path / "s.yaml"
    path.write_bytes(text)
    out = tmp_path / "out"
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    return code, err, out


def refused_with_a_short_message(data, tmp_path, capsys):
    try:
        validate(data)
        valid = True
    except ScenarioError:
        valid = False
    assume(not valid)  # a mutation that happens to be valid would be a real run: not this test's job
    code, err, out = run_cli(tmp_path, yaml.safe_dump(data, allow_unicode=True).encode(), capsys)
    assert code == 2
    assert err.startswith("fred: ") and "Traceback" not in err
    assert len(err.splitlines()) <= 40
    assert not out.exists()


# 100 broken scenarios in the default run (a fresh draw each time); 2,500 in `pytest -m slow`
# (25-60 s on 2 loaded cores).
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=broken_scenarios())
def test_a_broken_scenario_is_refused_with_a_short_message(data, tmp_path, capsys):
    refused_with_a_short_message(data, tmp_path, capsys)


@pytest.mark.slow
@settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=broken_scenarios())
def test_many_broken_scenarios_are_refused_with_a_short_message(data, tmp_path, capsys):
    refused_with_a_short_message(data, tmp_path, capsys)


@pytest.mark.parametrize(
    "text",
    [
        b"name: [unclosed\n",
        b"\xff\xfe\x00garbage",
        b"- just\n- a list\n",
        b"",
        b"strategy: {name: asgd}\n",
        b"stop: {max_updates: 1}\nstrategy: !!python/object/apply:os.system [echo]\n",
        b"a: b: c\n",
        b"strategy: {name: nope}\nstop: {max_updates: 3}\n",
    ],
)
def test_malformed_files_are_refused_with_a_short_message(text, tmp_path, capsys):
    code, err, out = run_cli(tmp_path, text, capsys)
    assert code == 2 and err.startswith("fred: ") and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "override, needle",
    [
        (
            {"cluster": {"compute": {"step_time_s": float("inf")}}},
            "cluster.compute.step_time_s: got inf; Input should be a finite number",
        ),
        ({"stop": {"max_sim_time_s": float("inf"), "max_updates": None}}, "stop.max_sim_time_s: got inf"),
        ({"stop": {"target_eval_loss": float("nan")}}, "stop.target_eval_loss: got nan"),
        (
            {"cluster": {"jitter": {"kind": "lognormal", "sigma": 1000}}},
            "cluster.jitter.sigma: got 1000; Input should be less than or equal to 10",
        ),
        ({"cluster": {"speed": {-1: 0.5}}}, "speed.-1: worker index -1 does not exist"),
        ({"strategy": {"name": "sgp", "topology": []}}, "strategy.topology: give at least one mixing matrix"),
        (
            {"model": {"kind": "cnn", "kernel_size": 1000, "hidden": 16}},
            "model.kernel_size is 1000 but the images are 8 x 8: use at most 8",
        ),
        (
            {"cluster": {"workers": True}},
            "cluster: workers: got true; a number is needed here",
        ),  # ran 1 worker
        ({"strategy": {"lr": True}}, "strategy: lr: got true; a number is needed here"),
        (
            {
                "eval": {"every_s": 1e-20, "every_updates": None},
                "stop": {"max_sim_time_s": 1.0, "max_updates": None},
            },
            "eval.every_s is 1e-20 s: 1e+20 times",
        ),
        (
            {"strategy": {"name": "pipe_sgd", "pipeline_level": 2, "segments": 100_000_000}},
            "Input should be less than or equal to 4096",
        ),
        # Each of these ran for ever (hours at least), however long max_updates was:
        (
            {"eval": {"every_s": 1e-9, "every_updates": None}},
            "eval.every_s is 1e-09 s: at least 3e+07 times in the run, whose stop.max_updates 12 take 0.03 s "
            "or more",
        ),
        (
            {
                "strategy": {"name": "ssgd", "aggregation": "ps"},
                "faults": {
                    "server_crash": {"checkpoint_every_s": 1e-9, "crashes": [{"at_s": 1, "restart_s": 1}]}
                },
            },
            "faults.server_crash.checkpoint_every_s is 1e-09 s: at least 1.2e+08 times",
        ),  # SSGD: a round is 4 steps
        (
            {"cluster": {"speed": {0: 1e20}}, "stop": {"max_sim_time_s": 1.0, "max_updates": None}},
            "stop.max_sim_time_s is 1.0 s: 4 workers take 1e+22 steps in it (the fastest 1e-22 s, from "
            "cluster.speed.0)",
        ),
        (
            {"cluster": {"speed_changes": [{"worker": 1, "at_s": 100.0, "speed": 1e20}]}},
            "cluster.speed_changes.0.speed: worker 1's steps from 100.0 s take 1e-22 s, too short to move a "
            "clock at 100.0 s",
        ),
        (
            {"faults": {"message_loss": {"probability": 0.999999999, "retransmit_timeout_s": 0.001}}},
            "faults.message_loss.probability: got 0.999999999; at most 0.99",
        ),
        (
            {"strategy": {"name": "grouped_hybrid", "probe_s": 1e300}},
            "strategy.probe_s is 1e+300 s: the probe alone is 4e+302 steps",
        ),
        (
            {"strategy": {"name": "grouped_hybrid", "probe_iterations": 10**9}},
            "strategy.probe_iterations is 1000000000: up to 4e+09 steps",
        ),
        # A step or a message of inf s (an overflow) or longer than 1e9 s: the run stalled, waiting for it
        (
            {"strategy": {"name": "pipe_sgd"}, "cluster": {"speed": {0: 5e-324}}},
            "cluster.speed.0 is 4.94e-324: worker 0's steps would take inf s (0.01 s / 4.94e-324), more than "
            "the 1e+09 simulated "
            "seconds (about 32 years) one step or message may take (the run would wait for it for ever): "
            "give a speed of at least 1e-11",
        ),
        (
            {"cluster": {"speed_changes": [{"worker": 1, "at_s": 1.0, "speed": 1e-12}]}},
            "cluster.speed_changes.0.speed is 1e-12: worker 1's steps would take 1e+10 s",
        ),
        (
            {"cluster": {"stragglers": [{"worker": 1, "slow_factor": 1e300}]}},
            "cluster.stragglers.0.slow_factor is 1e+300: worker 1's steps would take 1e+298 s (0.01 s x the "
            "slow factors)",
        ),
        (
            {"cluster": {"compute": {"step_time_s": None, "device_flops": 1e-300, "flops_per_example": 1e6}}},
            "cluster.compute.device_flops is 1e-300: a step at speed 1 would take 8e+306 s",
        ),
        (
            {"network": {"bandwidth_bps": 5e-324}, "workload": {"param_bytes": 1000}},
            "network.bandwidth_bps is 4.94e-324: a message of 1,000 bytes would take inf s at 4.94e-324 "
            "bytes/s",
        ),
        ({"network": {"efficiency": 1e-320}}, "network.efficiency is 1e-320: one byte would take inf s"),
        (
            {"network": {"latency_s": 1e308}},
            "network.latency_s is 1e+308: every message would wait that long",
        ),
        # An independent fuzz of mostly valid scenarios found these running for minutes or for ever:
        (
            {"strategy": {"name": "local_sgd", "sync_every": 10**9}, "stop": {"max_updates": 5}},
            "stop.max_updates is 5: strategy local_sgd takes 2e+10 gradient steps of 4 workers for them; at "
            "most 100,000,000: "
            "give a smaller stop.max_updates, a smaller strategy.sync_every or stop.max_sim_time_s",
        ),
        (
            {"strategy": {"name": "pipe_sgd", "staleness": 10**9}, "stop": {"max_updates": 5}},
            "strategy pipe_sgd takes 4e+09 gradient steps of 4 workers for them; at most 100,000,000: give a "
            "smaller "
            "stop.max_updates, a smaller strategy.staleness or stop.max_sim_time_s",
        ),
        (
            {
                "strategy": {"name": "hpsgd"},
                "workload": {"param_bytes": 170_051_880},
                "stop": {"max_updates": 5},
                "cluster": {
                    "compute": {"step_time_s": None, "device_flops": 8.8e12, "flops_per_example": 1.5e-20}
                },
            },
            "strategy hpsgd takes 3.6e+32 gradient steps of 4 workers for them; at most 100,000,000: give a "
            "smaller "
            "stop.max_updates, slower steps against the all-reduce",
        ),
        (
            {
                "eval": {"every_s": 1e-5, "every_updates": None},
                "stop": {"max_sim_time_s": 0.5, "max_updates": None},
            },
            "eval.every_s: at least 50,000 evaluations of 359 rows by a model of 1,210 parameters cost about "
            "1.02e+12 "
            "multiply-adds, 1,687 times the run's training; give a larger eval.every_s or fewer "
            "data.eval_examples",
        ),
    ],
)
def test_values_that_passed_validation_and_then_hung_or_crashed_are_refused(
    override, needle, tmp_path, capsys
):
    # Each of these used to run forever, end in a traceback (overflow, division by zero, out of
    # memory), or be ignored.
    code, err, out = run_cli(tmp_path, yaml.safe_dump(tiny(**override)).encode(), capsys)
    assert code == 2 and needle in err and "Traceback" not in err and not out.exists()


def test_a_data_set_too_large_for_memory_is_a_message(tmp_path, capsys):
    data = tiny(data={"source": {"kind": "synthetic", "examples": 100_000_000_000, "features": 1_000_000}})
    code, err, out = run_cli(tmp_path, yaml.safe_dump(data).encode(), capsys)
    assert code == 2 and err.startswith("fred: out of memory") and "Traceback" not in err and not out.exists()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    matrix=st.lists(
        st.lists(st.floats(-1, 2, allow_nan=False), min_size=4, max_size=4), min_size=4, max_size=4
    )
)
def test_a_mixing_matrix_that_is_not_column_stochastic_is_refused(matrix, tmp_path, capsys):
    import numpy as np

    m = np.asarray(matrix)
    assume((m < 0).any() or (np.abs(m.sum(axis=0) - 1) > 1e-12).any())
    data = tiny(strategy={"name": "sgp", "topology": [matrix]})
    code, err, out = run_cli(tmp_path, yaml.safe_dump(data).encode(), capsys)
    assert code == 2 and not out.exists()
    assert "column-stochastic" in err or "negative weights" in err


SECONDS = "more than the 1e+09 simulated seconds (about 32 years) one step or message may take"
FOR_EVER = "(the run would wait for it for ever)"
DEGRADE = {"entity": "worker1", "at_s": 0.0}
TWO_SITES = {"cluster": {"workers": 2}, "network": {"sites": {"nodes": [1, 1]}}}


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        # A site's link and the waits faults add were outside the bounds: the run reached a simulated
        # time of 3.6e304 s, or made every update at 1e300 s.
        (
            merge(TWO_SITES, {"network": {"sites": {"bandwidth_bps": 1e-300}}}),
            "network.sites.bandwidth_bps is 1e-300: one byte would take 1e+300 s at 1e-300 bytes/s, "
            f"{SECONDS} "
            f"{FOR_EVER}: give at least 1e-09",
        ),
        (
            merge(TWO_SITES, {"network": {"sites": {"latency_s": 1e300}}}),
            "network.sites.latency_s is 1e+300: every message would wait that long",
        ),
        (
            {"network": {"intra_node": {"busbw_bps": 1e-300}}},
            "network.intra_node.busbw_bps is 1e-300: one byte would take",
        ),
        (
            {
                "faults": {
                    "server_crash": {"checkpoint_every_s": 1, "crashes": [{"at_s": 0.01, "restart_s": 1e300}]}
                }
            },
            "faults.server_crash.crashes.0.restart_s is 1e+300: the server would be down that long, and "
            "every "
            f"later update would wait for it, {SECONDS}",
        ),
        (
            {"faults": {"link_degrade": [DEGRADE | {"extra_latency_s": 1e300}]}},
            "faults.link_degrade.0.extra_latency_s is 1e+300: every message over it would wait that long",
        ),
        (
            {
                "faults": {"link_degrade": [DEGRADE | {"bandwidth_factor": 1e-300}]},
                "workload": {"param_bytes": 1000},
            },
            "faults.link_degrade.0.bandwidth_factor is 1e-300: a message of 1,000 bytes over worker1's "
            "degraded "
            "link (1.25e+09 bytes/s x the factor) would take 8e+293 s",
        ),
        (
            {"faults": {"message_loss": {"probability": 0.1, "retransmit_timeout_s": 1e300}}},
            "faults.message_loss.retransmit_timeout_s is 1e+300: every lost message would be sent again that "
            "late",
        ),
        (
            {"faults": {"sync_timeout_s": 1e300}},
            "faults.sync_timeout_s is 1e+300: anyone waiting for a crashed worker",
        ),
        # Two stragglers on one worker overflowed to inf, and the fix read "give at most 0", which
        # slow_factor does not accept.
        (
            {"cluster": {"stragglers": [{"worker": 1, "slow_factor": 1e300}] * 2}},
            "cluster.stragglers.0.slow_factor is 1e+300: worker 1's steps would take 1e+298 s (0.01 s x the "
            f"slow factors), {SECONDS} {FOR_EVER}: give at most 1e+11",
        ),
        (
            {"cluster": {"stragglers": [{"worker": 1, "slow_factor": f} for f in (1e6, 1e300)]}},
            "cluster.stragglers.1.slow_factor is 1e+300: worker 1's steps would take 1e+304 s (0.01 s x the "
            f"slow factors up to it), {SECONDS} {FOR_EVER}: give at most 1e+05",
        ),
    ],
    ids=[
        "site bandwidth",
        "site latency",
        "busbw",
        "server restart",
        "degraded latency",
        "degraded bandwidth",
        "retransmit",
        "sync timeout",
        "two stragglers",
        "a second straggler",
    ],
)
def test_every_wait_a_run_may_meet_is_bounded_with_a_fix_its_field_takes(override, needle, tmp_path, capsys):
    code, err, out = run_cli(tmp_path, yaml.safe_dump(tiny(**override)).encode(), capsys)
    assert code == 2 and needle in err and "Traceback" not in err and not out.exists(), err


@pytest.mark.parametrize("kind", ["arrays", "mnist", "cifar10", "text"])
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_data_path_at_a_fifo_or_a_device_is_refused_as_it_is_read(kind, special, tmp_path, capsys):
    # arrays or mnist at a FIFO hung; at /dev/zero it read 10 GB in 60 s.
    import os

    if special == "fifo":
        special = str(tmp_path / "pipe")
        os.mkfifo(special)
    what = "a FIFO (named pipe)" if special.endswith("pipe") else "a character device"
    data = tiny(data={"source": {"kind": kind, "path": special}})
    code, err, out = run_cli(tmp_path, yaml.safe_dump(data).encode(), capsys)
    assert code == 2 and f"data.source.path: {special} is {what}, not a file or folder" in err, err
    assert "Traceback" not in err and not out.exists()
    with pytest.raises(ScenarioError, match=r"data.source.eval_path: .* is a"):
        validate(tiny(data={"source": {"kind": "arrays", "path": str(tmp_path), "eval_path": special}}))


def test_a_text_source_at_a_folder_is_refused_as_the_scenario_is_read(tmp_path):
    source = {"kind": "text", "path": str(tmp_path)}
    with pytest.raises(ScenarioError, match=rf"data.source.path: {tmp_path} is a folder; give a text file"):
        validate(tiny(model={"kind": "transformer"}, data={"source": source}))
