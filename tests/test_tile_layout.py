"""A call's tiles are summed where each tile's gradient wrote it (:func:`fred.numerics.kernels.stored_tiles`
keeps them apart), not after copying them into one stacked array: the same adds in the same tree,
so every sum is the bits the stacked layout gives, in each of the sums' paths (aligned blocks, a
block of one tile, blocks that are no power of two, shards' covers, tiles at their own parameters,
a call cut in pieces)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fred.models.cnn import CNNModel
from fred.numerics import kernels, rng
from fred.numerics.data import load_dataset
from fred.numerics.gradients import Numerics, parts_of, sum_grads
from fred.numerics.models import build_model
from fred.scenario.schema import DataConfig

TILE = 8


def _stacked_tiles(tile_grad, tile, params, xs, ys, zero, per_tile=False):
    """The tiles of a call stacked into one chunk of leaves: the layout the sums read before."""
    at = (lambda k: params[k]) if per_tile else (lambda k: params)
    tiles = [
        kernels._as_stored(tile_grad(at(k), xs[i : i + tile], ys[i : i + tile]), zero)
        for k, i in enumerate(range(0, xs.shape[0], tile))
    ]
    return [jax.tree.map(lambda *leaf: jnp.stack(leaf), *tiles)]


@functools.cache
def _setup():
    ds = load_dataset(DataConfig(), rng.stream(0, "data", "load"))
    model = build_model(CNNModel(channels=[4], hidden=16), ds.feature_shape, ds.num_classes)
    apart = Numerics(model, ds.task, "exact", TILE)
    original = kernels.stored_tiles
    kernels.stored_tiles = _stacked_tiles
    try:
        stacked = Numerics(model, ds.task, "exact", TILE)
    finally:
        kernels.stored_tiles = original
    return ds, apart, stacked, model.init(rng.jax_key(0, "model"))


def _bytes(parts) -> list[bytes]:
    return [np.asarray(x).tobytes() for p in parts for x in [p.loss, *jax.tree.leaves(p.grad)]]


@pytest.mark.parametrize(
    ("shards", "leaves", "at_own", "most"),
    [
        (4, 4, False, None),  # blocks of a power of two leaves
        (8, 1, False, None),  # a block of one tile
        (3, 3, False, None),  # blocks of three leaves, with the shards' covers
        (2, 3, True, None),  # tiles at parameters of their own, with covers
        (4, 2, True, None),
        (3, 4, False, 4),  # a call cut into pieces of 4 tiles
    ],
)
def test_tiles_summed_apart_give_the_stacked_layouts_bits(shards, leaves, at_own, most):
    ds, apart, stacked, params = _setup()
    batch = leaves * TILE
    rows = rng.stream(shards, leaves, "layout").choice(len(ds.y_train), size=shards * batch)
    starts = apart.starts(range(shards), batch)
    at = (
        tuple(jax.tree.map(lambda v, k=k: v * (1 + k / 8), params) for k in range(shards))
        if at_own
        else params
    )

    def sums(numerics: Numerics) -> list[bytes]:
        if most is not None:
            key = jax.tree.structure(params), tuple(np.shape(v) for v in jax.tree.leaves(params))
            numerics._most_tiles[key] = most
        result = numerics.gradients(at, ds, rows, shards, starts)
        parts = parts_of(result, shards, batch, starts, TILE)
        return _bytes(parts) + ([] if at_own else _bytes([sum_grads(parts)]))

    assert sums(apart) == sums(stacked)
