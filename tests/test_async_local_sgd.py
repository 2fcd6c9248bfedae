"""Asynchronous Local-SGD against an independent loop, its closed-form push times, its reduction to
ASGD, and its refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import fred
from fred.numerics import rng
from fred.numerics.data import BatchStream, load_dataset
from fred.numerics.models import build_model
from fred.scenario.loading import ScenarioError, validate
from tests.conftest import tiny

LATENCY_S = 1e-3  # a push or fetch: one latency (the bandwidth makes the bytes' time vanish)
NET = {"latency_s": LATENCY_S, "bandwidth_bps": 1e18}


def two_speeds(dylu: bool, **strategy) -> dict:
    """Two replicas of one worker, worker 1 half as fast (0.02 s a step against 0.01 s). With DyLU,
    worker 0's steps take 0.0101 s (a straggler delay of 1e-4 s), so that its 4 steps and worker 1's
    2 do not end together: the arrival order is then the step times', not a tie's."""
    stragglers = [{"worker": 0, "slow_factor": 1.0, "delay_s": 1e-4}] if dylu else []
    return tiny(
        cluster={
            "workers": 2,
            "compute": {"step_time_s": 0.01},
            "speed": {1: 0.5},
            "stragglers": stragglers,
        },
        network=NET,
        strategy={
            "name": "async_local_sgd",
            "inner_steps": 4,
            "momentum_every": 2,
            "outer_lr": 0.7,
            "outer_momentum": 0.9,
            "lr": 0.05,
            "dynamic_local_updates": dylu,
            **strategy,
        },
        stop={"max_updates": 7},
        eval={"every_updates": 100},
    )


def arrivals(step_s: list[float], steps: list[int], pushes: int) -> list[tuple[float, int]]:
    """``(time, replica)`` of every push's arrival in order: replica i's k-th arrives at
    ``k (H_i s_i + L) + (k - 1) L`` (H_i steps, a push, then a fetch before the next round)."""
    times = [
        (k * (h * s + LATENCY_S) + (k - 1) * LATENCY_S, i)
        for i, (s, h) in enumerate(zip(step_s, steps))
        for k in range(1, pushes + 1)
    ]
    return sorted(times)[:pushes]


def reference(data: dict, step_s: list[float]) -> tuple[list[int], dict[str, np.ndarray]]:
    """Algorithms 2 and 3 as a plain float64 loop: the data, model, initial parameters and per-batch
    gradients are fred's (worker j's k-th batch is block j of global batch k); the order of arrivals
    comes from :func:`arrivals`; SGD inside, DN at the server, are written out here."""
    sc = validate(data)
    cfg, n, b = sc.strategy, sc.cluster.workers, sc.data.batch_size
    h, updates, period, c = cfg.inner_steps, sc.stop.max_updates, cfg.momentum_every, cfg.momentum_activation
    steps = [max(1, int(h * min(step_s) / s)) if cfg.dynamic_local_updates else h for s in step_s]
    dataset = load_dataset(sc.data, rng.stream(sc.seed, "data", "load"))
    model = build_model(sc.model, dataset.feature_shape, dataset.num_classes)
    init = model.init(rng.jax_key(sc.seed, "model", "init"))
    stream = BatchStream(np.arange(len(dataset.y_train)), n * b, rng.stream(sc.seed, "data", "batches"))
    global_batches: list[np.ndarray] = []

    def batch(worker: int, k: int) -> np.ndarray:
        while len(global_batches) <= k:
            global_batches.append(stream.next())
        return global_batches[k][worker * b : (worker + 1) * b]

    @jax.jit
    def grad_sum(params, x, y):
        return jax.grad(lambda p: -jnp.sum(jax.nn.log_softmax(model.apply(p, x))[jnp.arange(len(y)), y]))(
            params
        )

    f64 = lambda tree: {k: np.asarray(v, np.float64) for k, v in tree.items()}  # noqa: E731
    theta = f64(init)
    momentum = {k: np.zeros_like(v) for k, v in theta.items()}
    buffer = {k: np.zeros_like(v) for k, v in theta.items()}
    read, taken, order = [theta] * n, [0] * n, []
    for t, (_, i) in enumerate(arrivals(step_s, steps, updates)):
        local = read[i]
        for _ in range(steps[i]):
            rows = batch(i, taken[i])
            taken[i] += 1
            g = f64(
                grad_sum({k: v.astype(np.float32) for k, v in local.items()}, *dataset_rows(dataset, rows))
            )
            local = {k: local[k] - cfg.lr * g[k] / b for k in local}
        g = {k: read[i][k] - local[k] for k in theta}
        buffer = {k: buffer[k] + g[k] for k in theta}
        beta, eps = cfg.outer_momentum, cfg.outer_lr
        if (t + 1) % period == 0:
            momentum = {k: beta * momentum[k] + buffer[k] / period for k in theta}
            share = 1 - c * period + c
            theta = {k: theta[k] - eps * (share * beta * momentum[k] + g[k] / period) for k in theta}
            buffer = {k: np.zeros_like(v) for k, v in theta.items()}
        else:
            theta = {k: theta[k] - eps * (c * beta * momentum[k] + g[k] / period) for k in theta}
        read[i] = theta
        order.append(i)
    return order, theta


def dataset_rows(dataset, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return dataset.x_train[rows], dataset.y_train[rows]


@pytest.mark.parametrize("dylu, activation", [(False, 0.0), (True, 0.0), (True, 0.25)])
def test_two_replicas_of_two_speeds_match_an_independent_loop(dylu, activation):
    data = two_speeds(dylu, momentum_activation=activation)
    step_s = [0.0101 if dylu else 0.01, 0.02]
    result = fred.run(data)
    order, expected = reference(data, step_s)
    assert result.updates["worker"].tolist() == order
    assert len(set(order)) == 2 and order != sorted(order)  # both replicas push, interleaved
    for name, value in expected.items():
        np.testing.assert_allclose(result.params[name], value, rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("dylu", [False, True])
def test_pushes_arrive_at_their_closed_form_times(dylu):
    data = two_speeds(dylu)
    data["workload"] = {"param_bytes": 1_000_000, "timing_only": True}
    data["stop"] = {"max_updates": 12}
    step_s = [0.0101 if dylu else 0.01, 0.02]
    steps = [4, 2] if dylu else [4, 4]
    expected = arrivals(step_s, steps, 12)
    updates = fred.run(data).updates
    np.testing.assert_allclose(updates["sim_time_s"], [t for t, _ in expected], rtol=0, atol=1e-9)
    assert updates["worker"].tolist() == [i for _, i in expected]
    # staleness: the updates applied since the replica read the model
    last: dict[int, int] = {}
    for u, (_, i) in enumerate(expected):
        assert updates["staleness"].iloc[u] == u - last.get(i, 0)
        last[i] = u + 1


def test_one_inner_step_without_momentum_at_outer_lr_1_is_asgd():
    # theta - 1 * (theta_read - (theta_read - lr g)) = theta - lr g: ASGD's update at the same schedule
    # (events and updates bit for bit), the parameters up to float32 rounding.
    common = {"lr": 0.1}
    ours = fred.run(
        tiny(
            strategy={
                "name": "async_local_sgd",
                "inner_steps": 1,
                "outer_lr": 1.0,
                "outer_momentum": 0.0,
                "momentum_every": 1,
                **common,
            }
        )
    )
    asgd = fred.run(tiny(strategy={"name": "asgd", **common}))
    pd.testing.assert_frame_equal(ours.events, asgd.events)
    pd.testing.assert_frame_equal(ours.updates, asgd.updates)
    for name in asgd.params:
        np.testing.assert_allclose(ours.params[name], asgd.params[name], rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "strategy, needle",
    [
        (
            {"replica_workers": 3},
            "strategy.replica_workers is 3 but cluster.workers is 4, which it does not divide"
            ": replicas are replica_workers workers each; use a divisor of 4: 1, 2, 4",
        ),
        ({"inner_steps": 0}, "strategy.inner_steps: got 0; use at least 1 inner step per push"),
        ({"outer_lr": 0}, "strategy.outer_lr: got 0; use an outer learning rate above 0"),
        ({"outer_momentum": 1}, "strategy.outer_momentum: got 1; use a momentum in [0, 1)"),
        ({"momentum_every": 0}, "strategy.momentum_every: got 0; use at least 1"),
        (
            {"momentum_activation": -0.1},
            "strategy.momentum_activation: got -0.1; use a momentum activation in",
        ),
        (
            {"momentum_every": 4, "momentum_activation": 0.5},
            "strategy.momentum_activation is 0.5 but Delayed Nesterov's buffer is N = 4 pseudo-gradients "
            "(strategy.momentum_every, by default the replicas), and c must be in [0, 1/N]; use a "
            "momentum_activation of at most 0.25",
        ),
        (
            {"momentum_activation": 0.3},  # 4 replicas: N = 4 by default
            "N = 4 pseudo-gradients",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_field_the_value_and_the_fix(strategy, needle):
    with pytest.raises(ScenarioError) as refused:
        validate(tiny(strategy={"name": "async_local_sgd", **strategy}))
    assert any(needle in problem for problem in refused.value.problems), refused.value.problems
