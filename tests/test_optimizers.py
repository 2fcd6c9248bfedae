"""Optimizers from optax: plain SGD's bits, the other optimizers' numbers, where each strategy
keeps the state, exactness with momentum and Adam, replay, and refused settings."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import fred
from fred.numerics.optim import build, make_sum_step, optimizer_for, sgd
from fred.scenario.loading import validate
from fred.tools.replay import replay
from tests.conftest import load_shipped, shipped_scenarios, tiny

STEPS = 12  # gossip strategies count one update per node step: 3 steps each of 4 nodes
MOMENTUM = {"kind": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}
ADAM = {"kind": "adam", "b1": 0.8, "weight_decay": 1e-3}
OPTIMIZERS = [pytest.param(MOMENTUM, id="nesterov"), pytest.param(ADAM, id="adam")]
SCHEDULE = {"kind": "warmup_cosine_decay", "warmup_steps": 1, "decay_steps": 3}


def _run(optimizer: dict, schedule: dict | None = None, out=None, **overrides) -> fred.RunResult:
    strategy = {
        "optimizer": optimizer,
        **({"lr_schedule": schedule} if schedule else {}),
        **overrides.pop("strategy"),
    }
    scenario = tiny(stop={"max_updates": STEPS}, eval={"every_updates": 1000}, strategy=strategy, **overrides)
    return fred.run(scenario, out=out) if out else fred.run(scenario)


def _sha(optimizer: dict, schedule: dict | None = None, **overrides) -> str:
    return _run(optimizer, schedule, **overrides).summary["params_sha256"]


# ----------------------------------------------------------------------------- the numbers
TREE = {"w": np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2), "b": np.array([0.5, -0.25], np.float32)}


def _steps(opt, grads: list[dict], count: int = 4) -> dict:
    params, state = {k: jnp.asarray(v) for k, v in TREE.items()}, opt.init(TREE)
    for g in grads:
        params, state = make_sum_step(opt)(params, state, g, count)
    return {k: np.asarray(v) for k, v in params.items()}


def _grads(n: int) -> list[dict]:
    stream = np.random.default_rng(7)
    return [
        {k: stream.standard_normal(v.shape).astype(np.float32) for k, v in TREE.items()} for _ in range(n)
    ]


def test_plain_sgd_is_params_minus_lr_times_the_mean_gradient_bit_for_bit():
    lr, grads = 0.1, _grads(3)
    reference = jax.jit(lambda p, g, c: jax.tree.map(lambda p_, g_: p_ + -lr * (g_ / c), p, g))
    expected = {k: jnp.asarray(v) for k, v in TREE.items()}
    for g in grads:
        expected = reference(expected, g, 4)
    got = _steps(sgd(lr), grads)
    for k in TREE:
        assert got[k].tobytes() == np.asarray(expected[k]).tobytes(), k
    assert sgd(lr).init(TREE).leaves == (), "plain SGD keeps no state"


def test_nesterov_momentum_with_weight_decay_matches_a_numpy_reference():
    lr, mu, wd, grads = 0.1, 0.9, 0.01, _grads(5)
    got = _steps(build("sgd", lr, '{"momentum":0.9,"nesterov":true,"weight_decay":0.01}'), grads)
    p = {k: v.astype(np.float64) for k, v in TREE.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    for g in grads:
        for k in p:
            d = g[k] / 4 + wd * p[k]  # L2 enters the gradient, then momentum (torch.optim.SGD's order)
            m[k] = mu * m[k] + d
            p[k] = p[k] - lr * (d + mu * m[k])
    for k in p:
        np.testing.assert_allclose(got[k], p[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_adam_and_adamw_match_a_numpy_reference(kind):
    lr, b1, b2, eps, wd, grads = 0.01, 0.9, 0.999, 1e-8, 0.1, _grads(5)
    got = _steps(build(kind, lr, '{"weight_decay":0.1}'), grads)
    p = {k: v.astype(np.float64) for k, v in TREE.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, g in enumerate(grads, start=1):
        for k in p:
            d = g[k] / 4 + (wd * p[k] if kind == "adam" else 0.0)
            m[k] = b1 * m[k] + (1 - b1) * d
            v[k] = b2 * v[k] + (1 - b2) * d * d
            step = (m[k] / (1 - b1**t)) / (np.sqrt(v[k] / (1 - b2**t)) + eps)
            p[k] = p[k] - lr * (step + (wd * p[k] if kind == "adamw" else 0.0))
    for k in p:
        np.testing.assert_allclose(got[k], p[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("schedule", "rates"),
    [
        ({"kind": "cosine_decay", "decay_steps": 2, "alpha": 0.5}, [1.0, 0.75, 0.5, 0.5]),
        (
            {"kind": "warmup_cosine_decay", "warmup_steps": 2, "decay_steps": 4, "init_value": 0.0},
            [0.0, 0.5, 1.0, 0.5],
        ),
        ({"kind": "exponential_decay", "transition_steps": 1, "decay_rate": 0.5}, [1.0, 0.5, 0.25, 0.125]),
        ({"kind": "linear", "end_value": 0.0, "transition_steps": 4}, [1.0, 0.75, 0.5, 0.25]),
        ({"kind": "piecewise_constant", "boundaries_and_scales": {2: 0.1}}, [1.0, 1.0, 0.1, 0.1]),
    ],
    ids=["cosine_decay", "warmup_cosine_decay", "exponential_decay", "linear", "piecewise_constant"],
)
def test_a_schedule_sets_the_learning_rate_of_each_optimizer_step(schedule, rates):
    config = validate(tiny(strategy={"name": "ssgd", "lr": 1.0, "lr_schedule": schedule})).strategy
    ones = {k: np.full(v.shape, 4.0, np.float32) for k, v in TREE.items()}  # a mean gradient of 1
    before = TREE["b"][0]
    for step, rate in enumerate(rates, start=1):
        after = _steps(optimizer_for(config), [ones] * step)["b"][0]
        assert before - after == pytest.approx(rate, abs=1e-6), step
        before = after


# ----------------------------------------------------------------------------- exactness
@settings(max_examples=2, deadline=None)
@given(
    workers=st.integers(1, 5),
    batch=st.sampled_from([1, 2, 4, 8, 16]),
    aggregation=st.sampled_from(["ps", "allreduce"]),
    optimizer=st.sampled_from([MOMENTUM, ADAM]),
)
def test_ssgd_with_n_workers_of_batch_b_is_sgd_with_batch_nb_with_momentum_and_adam(
    workers, batch, aggregation, optimizer
):
    """The optimizer sees the same mean gradient, so its state and steps are the same bits too."""
    tile = (
        8 if batch % 8 == 0 else 1
    )  # the default tiles where the batch is whole tiles; per-example leaves otherwise
    large_batch = _sha(
        optimizer,
        SCHEDULE,
        cluster={"workers": 1},
        data={"batch_size": workers * batch},
        strategy={"name": "sgd", "exact_tile": tile},
    )
    distributed = _sha(
        optimizer,
        SCHEDULE,
        cluster={"workers": workers},
        data={"batch_size": batch},
        strategy={"name": "ssgd", "aggregation": aggregation, "exact_tile": tile},
    )
    assert distributed == large_batch, f"n={workers} b={batch} {aggregation} {optimizer['kind']}"


# Pairs that are the same algorithm: with the optimizer's state kept where docs/strategies.md
# says, they stay the same bits under Adam (a state kept per call, or shared by the wrong
# replicas, would not).
SAME = [
    ({"name": "asgd"}, {"name": "sgd"}, 1),  # the server's state is the one worker's
    (
        {"name": "pipe_sgd", "staleness": 0},
        {"name": "arsgd"},
        4,
    ),  # the shared w[t]'s state is every replica's
    ({"name": "osgp", "overlap": 0}, {"name": "sgp"}, 4),  # each node's own
    (
        {"name": "grouped_hybrid", "groups": 1, "probe_iterations": 0},
        {"name": "ssgd", "aggregation": "ps"},
        4,
    ),
    ({"name": "bfasgd"}, {"name": "fasgd"}, 4),  # c_push = c_fetch = 0: nothing dropped
]


@pytest.mark.parametrize(
    ("one", "other", "workers"), SAME, ids=lambda v: v["name"] if isinstance(v, dict) else str(v)
)
def test_equivalent_strategies_stay_equal_with_a_stateful_optimizer(one, other, workers):
    optimizer = MOMENTUM if one["name"] == "bfasgd" else ADAM
    both = [_sha(optimizer, SCHEDULE, cluster={"workers": workers}, strategy=s) for s in (one, other)]
    assert both[0] == both[1]


STRATEGIES = ["sgd", "ssgd", "arsgd", "asgd", "sasgd", "fasgd", "bfasgd", "local_sgd", "hpsgd", "pipe_sgd",
              "sgp", "osgp", "dpsgd", "adpsgd", "grouped_hybrid"]  # fmt: skip


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_applies_momentum_and_replays_it(name, tmp_path):
    """An optimizer setting is never ignored, and its steps replay from the tape bit for bit."""
    workers = {"cluster": {"workers": 1 if name == "sgd" else 4}}
    plain = _sha({"kind": "sgd"}, strategy={"name": name}, **workers)
    with_momentum = _run(
        {"kind": "sgd", "momentum": 0.5}, strategy={"name": name}, out=tmp_path / "run", **workers
    )
    assert with_momentum.summary["params_sha256"] != plain
    assert replay(tmp_path / "run").passed


def test_a_run_with_adam_and_a_schedule_is_deterministic_and_replays(tmp_path):
    runs = [_run(ADAM, SCHEDULE, strategy={"name": "sasgd"}, out=tmp_path / f"run{i}") for i in range(2)]
    assert runs[0].summary["params_sha256"] == runs[1].summary["params_sha256"]
    assert replay(tmp_path / "run0").passed


def test_local_sgd_keeps_each_workers_optimizer_state_across_rounds():
    # On one worker, rounds of one local step are SGD steps: momentum must carry from each
    # round to the next, as in SGD (a state started afresh every round would forget it).
    one = {"cluster": {"workers": 1}, "data": {"batch_size": 8}}
    local = _sha(MOMENTUM, strategy={"name": "local_sgd", "sync_every": 1}, **one)
    assert local == _sha(MOMENTUM, strategy={"name": "sgd"}, **one)


# ----------------------------------------------------------------------------- refused
@pytest.mark.parametrize(
    ("strategy", "needle"),
    [
        (
            {"optimizer": {"kind": "adamx"}},
            "strategy.optimizer.kind: got 'adamx'; did you mean 'adam'? allowed: sgd, adam, adamw",
        ),
        (
            {"optimizer": {"kind": "adam", "beta1": 0.9}},
            "strategy.optimizer.beta1: unknown key. Allowed here: b1, b2, eps",
        ),
        ({"lr": -0.1}, "strategy.lr: got -0.1; Input should be greater than 0"),
        (
            {"optimizer": {"momentum": 1.0}},
            "strategy.optimizer.momentum: got 1.0; Input should be less than 1",
        ),
        (
            {"optimizer": {"momentum": -0.5}},
            "strategy.optimizer.momentum: got -0.5; Input should be greater than or equal to 0",
        ),
        ({"optimizer": {"nesterov": True}}, "strategy.optimizer: nesterov: true needs momentum above 0"),
        (
            {"optimizer": {"kind": "adam", "b2": 1}},
            "strategy.optimizer.b2: got 1; Input should be less than 1",
        ),
        (
            {"optimizer": {"kind": "adamw", "weight_decay": -1}},
            "strategy.optimizer.weight_decay: got -1; Input should be greater than or equal to 0",
        ),
        (
            {"lr_schedule": {"kind": "cosine"}},
            "strategy.lr_schedule.kind: got 'cosine'; did you mean 'cosine_decay'? allowed: constant,",
        ),
        (
            {"lr_schedule": {"kind": "cosine_decay", "decay_steps": 0}},
            "strategy.lr_schedule.decay_steps: got 0; Input should be greater than or equal to 1",
        ),
        ({"lr_schedule": {"kind": "cosine_decay"}}, "strategy.lr_schedule.decay_steps: missing"),
        (
            {"lr_schedule": {"decay_steps": 10}},
            "strategy.lr_schedule: give the schedule's kind, one of: constant, cosine_decay",
        ),
        (
            {"lr_schedule": {"kind": "warmup_cosine_decay", "warmup_steps": 100, "decay_steps": 50}},
            "strategy.lr_schedule: decay_steps (50) counts the warm-up too; give more than warmup_steps "
            "(100)",
        ),
        (
            {"lr_schedule": {"kind": "exponential_decay", "transition_steps": 10, "decay_rate": -1}},
            "strategy.lr_schedule.decay_rate: got -1; Input should be greater than 0",
        ),
        (
            {"name": "fasgd", "optimizer": "adam"},
            "strategy: optimizer.kind is 'adam': fasgd already divides every gradient",
        ),
    ],
)
def test_a_bad_optimizer_setting_is_refused_naming_field_value_and_what_is_allowed(
    strategy, needle, tmp_path, capsys
):
    from fred.tools.cli import main

    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(tiny(strategy={"name": "ssgd", **strategy})))
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err and not out.exists(), err


def test_a_strategy_that_does_not_declare_it_applies_the_optimizer_refuses_one():
    from typing import Literal

    from pydantic import ValidationError

    from fred.scenario.schema import StrategyConfig

    class OwnUpdate(StrategyConfig):  # a plug-in whose start() never calls optimizer_for
        name: Literal["own_update"] = "own_update"
        lr: float = 0.1

    assert OwnUpdate(lr_schedule="constant").optimizer_refusal() is None  # the defaults: plain SGD
    for setting in [
        {"optimizer": {"momentum": 0.9}},
        {"lr_schedule": {"kind": "cosine_decay", "decay_steps": 9}},
    ]:
        with pytest.raises(
            ValidationError,
            match="strategy 'own_update' applies its own update, not a configurable optimizer",
        ):
            OwnUpdate(**setting)


# DiLoCo's inner optimizer is AdamW in its paper, and the wide-area study runs it so.
PAPERS_OPTIMIZER = {
    "diloco_h50.yaml": "adamw",
    "diloco_h500.yaml": "adamw",
    "streaming_diloco.yaml": "adamw",
    "async_local_sgd.yaml": "adamw",
}  # the papers' own inner optimizer


def test_every_shipped_scenario_keeps_plain_sgd():
    from pathlib import Path

    for path in shipped_scenarios():
        strategy = load_shipped(path).strategy
        assert optimizer_for(strategy).spec[0] == PAPERS_OPTIMIZER.get(Path(path).name, "sgd"), path
        if Path(path).name not in PAPERS_OPTIMIZER:
            assert optimizer_for(strategy).spec == ("sgd", strategy.lr), path
