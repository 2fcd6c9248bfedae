"""DiLoCo's eager updates (Kale, Douillard and Donchev, 2025) against an independent float64 loop, their
timing (the all-reduce hidden behind a whole inner phase), eager off as the same bits, and refusals."""

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
from fred.scenario.schema import NetworkConfig
from fred.simulation.collectives import allreduce_time_s
from tests.conftest import tiny
from tests.test_streaming_diloco import NET, close, diloco

f32 = np.float32


def reference_eager(data: dict, outer_steps: int) -> dict[str, np.ndarray]:
    """Eager DiLoCo as a plain loop over global inner steps, fred's strategy code aside: fred's data,
    model and initial parameters (iid sharding: worker j's k-th batch is block j of global batch k, and
    replica r's the blocks of its m workers), the gradients from JAX (float32; a replica's the sum of
    its workers' over m b), the rest in float64 numpy. Each replica
    keeps its own theta and outer Nesterov momentum; outer step u (of fragment u mod P) starts after
    inner step H + u H/P with each replica's delta_r = theta_r - replica_r, and merges tau inner steps
    later with replica r's eager outer gradient (1/k)(delta_r(u) + sum_{j != r} delta_j(u - P))
    (nothing of the others before the fragment's first all-reduce). Returns replica 0's theta."""
    sc = validate(data)
    s, n, b = sc.strategy, sc.cluster.workers, sc.data.batch_size
    m = s.replica_workers
    k = n // m
    h, frags, tau, alpha, mu = s.inner_steps, s.fragments, s.overlap_steps, s.mixing, s.outer_momentum
    dataset = load_dataset(sc.data, rng.stream(sc.seed, "data", "load"))
    model = build_model(sc.model, dataset.feature_shape, dataset.num_classes)
    init = model.init(rng.jax_key(sc.seed, "model", "init"))
    batches = BatchStream(np.arange(len(dataset.y_train)), n * b, rng.stream(sc.seed, "data", "batches"))

    @jax.jit
    def grad_sum(params, x, y):
        return jax.grad(lambda p: -jnp.sum(jax.nn.log_softmax(model.apply(p, x))[jnp.arange(len(y)), y]))(
            params
        )

    start = {key: np.asarray(v).astype(np.float64) for key, v in init.items()}
    layer = {key: int(key.split("_")[0][len("dense") :]) for key in start}  # dense0, dense1: j mod P
    fragment = [[key for key in sorted(start) if layer[key] % frags == p] for p in range(frags)]
    thetas = [dict(start) for _ in range(k)]
    momenta = [{key: np.zeros_like(v) for key, v in start.items()} for _ in range(k)]
    replicas = [dict(start) for _ in range(k)]
    deltas, done, step, period = {}, 0, 0, h // frags
    while done < outer_steps:
        rows, step = batches.next(), step + 1
        for r in range(k):
            params32 = {key: v.astype(f32) for key, v in replicas[r].items()}
            sums = [
                grad_sum(params32, *_rows(dataset, rows[w * b : (w + 1) * b]))
                for w in range(r * m, r * m + m)
            ]
            replicas[r] = {
                key: p - s.lr * (sum(np.asarray(g[key]).astype(np.float64) for g in sums) / (m * b))
                for key, p in replicas[r].items()
            }
        if step >= h and (step - h) % period == 0:  # outer step u starts: each replica's own delta
            u = (step - h) // period
            deltas[u] = [
                {key: thetas[r][key] - replicas[r][key] for key in fragment[u % frags]} for r in range(k)
            ]
        if step >= h + tau and (step - h - tau) % period == 0:  # outer step u merges, eagerly
            u = (step - h - tau) // period
            fresh, late = deltas[u], deltas.pop(u - frags, None)
            for r in range(k):
                for key in fresh[r]:
                    others = sum(late[j][key] for j in range(k) if j != r) if late else 0.0
                    eager = (fresh[r][key] + others) / k
                    momenta[r][key] = mu * momenta[r][key] + eager
                    thetas[r][key] = thetas[r][key] - s.outer_lr * (eager + mu * momenta[r][key])
                    mixed = alpha * replicas[r][key] + (1 - alpha) * thetas[r][key]
                    replicas[r][key] = thetas[r][key] if alpha == 0 else mixed
            done += 1
    return thetas[0]


def _rows(dataset, block):
    return dataset.x_train[block], dataset.y_train[block]


def test_eager_two_replicas_h4_tau1_match_an_independent_float64_loop():
    data = diloco(5, inner_steps=4, overlap_steps=1, eager=True)
    close(fred.run(data), reference_eager(data, 5))


def test_eager_streaming_p2_with_mixing_matches_an_independent_float64_loop():
    data = diloco(6, inner_steps=4, overlap_steps=1, fragments=2, mixing=0.5, eager=True)
    close(fred.run(data), reference_eager(data, 6))


def test_eager_replicas_of_two_workers_match_an_independent_float64_loop():
    data = diloco(4, inner_steps=4, overlap_steps=1, eager=True, replica_workers=2) | {
        "cluster": {"workers": 4}
    }
    close(fred.run(data), reference_eager(data, 4))


def test_eager_without_overlap_is_the_paper_s_step_at_once():
    data = diloco(4, inner_steps=3, overlap_steps=0, eager=True)
    close(fred.run(data), reference_eager(data, 4))


def test_eager_false_is_the_same_bits_as_no_eager_setting():
    base = {"inner_steps": 4, "overlap_steps": 1, "fragments": 2, "mixing": 0.5}
    plain, off = fred.run(diloco(4, **base)), fred.run(diloco(4, **base, eager=False))
    pd.testing.assert_frame_equal(plain.events, off.events)
    pd.testing.assert_frame_equal(plain.updates, off.updates)
    assert plain.summary["params_sha256"] == off.summary["params_sha256"]


def test_eager_hides_an_all_reduce_longer_than_the_overlap_behind_the_next_inner_phase():
    # the all-reduce takes more than tau inner steps and less than H: Streaming DiLoCo waits for it at
    # each merge, an eager replica steps at once and finds the previous one long done
    h, tau, step_s, param_bytes = 4, 1, 0.01, 2e6

    def run(eager: bool) -> fred.RunResult:
        return fred.run(
            tiny(
                cluster={"workers": 2, "compute": {"step_time_s": step_s}},
                network=NET,
                workload={"param_bytes": param_bytes, "timing_only": True},
                strategy={"name": "diloco", "inner_steps": h, "overlap_steps": tau, "eager": eager},
                stop={"max_updates": 4},
            )
        )

    reduce_s = allreduce_time_s("ring", 2, param_bytes, NetworkConfig(**NET))
    assert tau * step_s < reduce_s < h * step_s
    eager, streaming = run(True), run(False)
    applied_s = eager.updates.groupby("update")["sim_time_s"].first().to_numpy()
    np.testing.assert_allclose(applied_s, [(h + u * h + tau) * step_s for u in range(4)], rtol=1e-9)
    assert eager.events[eager.events.kind == "wait"].empty
    assert not streaming.events[streaming.events.kind == "wait"].empty


@pytest.mark.parametrize(
    "strategy, faults, needle",
    [
        (
            {"eager": True},
            {"worker_crash": [{"worker": 1, "at_s": 0.5}], "sync_timeout_s": 1},
            "strategy.eager is true but faults.worker_crash crashes workers",
        ),
        ({"eager": "sometimes"}, {}, "strategy.eager: got 'sometimes'"),
    ],
)
def test_bad_eager_settings_are_refused_with_the_fix(strategy, faults, needle):
    data = diloco(2, overlap_steps=1, **strategy) | ({"faults": faults} if faults else {})
    with pytest.raises(ScenarioError, match=needle):
        validate(data)
