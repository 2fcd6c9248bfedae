"""The CIFAR ResNet and the GPT-style decoder: shapes, parameter counts and FLOPs against the
published ones, an example's outputs its own (what the exact reduction needs), seeded starts,
and their workload profiles (layers, bytes, FLOPs) used for buckets, timing and memory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fred
from fred.models.resnet import ResNetModel
from fred.models.transformer import TransformerModel
from fred.numerics.gradients import Numerics, eval_chunk_rows
from fred.numerics.losses import example_loss as _example_loss
from fred.numerics.models import build_model, param_count
from fred.numerics.resnet import group_norm
from fred.runs.memory import Shape, check_fits, estimate
from fred.runs.memory import param_count as estimated_params
from fred.scenario import model_workloads, workloads
from fred.scenario.loading import ScenarioError, validate
from fred.scenario.schema import base_step_time_s
from fred.simulation import buckets
from tests.conftest import tiny

CIFAR = (32, 32, 3)
SMALL = (8, 8, 3)  # images the tests' models compute on quickly; the parameters do not depend on their size
# He et al., Deep Residual Learning for Image Recognition, CVPR 2016, Table 6 (CIFAR-10): parameters by depth.
PUBLISHED_PARAMS = {20: 0.27e6, 32: 0.46e6, 44: 0.66e6, 56: 0.85e6, 110: 1.7e6}
RESNET20_MULTIPLY_ADDS = 41e6  # the "41 M FLOPs" quoted for ResNet-20 on a 32 x 32 image count multiply-adds


def with_model(model: dict, **overrides) -> dict:
    data = tiny(**overrides)
    data["model"] = model
    return data


def rows(shape: tuple[int, ...], count: int, seed: int = 0, vocab: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if vocab:
        return rng.integers(0, vocab, (count, *shape)).astype(np.int32)
    return rng.random((count, *shape), dtype=np.float32)


# ----------------------------------------------------------------------------- ResNet
@pytest.mark.parametrize("depth", sorted(PUBLISHED_PARAMS))
def test_resnet_parameters_are_he_et_als_and_the_profiles(depth):
    cfg = ResNetModel(depth=depth)
    profile = model_workloads.model_workload(cfg, CIFAR, 10)
    assert profile.param_count == pytest.approx(PUBLISHED_PARAMS[depth], rel=0.03)
    shapes = jax.eval_shape(build_model(cfg, CIFAR, 10).init, jax.random.PRNGKey(0))
    assert sum(int(np.prod(s.shape)) for s in shapes.values()) == profile.param_count


def test_resnet20_has_269722_parameters_and_41_million_multiply_adds_an_image():
    profile = model_workloads.model_workload(ResNetModel(), CIFAR, 10)
    assert profile.param_count == 269_722
    biases = 10  # the head's, 1 FLOP an output; convolutions have none
    multiply_adds = (
        profile.forward_flops_per_example - biases
    ) / 2  # the library counts 2 FLOPs a multiply-add
    assert multiply_adds == 40_551_040
    assert multiply_adds == pytest.approx(RESNET20_MULTIPLY_ADDS, rel=0.02)
    assert profile.flops_per_example == 3 * profile.forward_flops_per_example


def test_resnet_layers_hold_the_parameters_their_names_begin():
    cfg = ResNetModel(depth=8, width=4)
    params = build_model(cfg, SMALL, 10).init(jax.random.PRNGKey(0))
    profile = model_workloads.model_workload(cfg, SMALL, 10)
    for layer in profile.layers:
        held = sum(int(v.size) for k, v in params.items() if k.rsplit(".", 1)[0] == layer.name)
        assert 4 * held == layer.param_bytes, layer.name
    assert sum(layer.param_bytes for layer in profile.layers) == 4 * param_count(params)
    names = [layer.name for layer in profile.layers]
    assert names[:3] == ["conv1", "norm1", "layer1.0.conv1"] and names[-1] == "fc"


@pytest.mark.parametrize(
    "shape", [SMALL, pytest.param((8, 8, 1), marks=pytest.mark.slow)]
)  # digits' shape too: the strides make 4 x 4, then 2 x 2
def test_resnet_outputs_one_row_of_logits_per_image_and_each_image_its_own(shape):
    model = build_model(ResNetModel(depth=8, width=8), shape, 10)
    params = model.init(jax.random.PRNGKey(1))
    x = rows(shape, 6)
    batch = np.asarray(jax.jit(model.apply)(params, x))
    assert batch.shape == (6, 10) and np.isfinite(batch).all()
    alone = np.concatenate([np.asarray(jax.jit(model.apply)(params, x[i : i + 1])) for i in range(6)])
    np.testing.assert_allclose(batch, alone, rtol=2e-5, atol=2e-5)  # GroupNorm: no batch statistics
    changed = x.copy()
    changed[3:] = 0.0
    np.testing.assert_allclose(
        np.asarray(jax.jit(model.apply)(params, changed))[:3], batch[:3], rtol=2e-5, atol=2e-5
    )


def test_group_norm_normalises_each_examples_groups_of_channels_over_its_pixels():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5, 4, 24)) * 3 + 2).astype(np.float32)
    scale, bias = rng.standard_normal(24).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    g = x.astype(np.float64).reshape(3, 5, 4, 8, 3)  # gcd(8, 24) = 8 groups of 3 channels
    centred = (g - g.mean(axis=(1, 2, 4), keepdims=True)) / np.sqrt(
        g.var(axis=(1, 2, 4), keepdims=True) + 1e-5
    )
    np.testing.assert_allclose(
        np.asarray(group_norm(x, scale, bias)), centred.reshape(x.shape) * scale + bias, atol=1e-5
    )


def test_resnet_without_normalisation_has_no_norm_parameters_and_starts_finite():
    cfg = ResNetModel(depth=20, width=8, norm="none")
    model = build_model(cfg, SMALL, 10)
    params = model.init(jax.random.PRNGKey(0))
    assert not any("norm" in k for k in params)
    assert param_count(params) == model_workloads.model_workload(cfg, SMALL, 10).param_count
    out = np.asarray(jax.jit(model.apply)(params, rows(SMALL, 4)))
    assert (
        np.isfinite(out).all() and np.abs(out).max() < 100
    )  # Fixup's rescaling keeps the residual sums small


def test_resnet_starts_from_the_key_he_normal():
    model = build_model(ResNetModel(depth=8, width=16), SMALL, 10)
    a, b, c = (
        model.init(jax.random.PRNGKey(0)),
        model.init(jax.random.PRNGKey(0)),
        model.init(jax.random.PRNGKey(1)),
    )
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["conv1.w"], c["conv1.w"])
    assert set(a) == set(c) and all(v.dtype == jnp.float32 for v in a.values())
    w = np.asarray(a["layer3.0.conv2.w"])  # 3 x 3 x 64 inputs: std sqrt(2 / 576)
    assert w.std() == pytest.approx(np.sqrt(2 / 576), rel=0.05)
    assert np.array_equal(a["layer1.0.norm1.scale"], np.ones(16)) and not np.any(a["fc.b"])


@pytest.mark.parametrize(
    "depth, words", [(18, "got 18; a CIFAR ResNet has 6n \\+ 2 layers"), (116, "got 116"), (2, "got 2")]
)
def test_a_depth_that_is_not_6n_plus_2_is_refused_with_the_ones_that_are(depth, words):
    with pytest.raises(ScenarioError, match=f"model.depth: {words}.*give 20, 32, 44 or 56"):
        validate(
            with_model({"kind": "resnet", "depth": depth}, data={"source": {"kind": "synthetic_images"}})
        )


def test_resnet_needs_images():
    with pytest.raises(
        ScenarioError, match="model.kind resnet needs images .* use synthetic_images, cifar10"
    ):
        validate(with_model({"kind": "resnet"}, data={"source": {"kind": "synthetic"}}))
    with pytest.raises(ValueError, match="model 'resnet' needs image data of shape"):
        build_model(ResNetModel(), (20,), 3)


# ----------------------------------------------------------------------------- transformer
def test_the_transformer_configured_as_gpt2_small_is_the_gpt2_profile_layer_for_layer():
    cfg = TransformerModel(layers=12, d_model=768, heads=12, context=1024, vocab=50257)
    own = model_workloads.model_workload(cfg, (1024,), 2)
    assert own.layers == workloads.load("gpt2").layers
    assert own.param_count == 124_439_808  # GPT2LMHeadModel, gpt2, its head tied to wte


def test_transformer_parameters_are_its_profiles_and_its_outputs_logits_per_position():
    cfg = TransformerModel(layers=2, d_model=32, heads=4)
    model = build_model(cfg, (12,), 20)
    params = model.init(jax.random.PRNGKey(0))
    profile = model_workloads.model_workload(cfg, (12,), 20)
    for layer in profile.layers:
        held = sum(
            int(v.size) for k, v in params.items() if k == layer.name or k.rsplit(".", 1)[0] == layer.name
        )
        assert 4 * held == layer.param_bytes, layer.name
    assert param_count(params) == profile.param_count
    out = np.asarray(jax.jit(model.apply)(params, rows((12,), 3, vocab=20)))
    assert out.shape == (3, 12, 20) and np.isfinite(out).all()


def test_a_position_sees_only_the_tokens_before_it_and_an_example_only_itself():
    model = build_model(TransformerModel(layers=2, d_model=16, heads=2), (10,), 30)
    params = model.init(jax.random.PRNGKey(2))
    apply = jax.jit(model.apply)
    x = rows((10,), 4, vocab=30)
    base = np.asarray(apply(params, x))
    later = x.copy()
    later[:, 6:] = (later[:, 6:] + 1) % 30
    np.testing.assert_allclose(np.asarray(apply(params, later))[:, :6], base[:, :6], rtol=2e-5, atol=2e-5)
    alone = np.concatenate([np.asarray(apply(params, x[i : i + 1])) for i in range(4)])
    np.testing.assert_allclose(alone, base, rtol=2e-5, atol=2e-5)


def test_transformer_checks_its_width_context_and_vocabulary():
    with pytest.raises(ScenarioError, match="heads 5 do not divide d_model 64"):
        validate(
            with_model({"kind": "transformer", "heads": 5}, data={"source": {"kind": "synthetic_tokens"}})
        )
    with pytest.raises(
        ScenarioError, match="model.context 16 is shorter than the data's sequences .*context 32"
    ):
        validate(
            with_model({"kind": "transformer", "context": 16}, data={"source": {"kind": "synthetic_tokens"}})
        )
    with pytest.raises(ScenarioError, match="model.vocab 40 is smaller than the data's 64 tokens"):
        validate(
            with_model({"kind": "transformer", "vocab": 40}, data={"source": {"kind": "synthetic_tokens"}})
        )
    with pytest.raises(
        ScenarioError, match="model.kind transformer predicts the next token .* use data.source.kind text"
    ):
        validate(with_model({"kind": "transformer"}))
    with pytest.raises(ScenarioError, match="model.kind mlp cannot learn data.source.kind synthetic_tokens"):
        validate(tiny(data={"source": {"kind": "synthetic_tokens"}}))
    with pytest.raises(ValueError, match="model.vocab 10 is smaller than the data's 12 tokens"):
        build_model(TransformerModel(vocab=10), (8,), 12)


def test_a_sequences_loss_is_the_mean_of_its_tokens_cross_entropies_and_accuracy_is_per_token():
    model = build_model(TransformerModel(layers=1, d_model=16, heads=2), (6,), 9)
    params = model.init(jax.random.PRNGKey(0))
    x, y = rows((6,), 5, vocab=9), rows((6,), 5, seed=1, vocab=9)
    logits = np.asarray(jax.jit(model.apply)(params, x), np.float64)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    token_losses = -np.take_along_axis(log_p, y[..., None], axis=-1)[..., 0]
    one = float(_example_loss(model, "classification", params, jnp.asarray(x[0]), jnp.asarray(y[0])))
    assert one == pytest.approx(token_losses[0].mean(), rel=1e-5)
    numerics = Numerics(model, "classification", "exact")
    loss, accuracy = numerics.evaluate(params, x, y)
    assert loss == pytest.approx(token_losses.mean(), rel=1e-5)
    assert accuracy == pytest.approx((logits.argmax(-1) == y).mean())


# ----------------------------------------------------------------------------- through a run
@pytest.mark.parametrize(
    "name, model, data",
    [
        pytest.param(
            "resnet",
            {"kind": "resnet", "depth": 8, "width": 4},
            {"source": {"kind": "digits"}, "batch_size": 8, "eval_examples": 16},
            marks=pytest.mark.slow,
        ),  # 11 s on 2 cores; tests/test_resnet_exact.py trains a ResNet in the default run
        pytest.param(
            "transformer",
            {"kind": "transformer", "layers": 1, "d_model": 16, "heads": 2},
            {
                "source": {"kind": "synthetic_tokens", "examples": 64, "context": 8, "vocab": 16},
                "batch_size": 8,
            },
            marks=pytest.mark.slow,
        ),  # 9 s on 2 cores; a sequence's loss and accuracy are checked in the default run
    ],
)
def test_both_models_train_alike_under_the_exact_and_the_fast_reduction(name, model, data):
    # the exact reduction's per-example gradients (vmap of grad) add up to the batch's gradient
    runs = [
        fred.run(
            with_model(
                model,
                data=data,
                strategy={"name": "ssgd", "reduction": reduction, "lr": 0.5},
                cluster={"workers": 2},
                stop={"max_updates": 3},
                eval={"every_updates": 3},
            )
        )
        for reduction in ("exact", "fast")
    ]
    exact, fast = (r.metrics["eval_loss"].to_numpy() for r in runs)
    assert np.isfinite(exact).all() and exact[-1] != exact[0]
    np.testing.assert_allclose(exact, fast, rtol=2e-4)
    assert runs[0].metrics["eval_accuracy"].between(0, 1).all()


def test_bucket_bytes_cuts_a_built_in_models_own_layers_without_a_profile():
    data = tiny(
        model={"hidden": [16, 8]},
        strategy={"name": "arsgd"},
        stop={"max_updates": 2},
        workload={"bucket_bytes": 300},
    )
    result = fred.run(data)
    layers = model_workloads.model_workload(result.scenario.model, (8, 8, 1), 10).layers
    assert [(layer.name, layer.param_bytes) for layer in layers] == [
        ("dense0", 4160),
        ("dense1", 544),
        ("dense2", 360),
    ]
    planned = buckets.plan(layers, 300, result.summary["param_bytes"])
    assert len(planned) == 3 and sum(b.nbytes for b in planned) == result.summary["param_bytes"]
    allreduces = result.events[result.events["kind"] == "allreduce"]
    assert len(allreduces) == 3 * 4 * 2  # three buckets, four workers, two iterations
    sent = np.array(sorted(set(allreduces["bytes"]))) / np.array(sorted({b.nbytes for b in planned}))
    assert sent == pytest.approx(
        [2 * 3 / 4] * 3
    )  # each bucket's ring all-reduce: 2 (p - 1) / p of it a worker


def test_device_flops_alone_times_a_step_with_the_models_own_training_flops():
    data = with_model(
        {"kind": "resnet"},
        data={"source": {"kind": "synthetic_images"}, "batch_size": 32},
        cluster={"compute": {"step_time_s": None, "device_flops": 1e12}},
    )
    scenario = validate(data)
    resnet20 = model_workloads.model_workload(ResNetModel(), CIFAR, 10)
    assert base_step_time_s(scenario) == 32 * resnet20.flops_per_example / 1e12
    assert base_step_time_s(scenario) == pytest.approx(32 * 3 * 81.1e6 / 1e12, rel=1e-3)
    given = validate(
        data | {"cluster": {"compute": {"step_time_s": None, "device_flops": 1e12, "flops_per_example": 1e6}}}
    )
    assert base_step_time_s(given) == 32 * 1e6 / 1e12  # FLOPs given win


def test_device_flops_alone_is_refused_where_only_files_tell_the_shape():
    data = tiny(
        data={"source": {"kind": "mnist", "path": "somewhere"}},
        cluster={"compute": {"step_time_s": None, "device_flops": 1e12}},
    )
    with pytest.raises(
        ScenarioError, match="device_flops needs flops_per_example .*data.source.kind mnist, whose shape only"
    ):
        validate(data)
    text = with_model(
        {"kind": "transformer"},
        data={"source": {"kind": "text", "path": "t.txt", "level": "char"}},
        cluster={"compute": {"step_time_s": None, "device_flops": 1e12}},
    )
    with pytest.raises(
        ScenarioError, match="read by character: its vocabulary is the file's; give model.vocab"
    ):
        validate(text)
    text["model"]["vocab"] = 100
    assert base_step_time_s(validate(text)) > 0


def test_the_memory_estimate_counts_the_models_parameters_and_refuses_one_too_large():
    scenario = validate(
        with_model({"kind": "resnet", "depth": 56}, data={"source": {"kind": "synthetic_images"}})
    )
    assert (
        estimated_params(scenario, Shape(2000, CIFAR, 10, 3.0))
        == model_workloads.model_workload(ResNetModel(depth=56), CIFAR, 10).param_count
    )
    parts = dict(estimate(scenario, Shape(2000, CIFAR, 10, 3.0)).parts)
    assert parts["evaluation"] > 0
    # a step holds each example's activations for the backward pass: for a ResNet, more than its leaves'
    # gradients
    leaves = next(v for k, v in parts.items() if k.startswith("tile gradients"))
    assert next(v for k, v in parts.items() if k.startswith("activations of")) > leaves > 0
    huge = with_model(
        {"kind": "transformer", "layers": 48, "d_model": 8192, "heads": 64},
        data={"source": {"kind": "synthetic_tokens", "vocab": 50000}},
        cluster={"workers": 8},
    )
    with pytest.raises(ValueError, match=r"out of memory: .*a model of 3[0-9,]+ parameters"):
        check_fits(validate(huge))


def test_the_memory_estimate_sizes_a_transformers_evaluation_by_its_widest_layer():
    data = with_model(
        {"kind": "transformer"},
        data={"source": {"kind": "synthetic_tokens", "examples": 5000}, "eval_examples": 100},
    )
    scenario = validate(data)
    parts = dict(estimate(scenario, Shape(5000, (32,), 64, 3.0)).parts)
    width = max(4 * 32 * 32, 4 * 64 * 32, 64 * 32)  # attention scores, MLP, logits
    assert parts["evaluation"] == eval_chunk_rows(width) * width * 4 * 4
