"""D-PSGD and AD-PSGD: average then step (Lian et al., the default) or step then average."""

from __future__ import annotations

import numpy as np
import pytest

import fred
from fred.runs.runner import build
from fred.scenario.loading import validate
from fred.tools.replay import replay
from strategies.dpsgd import ring_mixing
from strategies.sgp import run_push_sum
from tests.conftest import tiny


def one_ring_iteration(order: str, lr: float = 0.1, spread: float = 0.0) -> list[dict[str, np.ndarray]]:
    """Every node's x after one D-PSGD iteration on a 4-node ring (weights 1/3)."""
    scenario = validate(tiny(strategy={"name": "sgp", "lr": lr, "init_spread": spread}))
    sim = build(scenario).sim
    state = run_push_sum(sim, scenario.strategy, debiased=False, shares=ring_mixing(4), order=order)  # type: ignore[arg-type]
    sim.env.run(until=1.5 * 0.01)  # mid-compute of iteration 1: iteration 0's step and mix are done
    assert all(node.iteration == 1 for node in state.nodes)
    return [{k: np.asarray(v, np.float64) for k, v in node.x.items()} for node in state.nodes]


def test_average_then_step_mixes_the_models_and_not_the_gradients():
    # From one start x0 (W x0 = x0): average-then-step leaves node i at x0 - lr g_i, its own
    # gradient; step-then-average at x0 - lr (g_{i-1} + g_i + g_{i+1}) / 3, the ring's mix of them.
    start = {k: np.asarray(v, np.float64) for k, v in build(validate(tiny())).sim.init_params.items()}
    own = one_ring_iteration("average_then_step")
    mixed = one_ring_iteration("step_then_average")
    for name, x0 in start.items():
        steps = [x[name] - x0 for x in own]
        assert not np.allclose(steps[0], steps[1], atol=1e-7)  # the nodes' gradients differ
        for i in range(4):
            ring = (steps[i - 1] + steps[i] + steps[(i + 1) % 4]) / 3
            np.testing.assert_allclose(mixed[i][name] - x0, ring, rtol=1e-4, atol=1e-7)


def test_both_orders_move_the_mean_of_x_by_the_mean_gradient_step():
    # W is doubly stochastic: mean(W x - lr g) = mean(W (x - lr g)) = mean(x) - lr mean(g),
    # from a spread start too, where the two orders leave every node somewhere else.
    own = one_ring_iteration("average_then_step", spread=0.5)
    mixed = one_ring_iteration("step_then_average", spread=0.5)
    for name in own[0]:
        assert not np.allclose(own[0][name], mixed[0][name], atol=1e-6)
        np.testing.assert_allclose(
            sum(x[name] for x in own) / 4, sum(x[name] for x in mixed) / 4, rtol=1e-5, atol=1e-6
        )


def test_average_then_step_without_a_gradient_step_keeps_the_sum_and_reaches_consensus():
    scenario = validate(tiny(strategy={"name": "sgp", "lr": 0.0, "init_spread": 0.5}))
    sim = build(scenario).sim
    state = run_push_sum(
        sim, scenario.strategy, debiased=False, shares=ring_mixing(4), order="average_then_step"
    )
    first = min(state.nodes[0].x)
    start = sum(np.asarray(node.x[first], np.float64) for node in state.nodes)
    sim.env.run(until=60.5 * 0.01)
    np.testing.assert_allclose(
        sum(np.asarray(node.x[first], np.float64) for node in state.nodes), start, rtol=1e-5, atol=1e-5
    )
    spread = np.ptp(np.stack([np.asarray(node.x[first]) for node in state.nodes]), axis=0).max()
    assert spread < 1e-5 and all(node.w == 1.0 for node in state.nodes)


@pytest.mark.parametrize("name", ["dpsgd", "adpsgd"])
def test_each_order_is_bit_deterministic_replays_and_the_two_differ(name, tmp_path):
    runs = {}
    for order in ("average_then_step", "step_then_average"):
        data = tiny(strategy={"name": name, "order": order}, stop={"max_updates": 80})
        first = fred.run(data, out=tmp_path / order)
        again = fred.run(data)
        assert again.summary["params_sha256"] == first.summary["params_sha256"]
        assert again.events.equals(first.events) and again.updates.equals(first.updates)
        assert replay(tmp_path / order).passed
        runs[order] = first
    assert (
        runs["average_then_step"].summary["params_sha256"]
        != runs["step_then_average"].summary["params_sha256"]
    )
    if name == "dpsgd":  # the same schedule: only the numbers differ
        assert runs["average_then_step"].events.equals(runs["step_then_average"].events)


@pytest.mark.parametrize("name", ["dpsgd", "adpsgd"])
def test_the_papers_order_is_the_default(name):
    assert validate(tiny(strategy={"name": name})).strategy.order == "average_then_step"


def test_adpsgd_applies_each_gradient_after_its_own_average():
    # Average then step: the node's own exchange changed its model under every gradient, so
    # each update's staleness is at least 1; step then average applies some at staleness 0.
    after = fred.run(tiny(strategy={"name": "adpsgd"}, stop={"max_updates": 120})).updates
    before = fred.run(
        tiny(strategy={"name": "adpsgd", "order": "step_then_average"}, stop={"max_updates": 120})
    ).updates
    assert (after["staleness"] >= 1).all()
    assert (before["staleness"] == 0).any()


def test_dpsgd_learns_in_either_order():
    for order in ("average_then_step", "step_then_average"):
        result = fred.run(
            tiny(
                strategy={"name": "dpsgd", "order": order},
                stop={"max_updates": 600},
                eval={"every_updates": 200},
            )
        )
        assert result.metrics["eval_loss"].iloc[-1] < result.metrics["eval_loss"].iloc[0] / 2, order
