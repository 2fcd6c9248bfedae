"""Compressed all-reduce with error feedback (``arsgd``/``ssgd`` ``compression: topk | powersgd``):
independent numpy references, the plain all-reduce as a limit, closed-form timing, and refusals."""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import yaml

import fred
from fred.numerics import codecs
from fred.numerics.codecs import low_rank as psgd
from fred.numerics.codecs import sparsify as topk_codec
from fred.numerics.rng import jax_key
from fred.scenario.loading import ScenarioError, validate
from fred.scenario.schema import NetworkConfig
from fred.simulation.collectives import allgather_time_s, allreduce_time_s
from fred.simulation.engine import Simulation
from fred.tools.cli import main
from tests.conftest import tiny

NET = {"latency_s": 2e-4, "bandwidth_bps": 1e8, "reduce_s_per_byte": 1e-10, "sync_s": 1e-3}
STEP_S, CODEC_S_PER_BYTE, LR, BATCH, UPDATES = 0.01, 1e-9, 0.1, 8, 3
TOPK = {"kind": "topk", "ratio": 0.1}
POWERSGD = {"kind": "powersgd", "rank": 2}
# The tiny model: an MLP 64-16-10 on digits, dict leaves in key order.
SHAPES = {"dense0_b": (16,), "dense0_w": (64, 16), "dense1_b": (10,), "dense1_w": (16, 10)}


def scenario(
    compression, workers: int = 4, updates: int = UPDATES, network: dict | None = None, **overrides
) -> dict:
    return tiny(
        cluster={"workers": workers, "compute": {"step_time_s": STEP_S}},
        network=network or NET,
        strategy={
            "name": "arsgd",
            "lr": LR,
            "compression": compression,
            "codec_s_per_byte": CODEC_S_PER_BYTE,
        },
        stop={"max_updates": updates},
        **overrides,
    )


def recorded(data: dict) -> tuple[fred.RunResult, list[tuple[dict, dict[int, dict]]]]:
    """The run, and each round's parameters and every worker's gradient sum, as fred computed them."""
    calls = []
    real = Simulation.compute

    def compute(self, worker, params, *args, **kwargs):
        grad = yield from real(self, worker, params, *args, **kwargs)
        calls.append((worker.index, params, grad))
        return grad

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulation, "compute", compute)
        result = fred.run(data)
    rounds: list[tuple[dict, dict[int, dict]]] = []
    for worker, params, grad in calls:
        if not rounds or rounds[-1][0] is not params:
            rounds.append((params, {}))
        rounds[-1][1][worker] = {k: np.asarray(v) for k, v in grad.grad.items()}
    return result, [(as_numpy(params), grads) for params, grads in rounds]


def as_numpy(tree: dict, dtype=None) -> dict:
    return {k: np.asarray(v, dtype) for k, v in tree.items()}


@pytest.fixture(scope="module")
def topk_run():
    return recorded(scenario(TOPK))


@pytest.fixture(scope="module")
def powersgd_run():
    return recorded(scenario(POWERSGD, workers=3))


# ----------------------------------------------------------------------------- numpy references
def keep(ratio: float, size: int) -> int:
    return math.ceil(Fraction(str(ratio)) * size)


def topk_reference(rounds, ratio: float, steps: int):
    """Top-k with error memory, in numpy: m = g + e in float32 (so the same entries win as in fred),
    the sum and the update in float64. Yields the parameters before each round, then the last."""
    theta = as_numpy(rounds[0][0], np.float64)
    errors = {i: {k: np.zeros(v.shape, np.float32) for k, v in theta.items()} for i in rounds[0][1]}
    for _params, grads in rounds[:steps]:
        yield theta
        total = {k: np.zeros_like(v) for k, v in theta.items()}
        for i in sorted(grads):
            for k in theta:
                m = (grads[i][k] + errors[i][k]).ravel()  # float32 + float32
                order = np.argsort(-np.abs(m), kind="stable")[: keep(ratio, m.size)]  # ties: the lower index
                sent = np.zeros_like(m)
                sent[order] = m[order]
                errors[i][k] = (m - sent).reshape(theta[k].shape)
                total[k] += sent.reshape(theta[k].shape)
        theta = {k: theta[k] - LR * total[k] / (len(grads) * BATCH) for k in theta}
    yield theta


def gram_schmidt(p: np.ndarray) -> np.ndarray:
    p = p.copy()
    for i in range(p.shape[1]):
        p[:, i] /= np.linalg.norm(p[:, i])
        p[:, i + 1 :] -= p[:, i : i + 1] * (p[:, i] @ p[:, i + 1 :])
    return p


def powersgd_reference(rounds, rank: int, seed: int, steps: int):
    """PowerSGD (Vogels et al., Algorithm 1) in float64 numpy. A tensor (..., out) is the matrix
    out x rest; Q starts as fred draws it (documented: N(0, 1) from fold_in(key, i), matrix i in key
    order)."""
    theta = as_numpy(rounds[0][0], np.float64)
    matrices = [k for k in sorted(theta) if theta[k].ndim >= 2]
    key = jax_key(seed, "powersgd", "q")
    q = {}
    for i, k in enumerate(matrices):
        rows, cols = theta[k].shape[-1], theta[k].size // theta[k].shape[-1]
        q[k] = np.asarray(
            jax.random.normal(jax.random.fold_in(key, i), (cols, min(rank, rows, cols)), jnp.float32),
            np.float64,
        )
    workers = sorted(rounds[0][1])
    errors = {i: {k: 0.0 for k in matrices} for i in workers}
    for _params, grads in rounds[:steps]:
        yield theta
        n = len(grads)
        m = {
            i: {
                k: np.moveaxis(grads[i][k].astype(np.float64), -1, 0).reshape(theta[k].shape[-1], -1)
                + errors[i][k]
                for k in matrices
            }
            for i in workers
        }
        total = {k: sum(grads[i][k].astype(np.float64) for i in workers) for k in theta if k not in matrices}
        for k in matrices:
            p_hat = gram_schmidt(sum(m[i][k] @ q[k] for i in workers))
            q_sum = sum(m[i][k].T @ p_hat for i in workers)
            q[k] = q_sum / n
            for i in workers:
                errors[i][k] = m[i][k] - p_hat @ q[k].T
            shape = theta[k].shape
            total[k] = np.moveaxis((p_hat @ q_sum.T).reshape(shape[-1], *shape[:-1]), 0, -1)
        theta = {k: theta[k] - LR * total[k] / (n * BATCH) for k in theta}
    yield theta


def assert_params_close(fred_params: dict, reference: dict, atol: float) -> None:
    for k in reference:
        np.testing.assert_allclose(
            np.asarray(fred_params[k], np.float64), reference[k], rtol=0, atol=atol, err_msg=k
        )


def test_topk_with_error_memory_matches_a_numpy_reference(topk_run):
    result, rounds = topk_run
    assert len(rounds) >= UPDATES and all(len(grads) == 4 for _, grads in rounds[:UPDATES])
    expected = list(topk_reference(rounds, TOPK["ratio"], UPDATES))
    for (params, _), theta in zip(
        rounds[1:UPDATES], expected[1:]
    ):  # each round starts from the reference's update
        assert_params_close(params, theta, 1e-6)
    assert_params_close(result.params, expected[-1], 1e-6)
    uncompressed = list(topk_reference(rounds, 1.0, UPDATES))[-1]
    assert (
        np.abs(expected[-1]["dense0_w"] - uncompressed["dense0_w"]).max() > 1e-4
    )  # compression did something


def test_powersgd_matches_a_numpy_reference(powersgd_run):
    result, rounds = powersgd_run
    assert all(len(grads) == 3 for _, grads in rounds[:UPDATES])
    expected = list(powersgd_reference(rounds, POWERSGD["rank"], result.scenario.seed, UPDATES))
    for (params, _), theta in zip(rounds[1:UPDATES], expected[1:]):
        assert_params_close(params, theta, 1e-6)
    assert_params_close(result.params, expected[-1], 1e-6)


# ----------------------------------------------------------------------------- limits
def test_topk_with_ratio_1_is_plain_arsgd_and_ssgd_shares_it_bit_for_bit():
    plain = fred.run(tiny(strategy={"name": "arsgd"}, stop={"max_updates": UPDATES}))
    everything = fred.run(
        tiny(
            strategy={"name": "arsgd", "compression": {"kind": "topk", "ratio": 1}},
            stop={"max_updates": UPDATES},
        )
    )
    assert everything.summary["params_sha256"] == plain.summary["params_sha256"]
    ssgd = fred.run(
        tiny(
            strategy={"name": "ssgd", "compression": {"kind": "topk", "ratio": 1}},
            stop={"max_updates": UPDATES},
        )
    )
    assert ssgd.summary["params_sha256"] == plain.summary["params_sha256"]
    # sent as 8-byte pairs, all-gathered: (p - 1) * 2 * param_bytes per member and round
    assert everything.summary["bytes_sent"] == 4 * UPDATES * 3 * 2 * plain.summary["param_bytes"]


# ----------------------------------------------------------------------------- timing
def periods(result: fred.RunResult) -> np.ndarray:
    events = result.events
    return np.diff(
        events[(events["entity"] == "worker0") & (events["kind"] == "compute")]["start_s"].to_numpy()
    )


def test_a_topk_round_takes_an_all_gathers_time_not_an_all_reduces(topk_run):
    real, _ = topk_run
    timed = fred.run(scenario(TOPK, workload={"timing_only": True}))
    pd.testing.assert_frame_equal(timed.events, real.events)
    cfg, p = NetworkConfig(**NET), 4
    payload = 8 * (103 + 2 + 16 + 1)  # k = ceil(0.1 n) of 16, 1024, 10 and 160 entries, 4 B value + 4 B index
    assert payload == topk_codec.topk_payload_bytes(0.1, {k: np.zeros(s) for k, s in SHAPES.items()})
    codec_s = CODEC_S_PER_BYTE * real.summary["param_bytes"]  # compress and decompress: a pass each
    np.testing.assert_allclose(
        periods(timed), STEP_S + 2 * codec_s + allgather_time_s(p, payload, cfg), rtol=1e-9
    )
    gathers = timed.events[timed.events["kind"] == "allgather"]
    assert len(gathers) == p * UPDATES and (gathers["bytes"] == (p - 1) * payload).all()
    assert allgather_time_s(p, payload, cfg) != pytest.approx(allreduce_time_s("ring", p, p * payload, cfg))


@pytest.mark.parametrize(
    "network", [{"sharing": "fair"}, {"allreduce": "nccl"}, {"allreduce": "halving_doubling"}]
)
def test_the_all_gather_is_a_ring_on_fairly_shared_links_and_whatever_the_all_reduce(network):
    data = scenario(TOPK, workers=5, workload={"timing_only": True}, network={**NET, **network})
    events = fred.run(data).events
    gathers = events[events["kind"] == "allgather"]
    np.testing.assert_allclose(
        (gathers["end_s"] - gathers["start_s"]).to_numpy(),
        allgather_time_s(5, 976, NetworkConfig(**NET)),
        rtol=1e-12,
    )


def test_a_powersgd_round_is_all_reduces_of_p_of_the_vectors_and_of_q(powersgd_run):
    real, _ = powersgd_run
    timed = fred.run(scenario(POWERSGD, workers=3, workload={"timing_only": True}))
    pd.testing.assert_frame_equal(timed.events, real.events)
    cfg, p, r = NetworkConfig(**NET), 3, 2
    p_bytes, q_bytes, vector_bytes = (
        4 * r * (16 + 10),
        4 * r * (64 + 16),
        4 * (16 + 10),
    )  # P: out x r, Q: rest x r
    codec_s = CODEC_S_PER_BYTE * 4 * (64 * 16 + 16 * 10)  # a pass over the matrices: M Q, M^T P, P Q^T
    ring = [allreduce_time_s("ring", p, n, cfg) for n in (p_bytes, vector_bytes, q_bytes)]
    np.testing.assert_allclose(periods(timed), STEP_S + 3 * codec_s + sum(ring), rtol=1e-9)
    sent = timed.events[timed.events["kind"] == "allreduce"].groupby("entity")["bytes"].apply(list)
    assert sent["worker0"] == pytest.approx(
        [2 * (p - 1) / p * n for n in (p_bytes, vector_bytes, q_bytes)] * UPDATES
    )


def test_without_compression_nothing_changes():
    config = validate(tiny(strategy={"name": "arsgd"})).strategy
    assert config.compression is None and config.codec_s_per_byte == 0.0 and config.buckets_gradients()
    assert validate(tiny(strategy={"name": "ssgd", "compression": "none"})).strategy.compression is None


# ----------------------------------------------------------------------------- the codecs
def test_topk_sends_the_largest_entries_and_keeps_the_rest_as_its_error():
    rng = np.random.default_rng(0)
    grad = {"a": rng.normal(size=(7, 5)).astype(np.float32), "b": rng.normal(size=(9,)).astype(np.float32)}
    memory = codecs.ErrorMemory({k: rng.normal(size=v.shape).astype(np.float32) for k, v in grad.items()})
    sent, after = topk_codec.topk_compress(0.3)(grad, memory)
    for k in grad:
        m = (grad[k] + memory.error[k]).ravel()
        index, value = np.asarray(sent.index[k]), np.asarray(sent.value[k])
        assert len(index) == keep(0.3, m.size) == len(set(index.tolist()))
        np.testing.assert_array_equal(value, m[index])
        assert np.abs(m[index]).min() >= np.abs(np.delete(m, index)).max()
        dense = np.zeros_like(m)
        dense[index] = value
        np.testing.assert_array_equal(
            dense + np.asarray(after.error[k]).ravel(), m
        )  # nothing lost, nothing doubled
    total, _ = topk_codec.sparse_sum([sent, sent], [jnp.float32(1), jnp.float32(2)], grad)
    np.testing.assert_array_equal(
        np.asarray(total["b"]), 2 * (np.asarray(grad["b"]) + memory.error["b"] - after.error["b"])
    )


def test_powersgd_keeps_in_its_error_what_the_low_rank_product_misses():
    rng = np.random.default_rng(1)
    grad = {"w": rng.normal(size=(3, 4, 6)).astype(np.float32), "b": rng.normal(size=(6,)).astype(np.float32)}
    state, memory = psgd.powersgd_init(2)(grad, jax.random.PRNGKey(0))
    assert [q.shape for q in state.q] == [(12, 2)]  # the matrix is out x rest: 6 x 12
    m, p, vectors = psgd.compress_p(grad, memory, state)
    p_hat = psgd.orthogonalize(p)
    np.testing.assert_allclose(np.asarray(p_hat[0]).T @ np.asarray(p_hat[0]), np.eye(2), atol=1e-6)
    q_sum = psgd.compress_q(m, p_hat)
    after = psgd.feedback(m, p_hat, q_sum, 1)
    total, state = psgd.decompress(p_hat, q_sum, vectors, 1, grad)
    matrix = np.moveaxis(np.asarray(total["w"]), -1, 0).reshape(6, 12)
    np.testing.assert_allclose(matrix + np.asarray(after.error[0]), np.asarray(m[0]), atol=1e-5)
    assert np.linalg.matrix_rank(matrix) == 2 and np.abs(np.asarray(after.error[0])).max() > 0.1
    np.testing.assert_array_equal(np.asarray(total["b"]), grad["b"])  # vectors go uncompressed
    assert psgd.powersgd_bytes(2, grad) == (4 * 2 * 6, 4 * 2 * 12, 4 * 6, 4 * 72)
    assert psgd.powersgd_bytes(9, grad).p == 4 * 6 * 6  # clamped to min(rows, cols)


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "compression, problem",
    [
        ({"kind": "topk", "ratio": 0}, "strategy.compression.ratio: got 0; Input should be greater than 0"),
        (
            {"kind": "topk", "ratio": 1.5},
            "strategy.compression.ratio: got 1.5; Input should be less than or equal to 1",
        ),
        (
            {"kind": "powersgd", "rank": 0},
            "strategy.compression.rank: got 0; Input should be greater than or equal to 1",
        ),
        ({"kind": "topkk"}, "strategy.compression.kind: got 'topkk'; did you mean 'topk'?"),
    ],
)
def test_bad_settings_name_the_field_the_value_and_the_fix(compression, problem):
    with pytest.raises(ScenarioError, match=problem.replace("?", r"\?")):
        validate(tiny(strategy={"name": "arsgd", "compression": compression}))


@pytest.mark.parametrize(
    "data, problem",
    [
        (
            tiny(strategy={"name": "ssgd", "aggregation": "ps", "compression": "topk"}),
            "set aggregation: allreduce",
        ),
        (
            tiny(strategy={"name": "arsgd", "compression": "powersgd"}, workload={"bucket_bytes": 1000}),
            "workload.bucket_bytes 1000: strategy.compression (powersgd) compresses each whole gradient",
        ),
        (
            tiny(
                strategy={"name": "arsgd", "compression": "topk"},
                faults={
                    "sync_timeout_s": 0.01,
                    "worker_crash": [{"worker": 1, "at_s": 0.01, "rejoin_at_s": 0.05}],
                },
            ),
            "does not model a worker rejoining",
        ),
    ],
)
def test_what_compression_does_not_model_is_refused(data, problem):
    with pytest.raises(ScenarioError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        validate(data)


def test_a_rank_above_every_matrix_exits_2_naming_the_largest(tmp_path, capsys):
    data = tiny(
        strategy={"name": "arsgd", "compression": {"kind": "powersgd", "rank": 17}},
        workload={"timing_only": True},
    )
    with pytest.raises(
        ScenarioError,
        match=r"rank: got 17, .*of shape \(64, 16\), has rank at most 16: give a rank of 1 to 16",
    ):
        fred.run(data)
    fred.run(
        {**data, "strategy": {**data["strategy"], "compression": {"kind": "powersgd", "rank": 16}}}
    )  # clamped for 16 x 10
    path = tmp_path / "rank.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "give a rank of 1 to 16" in capsys.readouterr().err


# ----------------------------------------------------------------------------- replay and resume
@pytest.mark.slow  # per codec: a run, its replay and three runs to resume one: about 1 s after compiling
@pytest.mark.parametrize("compression", [TOPK, POWERSGD])
def test_compressed_runs_replay_and_resume_bit_for_bit(compression, tmp_path):
    import itertools

    from fred.runs import checkpoint
    from fred.runs.checkpoint import Checkpointer
    from fred.runs.runner import execute
    from fred.tools.replay import replay

    data = scenario(compression, updates=12)
    fred.run(data, out=tmp_path / "run")
    assert replay(tmp_path / "run").passed

    class Once(Checkpointer):
        def due(self) -> bool:
            return self.saved == 0 and super().due()

    sc = validate(data)
    counter = itertools.count()
    clean = execute(sc, checkpointer=Once(tmp_path / "never", 10**9, sc.digest(), clock=counter.__next__))
    execute(
        sc,
        checkpointer=Once(tmp_path / "ck", next(counter) // 2, sc.digest(), clock=itertools.count().__next__),
    )
    resumed = execute(sc, resume=checkpoint.load(tmp_path / "ck"))
    assert resumed.summary["params_sha256"] == clean.summary["params_sha256"]
    pd.testing.assert_frame_equal(resumed.events, clean.events)


# ----------------------------------------------------------------------------- one compression format
@pytest.mark.parametrize("old, kind", [("fp16_truncate", "fp16"), ("int8_quantize", "int8")])
def test_the_old_string_form_warns_naming_the_new_one_and_runs_the_same(old, kind):
    new = fred.run(
        tiny(strategy={"name": "pipe_sgd", "compression": {"kind": kind}}, stop={"max_updates": 6})
    )
    with pytest.warns(
        DeprecationWarning, match=rf"compression: {old} is deprecated; write compression: \{{kind: {kind}\}}"
    ):
        deprecated = fred.run(
            tiny(strategy={"name": "pipe_sgd", "compression": old}, stop={"max_updates": 6})
        )
    assert deprecated.summary["params_sha256"] == new.summary["params_sha256"]
    assert deprecated.summary["bytes_sent"] == new.summary["bytes_sent"]
    pd.testing.assert_frame_equal(deprecated.events, new.events)


@pytest.mark.parametrize(
    "strategy, kind, allowed",
    [
        ("pipe_sgd", "topk", "fp16, int8"),
        ("pipe_sgd", "fp32", "fp16, int8"),
        ("arsgd", "fp16", "topk, powersgd"),
        ("ssgd", "int4", "topk, powersgd"),
    ],
)
def test_a_bad_kind_is_refused_naming_the_field_the_value_and_the_allowed_kinds(strategy, kind, allowed):
    problem = f"strategy.compression.kind: got {kind!r}[^\\n]* allowed: {allowed}"
    for compression in (kind, {"kind": kind}):
        with pytest.raises(ScenarioError, match=problem):
            validate(tiny(strategy={"name": strategy, "compression": compression}))


def test_none_and_a_bare_kind_read_as_the_mapping_form():
    assert validate(tiny(strategy={"name": "pipe_sgd", "compression": "none"})).strategy.compression is None
    bare = validate(tiny(strategy={"name": "pipe_sgd", "compression": "fp16"})).strategy.compression
    assert (
        bare
        == validate(tiny(strategy={"name": "pipe_sgd", "compression": {"kind": "fp16"}})).strategy.compression
    )
