"""Injected faults: every strategy family survives them or fails cleanly, with the fault on record.

The families: parameter server (sgd, asgd, sasgd, fasgd, bfasgd, ssgd ps), all-reduce
(ssgd, arsgd, local_sgd, hpsgd, pipe_sgd), gossip (sgp, osgp, dpsgd, adpsgd) and the
grouped hybrid. Every registered strategy runs every fault kind it can have.
"""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

import fred
from fred.numerics import rng
from fred.runs.runner import build
from fred.scenario import registry
from fred.scenario.loading import ScenarioError, apply_overrides, validate
from tests.conftest import NEVER_WAITS, ONE_WORKER, cluster_for, tiny

CRASH_AT_S = 0.035
TIMEOUT_S = 0.02
LOSS = {"probability": 0.2, "retransmit_timeout_s": 0.002}


def scenario(name: str, faults: dict, **overrides) -> dict:
    strategy = {"name": name, **({"aggregation": "ps"} if name == "ssgd_ps" else {})}
    strategy["name"] = strategy["name"].removesuffix("_ps")
    base = {
        "strategy": strategy,
        "cluster": cluster_for(name),
        "stop": {"max_updates": 24, "max_sim_time_s": 5.0},
    }
    return tiny(**{**base, "faults": faults, **overrides})


STRATEGIES = registry.names() + ["ssgd_ps"]


def counts_match_events(result: fred.RunResult) -> None:
    """The summary's fault counters are the event table's, and the records are whole."""
    kinds, summary = result.events["kind"], result.summary
    for key, kind in [
        ("worker_crashes", "crash"),
        ("workers_excluded", "excluded"),
        ("messages_lost", "lost"),
    ]:
        assert summary[key] == int((kinds == kind).sum())
    assert summary["bytes_lost"] == pytest.approx(result.events.loc[kinds == "lost", "bytes"].sum())
    assert (result.updates["staleness"] >= 0).all()
    assert (result.events["end_s"] >= result.events["start_s"]).all()
    assert len(result.metrics) >= 1


def runs_after(result: fred.RunResult, worker: int, time_s: float) -> pd.DataFrame:
    events = result.events
    return events[
        (events["entity"] == f"worker{worker}") & (events["kind"] == "compute") & (events["start_s"] > time_s)
    ]


# ----------------------------------------------------------------------------- worker crash
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=(pytest.mark.slow,) if n == "adpsgd" else ()) for n in STRATEGIES]
)  # AD-PSGD: 4 s (and its own crash test below)
def test_a_crashed_worker_is_routed_around_after_the_timeout(name):
    worker = 0 if name in ONE_WORKER else 1
    faults = {"worker_crash": [{"worker": worker, "at_s": CRASH_AT_S}], "sync_timeout_s": TIMEOUT_S}
    result = fred.run(scenario(name, faults, stop={"max_sim_time_s": 0.3, "max_updates": 100_000}))
    counts_match_events(result)
    assert result.summary["worker_crashes"] == 1
    assert runs_after(result, worker, CRASH_AT_S).empty, "a crashed worker computes nothing more"
    if name in ONE_WORKER:  # its only worker is gone
        assert result.summary["status"] == "failed"
        assert result.summary["failure"] == "every worker has crashed"
        return
    assert result.summary["status"] == "completed", result.summary["failure"]
    assert result.summary["stop_reason"] == "max_sim_time_s"
    late = result.updates[result.updates["sim_time_s"] > CRASH_AT_S + TIMEOUT_S + 0.05]
    assert not late.empty and worker not in set(late["worker"])


@pytest.mark.parametrize("name", STRATEGIES)
def test_without_a_timeout_only_strategies_that_never_wait_survive_a_crash(name):
    worker = 0 if name in ONE_WORKER else 1
    result = fred.run(scenario(name, {"worker_crash": [{"worker": worker, "at_s": CRASH_AT_S}]}))
    counts_match_events(result)
    if name in NEVER_WAITS:
        assert result.summary["status"] == "completed"
        return
    assert result.summary["status"] == "failed"
    assert result.summary["stop_reason"] == "failed"
    assert (
        "sync_timeout_s" in result.summary["failure"]
        or result.summary["failure"] == "every worker has crashed"
    )
    assert (result.events["kind"] == "failed").sum() == 1
    assert result.summary["sim_time_s"] >= CRASH_AT_S


def test_the_all_reduce_waits_exactly_the_timeout_then_goes_on_without_the_worker():
    result = fred.run(
        scenario("ssgd", {"worker_crash": [{"worker": 2, "at_s": CRASH_AT_S}], "sync_timeout_s": TIMEOUT_S})
    )
    events = result.events
    excluded = events[events["kind"] == "excluded"].iloc[0]
    assert excluded["start_s"] == CRASH_AT_S and excluded["end_s"] == pytest.approx(CRASH_AT_S + TIMEOUT_S)
    ring = events[(events["kind"] == "allreduce") & (events["start_s"] >= CRASH_AT_S)]
    assert ring["start_s"].min() == pytest.approx(CRASH_AT_S + TIMEOUT_S)
    after = result.updates[
        result.updates["version_applied"]
        > result.updates.loc[result.updates["sim_time_s"] <= CRASH_AT_S, "version_applied"].max() + 1
    ]
    assert set(after["worker"]) == {0, 1, 3}


@pytest.mark.parametrize(
    "name, rejoin_from", [("asgd", "own"), ("asgd", "global"), ("ssgd", "global"), ("ssgd_ps", "global")]
)
def test_a_rejoining_worker_computes_again(name, rejoin_from):
    crash = {"worker": 1, "at_s": CRASH_AT_S, "rejoin_at_s": 0.1, "rejoin_from": rejoin_from}
    result = fred.run(
        scenario(name, {"worker_crash": [crash], "sync_timeout_s": TIMEOUT_S}, stop={"max_updates": 60})
    )
    assert result.summary["status"] == "completed"
    assert result.summary["worker_rejoins"] == 1
    computes = result.events[(result.events["entity"] == "worker1") & (result.events["kind"] == "compute")]
    assert not computes[computes["start_s"] >= 0.1].empty
    assert computes[(computes["start_s"] > CRASH_AT_S) & (computes["start_s"] < 0.1)].empty
    assert 1 in set(result.updates.loc[result.updates["sim_time_s"] > 0.12, "worker"])


def test_rejoining_from_own_or_global_parameters_differs():
    crash = {"worker": 1, "at_s": CRASH_AT_S, "rejoin_at_s": 0.1}
    own = fred.run(
        scenario("asgd", {"worker_crash": [{**crash, "rejoin_from": "own"}]}, stop={"max_updates": 60})
    )
    fresh = fred.run(
        scenario("asgd", {"worker_crash": [{**crash, "rejoin_from": "global"}]}, stop={"max_updates": 60})
    )
    assert own.summary["params_sha256"] != fresh.summary["params_sha256"]
    first = lambda r: r.updates[(r.updates["worker"] == 1) & (r.updates["sim_time_s"] > 0.1)].iloc[0]
    assert first(own)["staleness"] > first(fresh)["staleness"], "a stale copy shows up as staleness"


# ----------------------------------------------------------------------------- message loss
@pytest.mark.parametrize("name", STRATEGIES)
def test_lost_messages_are_resent_and_counted(name):
    data = scenario(name, {"message_loss": LOSS})
    result, again = fred.run(data), fred.run(data)
    assert result.summary["status"] == "completed"
    counts_match_events(result)
    if name not in ONE_WORKER:  # one worker sends nothing
        assert result.summary["messages_lost"] > 0
    assert result.summary["params_sha256"] == again.summary["params_sha256"]
    pd.testing.assert_frame_equal(result.events, again.events)


def test_a_lost_send_is_resent_after_the_retransmit_timeout():
    data = scenario("asgd", {"message_loss": {"probability": 0.5, "retransmit_timeout_s": 0.01}})
    sim = build(fred.scenario.loading.validate(data)).sim
    draws = rng.stream(data["seed"], "faults", "loss", "worker0")
    losses = 0
    while draws.random() < 0.5:
        losses += 1
    nbytes = 1e6
    sim.process(sim.send("worker0", "worker1", nbytes))
    sim.env.run()
    cfg = sim.network.config
    assert sim.now == pytest.approx(losses * 0.01 + nbytes / cfg.bandwidth_bps + cfg.latency_s, rel=1e-12)


# ----------------------------------------------------------------------------- link degrade
@pytest.mark.parametrize("name", STRATEGIES)
def test_a_degraded_link_slows_transfers_and_is_recorded(name):
    degrade = {
        "entity": "worker0",
        "at_s": 0.0,
        "duration_s": 0.05,
        "bandwidth_factor": 0.01,
        "extra_latency_s": 0.001,
    }
    result = fred.run(scenario(name, {"link_degrade": [degrade]}))
    assert result.summary["status"] == "completed"
    marks = result.events[result.events["kind"] == "link_degraded"]
    assert list(marks["start_s"]) == [0.0] and list(marks["end_s"]) == [pytest.approx(0.05)]


def test_a_transfer_on_a_degraded_link_takes_the_degraded_time():
    degrade = {"entity": "worker1", "at_s": 0.0, "bandwidth_factor": 0.25, "extra_latency_s": 0.003}
    sim = build(fred.scenario.loading.validate(scenario("asgd", {"link_degrade": [degrade]}))).sim
    sim.faults.start()
    sim.env.run(until=1e-9)  # the degrade takes effect at 0
    sim.process(sim.send("worker0", "worker1", 1e6))
    sim.env.run()
    cfg = sim.network.config
    assert sim.now - 1e-9 == pytest.approx(1e6 / (0.25 * cfg.bandwidth_bps) + cfg.latency_s + 0.003, rel=1e-9)


def test_overlapping_degradations_compound_and_both_end():
    # Each window used to restore the link as it found it: the second, begun inside the
    # first, put back the first's half bandwidth when it ended, for the rest of the run.
    first = {
        "entity": "worker1",
        "at_s": 0.1,
        "duration_s": 0.2,
        "bandwidth_factor": 0.5,
        "extra_latency_s": 0.001,
    }
    second = {
        "entity": "worker1",
        "at_s": 0.2,
        "duration_s": 0.2,
        "bandwidth_factor": 0.25,
        "extra_latency_s": 0.002,
    }
    sim = build(fred.scenario.loading.validate(scenario("asgd", {"link_degrade": [first, second]}))).sim
    port, cfg = sim.network.ports["worker1"], sim.network.config
    sim.faults.start()
    seen = []
    for time_s in (0.05, 0.15, 0.25, 0.35, 0.45):
        sim.env.run(until=time_s)
        seen.append((port.bandwidth_bps / cfg.bandwidth_bps, round(port.latency_s - cfg.latency_s, 9)))
    assert seen == [(1.0, 0.0), (0.5, 0.001), (0.125, 0.003), (0.25, 0.002), (1.0, 0.0)]


# ----------------------------------------------------------------------------- server crash
PS = ["asgd", "sasgd", "fasgd", "bfasgd", "ssgd_ps"]
SERVER = {"checkpoint_every_s": 0.03, "crashes": [{"at_s": 0.05, "restart_s": 0.02}]}


@pytest.mark.parametrize("name", PS)
def test_a_server_crash_loses_the_updates_since_its_checkpoint(name):
    result = fred.run(scenario(name, {"server_crash": SERVER}, stop={"max_updates": 40}))
    assert result.summary["status"] == "completed"
    events, updates = result.events, result.updates
    crash = events[events["kind"] == "server_crash"].iloc[0]
    assert (crash["start_s"], crash["end_s"]) == (0.05, pytest.approx(0.07))
    last_checkpoint = events.loc[
        (events["kind"] == "checkpoint") & (events["start_s"] <= 0.05), "start_s"
    ].max()
    applied = updates.drop_duplicates("update")
    lost = applied[(applied["sim_time_s"] > last_checkpoint) & (applied["sim_time_s"] <= 0.05)]
    assert result.summary["updates_lost"] == len(lost) > 0
    assert applied[(applied["sim_time_s"] > 0.05) & (applied["sim_time_s"] < 0.07)].empty, (
        "nothing applied while down"
    )


def test_bfasgd_re_applies_no_cached_gradient_while_the_server_is_down():
    # A dropped push re-applies the worker's cached gradient: a down server cannot.
    crash = {"checkpoint_every_s": 0.05, "crashes": [{"at_s": 0.12, "restart_s": 0.04}]}
    data = scenario(
        "bfasgd",
        {"server_crash": crash},
        workload={"param_bytes": 1e6},
        eval={"every_s": 0.05, "every_updates": None},
        strategy={"name": "bfasgd", "c_push": 0.03, "c_fetch": 0.03},
        stop={"max_sim_time_s": 0.3, "max_updates": None},
    )
    result = fred.run(data)
    updates = result.updates
    assert updates["cached"].any() and (result.events["kind"] == "push_dropped").any()
    assert updates[(updates["sim_time_s"] > 0.12) & (updates["sim_time_s"] < 0.16)].empty


def test_a_transfer_the_server_crash_cuts_is_recorded_once_as_lost():
    # At 0.094 s the four workers' pushes (0.0925 to 0.09575 s, sharing the server's downlink) are under way
    crash = {"checkpoint_every_s": 0.05, "crashes": [{"at_s": 0.094, "restart_s": 0.04}]}
    data = scenario(
        "ssgd_ps",
        {"server_crash": crash},
        workload={"param_bytes": 1e6},
        eval={"every_s": 0.05, "every_updates": None},
        stop={"max_sim_time_s": 0.3, "max_updates": None},
    )
    result = fred.run(data)
    events = result.events
    sent = events[events["kind"].isin(["push", "fetch"])]
    assert not ((sent["start_s"] < 0.134) & (sent["end_s"] > 0.094)).any(), (
        "no push or fetch delivered across the outage"
    )
    lost = events[events["kind"] == "lost"]
    assert len(lost) > 0 and (lost["end_s"] > lost["start_s"]).all() and (lost["bytes"] == 1e6).all()
    assert (
        result.summary["bytes_sent"] == sent["bytes"].sum()
        and result.summary["bytes_lost"] == lost["bytes"].sum()
    )


def test_after_a_restart_the_server_serves_its_checkpoint():
    # The first fetch after the restart carries the checkpointed parameters, so a server
    # crashing right after a checkpoint loses nothing: the run is the fault-free run, delayed.
    data = scenario(
        "asgd", {"server_crash": {"checkpoint_every_s": 0.05, "crashes": [{"at_s": 0.05, "restart_s": 0.02}]}}
    )
    result = fred.run(data)
    assert result.summary["updates_lost"] == 0
    clean = fred.run(scenario("asgd", {}))
    assert result.summary["sim_time_s"] > clean.summary["sim_time_s"]


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "name, faults, needle",
    [
        (
            "sgp",
            {"worker_crash": [{"worker": 1, "at_s": 0.1, "rejoin_at_s": 0.2}]},
            "does not model a worker rejoining",
        ),
        ("ssgd", {"server_crash": SERVER}, "has no parameter server"),
        (
            "grouped_hybrid",
            {"server_crash": SERVER},
            "does not model its parameter server crashing",
        ),  # it has one
        ("asgd", {"link_degrade": [{"entity": "worker9", "at_s": 0}]}, "worker0..worker3 or server"),
        (
            "sgd",
            {"link_degrade": [{"entity": "worker1", "at_s": 0}]},
            "links belong to worker0 (strategy",
        ),  # not worker0..worker0
        ("asgd", {"message_loss": {**LOSS, "entities": ["switch"]}}, "worker0..worker3 or server"),
        ("asgd", {"worker_crash": [{"worker": 7, "at_s": 0.1}]}, "workers are 0..3"),
        ("asgd", {"worker_crash": [{"worker": 1, "at_s": 0.2, "rejoin_at_s": 0.1}]}, "must be after at_s"),
        ("asgd", {"message_loss": {"probability": 1.0, "retransmit_timeout_s": 0.1}}, "less than 1"),
        (
            "asgd",
            {"worker_crash": [{"worker": 1, "at_s": 0.3}, {"worker": 1, "at_s": 0.1, "rejoin_at_s": 0.3}]},
            "worker_crash.0 crashes worker 1 at 0.3 s while it is down (faults.worker_crash.1: down from 0.1 "
            "s, back at 0.3 s)",
        ),
        (
            "asgd",
            {"worker_crash": [{"worker": 2, "at_s": 0.1}, {"worker": 2, "at_s": 0.5, "rejoin_at_s": 0.6}]},
            "never back (no rejoin_at_s)",
        ),
        (
            "asgd",
            {
                "server_crash": {
                    "checkpoint_every_s": 0.05,
                    "crashes": [{"at_s": 0.1, "restart_s": 0.05}, {"at_s": 0.12, "restart_s": 0.1}],
                }
            },
            "crashes.1 is at 0.12 s while the server is down (crashes.0: from 0.1 s, back at",
        ),
    ],
)
def test_bad_fault_settings_name_the_field_and_the_fix(name, faults, needle):
    with pytest.raises(ScenarioError, match="faults") as info:
        fred.run(scenario(name, faults))
    assert needle in str(info.value)


def test_a_fault_message_names_the_path_that_set_fixes():
    # Messages once said faults.worker_crash[0].worker, which --set reads as a key named "worker_crash[0]".
    data = scenario("asgd", {"worker_crash": [{"worker": 7, "at_s": 0.1}]})
    with pytest.raises(ScenarioError) as info:
        fred.run(data)
    path = re.search(r"(faults\.\S+) is 7", str(info.value)).group(1)
    assert path == "faults.worker_crash.0.worker"
    assert validate(apply_overrides(data, [f"{path}=1"])).faults.worker_crash[0].worker == 1


def test_a_worker_may_crash_again_after_it_rejoined():
    crashes = [
        {"worker": 1, "at_s": 0.02, "rejoin_at_s": 0.04},
        {"worker": 1, "at_s": 0.06, "rejoin_at_s": 0.08},
    ]
    result = fred.run(scenario("asgd", {"worker_crash": crashes}))
    kinds = result.events.loc[result.events["entity"] == "worker1", "kind"]
    assert (kinds == "crash").sum() == 2 and (kinds == "rejoin").sum() == 2


def test_faults_need_the_simulated_clock():
    data = scenario("asgd", {"worker_crash": [{"worker": 1, "at_s": 0.1}]})
    data["strategy"]["clock"] = "logical"
    with pytest.raises(ScenarioError, match="clock: simulated"):
        fred.run(data)


def test_a_run_without_faults_has_zero_fault_counters():
    summary = fred.run(scenario("asgd", {})).summary
    assert summary["failure"] is None
    assert all(summary[k] == 0 for k in ("worker_crashes", "messages_lost", "server_crashes", "updates_lost"))
    assert not math.isnan(summary["final_eval_loss"])


@pytest.mark.parametrize("name", ["pipe_sgd", "grouped_hybrid"])
def test_no_event_starts_after_the_run_ends(name):
    # Lost ring chunks are booked when the ring starts: those after the end are not records.
    loss = {"probability": 0.2, "retransmit_timeout_s": 0.002}
    data = scenario(
        name,
        {"message_loss": loss},
        cluster={"workers": 5},
        workload={"param_bytes": 1e6},
        stop={"max_sim_time_s": 0.3, "max_updates": None},
        eval={"every_s": 0.05, "every_updates": None},
    )
    result = fred.run(data)
    assert result.summary["sim_time_s"] == 0.3 and (result.events["start_s"] <= 0.3).all()
    assert result.summary["messages_lost"] == (result.events["kind"] == "lost").sum() > 0


# ----------------------------------------------------------------------------- found by a fuzzer
# Each scenario is a generated one, shrunk; each ended in a traceback or in records that
# contradicted the docs (2026-11-25).
def acts_after_its_crash(result: fred.RunResult) -> pd.DataFrame:
    """Compute, send and update rows of workers after their last crash (none with no rejoin after it)."""
    events = result.events
    rows = []
    for _, crash in events[events["kind"] == "crash"].iterrows():
        rejoins = events[
            (events["kind"] == "rejoin")
            & (events["entity"] == crash["entity"])
            & (events["end_s"] > crash["start_s"])
        ]
        if rejoins.empty:
            rows.append(
                events[
                    (events["entity"] == crash["entity"])
                    & (events["start_s"] > crash["start_s"])
                    & events["kind"].isin(["compute", "send", "push"])
                ]
            )
    return pd.concat(rows) if rows else events.iloc[:0]


@pytest.mark.slow  # 5 s on 2 cores
def test_pipe_sgd_with_staleness_two_on_an_uneven_cluster_runs():
    # A fast worker dropped w[t-1] while a slower one was about to read it (KeyError).
    data = {
        "cluster": {"workers": 2, "stragglers": [{"worker": 1, "slow_factor": 2}]},
        "strategy": {"name": "pipe_sgd", "staleness": 2},
        "stop": {"max_updates": 20},
    }
    assert fred.run(data).summary["status"] == "completed"


@pytest.mark.slow  # 3.5 s on 2 cores
def test_adpsgd_survives_a_crash_while_queued_for_a_lock_and_a_dead_neighbour_sends_nothing():
    # The lock request was cancelled twice (list.remove); a neighbour that died while the
    # locks were awaited still sent its parameters.
    queued = {
        "cluster": {"workers": 3},
        "network": {"bandwidth_bps": 2e5},
        "strategy": {"name": "adpsgd"},
        "stop": {"max_sim_time_s": 0.2},
        "faults": {"worker_crash": [{"worker": 2, "at_s": 0.02}], "sync_timeout_s": 0.01},
    }
    assert fred.run(queued).summary["status"] == "completed"
    dead = {
        "seed": 113,
        "model": {"kind": "mlp", "hidden": [16]},
        "data": {"batch_size": 8},
        "cluster": {
            "workers": 3,
            "compute": {"step_time_s": 0.005},
            "speed": {1: 2.0, 2: 1.5},
            "stragglers": [{"worker": 1, "slow_factor": 4, "delay_s": 0.02}],
        },
        "network": {"bandwidth_bps": 1e6},
        "strategy": {"name": "adpsgd"},
        "stop": {"max_updates": 21},
        "faults": {
            "worker_crash": [{"worker": 1, "at_s": 0.0344}, {"worker": 0, "at_s": 0.0639}],
            "sync_timeout_s": 0.02,
        },
    }
    assert acts_after_its_crash(fred.run(dead)).empty


@pytest.mark.parametrize("name", ["ssgd", "arsgd"])
def test_a_worker_rejoining_while_a_ring_is_in_flight_starts_from_the_replica_it_makes(name):
    data = {
        "cluster": {"workers": 3, "stragglers": [{"worker": 2, "slow_factor": 3}]},
        "network": {"bandwidth_bps": 2e5},
        "strategy": {"name": name},
        "stop": {"max_sim_time_s": 0.3},
        "faults": {
            "worker_crash": [{"worker": 2, "at_s": 0.02, "rejoin_at_s": 0.12}],
            "sync_timeout_s": 0.01,
        },
    }
    result = fred.run(data)  # KeyError: the replica it started from had been dropped
    assert result.summary["status"] == "completed" and result.summary["worker_rejoins"] == 1
    after = result.updates[result.updates["sim_time_s"] > 0.13]
    assert set(after["worker"]) == {0, 1, 2} and (after["staleness"] == 0).all()


def test_a_second_crash_during_the_rejoin_fetch_stops_the_worker():
    # The rejoined process's first step is the server's fetch: it was not the worker's, and lived on.
    data = {
        "model": {"kind": "mlp", "hidden": [16]},
        "cluster": {"workers": 2},
        "network": {"bandwidth_bps": 1e5},
        "strategy": {"name": "asgd"},
        "stop": {"max_sim_time_s": 0.5},
        "faults": {
            "worker_crash": [{"worker": 1, "at_s": 0.1, "rejoin_at_s": 0.2}, {"worker": 1, "at_s": 0.22}]
        },
    }
    result = fred.run(data)
    assert acts_after_its_crash(result).empty
    assert result.updates[(result.updates["worker"] == 1) & (result.updates["sim_time_s"] > 0.22)].empty


def test_a_server_link_is_refused_where_the_strategy_has_no_server():
    data = scenario("ssgd", {"link_degrade": [{"entity": "server", "at_s": 0.0, "bandwidth_factor": 0.5}]})
    with pytest.raises(ScenarioError, match="strategy 'ssgd' has no parameter server, so no server link"):
        fred.run(data)  # KeyError: 'server' at the degrade's start


def test_a_fault_window_the_run_ends_in_is_recorded_and_counted():
    link = {
        "cluster": {"workers": 2},
        "strategy": {"name": "asgd"},
        "stop": {"max_sim_time_s": 0.1},
        "faults": {
            "link_degrade": [{"entity": "worker0", "at_s": 0.05, "duration_s": 0.1, "bandwidth_factor": 0.1}]
        },
    }
    result = fred.run(link)
    marks = result.events[result.events["kind"] == "link_degraded"]
    assert result.summary["links_degraded"] == 1 and list(zip(marks["start_s"], marks["end_s"])) == [
        (0.05, pytest.approx(0.15))
    ]
    outage = {
        **link,
        "faults": {
            "server_crash": {"checkpoint_every_s": 0.02, "crashes": [{"at_s": 0.09, "restart_s": 0.05}]}
        },
    }
    summary = fred.run(outage).summary
    assert summary["server_crashes"] == 1 and summary["updates_lost"] == 2  # server_crashes was 0


def test_a_run_that_fails_in_the_step_reaching_its_stop_is_failed():
    data = {
        "cluster": {"workers": 2, "speed": {0: 0.25}, "stragglers": [{"worker": 0, "delay_s": 0.005}]},
        "strategy": {"name": "adpsgd"},
        "stop": {"max_updates": 5},
        "faults": {"worker_crash": [{"worker": 1, "at_s": 0.0431}]},
    }
    summary = fred.run(data).summary
    assert (summary["status"], summary["stop_reason"]) == (
        "failed",
        "failed",
    ) and "worker 1 crashed" in summary["failure"]


@pytest.mark.parametrize(
    "strategy", [{"name": "ssgd"}, {"name": "ssgd", "aggregation": "ps"}, {"name": "sasgd", "n_soft": 1}]
)
def test_without_a_timeout_a_synchronous_wait_lasts_until_the_worker_rejoins(strategy):
    # It failed at the first wait, though the docs' reason (the wait can never end) did not hold.
    data = {
        "cluster": {"workers": 3},
        "strategy": strategy,
        "stop": {"max_sim_time_s": 0.2},
        "faults": {"worker_crash": [{"worker": 2, "at_s": 0.015, "rejoin_at_s": 0.05}]},
    }
    result = fred.run(data)
    assert result.summary["status"] == "completed" and result.summary["worker_rejoins"] == 1
    assert result.updates[
        (result.updates["sim_time_s"] > 0.015) & (result.updates["sim_time_s"] < 0.05)
    ].empty
    assert 2 in set(result.updates.loc[result.updates["sim_time_s"] > 0.06, "worker"])
