"""The models train, on every data source, through the whole stack."""

from __future__ import annotations

import numpy as np
import pytest

import fred
from fred.numerics.models import build_model
from fred.models.cnn import CNNModel
from tests.conftest import tiny


@pytest.mark.parametrize(
    "model",
    [{"kind": "logistic"}, {"kind": "mlp", "hidden": [16, 8], "activation": "tanh"}, {"kind": "cnn", "channels": [4]}],
)
def test_each_model_reduces_the_loss_on_digits(model):
    data = tiny(strategy={"name": "ssgd"}, stop={"max_updates": 40}, eval={"every_updates": 40})
    data["model"] = model
    result = fred.run(data)
    assert result.metrics["eval_loss"].iloc[-1] < result.metrics["eval_loss"].iloc[0]


def test_a_cnn_needs_images():
    data = tiny(data={"source": {"kind": "synthetic"}})
    data["model"] = {"kind": "cnn"}
    with pytest.raises(fred.ScenarioError, match="model.kind cnn needs images"):  # refused as the scenario is read
        fred.run(data)
    with pytest.raises(ValueError, match="needs image data"):  # and by the model, for data a file shapes
        build_model(CNNModel(), (20,), 4)


def test_synthetic_regression_trains_with_squared_error():
    data = tiny(data={"source": {"kind": "synthetic", "task": "regression", "noise": 0.1}}, stop={"max_updates": 100})
    data["model"] = {"kind": "logistic"}  # a linear model, here a linear regression
    result = fred.run(data)
    assert result.summary["final_eval_accuracy"] is None
    assert result.metrics["eval_loss"].iloc[-1] < 0.2 * result.metrics["eval_loss"].iloc[0]


def test_user_supplied_mnist_files_run_end_to_end(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(96, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=96).astype(np.uint8)
    np.savez(tmp_path / "mnist.npz", x_train=x[:80], y_train=y[:80], x_test=x[80:], y_test=y[80:])
    data = tiny(data={"source": {"kind": "mnist", "path": str(tmp_path / "mnist.npz")}}, stop={"max_updates": 4})
    result = fred.run(data)
    assert result.summary["status"] == "completed"
    assert result.params["dense0_w"].shape == (784, 16)
