"""Evaluation in chunks: a held-out set larger than one evaluation call is evaluated chunk by
chunk, the last chunk padded, with the result of one call over the whole set. Sequence data
(tokens, text) has 2-D labels, which the padding pads as it pads the features."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import fred
from fred.numerics import evaluation
from fred.numerics.data import data_stream, load_dataset
from fred.numerics.gradients import Numerics
from fred.numerics.models import build_model
from fred.scenario.schema import DataConfig, TransformerModel
from tests.conftest import tiny

# 8 heads over 32 tokens: 8,192 attention scores a sequence, so an evaluation call holds 512 sequences.
MODEL = {"kind": "transformer", "layers": 1, "d_model": 8, "heads": 8}
TOKENS = {"kind": "synthetic_tokens", "examples": 3000, "vocab": 16, "context": 32, "branching": 3}


def test_a_transformer_evaluates_a_held_out_set_of_more_sequences_than_one_call_holds():
    data = tiny(
        data={"source": TOKENS, "sharding": "iid", "batch_size": 8},
        stop={"max_updates": 1},
        strategy={"name": "sgd"},
        cluster={"workers": 1},
    )
    data["model"] = MODEL
    dataset = load_dataset(DataConfig(**data["data"]), data_stream(data["seed"]))
    model = build_model(TransformerModel(**MODEL), dataset.feature_shape, dataset.num_classes)
    assert len(dataset.x_eval) == 600 and evaluation.eval_chunk_rows(model.width) == 512  # a chunk and a part
    summary = fred.run(data).summary
    assert summary["status"] == "completed"
    assert 0 < summary["final_eval_loss"] < 2 * math.log(16) and 0 <= summary["final_eval_accuracy"] <= 1


@pytest.mark.parametrize("rows", [512, 100, 7])
def test_chunks_of_sequences_give_the_mean_loss_and_token_accuracy_of_one_call(rows, monkeypatch):
    dataset = load_dataset(DataConfig(source=TOKENS), data_stream(0))
    model = build_model(TransformerModel(**MODEL), dataset.feature_shape, dataset.num_classes)
    params = model.init(jax.random.PRNGKey(0))
    numerics = Numerics(model, "classification", "fast")
    x, y = dataset.x_eval, dataset.y_eval
    whole = jax.jit(lambda p, xs, ys: evaluation.mean_loss(model, "classification", p, xs, ys))(params, x, y)
    monkeypatch.setattr(evaluation, "EVAL_BYTES", 16 * model.width * rows)
    calls = []
    sums = numerics._evaluate_sums
    numerics._evaluate_sums = lambda *args: calls.append(args[2].shape) or sums(*args)
    loss, accuracy = numerics.evaluate(params, x, y)
    assert calls == [(rows, 32)] * math.ceil(len(x) / rows), "every chunk padded to one shape, labels too"
    assert loss == pytest.approx(float(whole[0]), rel=1e-5)
    assert accuracy == pytest.approx(float(whole[1]), rel=1e-5)
    assert 0 < accuracy < 1


def test_padding_a_chunk_keeps_the_labels_rank():
    assert evaluation._padded(np.ones((3, 4), np.int32), 5).tolist() == [[1] * 4] * 3 + [[0] * 4] * 2
    assert evaluation._padded(np.ones(3, np.float32), 5).tolist() == [1, 1, 1, 0, 0]
