"""The exact reduction on a ResNet (GroupNorm): SSGD with n workers of batch b is SGD with batch
n*b bit for bit, for tiles of 8 rows (odd numbers of tiles too) and for per-example leaves (odd
batches), and a run replays bit for bit. A ResNet-8 of width 4 keeps the programs small; each
layout still compiles programs of its own (5-12 s on 2 cores), so the default run checks one
layout and `pytest -m slow` the others, a replay and many draws."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fred
from fred.tools.replay import replay

STEPS = 3


def resnet(**overrides) -> dict:
    scenario = {
        "name": "resnet-exact",
        "seed": 3,
        "model": {"kind": "resnet", "depth": 8, "width": 4, "norm": "group"},
        "data": {"source": {"kind": "synthetic_images", "examples": 256}, "eval_examples": 16},
        "cluster": {"workers": 1, "compute": {"step_time_s": 0.01}},
        "strategy": {"name": "sgd", "lr": 0.1},
        "stop": {"max_updates": STEPS},
        "eval": {"every_updates": 1000},
    }
    for key, value in overrides.items():
        scenario[key] = {**scenario.get(key, {}), **value}
    return scenario


def _sha(workers: int, batch: int, tile: int, name: str, aggregation: str | None = None) -> str:
    strategy = {
        "name": name,
        "lr": 0.1,
        "exact_tile": tile,
        **({"aggregation": aggregation} if aggregation else {}),
    }
    run = fred.run(resnet(cluster={"workers": workers}, data={"batch_size": batch}, strategy=strategy))
    return run.summary["params_sha256"]


def _check(workers: int, batch: int, tile: int, aggregation: str) -> None:
    large = _sha(1, workers * batch, tile, "sgd")
    assert _sha(workers, batch, tile, "ssgd", aggregation) == large, (
        f"n={workers} b={batch} tile={tile} {aggregation}"
    )


@pytest.mark.parametrize(
    ("workers", "batch", "tile", "aggregation"),
    [
        (2, 16, 8, "allreduce"),
        pytest.param(3, 24, 8, "allreduce", marks=pytest.mark.slow),  # 12 s on 2 cores
        pytest.param(2, 3, 1, "ps", marks=pytest.mark.slow),
    ],  # 7 s
    ids=["2x2-tiles", "3x3-tiles", "2x3-examples"],
)
def test_ssgd_on_a_resnet_is_sgd_with_the_large_batch(workers, batch, tile, aggregation):
    _check(workers, batch, tile, aggregation)


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(workers=st.integers(1, 4), tiles=st.integers(1, 4), aggregation=st.sampled_from(["allreduce", "ps"]))
def test_ssgd_on_a_resnet_is_sgd_with_the_large_batch_many_draws(workers, tiles, aggregation):
    _check(workers, 8 * tiles, 8, aggregation)


@pytest.mark.slow  # 14 s on 2 cores; tests/test_replay.py replays every strategy in the default run
def test_a_resnet_run_replays_bit_for_bit(tmp_path):
    scenario = resnet(
        cluster={"workers": 2, "jitter": {"kind": "lognormal", "sigma": 0.3}},
        data={"batch_size": 16},
        strategy={"name": "asgd", "lr": 0.05},
        stop={"max_updates": 4},
    )
    fred.run(scenario, out=tmp_path / "run")
    assert replay(tmp_path / "run").passed
