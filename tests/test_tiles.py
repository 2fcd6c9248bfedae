"""Tiles: the exact reduction's leaves of ``strategy.exact_tile`` rows, each one batched gradient.

What makes them exact: a tile's values are the same bits whichever program computed it (one
tile, several, a piece of a call cut in pieces), so every split of a batch on whole tiles sums
the same leaves by the same tree (tests/test_exact_split.py and tests/test_equivalence.py check
whole runs: SSGD with n workers of batch b is SGD with batch n*b)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

import fred
from fred.models.cnn import CNNModel
from fred.models.mlp import MLPModel
from fred.numerics import rng
from fred.numerics.data import load_dataset
from fred.numerics.gradients import GradSum, Numerics, parts_of, sum_grads
from fred.numerics.models import build_model
from fred.scenario.loading import ScenarioError, validate
from fred.scenario.schema import DataConfig, default_tile
from tests.conftest import tiny

TILE = 8
MODELS = {"mlp": MLPModel(hidden=[16]), "cnn": CNNModel(channels=[4], hidden=16)}


@functools.cache
def _setup(kind: str, tile: int = TILE):
    ds = load_dataset(DataConfig(), rng.stream(0, "data", "load"))
    model = build_model(MODELS[kind], ds.feature_shape, ds.num_classes)
    return ds, Numerics(model, ds.task, "exact", tile), model.init(rng.jax_key(0, "model"))


def _leaves(numerics: Numerics, ds, params, rows: np.ndarray) -> list[list[bytes]]:
    """Each tile's stored (loss, gradient) as bytes, computed by one program over ``rows``."""
    x_all, y_all, zero = numerics._on_device(ds)
    losses, grads = numerics._piece(params, x_all, y_all, rows, zero, False)
    leaves = [np.asarray(losses), *map(np.asarray, jax.tree.leaves(grads))]
    return [[leaf[k].tobytes() for leaf in leaves] for k in range(len(losses))]


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=() if k == "cnn" else (pytest.mark.slow,)) for k in sorted(MODELS)]
)  # 3-5 s each
def test_a_tiles_bits_do_not_depend_on_the_program_that_computed_it(kind):
    ds, numerics, params = _setup(kind)
    rows = rng.stream(1, "rows").choice(len(ds.y_train), size=8 * TILE)
    alone = [_leaves(numerics, ds, params, rows[k * TILE : (k + 1) * TILE])[0] for k in range(8)]
    for first, count in [(0, 8), (3, 5), (5, 2)]:
        together = _leaves(numerics, ds, params, rows[first * TILE : (first + count) * TILE])
        assert together == alone[first : first + count], f"tiles {first}..{first + count} in one program"


def _bytes(parts) -> list[bytes]:
    return [np.asarray(x).tobytes() for p in parts for x in [p.loss, *jax.tree.leaves(p.grad)]]


@pytest.mark.parametrize(
    ("shards", "leaves"),
    [(2, 5)] + [pytest.param(*c, marks=pytest.mark.slow) for c in [(4, 2), (3, 3), (1, 12)]],
)  # 2-4 s each
def test_a_call_cut_into_pieces_gives_one_programs_bits(shards, leaves):
    """A call of more tiles than one program computes is cut into pieces, summed by a program of
    its own: each shard's sum, its cover's sums and the all-reduce's total are the same bits."""
    ds, numerics, params = _setup("mlp")
    batch = leaves * TILE
    rows = rng.stream(shards, leaves, "rows").choice(len(ds.y_train), size=shards * batch)
    starts = numerics.starts(range(shards), batch)

    def call(most: int):
        numerics._most_tiles.clear()
        key = jax.tree.structure(params), tuple(np.shape(v) for v in jax.tree.leaves(params))
        numerics._most_tiles[key] = most
        result = numerics.gradients(params, ds, rows, shards, starts)
        parts = parts_of(result, shards, batch, starts, TILE)
        return _bytes(parts) + _bytes([sum_grads(parts)])

    try:
        whole = call(32)
        for most in (1, 2, 4):
            assert call(most) == whole, f"pieces of {most} tiles"
    finally:
        numerics._most_tiles.clear()


def test_programs_hold_few_tiles_of_a_large_model_and_many_of_a_small_one():
    ds, numerics, params = _setup("mlp")
    assert numerics.tiles_per_program(params, ds) == 256 // TILE  # every tile of a 256-row call
    assert numerics.workers_per_call(32, 8) == 8
    wide = build_model(
        MLPModel(hidden=[4096, 4096]), ds.feature_shape, ds.num_classes
    )  # 67 MB a tile's gradient
    assert Numerics(wide, ds.task, "exact", TILE).workers_per_call(32, 8) == 1, (
        "a call's leaves stay within 256 MB"
    )


def test_a_batch_of_partial_tiles_is_refused_with_the_fix():
    with pytest.raises(ScenarioError) as refused:
        validate(tiny(data={"batch_size": 12}, strategy={"exact_tile": 8}))  # a tile the scenario names
    message = str(refused.value)
    assert "strategy.exact_tile is 8 but data.batch_size 12" in message
    assert "(8, 16)" in message and "(4; 1 fits any batch)" in message and "reduction: fast" in message
    validate(tiny(data={"batch_size": 12}, strategy={"exact_tile": 4}))
    validate(tiny(data={"batch_size": 12}, strategy={"reduction": "fast"}))


@pytest.mark.parametrize(
    ("batch", "tile"),
    [(1, 1), (4, 4), (12, 6), (20, 5), (50, 5), (100, 5), (7, 7), (11, 1), (8, 8), (16, 8), (96, 8)],
)
def test_a_scenario_naming_no_tile_takes_the_largest_divisor_of_its_batch_up_to_8(batch, tile):
    # exact_tile: 8 refused batches of 1, 4, 12, 20, 50 or 100 unless the user had learnt about tiles.
    scenario = validate(tiny(data={"batch_size": batch}))
    assert scenario.strategy.exact_tile == tile == default_tile(batch)
    assert scenario.resolved()["strategy"]["exact_tile"] == tile
    assert validate(scenario.resolved()) == scenario  # the resolved form states it, and reads back the same


def test_a_batch_of_whole_8_row_tiles_resolves_as_it_always_did():
    """Goldens and run directories' names hash the resolved scenario: with a multiple of 8 its tile
    is 8, the same digest as with exact_tile: 8 stated; a fast reduction keeps the unused 8."""
    for batch in (8, 32, 128):
        scenario = validate(tiny(data={"batch_size": batch}))
        stated = validate(tiny(data={"batch_size": batch}, strategy={"exact_tile": 8}))
        assert scenario.strategy.exact_tile == 8 and scenario.digest() == stated.digest()
    fast = validate(tiny(data={"batch_size": 12}, strategy={"reduction": "fast"}))
    assert fast.strategy.exact_tile == 8 and "exact_tile" not in fast.strategy.model_fields_set


def test_ssgd_over_a_batch_of_the_default_tiles_is_large_batch_sgd_of_the_same_tiles():
    # 2 workers of 12 rows take tiles of 6; one worker of 24 rows would take 8: the same tile is stated there.
    def sha(**overrides) -> str:
        run = fred.run(tiny(stop={"max_updates": 3}, eval={"every_updates": 1000}, **overrides))
        return run.summary["params_sha256"]

    distributed = sha(cluster={"workers": 2}, data={"batch_size": 12}, strategy={"name": "ssgd"})
    large = sha(cluster={"workers": 1}, data={"batch_size": 24}, strategy={"name": "sgd", "exact_tile": 6})
    assert distributed == large


def test_tiles_and_per_example_leaves_are_different_trees_over_the_same_gradient():
    """Both are the batch's gradient; their bits differ (the sums run in other orders), which is
    why exact_tile is a scenario constant and not picked per batch."""
    runs = {tile: fred.run(tiny(strategy={"exact_tile": tile}, stop={"max_updates": 4})) for tile in (1, 8)}
    one, eight = (np.asarray(runs[t].metrics["eval_loss"]) for t in (1, 8))
    np.testing.assert_allclose(one, eight, rtol=1e-4)
    assert runs[1].summary["params_sha256"] != runs[8].summary["params_sha256"]


# ----------------------------------------------------------------------------- several parameter versions in
# one call
@pytest.fixture
def one_version_a_call(monkeypatch):
    """Calls at one parameter version each, as before tiles could mix them."""
    monkeypatch.setattr(Numerics, "batches_parameters", property(lambda self: False))


def _jittery(name: str) -> dict:
    return tiny(
        strategy={"name": name},
        cluster={"workers": 4, "jitter": {"kind": "lognormal", "sigma": 0.3}},
        stop={"max_updates": 12},
    )


MIXED = ["asgd", "local_sgd", "sgp", "pipe_sgd"]  # workers computing at once on versions of their own


@pytest.fixture(scope="module")
def mixed_runs():
    return {name: fred.run(_jittery(name)) for name in MIXED}


@pytest.mark.parametrize("name", MIXED)
def test_gradients_at_several_versions_computed_together_are_each_ones_own_bits(
    name, mixed_runs, one_version_a_call
):
    together, apart = mixed_runs[name], fred.run(_jittery(name))
    assert together.summary["params_sha256"] == apart.summary["params_sha256"]
    assert len(together.tape[0]["calls"]) < len(apart.tape[0]["calls"]), "fewer calls: versions share them"


def test_a_sum_of_parts_that_only_look_like_whole_calls_is_summed_part_by_part():
    """Rows 0 of one call and 1..3 of another are not a whole call: summing every row of the first
    (what Pipe-SGD's all-reduce did once calls mixed versions) added gradients of other versions."""
    ds, numerics, params = _setup("mlp")
    rows = rng.stream(5, "rows").choice(len(ds.y_train), size=4 * TILE)
    other = jax.tree.map(lambda p: p * 0.5, params)
    mine = parts_of(numerics.gradients(params, ds, rows, 4), 4, TILE)
    theirs = parts_of(numerics.gradients(other, ds, rows, 4), 4, TILE)
    mixed = [theirs[0], *mine[1:]]
    expected = sum_grads([GradSum(p.grad, p.loss, p.count) for p in mixed])
    assert _bytes([sum_grads(mixed)]) == _bytes([expected])
