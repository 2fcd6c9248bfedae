"""Compute times: base time, speed factors, stragglers, jitter and workload profiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fred
from fred.numerics import rng
from fred.scenario.loading import validate
from fred.simulation.compute import ComputeModel
from tests.conftest import tiny


def draws(data: dict, worker: int, count: int = 200) -> np.ndarray:
    model = ComputeModel(validate(data))
    return np.array([model.duration_s(worker) for _ in range(count)])


def test_without_jitter_every_step_takes_the_base_time():
    assert (draws(tiny(), 0) == 0.01).all()


def test_speed_factors_and_stragglers_scale_and_delay_steps():
    data = tiny(cluster={"speed": {1: 2.0}, "stragglers": [{"worker": 2, "slow_factor": 3, "delay_s": 0.5}]})
    assert draws(data, 1)[0] == pytest.approx(0.005)
    assert draws(data, 2)[0] == pytest.approx(0.03 + 0.5)


def test_flops_timing_uses_the_batch_and_the_device():
    data = tiny(cluster={"compute": {"step_time_s": None, "flops_per_example": 1e9, "device_flops": 1e12}})
    assert draws(data, 0)[0] == pytest.approx(8 * 1e9 / 1e12)


def test_a_workload_profile_times_a_small_model_as_resnet50():
    data = tiny(
        cluster={"compute": {"step_time_s": None, "device_flops": 1e14}}, workload={"profile": "resnet50"}
    )
    assert draws(data, 0)[0] == pytest.approx(8 * 3 * 4.1e9 / 1e14)
    result = fred.run(data | {"stop": {"max_updates": 2}})
    assert result.summary["param_bytes"] == int(25.6e6 * 4)
    pushes = result.events[result.events["kind"] == "push"]
    assert (pushes["bytes"] == 25.6e6 * 4).all()


def test_lognormal_jitter_has_median_one_and_the_requested_spread():
    data = tiny(cluster={"jitter": {"kind": "lognormal", "sigma": 0.5}})
    logs = np.log(draws(data, 0, 4000) / 0.01)
    assert abs(np.median(logs)) < 0.05 and logs.std() == pytest.approx(0.5, rel=0.1)


def test_random_straggles_happen_at_the_requested_rate():
    data = tiny(cluster={"random_straggle": {"probability": 0.25, "delay_s": 1.0}})
    slow = draws(data, 0, 4000) > 0.5
    assert slow.mean() == pytest.approx(0.25, abs=0.03)


def test_each_worker_draws_from_its_own_stream():
    data = tiny(cluster={"jitter": {"kind": "lognormal", "sigma": 0.5}})
    alone = draws(data, 1, 10)
    model = ComputeModel(validate(data))
    for _ in range(50):
        model.duration_s(0)  # another worker's progress ...
    assert (np.array([model.duration_s(1) for _ in range(10)]) == alone).all()  # ... changes nothing here


def test_a_worker_can_slow_down_mid_run():
    data = tiny(cluster={"speed": {1: 2.0}, "speed_changes": [{"worker": 1, "at_s": 1.0, "speed": 0.5}]})
    model = ComputeModel(validate(data))
    assert model.duration_s(1, now_s=0.5) == pytest.approx(0.005)
    assert model.duration_s(1, now_s=1.0) == pytest.approx(0.02)
    assert model.duration_s(0, now_s=2.0) == pytest.approx(0.01)  # others unaffected
    result = fred.run(data | {"stop": {"max_sim_time_s": 2.0}})
    computes = result.events[(result.events["kind"] == "compute") & (result.events["entity"] == "worker1")]
    before = computes[computes["end_s"] < 0.9]
    after = computes[computes["start_s"] > 1.1]
    assert (
        (before["end_s"] - before["start_s"]).max()
        < 0.006
        < 0.019
        < (after["end_s"] - after["start_s"]).min()
    )


def test_jitter_is_the_c_library_exp_of_the_workers_normal_draws():
    # math.exp and not np.exp: on AVX-512 CPUs numpy's exp differs from libm's in the last
    # bit, and the event trace would depend on the machine (docs/determinism.md).
    data = tiny(cluster={"jitter": {"kind": "lognormal", "sigma": 0.3}})
    normals = rng.stream(validate(data).seed, "compute", 1).standard_normal(200)
    assert draws(data, 1).tolist() == [0.01 * math.exp(0.3 * float(z)) for z in normals]
