"""Streaming DiLoCo and the quantised outer all-reduce (DiLoCo, Local SGD) against an independent loop,
their closed-form timing, and their refusals."""

from __future__ import annotations

from pathlib import Path

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

f32 = np.float32


# ----------------------------------------------------------------------------- the codecs, in numpy
def fp16(x: np.ndarray) -> np.ndarray:
    """The 16 high bits of each float32."""
    return (x.astype(f32).view(np.uint32) & np.uint32(0xFFFF0000)).view(f32)


def int8(x: np.ndarray) -> np.ndarray:
    """256 levels between the tensor's min and max, as XLA computes them: each division by a scalar
    (255, the step) as a product with its float32 reciprocal, and ``lo + q step`` as one fused
    multiply-add (emulated in float64, where the product of two float32 is exact)."""
    lo, hi = x.min(), x.max()
    step = (hi - lo) * f32(1 / 255)
    if step <= 0:
        return x
    q = np.clip(np.round((x - lo) * (f32(1) / step)), 0, 255).astype(f32)
    return (np.float64(lo) + np.float64(q) * np.float64(step)).astype(f32)


def e3m0(x: np.ndarray) -> np.ndarray:
    """Sign and a power of two in 2^-6 .. 2^0 (or 0), times the tensor's largest magnitude."""
    scale = np.abs(x).max()
    if scale == 0:
        return x
    m = np.abs(x) / scale
    f, e = np.frexp(m)
    q = np.ldexp(f32(1), np.where(f >= 0.75, e, e - 1)).astype(f32)
    q = np.where(m < f32(2.0**-7), f32(0), np.maximum(q, f32(2.0**-6)))
    return np.where(x < 0, -(q * scale), q * scale).astype(f32)


CODECS = {None: lambda x: x, "fp16": fp16, "int8": int8, "e3m0": e3m0}


def test_the_e3m0_codec_rounds_to_the_nearest_power_of_two_of_the_largest_magnitude():
    from fred.numerics.codecs import e3m0 as fred_e3m0

    x = np.array([0, 1e-4, 0.0078125, 0.0078, 0.01, -0.3, 0.37, 0.375, 0.74, 0.75, -1.0], f32) * 2
    expected = np.array([0, 0, 2**-6, 0, 2**-6, -0.25, 0.25, 0.5, 0.5, 1, -1], f32) * 2
    np.testing.assert_array_equal(e3m0(x), expected)
    np.testing.assert_array_equal(np.asarray(fred_e3m0().roundtrip({"x": jnp.asarray(x)})["x"]), expected)
    assert fred_e3m0().wire_bytes(800.0, 2) == 800 / 8 + 4 * 2


@pytest.mark.parametrize("kind", ["fp16", "int8", "e3m0"])
def test_the_numpy_codecs_give_fred_s_bits(kind):
    from fred.numerics.codecs import QUANTIZERS

    values = np.random.default_rng(0).standard_normal((50, 300)) * np.logspace(-4, 0, 50)[:, None]
    for x in values.astype(f32):
        fred_bits = np.asarray(QUANTIZERS[kind]().roundtrip({"x": jnp.asarray(x)})["x"])
        np.testing.assert_array_equal(CODECS[kind](x), fred_bits)


# ----------------------------------------------------------------------------- the reference loop
def reference(data: dict, outer_steps: int) -> dict[str, np.ndarray]:
    """Streaming DiLoCo as a plain loop over global inner steps, fred's strategy code aside: fred's
    data, model and initial parameters (the same batches; iid sharding: replica r's k-th batch is
    block r of global batch k), replicas of one worker, the gradients from JAX (float32), the rest
    in numpy: float64, or with a rounding codec float32, one rounding an operation as fred's
    float32 computes it (a codec decides on the bits it is given, so the loop must give it
    fred's). Inner SGD; the outer Nesterov SGD per fragment; ``P = 1, tau = 0, alpha = 0`` is
    DiLoCo's Algorithm 1."""
    sc = validate(data)
    s, n, b = sc.strategy, sc.cluster.workers, sc.data.batch_size
    h, frags, tau, alpha, mu = s.inner_steps, s.fragments, s.overlap_steps, s.mixing, s.outer_momentum
    kind = None if s.outer_compression is None else s.outer_compression.kind
    codec, real = CODECS[kind], np.float64 if kind is None else f32
    dataset = load_dataset(sc.data, rng.stream(sc.seed, "data", "load"))
    model = build_model(sc.model, dataset.feature_shape, dataset.num_classes)
    init = model.init(rng.jax_key(sc.seed, "model", "init"))
    theta = {k: np.asarray(v).astype(real) for k, v in init.items()}
    batches = BatchStream(np.arange(len(dataset.y_train)), n * b, rng.stream(sc.seed, "data", "batches"))

    @jax.jit
    def grad_sum(params, x, y):
        return jax.grad(lambda p: -jnp.sum(jax.nn.log_softmax(model.apply(p, x))[jnp.arange(len(y)), y]))(
            params
        )

    # the MLP's layers are dense0, dense1, ...: layer j in fragment j mod P
    layer = {key: int(key.split("_")[0][len("dense") :]) for key in theta}
    fragment = [[key for key in sorted(theta) if layer[key] % frags == p] for p in range(frags)]
    replicas = [dict(theta) for _ in range(n)]
    momentum = {key: np.zeros_like(v) for key, v in theta.items()}
    lr, outer_lr, mu, alpha = real(s.lr), real(s.outer_lr), real(mu), real(alpha)
    pending, done, step, period = {}, 0, 0, h // frags
    while done < outer_steps:
        rows, step = batches.next(), step + 1
        for r in range(n):
            block = rows[r * b : (r + 1) * b]
            params32 = {k: v.astype(f32) for k, v in replicas[r].items()}
            g = grad_sum(params32, dataset.x_train[block], dataset.y_train[block])
            replicas[r] = {
                k: p - lr * (np.asarray(g[k]).astype(real) / real(b)) for k, p in replicas[r].items()
            }
        if step >= h and (step - h) % period == 0:  # outer step u starts: each replica's outer gradient
            u = (step - h) // period
            keys = fragment[u % frags]
            pending[u] = [{k: codec(theta[k] - rep[k]) for k in keys} for rep in replicas]
        if step >= h + tau and (step - h - tau) % period == 0:  # outer step u merges
            deltas = pending.pop(u := (step - h - tau) // period)
            for k in deltas[0]:
                mean = sum((d[k] for d in deltas[1:]), deltas[0][k]) / real(n)
                momentum[k] = mu * momentum[k] + mean
                theta[k] = theta[k] - outer_lr * (mean + mu * momentum[k])
                for rep in replicas:
                    rep[k] = theta[k] if alpha == 0 else alpha * rep[k] + (real(1) - alpha) * theta[k]
            done += 1
    return theta


def close(result: fred.RunResult, expected: dict[str, np.ndarray]) -> None:
    assert sorted(result.params) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(result.params[name], value, rtol=0, atol=1e-6, err_msg=name)


STREAMING = {"fragments": 2, "inner_steps": 4, "overlap_steps": 1, "mixing": 0.5}


def diloco(outer_steps: int, **strategy) -> dict:
    return tiny(
        cluster={"workers": 2},
        strategy={"name": "diloco", "lr": 0.05, **strategy},
        stop={"max_updates": outer_steps},
        eval={"every_updates": 100},
    )


def test_streaming_diloco_p2_h4_tau1_alpha_half_on_two_replicas_matches_an_independent_loop():
    data = diloco(6, **STREAMING)
    close(fred.run(data), reference(data, 6))


@pytest.mark.parametrize("kind", ["fp16", "int8", "e3m0"])
def test_a_quantised_outer_all_reduce_matches_an_independent_loop(kind):
    plain = diloco(3, inner_steps=3, outer_compression={"kind": kind})
    close(fred.run(plain), reference(plain, 3))
    streaming = diloco(4, **STREAMING, outer_compression=kind)
    close(fred.run(streaming), reference(streaming, 4))


def test_one_fragment_no_overlap_and_no_mixing_is_diloco_bit_for_bit():
    data = diloco(3, inner_steps=3)
    plain, same = fred.run(data), fred.run(diloco(3, inner_steps=3, fragments=1, overlap_steps=0, mixing=0.0))
    pd.testing.assert_frame_equal(plain.events, same.events)
    pd.testing.assert_frame_equal(plain.updates, same.updates)
    assert plain.summary["params_sha256"] == same.summary["params_sha256"]
    close(plain, reference(data, 3))


@pytest.mark.parametrize("kind", ["fp16", "int8", "e3m0"])
def test_local_sgd_s_quantised_average_is_the_mean_of_the_rounded_changes(kind):
    # Local SGD with outer_compression: x - (sum_j Q(x - x_j)) / n, DiLoCo's outer step at lr 1, momentum 0
    data = tiny(
        cluster={"workers": 2},
        strategy={"name": "local_sgd", "lr": 0.05, "sync_every": 3, "outer_compression": kind},
        stop={"max_updates": 3},
        eval={"every_updates": 100},
    )
    as_diloco = diloco(3, inner_steps=3, outer_lr=1.0, outer_momentum=0.0, outer_compression=kind)
    close(fred.run(data), reference(as_diloco, 3))


# ----------------------------------------------------------------------------- timing
NET = {"latency_s": 2e-4, "bandwidth_bps": 1e8, "reduce_s_per_byte": 1e-10, "sync_s": 1e-3}
LAYER_FLOATS = [
    64 * 16 + 16,
    16 * 10 + 10,
]  # the tiny MLP's layers: digits' 64 features, 16 hidden, 10 classes


@pytest.mark.parametrize("param_bytes", [1e4, 4e6])  # the exchange hidden by one inner step, or not
@pytest.mark.parametrize("kind", [None, "int8"])
def test_each_fragment_s_all_reduce_sends_its_bytes_and_overlaps_tau_inner_steps(param_bytes, kind):
    h, frags, tau, step_s, codec_s_per_byte = 4, 2, 1, 0.01, 1e-10
    data = tiny(
        cluster={"workers": 2, "compute": {"step_time_s": step_s}},
        network=NET,
        workload={"param_bytes": param_bytes, "timing_only": True},
        strategy={
            "name": "diloco",
            "inner_steps": h,
            "fragments": frags,
            "overlap_steps": tau,
            "outer_compression": kind,
            "codec_s_per_byte": codec_s_per_byte,
        },
        stop={"max_updates": 4},
    )
    result = fred.run(data)
    raw = [param_bytes * f / sum(LAYER_FLOATS) for f in LAYER_FLOATS]  # fragment p is layer p
    wire = raw if kind is None else [r / 4 + 8 * 2 for r in raw]  # int8: and min and max of 2 tensors
    codec_s = [0.0 if kind is None else codec_s_per_byte * r for r in raw]
    events = result.events[result.events.entity == "worker0"]
    sent = events[events.kind == "allreduce"]["bytes"].to_numpy()
    np.testing.assert_allclose(sent, [wire[u % frags] for u in range(len(sent))], rtol=1e-12)  # p = 2: all

    # Outer step u starts (compress) after inner step h + u h/P, its all-reduce goes on while tau more
    # steps are taken; the worker then waits for whatever of it is left, and decompresses.
    cfg, clock, expected = NetworkConfig(**NET), h * step_s, []
    for u in range(4):
        p = u % frags
        reduce_s = allreduce_time_s("ring", 2, wire[p], cfg)
        clock += codec_s[p] + max(reduce_s, tau * step_s) + codec_s[p]
        expected.append(clock)
        clock += (h // frags - tau) * step_s
    applied_s = result.updates.groupby("update")["sim_time_s"].first().to_numpy()
    np.testing.assert_allclose(applied_s, expected, rtol=1e-9)
    hidden = allreduce_time_s("ring", 2, max(wire), cfg) <= tau * step_s
    assert hidden == (param_bytes < 1e5)  # the small model's exchange is hidden: no wait
    assert hidden == (events[events.kind == "wait"].empty)


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "strategy, needle",
    [
        (
            {"inner_steps": 4, "overlap_steps": 4},
            "strategy.overlap_steps is 4 but strategy.inner_steps is 4: an outer all-reduce must end "
            "before its fragment's next one starts; use an overlap_steps below 4",
        ),
        (
            {"inner_steps": 5, "fragments": 2},
            "strategy.inner_steps is 5 but strategy.fragments is 2, which does not divide it",
        ),
        ({"mixing": 1.5}, "strategy.mixing: got 1.5; use a mixing factor in [0, 1]"),
        ({"mixing": -0.1}, "strategy.mixing: got -0.1; use a mixing factor in [0, 1]"),
        ({"fragments": 0}, "strategy.fragments: got 0; use at least 1 fragment"),
        ({"overlap_steps": -1}, "strategy.overlap_steps: got -1; use 0 or more inner steps"),
        ({"outer_compression": "topk"}, "outer_compression"),
    ],
)
def test_bad_settings_are_refused_naming_the_field_the_value_and_the_fix(strategy, needle):
    with pytest.raises(ScenarioError) as refused:
        validate(tiny(strategy={"name": "diloco", **strategy}))
    assert any(needle in problem for problem in refused.value.problems), refused.value.problems


@pytest.mark.parametrize(
    "hidden, fragments, needle",
    [
        ([16], 4, "strategy.fragments: got 4, but the model has 2 layers, which 4 fragments exceed; "
         "use a divisor of 2: 1, 2"),
        ([16, 16], 2, "strategy.fragments: got 2, but the model has 3 layers, which 2 fragments do not "
         "divide; use a divisor of 3: 1, 3"),
    ],
)  # fmt: skip
def test_fragments_that_do_not_fit_the_model_s_layers_are_refused(hidden, fragments, needle):
    data = tiny(model={"kind": "mlp", "hidden": hidden}, strategy={"name": "diloco", "fragments": fragments})
    with pytest.raises(ScenarioError) as refused:
        fred.run(data)
    assert any(needle in problem for problem in refused.value.problems), refused.value.problems


def test_the_shipped_example_runs_and_the_overlap_hides_its_exchanges(tmp_path):
    path = Path(__file__).resolve().parents[1] / "scenarios" / "wide_area" / "streaming_diloco.yaml"
    result = fred.run(path, out=tmp_path / "run")
    assert result.summary["status"] == "completed" and result.summary["updates"] == 3
    assert result.summary["bytes_between_sites"] > 0
    assert not (result.events.kind == "wait").any()  # 2 inner steps cover every outer all-reduce
