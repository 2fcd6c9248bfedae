"""The grouped sync/async hybrid: grouping by measured speed, and its two limits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fred
from fred.scenario.loading import ScenarioError, validate
from tests.conftest import tiny

STOP = {"max_updates": 30}


def sha(**overrides) -> str:
    return fred.run(tiny(stop=STOP, **overrides)).summary["params_sha256"]


@pytest.mark.parametrize("probe", [{"probe_iterations": 0}, {"probe_iterations": 5}])
def test_one_group_of_everyone_is_ssgd_on_a_parameter_server(probe):
    hybrid = sha(strategy={"name": "grouped_hybrid", "lr": 0.1, "group_size": 4, **probe})
    assert hybrid == sha(strategy={"name": "ssgd", "aggregation": "ps", "lr": 0.1})


@pytest.mark.parametrize("update", ["mean", "sum"])
def test_groups_of_one_are_asgd(update):
    hybrid = sha(
        strategy={
            "name": "grouped_hybrid",
            "lr": 0.1,
            "group_size": 1,
            "probe_iterations": 0,
            "group_update": update,
        }
    )
    assert hybrid == sha(strategy={"name": "asgd", "lr": 0.1})


def test_the_group_update_is_the_mean_unless_asked_for_the_sum():
    assert validate(tiny(strategy={"name": "grouped_hybrid"})).strategy.group_update == "mean"


def test_a_summed_group_update_of_everyone_is_ssgd_at_n_times_the_learning_rate():
    # sum: lr * (g_1 + ... + g_n) with g_m each member's mean gradient = (n lr) * their mean.
    # Equal in exact arithmetic; the division happens in another place, so float32 rounding differs.
    hybrid = fred.run(
        tiny(
            stop=STOP,
            strategy={
                "name": "grouped_hybrid",
                "lr": 0.025,
                "group_size": 4,
                "probe_iterations": 0,
                "group_update": "sum",
            },
        )
    )
    ssgd = fred.run(tiny(stop=STOP, strategy={"name": "ssgd", "aggregation": "ps", "lr": 0.1}))
    mean = fred.run(
        tiny(
            stop=STOP,
            strategy={"name": "grouped_hybrid", "lr": 0.025, "group_size": 4, "probe_iterations": 0},
        )
    )
    for name in ssgd.params:
        np.testing.assert_allclose(hybrid.params[name], ssgd.params[name], rtol=1e-4, atol=1e-6)
        assert not np.allclose(mean.params[name], ssgd.params[name], rtol=1e-3, atol=1e-5)


@settings(max_examples=6, deadline=None)
@given(
    slow=st.lists(st.integers(0, 8), min_size=2, max_size=2, unique=True),
    slowdown=st.floats(1.5, 5.0),
    sigma=st.floats(0.0, 0.1),
    seed=st.integers(0, 1000),
)
def test_the_probe_groups_the_slowed_workers_together(slow, slowdown, sigma, seed):
    # Two workers slower by a factor well beyond the jitter (sigma <= 0.1 vs >= 1.5x).
    data = tiny(
        seed=seed,
        cluster={
            "workers": 9,
            "jitter": {"kind": "lognormal", "sigma": sigma},
            "stragglers": [{"worker": w, "slow_factor": slowdown} for w in slow],
        },
        strategy={"name": "grouped_hybrid", "probe_iterations": 20, "group_size": 3},
        stop={"max_updates": 3},
    )
    groups = fred.run(data).summary["groups"]
    assert any(set(slow) <= set(g) for g in groups), groups
    assert set(slow) <= set(groups[-1])  # the slowest group comes last


def test_every_group_update_records_each_member_with_non_negative_staleness():
    data = tiny(
        cluster={"workers": 6, "stragglers": [{"worker": 1, "delay_s": 0.01}]},
        strategy={"name": "grouped_hybrid", "probe_iterations": 5, "group_size": 2},
        stop={"max_updates": 60},
    )
    result = fred.run(data)
    groups = [set(g) for g in result.summary["groups"]]
    for _, rows in result.updates.groupby("update"):
        assert set(rows["worker"]) in groups
    assert (result.updates["staleness"] >= 0).all()
    assert result.updates["staleness"].max() > 0  # groups do run asynchronously


def test_regrouping_follows_a_worker_that_slows_down():
    data = tiny(
        cluster={
            "workers": 6,
            "speed_changes": [
                {"worker": 0, "at_s": 0.3, "speed": 0.2},
                {"worker": 4, "at_s": 0.3, "speed": 0.2},
            ],
        },
        strategy={"name": "grouped_hybrid", "probe_s": 0.1, "group_size": 2, "regroup_every_s": 0.5},
        stop={"max_sim_time_s": 2.0, "max_updates": None},
    )
    result = fred.run(data)
    assert result.summary["regroupings"] >= 1
    assert [0, 4] in result.summary["groups"]


def test_a_kept_probe_trains_the_model():
    data = tiny(
        strategy={"name": "grouped_hybrid", "probe_iterations": 5, "keep_probe_updates": True},
        stop={"max_updates": 10},
    )
    result = fred.run(data)
    assert result.updates.groupby("update")["worker"].count().iloc[:5].eq(1).all()  # probe: ASGD updates


def test_regrouping_leaves_out_a_crashed_worker():
    # Worker 2 crashes before the first regrouping and never comes back (the hybrid has no
    # rejoin): it must not be given a group, where its mates would wait for it every round.
    data = tiny(
        cluster={"workers": 6},
        strategy={"name": "grouped_hybrid", "probe_s": 0.1, "group_size": 2, "regroup_every_s": 0.3},
        faults={"worker_crash": [{"worker": 2, "at_s": 0.2}], "sync_timeout_s": 0.05},
        stop={"max_sim_time_s": 1.5, "max_updates": None},
    )
    result = fred.run(data)
    assert result.summary["regroupings"] >= 1
    grouped = [w for g in result.summary["groups"] for w in g]
    assert sorted(grouped) == [0, 1, 3, 4, 5], result.summary["groups"]
    assert all(len(g) == 2 for g in result.summary["groups"][:2])  # the live workers fill whole groups
    after = result.updates[result.updates["update"] > result.updates["update"].max() // 2]
    assert 2 not in set(after["worker"])


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"group_size": 5}, "strategy.group_size is 5 but there are 4 workers; use 1..4"),
        ({"groups": 5}, "strategy.groups is 5 but there are 4 workers; use 1..4"),
    ],
)
def test_more_workers_per_group_or_groups_than_workers_is_refused(choice, message):
    with pytest.raises(ScenarioError) as err:
        validate(tiny(cluster={"workers": 4}, strategy={"name": "grouped_hybrid", "lr": 0.1, **choice}))
    assert any(message in problem for problem in err.value.problems)
