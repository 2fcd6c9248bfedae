"""What a run does over simulated time: evaluation cadence, stop conditions, divergence."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

import pytest

import fred
import fred.runs.controller
import fred.simulation.faults
from tests.conftest import tiny


def test_evaluation_every_simulated_interval_lands_on_the_grid():
    result = fred.run(
        tiny(
            eval={"every_s": 0.01, "every_updates": None}, stop={"max_sim_time_s": 0.05, "max_updates": None}
        )
    )
    times = result.metrics["sim_time_s"].tolist()
    assert times == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04, 0.05])
    assert result.summary["sim_time_s"] == 0.05 and result.summary["stop_reason"] == "max_sim_time_s"


def test_evaluation_times_are_multiples_of_the_interval_as_written_and_never_doubled():
    # Adding 0.05 up drifted (0.15000000000000002, ..., 0.9999999999999999), and the end's
    # evaluation at 1.0 then doubled the last one, with a NaN train loss.
    result = fred.run(
        tiny(eval={"every_s": 0.05, "every_updates": None}, stop={"max_sim_time_s": 1.0, "max_updates": None})
    )
    assert result.metrics["sim_time_s"].tolist() == [round(0.05 * k, 10) for k in range(21)]
    assert not result.metrics["train_loss"].iloc[1:].isna().any()


def test_a_run_stopped_by_an_evaluation_on_the_grid_ends_at_it():
    # The run used to end at the last event before that evaluation, and its end's evaluation
    # then went back in time (0.091, then 0.0909813 with a NaN train loss).
    result = fred.run(
        tiny(
            eval={"every_s": 0.013, "every_updates": None},
            stop={"max_sim_time_s": 1.0, "max_updates": None, "target_eval_loss": 2.0},
        )
    )
    times = result.metrics["sim_time_s"].tolist()
    assert result.summary["stop_reason"] == "target_eval_loss" and times == sorted(set(times))
    assert result.summary["sim_time_s"] == times[-1] == round(0.013 * (len(times) - 1), 10)


@pytest.mark.parametrize(
    "strategy, stop",
    [
        ({"name": "sgd"}, {"max_sim_time_s": 1.0, "max_updates": None}),
        ({"name": "asgd", "clock": "logical"}, {"max_updates": 5}),
    ],
)
def test_an_evaluation_on_the_grid_sees_the_updates_applied_at_its_time(strategy, stop):
    # Updates land on the grid here (compute 0.25 s; the logical clock's whole steps). A grid
    # evaluation was taken before them and the end's after them: two rows at the end's time.
    compute = {"step_time_s": 0.25} if strategy["name"] == "sgd" else {}
    result = fred.run(
        tiny(
            strategy=strategy,
            cluster={"workers": 1 if strategy["name"] == "sgd" else 4, "compute": compute},
            eval={"every_s": 0.25 if strategy["name"] == "sgd" else 1.0, "every_updates": None},
            stop=stop,
        )
    )
    metrics, applied = result.metrics, result.updates.drop_duplicates("update")
    assert metrics["sim_time_s"].is_unique
    for time_s, updates in zip(metrics["sim_time_s"].iloc[1:], metrics["updates"].iloc[1:]):
        assert updates == (applied["sim_time_s"] <= time_s).sum() > 0


@pytest.mark.parametrize("cadence", ["eval", "server_checkpoint"])
def test_a_wait_validation_could_not_foresee_ends_the_run_at_the_most_evaluations_or_checkpoints(
    cadence, monkeypatch
):
    # Pushes of 100 s between updates (slow links; validation counts compute only): 1e5 evaluations
    # or checkpoints per update, and a longer wait gave hours of them. The bound stands in small.
    monkeypatch.setattr(fred.runs.controller, "MAX_CADENCE_EVENTS", 40)
    monkeypatch.setattr(fred.simulation.faults, "MAX_CADENCE_EVENTS", 40)
    data = tiny(network={"bandwidth_bps": 1e3}, workload={"param_bytes": 100_000}, stop={"max_updates": 3})
    if cadence == "eval":
        data = tiny(**{**data, "eval": {"every_s": 0.01, "every_updates": None}})
        field, what = (
            "eval.every_s is 0.01 s: 40 evaluations",
            "give a larger eval.every_s, or eval.every_updates",
        )
    else:
        crash = {"checkpoint_every_s": 0.01, "crashes": [{"at_s": 1000, "restart_s": 1}]}
        data = tiny(
            **{**data, "strategy": {"name": "ssgd", "aggregation": "ps"}, "faults": {"server_crash": crash}}
        )
        field, what = (
            "faults.server_crash.checkpoint_every_s is 0.01 s: 40 checkpoints",
            "give a larger checkpoint_every_s",
        )
    summary = fred.run(data).summary
    assert (
        summary["status"] == "failed" and summary["failure"].startswith(field) and what in summary["failure"]
    )
    assert summary["sim_time_s"] < 0.5


def test_evaluation_every_n_updates():
    result = fred.run(tiny(eval={"every_updates": 5}, stop={"max_updates": 20}))
    assert result.metrics["updates"].tolist() == [0, 5, 10, 15, 20]


def test_a_target_loss_ends_the_run_early():
    result = fred.run(tiny(stop={"max_updates": 2000, "target_eval_loss": 1.5}, eval={"every_updates": 5}))
    assert result.summary["stop_reason"] == "target_eval_loss"
    assert result.summary["final_eval_loss"] <= 1.5 and result.summary["updates"] < 2000


def test_a_run_whose_loss_explodes_is_marked_diverged_and_keeps_its_records(tmp_path):
    data = tiny(data={"source": {"kind": "synthetic", "task": "regression"}}, strategy={"lr": 5.0})
    data["model"] = {"kind": "logistic"}
    result = fred.run(data | {"stop": {"max_updates": 500}, "eval": {"every_updates": 2}}, out=tmp_path / "r")
    assert result.summary["status"] == "diverged"
    assert result.summary["final_eval_loss"] is None
    assert not math.isfinite(result.metrics["eval_loss"].iloc[-1])
    assert result.summary["updates"] < 500 and result.summary["stop_reason"] == "non_finite_loss"
    assert fred.load_run(tmp_path / "r").summary["status"] == "diverged"


def test_a_run_gone_to_nan_reports_no_accuracy():
    # Its parameters are NaN: argmax of NaN logits is class 0, which digits' test split holds
    # ~10% of, and that 0.106 was reported as the final accuracy next to no final loss.
    result = fred.run(tiny(name="nan", strategy={"name": "ssgd", "lr": 1e30}, stop={"max_updates": 200}))
    assert result.summary["status"] == "diverged" and result.summary["final_eval_loss"] is None
    assert result.summary["final_eval_accuracy"] is None
    assert math.isnan(result.metrics["eval_accuracy"].iloc[-1])
    assert result.metrics["eval_accuracy"].iloc[0] > 0  # the start's, with finite parameters, is kept


def test_training_loss_is_recorded_between_evaluations():
    result = fred.run(tiny())
    assert math.isnan(result.metrics["train_loss"].iloc[0])  # nothing trained before the first eval
    assert result.metrics["train_loss"].iloc[1:].notna().all()


def test_asgd_learns_the_digits():
    result = fred.run(tiny(stop={"max_updates": 300}, eval={"every_updates": 100}))
    assert result.summary["final_eval_accuracy"] > 0.8
    assert result.metrics["eval_loss"].iloc[-1] < result.metrics["eval_loss"].iloc[0] / 3


@pytest.mark.parametrize("sharing", ["fair", "fcfs"])
def test_asgd_staleness_reflects_the_number_of_workers(sharing):
    result = fred.run(tiny(cluster={"workers": 8}, stop={"max_updates": 200}, network={"sharing": sharing}))
    steady = result.updates[result.updates["update"] > 50]
    # Eight equal workers: served one at a time they take turns; sharing the server's links
    # their pushes land together, and each reads the model as its fetch starts, just after its
    # own update. Either way each gradient is applied after the other seven: seven updates old.
    assert steady["staleness"].mean() == pytest.approx(7, abs=1)


def test_a_straggler_contributes_fewer_and_staler_gradients():
    result = fred.run(
        tiny(
            cluster={"workers": 4, "stragglers": [{"worker": 3, "slow_factor": 4}]}, stop={"max_updates": 200}
        )
    )
    per_worker = result.updates.groupby("worker")["staleness"].agg(["count", "mean"])
    assert per_worker.loc[3, "count"] < per_worker.loc[0, "count"] / 2
    assert per_worker.loc[3, "mean"] > per_worker.loc[0, "mean"]


def test_ssgd_waits_for_its_straggler():
    fast = fred.run(tiny(strategy={"name": "ssgd"}))
    slow = fred.run(tiny(strategy={"name": "ssgd"}, cluster={"stragglers": [{"worker": 1, "delay_s": 0.1}]}))
    assert slow.summary["params_sha256"] == fast.summary["params_sha256"]  # same numbers ...
    assert slow.summary["sim_time_s"] > fast.summary["sim_time_s"] + 12 * 0.1 - 1e-9  # ... later
    waits = slow.events[slow.events["kind"] == "wait"]
    assert set(waits["entity"]) == {"worker0", "worker2", "worker3"}


def test_progress_is_reported_between_evaluations():
    seen = []
    fred.run(
        tiny(stop={"max_updates": 400}, eval={"every_updates": 200}),
        progress=lambda t, u, loss: seen.append(u),
    )
    assert len(seen) > 10 and seen == sorted(seen) and seen[-1] == 400


def test_loading_a_result_that_was_not_written_says_how_to_write_it():
    result = fred.run(tiny(stop={"max_updates": 2}))
    assert result.path is None
    with pytest.raises(ValueError, match="pass out= to fred.run"):
        fred.load_run(result.path)


@pytest.mark.parametrize("max_sim_time_s", [None, 5.0])
def test_a_run_with_nothing_left_to_happen_stops_as_stalled(monkeypatch, max_sim_time_s):
    # With every_s and no time limit it used to evaluate on the grid forever; with a time
    # limit it jumped to the limit and said `completed`, hiding the deadlock.
    from fred.scenario import registry

    idle = registry.get("asgd")._replace(start=lambda sim, config: lambda: sim.init_params)
    monkeypatch.setitem(registry._REGISTRY, "asgd", idle)
    done = []
    scenario = tiny(
        eval={"every_s": 0.01, "every_updates": None},
        stop={"max_updates": 4, "max_sim_time_s": max_sim_time_s},
    )
    thread = threading.Thread(target=lambda: done.append(fred.run(scenario)), daemon=True)
    thread.start()
    thread.join(600)  # a hang guard, not a speed check: the run takes about a second
    assert done and done[0].summary["status"] == "stalled" and done[0].summary["stop_reason"] == "no_events"
    assert done[0].summary["sim_time_s"] == 0.0


def test_a_result_prints_as_one_line_not_its_tables_and_arrays():
    result = fred.run(tiny(stop={"max_updates": 2}))
    text = repr(result)
    assert "\n" not in text and len(text) < 400 and "status=completed" in text and "updates=2" in text


def test_a_run_directory_another_process_writes_at_the_same_time_ends_whole(tmp_path, monkeypatch):
    # Two sweeps sharing a runs folder write the same run: the other's copy appeared at out between
    # the two renames ("Directory not empty"), and hidden .old and .partial copies were left behind.
    # The renames are what replaces a run where directories cannot be swapped in one step (NFS);
    # tests/test_run_dir_swap.py races the swap.
    import errno

    from fred.runs import records

    out = tmp_path / "run"
    fred.run(tiny(stop={"max_updates": 2}), out=out)

    def cannot_swap(a, b):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(a))

    monkeypatch.setattr(records, "exchange", cannot_swap)
    real_replace = os.replace
    raced: list[Path] = []

    def replace(src, dst):
        if Path(dst) == out and not raced and Path(src).name.startswith(".run.partial"):
            raced.append(out)
            out.mkdir()  # the other writer's run lands first
            (out / "summary.json").write_text("{}")
        return real_replace(src, dst)

    monkeypatch.setattr(records.os, "replace", replace)
    result = fred.run(tiny(stop={"max_updates": 3}), out=out)
    assert raced and fred.load_run(out).summary["params_sha256"] == result.summary["params_sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no hidden copies left


def test_hidden_copies_a_killed_process_left_are_deleted_by_the_next_write(tmp_path):
    # A SIGKILL during the write left .run.partial-<pid> (a 10,000-update run's: ~1 MB) for good.
    import socket
    import subprocess
    import sys

    from fred.runs.records import _hidden

    out = tmp_path / "run"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    host = socket.gethostname()
    left = [
        tmp_path / f".run.partial-{host}-{dead.stdout.strip()}",
        tmp_path / f".run.old-{host}-{dead.stdout.strip()}-0",
    ]
    alive = tmp_path / f".run.partial-{host}-{os.getppid()}"  # another process's, still writing
    elsewhere = tmp_path / f".run.partial-another-host-{dead.stdout.strip()}"
    for path in [*left, alive, elsewhere]:
        path.mkdir()
        (path / "metrics.parquet").write_text("")
    fred.run(tiny(stop={"max_updates": 2}), out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", alive.name, elsewhere.name])
    assert _hidden(out, "partial").name == f".run.partial-{host}-{os.getpid()}"
