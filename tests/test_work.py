"""The bounds on a run's work that a scenario's numbers alone do not show: gradient steps counted
as each strategy counts them (the contract tests check every strategy's count), and what
evaluations cost, before the run and as it goes."""

from __future__ import annotations

import pytest

import fred
from fred.runs import work
from fred.scenario.loading import ScenarioError, validate
from fred.scenario.schema import run_work
from tests.conftest import tiny


def test_an_update_of_many_local_steps_is_counted_in_the_shortest_time_a_run_lasts():
    # 12 averaging rounds of 5 local steps of 10 ms: at least 0.6 s, so 100,000 evaluations fit only every 6
    # us
    scenario = validate(tiny(strategy={"name": "local_sgd", "sync_every": 5}))
    assert run_work(scenario).by_updates == 12 * 5 * 4 and run_work(scenario).at_least_s == pytest.approx(0.6)
    with pytest.raises(ScenarioError, match=r"eval.every_s is 1e-06 s: at least 6e\+05 times in the run"):
        validate(
            tiny(
                strategy={"name": "local_sgd", "sync_every": 5}, eval={"every_s": 1e-6, "every_updates": None}
            )
        )


def test_both_stops_bound_the_steps_by_whichever_comes_first():
    # a billion local steps a round would never end, but 10 simulated seconds of 10 ms steps are 4,000
    sync = {"strategy": {"name": "local_sgd", "sync_every": 10**9}}
    assert validate(tiny(**sync, stop={"max_updates": 5, "max_sim_time_s": 10.0})).stop.max_updates == 5
    with pytest.raises(
        ScenarioError,
        match="give a smaller stop.max_updates, a smaller strategy.sync_every or a shorter "
        "stop.max_sim_time_s",
    ):
        validate(tiny(**sync, stop={"max_updates": 5, "max_sim_time_s": 1e9}))


def test_evaluating_often_a_model_trained_far_more_still_runs():
    # 20,000 evaluations of a 300k-parameter MLP cost 2.6e12 multiply-adds, past MAX_EVAL_WORK, but the
    # 20,000 gradient steps of 32 examples cost 200 times that
    scenario = validate(
        tiny(
            model={"hidden": [512, 512]},
            data={"batch_size": 32},
            stop={"max_updates": 20_000},
            eval={"every_updates": 1},
        )
    )
    work.check_evaluations(scenario)


def test_evaluations_that_turn_out_to_cost_far_more_than_training_end_the_run(monkeypatch):
    # Pushes of a gigabyte hold each worker 0.8 s: the 3 updates take seconds, not the 7.5 ms validation
    # can count on, and evaluations every millisecond pile up. (The bound lowered: the test makes 10
    # evaluations, not the 25,000 of the real one.)
    monkeypatch.setattr(work, "MAX_EVAL_WORK", 2e8)
    data = tiny(
        workload={"param_bytes": 10**9},
        stop={"max_updates": 3},
        eval={"every_s": 0.02, "every_updates": None},
    )
    result = fred.run(data)
    assert result.summary["status"] == "failed"
    assert result.summary["failure"].startswith(
        "eval.every_s: 10 evaluations have cost 2.04e+08 multiply-adds, 17 times the run's training so far"
    )
    assert "give a larger eval.every_s or fewer data.eval_examples" in result.summary["failure"]
    assert (
        result.summary["sim_time_s"] == 0.18 and result.summary["updates"] == 0
    )  # the first push takes 0.8 s
    assert result.metrics["sim_time_s"].is_monotonic_increasing


def test_the_check_before_the_run_counts_the_fewest_evaluations(monkeypatch):
    monkeypatch.setattr(work, "MAX_EVAL_WORK", 2e8)
    data = tiny(
        stop={"max_updates": 40}, eval={"every_s": 1e-3, "every_updates": None}
    )  # at least 100 evaluations
    with pytest.raises(
        ValueError,
        match=r"^eval.every_s: at least 100 evaluations of 359 rows by a model of 1,210 "
        r"parameters cost about 2.04e\+09 multiply-adds",
    ):
        fred.run(data)
