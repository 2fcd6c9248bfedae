"""The synthetic tokens' loss floor: the Bayes-optimal predictor's expected cross-entropy on the
very chain a run draws, against Monte Carlo over the chain's sequences, its bounds, the run's
summary and its loss plots."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fred
from fred.numerics import tokens
from fred.numerics.data import data_stream, load_dataset, loss_floor
from fred.runs.summary import _data_loss_floor
from fred.scenario.loading import validate
from fred.scenario.schema import DataConfig, SyntheticTokensData
from tests.conftest import tiny


def bayes_losses(
    cfg: SyntheticTokensData, rng: np.random.Generator, x: np.ndarray, y: np.ndarray
) -> np.ndarray:
    """-log p(y_t | x_t) under the chain that ``rng`` draws, each sequence's mean ``(N,)``,
    repeated successors merged: the Bayes-optimal predictor's loss on ``x, y``."""
    successors, probabilities = tokens.chain(cfg, rng)
    dense = np.zeros((cfg.vocab, cfg.vocab))
    np.add.at(
        dense, (np.repeat(np.arange(cfg.vocab), cfg.branching), successors.ravel()), probabilities.ravel()
    )
    return -np.log(dense[x, y]).mean(axis=1)


@pytest.mark.parametrize("vocab, context, branching, seed", [(16, 8, 3, 0), (32, 12, 6, 1), (5, 20, 5, 2)])
def test_the_floor_is_the_mean_loss_of_the_true_chain_on_its_own_sequences(vocab, context, branching, seed):
    # brute force: the chain's sequences, scored by the chain's own next-token probabilities
    cfg = SyntheticTokensData(vocab=vocab, context=context, branching=branching, examples=60_000)
    x, y = tokens.synthetic_tokens(cfg, np.random.default_rng(seed))
    per_sequence = bayes_losses(cfg, np.random.default_rng(seed), x, y)
    assert np.isfinite(per_sequence).all()  # every transition drawn is one of the chain's
    floor = tokens.markov_loss_floor(cfg, np.random.default_rng(seed))
    error = per_sequence.std() / math.sqrt(
        len(per_sequence)
    )  # sequences are independent; their tokens are not
    assert abs(per_sequence.mean() - floor) < 4 * error, (per_sequence.mean(), floor, error)
    assert error < 0.004  # a tight bound: the floor is right to a few thousandths of a nat


def test_the_floor_of_a_chain_whose_marginal_never_settles_is_exact():
    # vocab 2, branching 2: a token is followed by either token, or (both draws alike) by one alone;
    # the exact floor position by position, from the 2 x 2 matrix, against the implementation
    for seed in range(8):
        cfg = SyntheticTokensData(vocab=2, context=7, branching=2)
        successors, probabilities = tokens.chain(cfg, np.random.default_rng(seed))
        matrix = np.zeros((2, 2))
        np.add.at(matrix, (np.repeat([0, 1], 2), successors.ravel()), probabilities.ravel())
        rows = [-sum(p * math.log(p) for p in row if p > 0) for row in matrix]
        marginal, total = np.array([0.5, 0.5]), 0.0
        for _ in range(7):
            total += marginal @ rows
            marginal = marginal @ matrix
        assert tokens.markov_loss_floor(cfg, np.random.default_rng(seed)) == pytest.approx(
            total / 7, rel=1e-12, abs=1e-15
        )


@pytest.mark.parametrize("branching", [1, 2, 4, 16, 64])
def test_the_floor_lies_between_zero_and_log_branching(branching):
    for seed in range(3):
        cfg = DataConfig(
            source={"kind": "synthetic_tokens", "vocab": 64, "context": 32, "branching": branching}
        )
        floor = loss_floor(cfg, seed)
        assert 0.0 <= floor <= math.log(branching) + 1e-12
        if branching == 1:
            assert floor == 0.0  # each token has one successor: the next token is certain
        else:
            assert floor > 0.0


def test_the_floor_is_of_the_seeds_chain_and_of_no_other_data():
    cfg = DataConfig(
        source={"kind": "synthetic_tokens", "vocab": 24, "context": 10, "branching": 3, "examples": 4000}
    )
    floors = [loss_floor(cfg, seed) for seed in (0, 0, 1)]
    assert floors[0] == floors[1] != floors[2]
    assert loss_floor(DataConfig(), 0) is None  # digits: no floor known
    # the run's data set (loaded from the same stream, as the runner loads it) is the chain's: its
    # held-out sequences score the floor, within their noise, under the chain the floor is of
    dataset = load_dataset(cfg, data_stream(5))
    held = bayes_losses(cfg.source, data_stream(5), np.asarray(dataset.x_eval), np.asarray(dataset.y_eval))
    train = bayes_losses(cfg.source, data_stream(5), np.asarray(dataset.x_train), np.asarray(dataset.y_train))
    assert np.isfinite(held).all() and np.isfinite(train).all()
    error = held.std() / math.sqrt(len(held))
    assert abs(held.mean() - loss_floor(cfg, 5)) < 4 * error


def test_the_summary_reports_the_floor_for_synthetic_tokens_only():
    data = tiny(
        data={
            "source": {"kind": "synthetic_tokens", "examples": 40, "vocab": 8, "context": 4, "branching": 2},
            "sharding": "iid",
        },
        workload={"timing_only": True},
        stop={"max_updates": 2},
        eval={"every_updates": 1},
    )
    data["model"] = {"kind": "transformer", "layers": 1, "d_model": 8, "heads": 1}
    summary = fred.run(data).summary
    assert summary["data_loss_floor"] == loss_floor(DataConfig(**data["data"]), data["seed"])
    assert 0 < summary["data_loss_floor"] <= math.log(2)
    assert _data_loss_floor(validate(tiny())) == {}  # digits: no key (its run's summary is built alike)


def test_loss_plots_draw_the_floor_as_a_line_or_the_seeds_band(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from fred.tools import plots

    figures = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: figures.append(fig) or [])
    metrics = {"sim_time_s": [0.0, 1.0], "updates": [0, 10], "eval_loss": [2.0, 1.2]}

    def run(floor):
        import pandas as pd

        return SimpleNamespace(
            title="r",
            summary={"strategy": "ssgd", "workers": 1, "data_loss_floor": floor},
            metrics=pd.DataFrame(metrics),
        )

    plots.loss_curves([run(0.75)], tmp_path)
    [floor] = [line for line in figures[-1].axes[0].lines if line.get_label().startswith("loss floor")]
    assert set(floor.get_ydata()) == {0.75}
    plots.loss_curves([run(0.75), run(0.8)], tmp_path)
    labels = [p.get_label() for p in figures[-1].axes[0].patches]
    assert "loss floors 0.75 to 0.8 (the runs' data)" in labels
    plots.loss_curves([run(0.0)], tmp_path)  # branching 1: no place for 0 on a log axis
    assert not any(line.get_label().startswith("loss floor") for line in figures[-1].axes[0].lines)


@pytest.mark.slow
def test_a_trained_transformer_never_beats_the_floor_on_held_out_sequences():
    source = {"kind": "synthetic_tokens", "examples": 1200, "vocab": 12, "context": 8, "branching": 3}
    data = {
        "name": "floor",
        "seed": 3,
        "model": {"kind": "transformer", "layers": 1, "d_model": 32, "heads": 2},
        "data": {"source": source, "batch_size": 32, "sharding": "iid", "eval_examples": 240},
        "cluster": {"workers": 1, "compute": {"step_time_s": 0.01}},
        "strategy": {"name": "sgd", "lr": 0.5},
        "stop": {"max_updates": 600},
        "eval": {"every_updates": 100},
    }
    result = fred.run(data)
    floor = result.summary["data_loss_floor"]
    dataset = load_dataset(DataConfig(**data["data"]), data_stream(3))
    held = bayes_losses(
        SyntheticTokensData(**source),
        data_stream(3),
        np.asarray(dataset.x_eval)[:240],
        np.asarray(dataset.y_eval)[:240],
    )
    noise = 4 * held.std() / math.sqrt(len(held))
    losses = result.metrics["eval_loss"].dropna()
    assert (losses >= floor - noise).all(), (losses.min(), floor, noise)
    assert losses.iloc[-1] < 0.5 * (
        floor + math.log(12)
    )  # it learned: well on its way from a guess to the floor
