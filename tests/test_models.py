"""The models train, on every data source, through the whole stack."""

from __future__ import annotations

import typing

import jax
import numpy as np
import pytest
from pydantic import TypeAdapter

import fred
from fred.models.cnn import CNNModel
from fred.numerics.models import build_model, param_count
from fred.scenario import model_workloads
from fred.scenario.schema import KINDS, ModelConfig, Scenario, kinds_taking
from tests.conftest import tiny


@pytest.mark.parametrize(
    "model",
    [
        {"kind": "logistic"},
        {"kind": "mlp", "hidden": [16, 8], "activation": "tanh"},
        {"kind": "cnn", "channels": [4]},
    ],
)
def test_each_model_reduces_the_loss_on_digits(model):
    data = tiny(strategy={"name": "ssgd"}, stop={"max_updates": 40}, eval={"every_updates": 40})
    data["model"] = model
    result = fred.run(data)
    assert result.metrics["eval_loss"].iloc[-1] < result.metrics["eval_loss"].iloc[0]


def test_a_cnn_needs_images():
    data = tiny(data={"source": {"kind": "synthetic"}})
    data["model"] = {"kind": "cnn"}
    with pytest.raises(
        fred.ScenarioError, match="model.kind cnn needs images"
    ):  # refused as the scenario is read
        fred.run(data)
    with pytest.raises(ValueError, match="needs image data"):  # and by the model, for data a file shapes
        build_model(CNNModel(), (20,), 4)


def test_synthetic_regression_trains_with_squared_error():
    data = tiny(
        data={"source": {"kind": "synthetic", "task": "regression", "noise": 0.1}}, stop={"max_updates": 100}
    )
    data["model"] = {"kind": "logistic"}  # a linear model, here a linear regression
    result = fred.run(data)
    assert result.summary["final_eval_accuracy"] is None
    assert result.metrics["eval_loss"].iloc[-1] < 0.2 * result.metrics["eval_loss"].iloc[0]


def test_user_supplied_mnist_files_run_end_to_end(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(96, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=96).astype(np.uint8)
    np.savez(tmp_path / "mnist.npz", x_train=x[:80], y_train=y[:80], x_test=x[80:], y_test=y[80:])
    data = tiny(
        data={"source": {"kind": "mnist", "path": str(tmp_path / "mnist.npz")}}, stop={"max_updates": 4}
    )
    result = fred.run(data)
    assert result.summary["status"] == "completed"
    assert result.params["dense0_w"].shape == (784, 16)


def test_each_model_kind_is_one_module_of_fred_models_found_by_name():
    kinds = [section.model_fields["kind"].default for section in KINDS]
    assert kinds == ["logistic", "mlp", "cnn", "resnet", "transformer", "python"]  # as errors list them
    assert all(section.__module__ == f"fred.models.{kind}" for section, kind in zip(KINDS, kinds))
    assert typing.get_args(typing.get_args(ModelConfig)[0]) == KINDS
    assert Scenario.model_fields["model"].default_factory().kind == "mlp"
    assert kinds_taking("sequences") == ["transformer"] and kinds_taking("images") == ["cnn", "resnet"]


@pytest.mark.parametrize(
    "model, shape, outputs",
    [
        ({"kind": "logistic"}, (8, 8, 1), 10),
        ({"kind": "mlp", "hidden": [5, 3]}, (7,), 2),
        ({"kind": "cnn", "channels": [3, 2], "kernel_size": 3, "hidden": 6}, (6, 5, 2), 4),
        ({"kind": "resnet", "depth": 8, "width": 4}, (9, 9, 3), 5),
        ({"kind": "resnet", "depth": 14, "width": 2, "norm": "none"}, (8, 8, 1), 3),
        ({"kind": "transformer", "layers": 1, "d_model": 8, "heads": 2, "context": 7}, (5,), 11),
    ],
)
def test_a_kinds_layers_hold_the_parameters_it_builds(model, shape, outputs):
    cfg = TypeAdapter(ModelConfig).validate_python(model)
    built = build_model(cfg, shape, outputs)
    params = built.init(jax.random.PRNGKey(0))
    assert cfg.param_count(shape, outputs) == param_count(params)
    layers = model_workloads.model_workload(cfg, shape, outputs).layers
    assert all(any(name.startswith(layer.name) for layer in layers) for name in params)
    assert built.width == cfg.activation_width(shape, outputs) and cfg.takes(shape)
