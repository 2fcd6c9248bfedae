"""DiLoCo against an independent loop, against Local SGD, against its closed-form timing, and its refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import yaml

import fred
from fred.numerics import rng
from fred.numerics.data import BatchStream, load_dataset
from fred.numerics.models import build_model
from fred.scenario.loading import ScenarioError, validate
from fred.scenario.schema import NetworkConfig
from fred.simulation.collectives import allreduce_time_s
from fred.tools.cli import main
from tests.conftest import tiny

ADAMW = {"kind": "adamw", "b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 0.1}


def reference_diloco(data: dict, outer_steps: int) -> dict[str, np.ndarray]:
    """Algorithm 1 as a plain loop, fred's strategy code aside: the data, model and initial
    parameters are fred's (the same batches); the gradients (JAX), AdamW, the outer mean and
    Nesterov (numpy) are written out here. iid sharding: worker j's k-th batch is block j of
    global batch k, so replica r's batch (its m workers') is blocks r*m .. r*m + m - 1, and
    fred's exact reduction adds the workers' gradient sums (one tile of b rows each) in
    worker order before dividing by m b."""
    sc = validate(data)
    n, m, h, b = sc.cluster.workers, sc.strategy.replica_workers, sc.strategy.inner_steps, sc.data.batch_size
    lr, wd, b1, b2, eps = sc.strategy.lr, ADAMW["weight_decay"], ADAMW["b1"], ADAMW["b2"], ADAMW["eps"]
    outer_lr, mu, k = sc.strategy.outer_lr, sc.strategy.outer_momentum, n // m
    dataset = load_dataset(sc.data, rng.stream(sc.seed, "data", "load"))
    model = build_model(sc.model, dataset.feature_shape, dataset.num_classes)
    theta = model.init(rng.jax_key(sc.seed, "model", "init"))
    global_batches = BatchStream(
        np.arange(len(dataset.y_train)), n * b, rng.stream(sc.seed, "data", "batches")
    )

    @jax.jit
    def grad_sum(params, x, y):  # the summed cross-entropy's gradient over one worker's b rows
        return jax.grad(lambda p: -jnp.sum(jax.nn.log_softmax(model.apply(p, x))[jnp.arange(len(y)), y]))(
            params
        )

    def grad(
        params, x, y
    ):  # the replica's mean gradient: its workers' sums added in worker order (m = 2: one add)
        sums = [grad_sum(params, x[j * b : (j + 1) * b], y[j * b : (j + 1) * b]) for j in range(m)]
        return {
            key: sum((np.asarray(s[key]) for s in sums[1:]), np.asarray(sums[0][key])) / f32(m * b)
            for key in params
        }

    # The rest in float32 numpy, one rounding an operation: AdamW and Nesterov as torch.optim writes them.
    f32 = np.float32
    theta = {key: np.asarray(value) for key, value in theta.items()}
    zeros = lambda: {key: np.zeros_like(value) for key, value in theta.items()}  # noqa: E731
    adam = [(zeros(), zeros(), 0) for _ in range(k)]  # each replica's AdamW state, kept across outer steps
    momentum = zeros()
    for _ in range(outer_steps):
        replicas = [theta] * k
        for _ in range(h):
            rows = global_batches.next()
            for r in range(k):
                block = rows[r * m * b : (r + 1) * m * b]
                g = grad(replicas[r], dataset.x_train[block], dataset.y_train[block])
                mom, var, t = adam[r]
                t += 1
                mom = {key: f32(b1) * mom[key] + f32(1 - b1) * g[key] for key in g}
                var = {key: f32(b2) * var[key] + f32(1 - b2) * g[key] * g[key] for key in g}
                c1, c2 = f32(1) - f32(b1) ** t, f32(1) - f32(b2) ** t
                replicas[r] = {
                    key: p - f32(lr) * ((mom[key] / c1) / (np.sqrt(var[key] / c2) + f32(eps)) + f32(wd) * p)
                    for key, p in replicas[r].items()
                }
                adam[r] = (mom, var, t)
        delta = {
            key: sum((theta[key] - p[key] for p in replicas[1:]), theta[key] - replicas[0][key]) / f32(k)
            for key in theta
        }
        momentum = {key: f32(mu) * momentum[key] + delta[key] for key in theta}
        theta = {
            key: p - f32(outer_lr) * (delta[key] + f32(mu) * momentum[key]) for key, p in theta.items()
        }  # Nesterov
    return theta


def test_two_replicas_of_two_workers_match_an_independent_loop():
    data = tiny(
        cluster={"workers": 4},
        strategy={"name": "diloco", "replica_workers": 2, "inner_steps": 3, "lr": 0.01, "optimizer": ADAMW},
        stop={"max_updates": 2},
        eval={"every_updates": 100},
    )
    result = fred.run(data)
    expected = reference_diloco(data, outer_steps=2)
    assert result.summary["updates"] == 2 and sorted(result.params) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(result.params[name], value, rtol=0, atol=1e-6, err_msg=name)


def test_outer_sgd_at_lr_1_without_momentum_is_local_sgd():
    # theta - 1 * (theta - mean_i theta_i) is mean_i theta_i, Local SGD's average: the same schedule (events
    # and
    # updates bit for bit) and, for any inner optimizer (both keep a worker's state across rounds), the same
    # parameters up to float32 rounding (Local SGD rounds mean_i theta_i once, DiLoCo theta - theta_i, their
    # mean,
    # then theta minus it).
    for steps, optimizer in [(1, {"kind": "sgd"}), (3, {"kind": "sgd", "momentum": 0.9})]:
        common = {"optimizer": optimizer, "lr": 0.05}
        diloco = fred.run(
            tiny(
                strategy={
                    "name": "diloco",
                    "inner_steps": steps,
                    "outer_lr": 1.0,
                    "outer_momentum": 0.0,
                    **common,
                },
                stop={"max_updates": 6},
            )
        )
        local = fred.run(
            tiny(strategy={"name": "local_sgd", "sync_every": steps, **common}, stop={"max_updates": 6})
        )
        pd.testing.assert_frame_equal(diloco.events, local.events)
        pd.testing.assert_frame_equal(diloco.updates, local.updates)
        for name in local.params:
            np.testing.assert_allclose(
                diloco.params[name], local.params[name], rtol=0, atol=1e-6, err_msg=name
            )


NET = {"latency_s": 2e-4, "bandwidth_bps": 1e8, "reduce_s_per_byte": 1e-10, "sync_s": 1e-3}


@pytest.mark.parametrize("replica_workers", [1, 2])
def test_an_outer_step_takes_h_inner_steps_and_their_all_reduces_then_one_all_reduce_of_all(replica_workers):
    # Two concurrent replica all-reduces share no link; nothing else is in flight during the outer one.
    h, p, step_s, param_bytes = 3, 4, 0.01, 2_000_000
    data = tiny(
        cluster={"workers": p, "compute": {"step_time_s": step_s}},
        network=NET,
        workload={"param_bytes": param_bytes, "timing_only": True},
        strategy={"name": "diloco", "replica_workers": replica_workers, "inner_steps": h},
        stop={"max_updates": 4},
    )
    cfg = NetworkConfig(**NET)
    inner_s = allreduce_time_s("ring", replica_workers, param_bytes, cfg) if replica_workers > 1 else 0.0
    outer_s = allreduce_time_s("ring", p, param_bytes, cfg)
    applied_s = fred.run(data).updates.groupby("update")["sim_time_s"].first().to_numpy()
    np.testing.assert_allclose(np.diff(applied_s, prepend=0.0), h * (step_s + inner_s) + outer_s, rtol=1e-9)


@pytest.mark.parametrize(
    "strategy, needle",
    [
        (
            {"replica_workers": 3},
            "strategy.replica_workers is 3 but cluster.workers is 4, which it does not divide"
            ": replicas are replica_workers workers each; use a divisor of 4: 1, 2, 4",
        ),
        (
            {"inner_steps": 0},
            "strategy.inner_steps: got 0; use at least 1 inner step per outer step (the paper: 500)",
        ),
        ({"outer_lr": 0}, "strategy.outer_lr: got 0; use an outer learning rate above 0 (the paper: 0.7"),
        ({"outer_lr": -0.5}, "strategy.outer_lr: got -0.5; use an outer learning rate above 0"),
        ({"outer_momentum": 1}, "strategy.outer_momentum: got 1; use a momentum in [0, 1) (the paper: 0.9"),
        ({"outer_momentum": -0.1}, "strategy.outer_momentum: got -0.1; use a momentum in [0, 1)"),
    ],
)
def test_bad_settings_are_refused_naming_the_field_the_value_and_the_fix(strategy, needle, tmp_path, capsys):
    with pytest.raises(ScenarioError) as refused:
        validate(tiny(strategy={"name": "diloco", **strategy}))
    assert any(needle in problem for problem in refused.value.problems), refused.value.problems
    if "replica_workers" in strategy:  # the command line exits 2 with it, no traceback
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(tiny(strategy={"name": "diloco", **strategy})))
        code = main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and needle in err and "Traceback" not in err
