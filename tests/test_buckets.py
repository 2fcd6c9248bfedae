"""Gradient buckets: cut from a model's layers in backward order, each all-reduced as soon as the
backward pass has made it, one after another; the iteration time follows the overlap."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import fred
from fred.scenario.loading import ScenarioError
from fred.scenario.schema import NetworkConfig
from fred.scenario.workloads import Layer
from fred.simulation.buckets import Bucket, plan
from fred.simulation.collectives import allreduce_time_s
from fred.simulation.compute import ComputeModel
from fred.simulation.engine import Simulation
from fred.simulation.network import Network
from fred.simulation.worker import Worker
from tests.conftest import tiny

NET = dict(latency_s=20e-6, bandwidth_bps=1.25e9, reduce_s_per_byte=1e-10, sync_s=5e-5)


def test_buckets_are_cut_in_backward_order_and_ready_as_the_backward_pass_reaches_them():
    # Forward FLOPs 1, 2, 3 (F = 6): the step is F forward + 2F backward, last layer first.
    layers = [Layer("a", 40, 1), Layer("b", 40, 2), Layer("c", 40, 3)]
    buckets = plan(layers, bucket_bytes=50, message_bytes=1200.0)
    # c alone is 40 bytes, under 50: c and b close the first bucket; a is the last
    assert buckets == (Bucket(800.0, (6 + 2 * (3 + 2)) / 18), Bucket(400.0, 1.0))
    assert sum(b.nbytes for b in plan(layers, 1, 1200.0)) == 1200.0
    assert [b.ready for b in plan(layers, 10**9, 1200.0)] == [
        1.0
    ]  # one bucket: the whole gradient at the end


def two_bucket_simulation(
    scenario: fred.Scenario, cfg: NetworkConfig, first_bytes: float, last_bytes: float, ready: float
) -> Simulation:
    """A simulation of the scenario's workers whose gradient is two buckets: the first of
    ``first_bytes``, ready at ``ready`` of the backward pass, the last of ``last_bytes`` at its end."""
    crew = [Worker(i, lambda: np.arange(1)) for i in range(scenario.cluster.workers)]
    return Simulation(
        simpy.Environment(),
        crew,
        Network(cfg),
        ComputeModel(scenario),
        None,
        None,  # type: ignore[arg-type]
        first_bytes + last_bytes,
        0,
        buckets=(Bucket(first_bytes, ready), Bucket(last_bytes, 1.0)),
    )


@pytest.mark.parametrize("sharing", ["fair", "fcfs"])
@pytest.mark.parametrize(
    "first_bytes, step_s", [(4e7, 0.01), (1e6, 0.5)]
)  # communication-bound, compute-bound
def test_two_buckets_take_the_closed_form_time(sharing, first_bytes, step_s):
    p, last_bytes, ready = 4, 2e7, 0.6
    cfg = NetworkConfig(sharing=sharing, **NET)
    scenario = fred.validate(tiny(cluster={"workers": p, "compute": {"step_time_s": step_s}}))
    sim = two_bucket_simulation(scenario, cfg, first_bytes, last_bytes, ready)
    crew = sim.workers
    done: list[float] = []

    def member(w):
        yield from sim.backprop_allreduce(w, None, sim.workers)
        done.append(sim.now)

    for w in crew:
        sim.process(member(w))
    sim.env.run()
    first, last = (allreduce_time_s("ring", p, n, cfg) for n in (first_bytes, last_bytes))
    # the last bucket starts when the step ends and the first bucket's all-reduce is done
    expected = max(step_s, ready * step_s + first) + last
    assert done == pytest.approx([expected] * p, rel=1e-9)


def test_buckets_change_the_clock_and_not_the_numbers():
    def run(bucket_bytes):
        workload = {"profile": "resnet50"} | ({"bucket_bytes": bucket_bytes} if bucket_bytes else {})
        return fred.run(
            fred.validate(
                tiny(
                    strategy={"name": "arsgd"},
                    workload=workload,
                    stop={"max_updates": 3},
                    cluster={"workers": 4, "compute": {"step_time_s": 0.3}},
                )
            )
        )

    whole, bucketed = run(None), run(25 * 2**20)
    assert bucketed.summary["params_sha256"] == whole.summary["params_sha256"]
    assert bucketed.summary["sim_time_s"] < whole.summary["sim_time_s"]  # the overlap hides communication
    allreduces = bucketed.events[bucketed.events["kind"] == "allreduce"]
    assert len(allreduces) > 3 * 4  # several all-reduces per worker per iteration


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            {
                "workload": {"bucket_bytes": 1000},
                "model": {"kind": "python", "factory": "mymodels:make"},
                "strategy": {"name": "arsgd"},
            },
            "needs workload.profile with a python model",
        ),
        (
            {"workload": {"profile": "resnet50", "bucket_bytes": 1000}, "strategy": {"name": "asgd"}},
            "drop bucket_bytes or use",
        ),
        ({"workload": {"profile": "resnet50", "bucket_bytes": 0}}, "bucket_bytes"),
    ],
)
def test_buckets_without_layers_or_an_allreduce_are_refused_with_the_fix(overrides, words):
    data = tiny(**{key: value for key, value in overrides.items() if key != "model"})
    data["model"] = overrides.get(
        "model", data["model"]
    )  # a python model in place of the MLP, not merged into it
    with pytest.raises(ScenarioError, match=words):
        fred.validate(data)
