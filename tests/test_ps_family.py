"""The asynchronous parameter-server family: SASGD, FASGD, B-FASGD and the logical clock."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import fred
from fred.numerics.gradients import GradSum
from fred.numerics.optim import sgd
from fred.simulation.engine import Worker
from strategies.bfasgd import BFASGD, _decider, transmit_probability
from strategies.fasgd import fasgd_rule
from strategies.sasgd import sasgd_rule
from tests.conftest import tiny

LR = 0.05
SHAPES = {"w": (3, 2), "b": (2,)}


def fixed_batches(seed: int, batches: int, c: int, count: int = 4):
    """Deterministic gradient sums (as servers receive them) with their staleness."""
    rs = np.random.default_rng(seed)
    out = []
    for _ in range(batches):
        grads = [
            {k: rs.normal(size=s).astype(np.float32) * count for k, s in SHAPES.items()} for _ in range(c)
        ]
        out.append((grads, [int(t) for t in rs.integers(0, 6, size=c)]))
    return out


def start_params():
    return {k: np.linspace(-1, 1, int(np.prod(s)), dtype=np.float32).reshape(s) for k, s in SHAPES.items()}


def run_rule(rule, batches, count=4):
    params = {k: jnp.asarray(v) for k, v in start_params().items()}
    state = rule.init(params)
    for grads, staleness in batches:
        sums = [GradSum({k: jnp.asarray(v) for k, v in g.items()}, jnp.float32(0), count) for g in grads]
        params, state = rule.apply(params, state, sums, staleness)
    return {k: np.asarray(v) for k, v in params.items()}


@pytest.mark.parametrize("aware", [True, False])
@pytest.mark.parametrize("c", [1, 2, 3])
def test_sasgd_rule_matches_a_numpy_reference(c, aware):
    batches = fixed_batches(1, 5, c)
    expected = start_params()
    for grads, staleness in batches:
        for g, tau in zip(grads, staleness):
            scale = 1.0 / (c * (tau + 1)) if aware else 1.0 / c
            for k in expected:
                expected[k] = expected[k] - LR * scale * (g[k] / 4)
    got = run_rule(sasgd_rule(sgd(LR), aware), batches)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("aware", [True, False])
def test_a_batch_short_of_c_after_a_crash_is_scaled_by_its_own_size(aware):
    # After a crash the server applies what the live workers sent: 3 of c = 4. Scaled by
    # 1 / (4 (tau + 1)), the staleness-aware step shrank to 3/4, unlike the plain average.
    batches = fixed_batches(3, 2, 4) + fixed_batches(4, 3, 3)
    expected = start_params()
    for grads, staleness in batches:
        for g, tau in zip(grads, staleness):
            scale = 1.0 / (len(grads) * (tau + 1)) if aware else 1.0 / len(grads)
            for k in expected:
                expected[k] = expected[k] - LR * scale * (g[k] / 4)
    got = run_rule(sasgd_rule(sgd(LR), aware), batches)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("statistic", ["std", "abs"])
@pytest.mark.parametrize("aware", [True, False])
@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("corrected", [False, True])
def test_fasgd_rule_matches_a_numpy_reference(statistic, aware, c, corrected):
    gamma, beta, eps = 0.8, 0.7, 1e-3
    batches = fixed_batches(2, 6, c) + fixed_batches(
        5, 2, max(c - 1, 1)
    )  # and short batches, as after a crash
    params = start_params()
    n = {k: np.zeros(s, np.float64) for k, s in SHAPES.items()}
    b = {k: np.zeros(s, np.float64) for k, s in SHAPES.items()}
    v = {k: np.zeros(s, np.float64) for k, s in SHAPES.items()}
    t = 0  # gradients seen
    # Adam's correction of an average of t values started at zero; without it, the paper's form
    unbias = (lambda x, w: x / (1 - w**t)) if corrected else (lambda x, w: x)
    for grads, staleness in batches:
        step = {k: np.zeros(s) for k, s in SHAPES.items()}
        for g, tau in zip(grads, staleness):
            scale = 1.0 / (len(grads) * (tau + 1)) if aware else 1.0 / len(grads)
            t += 1
            for k in SHAPES:
                mean = g[k] / 4
                if statistic == "abs":
                    v[k] = gamma * v[k] + (1 - gamma) * np.abs(mean)
                    step[k] += mean / (unbias(v[k], gamma) + eps) * scale
                else:
                    n[k] = gamma * n[k] + (1 - gamma) * mean**2
                    b[k] = gamma * b[k] + (1 - gamma) * mean
                    spread = unbias(n[k], gamma) - unbias(b[k], gamma) ** 2
                    v[k] = beta * v[k] + (1 - beta) * np.sqrt(np.maximum(spread, 0) + eps)
                    step[k] += mean / unbias(v[k], beta) * scale
        params = {k: params[k] - LR * step[k] for k in SHAPES}
    got = run_rule(fasgd_rule(sgd(LR), aware, statistic, gamma, beta, eps, corrected), batches)
    for k in SHAPES:
        np.testing.assert_allclose(got[k], params[k], rtol=1e-4, atol=1e-6)


def test_the_bias_correction_makes_the_first_step_the_one_a_settled_statistic_would_give():
    # Started at zero, the paper's abs statistic after one gradient is (1 - gamma) |g|: the first
    # step is 1 / (1 - gamma) = 10 times sign(g). Corrected, it is |g|: one step of sign(g).
    g = {k: np.full(s, 0.5, np.float32) for k, s in SHAPES.items()}
    batches = [([{k: 4 * x for k, x in g.items()}], [0])]
    for corrected, size in [(False, 10.0), (True, 1.0)]:
        got = run_rule(fasgd_rule(sgd(1.0), True, "abs", 0.9, 0.9, 1e-12, corrected), batches)
        for k in SHAPES:
            np.testing.assert_allclose(start_params()[k] - got[k], size, rtol=1e-5)


def test_a_corrected_run_replays_and_differs_from_the_papers_form(tmp_path):
    from fred.tools.replay import replay

    paper = fred.run(tiny(strategy={"name": "bfasgd", "c_fetch": 0.1}))
    corrected = fred.run(
        tiny(strategy={"name": "bfasgd", "c_fetch": 0.1, "bias_correction": True}), out=tmp_path / "run"
    )
    assert corrected.summary["params_sha256"] != paper.summary["params_sha256"]
    assert replay(tmp_path / "run").passed


def sha(**overrides) -> str:
    return fred.run(tiny(**overrides)).summary["params_sha256"]


def test_sasgd_waiting_for_everyone_without_staleness_scaling_is_ssgd_on_a_server():
    assert sha(strategy={"name": "sasgd", "n_soft": 1, "staleness_aware": False, "lr": 0.1}) == sha(
        strategy={"name": "ssgd", "aggregation": "ps", "lr": 0.1}
    )


def test_sasgd_one_gradient_per_update_without_scaling_is_asgd():
    assert sha(strategy={"name": "sasgd", "staleness_aware": False, "lr": 0.1}) == sha(
        strategy={"name": "asgd"}
    )


def test_bfasgd_with_zero_constants_drops_nothing_and_is_fasgd():
    fasgd = fred.run(tiny(strategy={"name": "fasgd"}))
    bfasgd = fred.run(tiny(strategy={"name": "bfasgd", "c_push": 0.0, "c_fetch": 0.0}))
    assert bfasgd.summary["params_sha256"] == fasgd.summary["params_sha256"]
    assert bfasgd.summary["pushes_dropped"] == bfasgd.summary["fetches_dropped"] == 0


@pytest.mark.parametrize("c, v", [(0.01, 0.02), (0.1, 0.05), (1.0, 3.0)])
def test_the_transmission_rate_matches_the_formula_for_a_fixed_statistic(c, v):
    config = BFASGD(c_fetch=c)
    decide = _decider(config, "fetch", seed=5, workers=1)
    draws = np.array([decide(Worker(0, lambda: None), k, v) for k in range(20000)])
    p = transmit_probability(c, v, 1e-4)
    assert draws.mean() == pytest.approx(p, abs=4 * np.sqrt(p * (1 - p) / draws.size))


def test_every_kth_opportunity_transmits_exactly():
    result = fred.run(tiny(strategy={"name": "bfasgd", "k_fetch": 3}, stop={"max_updates": 40}))
    s = result.summary
    fetches = result.events[result.events["kind"].isin(["fetch", "fetch_dropped"])]
    worker = fetches["peer"].where(
        fetches["kind"] == "fetch", fetches["entity"]
    )  # a fetch is sent by the server
    per_worker = fetches.groupby(worker)["kind"]
    for _, kinds in per_worker:
        assert list(kinds) == [("fetch" if k % 3 == 0 else "fetch_dropped") for k in range(len(kinds))]
    assert s["pushes_dropped"] == 0 and s["fetches_dropped"] > s["fetches_sent"]


def test_bandwidth_counters_agree_with_the_event_table():
    result = fred.run(
        tiny(strategy={"name": "bfasgd", "c_push": 0.5, "c_fetch": 5.0}, stop={"max_updates": 60})
    )
    s, kinds = result.summary, result.events["kind"]
    assert (
        s["pushes_sent"] == (kinds == "push").sum() and s["pushes_dropped"] == (kinds == "push_dropped").sum()
    )
    assert (
        s["fetches_sent"] == (kinds == "fetch").sum()
        and s["fetches_dropped"] == (kinds == "fetch_dropped").sum()
    )
    assert s["bytes_pushed"] == s["pushes_sent"] * s["param_bytes"]
    assert s["bytes_fetched"] == s["fetches_sent"] * s["param_bytes"]
    assert s["pushes_dropped"] > 0 and s["fetches_dropped"] > 0
    # every dropped push became a cached re-application, still counted as an update
    assert result.updates["cached"].sum() == s["pushes_dropped"] - (kinds.iloc[-1] == "push_dropped")


def test_a_cached_gradient_keeps_its_original_version():
    result = fred.run(tiny(strategy={"name": "bfasgd", "k_push": 4}, stop={"max_updates": 60}))
    updates = result.updates
    for _, rows in updates.groupby("worker"):
        sent = rows[~rows["cached"]]
        for _, row in rows[rows["cached"]].iterrows():
            last = sent[sent["update"] < row["update"]].iloc[-1]
            assert row["version_read"] == last["version_read"]
            assert row["staleness"] == row["version_applied"] - last["version_read"]


def test_a_fetch_reply_carries_the_statistic_as_it_was_sent_not_as_it_arrives(monkeypatch):
    # A rule whose statistic counts the updates applied: a worker's v must then be the version of
    # the parameters that came with it. Read on arrival, it counted the updates applied while the
    # reply was on the wire (most fetches of four workers overlap another worker's push).
    import strategies.bfasgd as bfasgd
    from strategies.sasgd import Rule

    seen: list[tuple[str, int, float | None]] = []

    def recording(config, kind, seed, workers):
        def decide(w, opportunity, v):
            seen.append((kind, w.index, v))
            return True

        return decide

    counting = Rule(
        lambda params: 0, lambda params, state, grads, staleness: (params, state + 1), lambda s: float(s)
    )
    monkeypatch.setattr(bfasgd, "_decider", recording)
    monkeypatch.setattr(bfasgd, "rule_for", lambda config: counting)
    updates = fred.run(tiny(strategy={"name": "bfasgd"}, stop={"max_updates": 40})).updates
    checked = 0
    for worker, rows in updates.groupby("worker"):
        reads = rows["version_read"].tolist()  # gradient p was computed on the parameters of fetch p - 1
        pushes = [v for kind, i, v in seen if kind == "push" and i == worker]  # opportunities 1, 2, ...
        for p, v in enumerate(pushes[: len(reads) - 1], start=1):
            assert v == reads[p], (worker, p)
            checked += 1
    assert checked > 20


def test_the_first_push_always_goes_through():
    result = fred.run(tiny(strategy={"name": "bfasgd", "c_push": 1e6}, stop={"max_updates": 30}))
    first = (
        result.events[result.events["kind"].isin(["push", "push_dropped"])].groupby("entity")["kind"].first()
    )
    assert (first == "push").all()


def test_the_logical_clock_is_one_report_per_step_from_a_random_ready_worker():
    result = fred.run(
        tiny(strategy={"name": "sasgd", "clock": "logical", "lr": 0.1}, stop={"max_updates": 400})
    )
    updates = result.updates
    assert updates["sim_time_s"].tolist() == [float(t) for t in range(400)]  # one step, one update
    counts = updates["worker"].value_counts()
    assert len(counts) == 4 and counts.min() > 70  # uniform over 4 workers: 100 each on average
    assert (result.events["end_s"] == result.events["start_s"]).all()  # no simulated durations
    assert result.summary["bytes_pushed"] == 400 * result.summary["param_bytes"]


def test_softsync_blocks_workers_so_the_logical_dispatcher_only_picks_ready_ones():
    result = fred.run(
        tiny(strategy={"name": "sasgd", "clock": "logical", "n_soft": 1}, stop={"max_updates": 20})
    )
    # with n_soft = 1 all 4 workers must report before an update: 4 steps per update
    assert result.updates.groupby("update")["worker"].apply(lambda w: sorted(w) == [0, 1, 2, 3]).all()
    assert result.summary["sim_time_s"] == pytest.approx(79.0, abs=1.0)


def test_n_soft_larger_than_the_cluster_is_refused():
    with pytest.raises(fred.ScenarioError, match="n_soft is 9 but there are 4 workers"):
        fred.run(tiny(strategy={"name": "sasgd", "n_soft": 9}))


@pytest.mark.slow  # 6 s on 2 cores; tests/test_models.py runs MNIST files end to end in the default run
def test_the_paper_scenarios_accept_user_mnist_files(tmp_path):
    from pathlib import Path

    rs = np.random.default_rng(1)
    x, y = rs.integers(0, 256, (300, 28, 28), dtype=np.uint8), rs.integers(0, 10, 300).astype(np.uint8)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=y)
    paper = Path(__file__).resolve().parents[1] / "scenarios" / "fasgd" / "fasgd_4.yaml"
    scenario = fred.load_scenario(
        paper, [f"data.source={{kind: mnist, path: {tmp_path / 'mnist.npz'}}}", "stop.max_updates=5"]
    )
    result = fred.run(scenario)
    assert result.summary["updates"] == 5 and result.params["dense0_w"].shape == (784, 200)
