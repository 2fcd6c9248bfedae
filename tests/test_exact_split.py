"""SSGD is large-batch SGD bit for bit for every split of the global batch, not only for
batches that are powers of two: shards send the sums of the global tree's nodes inside them
(their cover, fred.numerics.canonical), and the all-reduce puts that tree together. The tree's
leaves are examples (``exact_tile: 1``: any split) or tiles of rows (the default: any split on
whole tiles)."""

from __future__ import annotations

import functools
import itertools

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fred
from fred.models.mlp import MLPModel
from fred.numerics import canonical, rng
from fred.numerics.data import load_dataset
from fred.numerics.gradients import GradSum, Numerics, parts_of, sum_grads, tree_sum
from fred.numerics.models import build_model
from fred.scenario.schema import DataConfig
from tests.conftest import tiny

STEPS = 4
MOMENTUM = {"kind": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}
ADAM = {"kind": "adam", "b1": 0.8, "weight_decay": 1e-3}
SCHEDULE = {"kind": "warmup_cosine_decay", "warmup_steps": 1, "decay_steps": 3}
ALGORITHMS = ["ring", "recursive_doubling", "halving_doubling", "binary_tree", "double_binary_tree"]


# ----------------------------------------------------------------------------- the cover
@given(start=st.integers(0, 5000), count=st.integers(1, 3000))
def test_the_cover_of_a_shard_is_the_largest_tree_nodes_inside_it_each_leaf_once(start, count):
    nodes = canonical.cover(start, count)
    at = start
    for level, index in nodes:
        assert index << level == at, "the nodes are in leaf order, end to end"
        parent_lo, parent_hi = (index >> 1) << (level + 1), ((index >> 1) + 1) << (level + 1)
        assert not (start <= parent_lo and parent_hi <= start + count), (
            "a node's parent is not inside the shard"
        )
        at += 1 << level
    assert at == start + count
    assert all(sum(1 for lv, _ in nodes if lv == level) <= 2 for level, _ in nodes), "at most two per level"
    assert (len(nodes) == 1) == (count & (count - 1) == 0 and start % count == 0), (
        "one node: a power of two, aligned"
    )


@given(
    start=st.integers(0, 300),
    rows=st.integers(1, 300),
    cuts=st.lists(st.integers(1, 299), max_size=8, unique=True),
)
def test_folding_the_covers_of_any_split_makes_the_additions_of_the_padded_pairwise_tree(start, rows, cuts):
    # Symbolically: each sum is the expression it was made by, so equal strings are equal trees.
    # From row 0 it is the large batch's padded tree; from another row, that tree restricted to
    # the rows from there on, under the smallest node that holds them all (a shard's own sum).
    end = start + rows
    edges = sorted({start, end, *(start + c for c in cuts if c < rows)})
    sums: dict[canonical.Node, str] = {}
    for lo, hi in itertools.pairwise(edges):
        for level, index in canonical.cover(lo, hi - lo):
            sums[(level, index)] = _tree(list(range(index << level, (index + 1) << level)))
    level = 0
    while start >> level != (end - 1) >> level:
        level += 1
    under = range((start >> level) << level, ((start >> level) + 1) << level)
    padded = [None if r < start else str(r) if r < end else "0" for r in under]
    assert canonical.fold(sums, start, end, "0", lambda a, b: f"({a}+{b})") == _tree(padded)


def _tree(rows: list) -> str:
    """pairwise_sum's tree over ``rows`` (a power of two of them), written out; a sum of padding
    zeros is written ``0``, the +0.0 it is, and rows that are ``None`` are left out."""
    rows = [None if r is None else str(r) for r in rows]
    while len(rows) > 1:
        rows = [
            b if a is None else "0" if a == b == "0" else f"({a}+{b})" for a, b in zip(rows[0::2], rows[1::2])
        ]
    return rows[0]


# ----------------------------------------------------------------------------- the sums
@functools.cache
def digits_mlp(tile: int = 1):
    ds = load_dataset(DataConfig(), rng.stream(0, "data", "load"))
    model = build_model(MLPModel(hidden=[16]), ds.feature_shape, ds.num_classes)
    return ds, Numerics(model, ds.task, "exact", tile), model.init(rng.jax_key(0, "model"))


def _bytes(grad, loss) -> list[bytes]:
    return [np.asarray(x).tobytes() for x in [loss, *jax.tree.leaves(grad)]]


@pytest.mark.parametrize(
    ("tile", "cuts"),
    # shards of unequal sizes, one call each, batches of 72 to 104 rows; each compiles calls of
    # its own (3-5 s on 2 cores): the default run checks one, `pytest -m slow` all six
    [(8, [8, 24, 72])]
    + [
        pytest.param(t, c, marks=pytest.mark.slow)
        for t, c in (
            [(1, [1, 2, 3, 70, 72]), (1, [24, 48, 72]), (1, [37, 100]), (1, [5, 64, 100]), (8, [16, 40, 104])]
        )
    ],
    ids=lambda c: "-".join(map(str, c)) if isinstance(c, list) else f"tile{c}",
)
def test_shards_of_any_sizes_sum_to_the_large_batch_bit_for_bit(tile, cuts):
    """Gradient and loss sums, signed zeros included (digits' blank corner pixels give +-0 weight
    gradients, and the zero padding past the batch makes -0.0 +0.0)."""
    ds, numerics, params = digits_mlp(tile)
    rows = rng.stream(len(cuts), "rows").choice(len(ds.y_train), size=cuts[-1])
    [whole] = numerics.gradients(params, ds, rows, 1)
    parts = []
    for lo, hi in zip([0, *cuts], cuts):
        result = numerics.gradients(params, ds, rows[lo:hi], 1, np.array([lo // tile]))
        parts += parts_of(result, 1, hi - lo, [lo // tile], tile)
    total = sum_grads(parts)
    assert total.count == whole.count
    assert _bytes(total.grad, total.loss) == _bytes(whole.grad, whole.loss)
    # One shard from the first row: its own sum, folded from its cover, is the padded tree's too.
    [alone] = parts_of(numerics.gradients(params, ds, rows, 1, np.array([0])), 1, len(rows), [0], tile)
    assert _bytes(alone.grad, alone.loss) == _bytes(whole.grad, whole.loss)


# 10 s on 2 cores; test_equivalence's workers-served-together test is the default run's check
@pytest.mark.slow
def test_which_call_serves_a_worker_never_changes_its_sums_or_the_all_reduce():
    """12 workers of 24 rows, served by GradientService in calls of 10 and 2 workers, against a
    call per worker told its place: the same bits for each worker's own sum and for the total."""
    from fred.simulation.engine import GradientService

    ds, numerics, params = digits_mlp()
    batches = [rng.stream(w, "rows").choice(len(ds.y_train), size=24) for w in range(12)]
    service = GradientService(numerics, ds)
    served = [service.result(r) for r in [service.request(params, rows, w) for w, rows in enumerate(batches)]]
    assert len({id(part.cover.sums) for part in served}) == 2
    alone = [
        parts_of(numerics.gradients(params, ds, rows, 1, [24 * w]), 1, 24, [24 * w])[0]
        for w, rows in enumerate(batches)
    ]
    for one, other in zip(served, alone):
        assert _bytes(one.grad, one.loss) == _bytes(other.grad, other.loss)
    assert _bytes(sum_grads(served).grad, sum_grads(served).loss) == _bytes(
        sum_grads(alone).grad, sum_grads(alone).loss
    )


def test_shards_that_do_not_cover_the_batch_from_its_first_row_are_summed_by_the_tree_over_shards():
    # A crashed worker leaves a hole: there is no large batch to equal; the sum is the fixed
    # tree over the shards' own sums, as for any other parts.
    ds, numerics, params = digits_mlp()
    rows = rng.stream(3, "rows").choice(len(ds.y_train), size=3 * 6)
    starts = np.array([0, 6, 12])
    parts = parts_of(numerics.gradients(params, ds, rows, 3, starts), 3, 6, starts)
    for chosen in ([parts[0], parts[2]], parts[1:]):
        total = sum_grads(chosen)
        by_shards = tree_sum([(p.grad, p.loss) for p in chosen])
        assert _bytes(total.grad, total.loss) == _bytes(*by_shards)
    alone = GradSum(parts[0].grad, parts[0].loss, parts[0].count)  # no cover: as before
    assert _bytes(*tree_sum([(alone.grad, alone.loss), (parts[1].grad, parts[1].loss)])) == _bytes(
        sum_grads([alone, parts[1]]).grad, sum_grads([alone, parts[1]]).loss
    )


# ----------------------------------------------------------------------------- whole runs
@pytest.mark.slow  # 6 s on 2 cores: a run, its replay and a resume
def test_a_run_whose_batch_is_not_a_power_of_two_replays_and_resumes_bit_for_bit(tmp_path):
    """The tape holds the shards' starts and the assembly's plan: replay and a resumed run's
    fast-forward make the same calls (per-example leaves: 5 rows; and tiles of 2 rows: 3 tiles)."""
    from fred.runs import checkpoint
    from fred.runs.runner import execute
    from fred.scenario.loading import validate
    from fred.tools.replay import replay
    from tests.test_resume import Once, same_run

    tiles = tiny(
        cluster={"workers": 3},
        data={"batch_size": 6},
        strategy={"name": "ssgd", "exact_tile": 2},
        stop={"max_updates": 6},
    )
    fred.run(tiles, out=tmp_path / "tiles")
    assert replay(tmp_path / "tiles").passed
    data = tiny(
        cluster={"workers": 3},
        data={"batch_size": 5},
        strategy={"name": "ssgd", "exact_tile": 1},
        stop={"max_updates": 12},
    )
    fred.run(data, out=tmp_path / "run")
    assert replay(tmp_path / "run").passed
    sc = validate(data)
    counter = itertools.count()
    clean = execute(sc, checkpointer=Once(tmp_path / "never", 10**9, sc.digest(), clock=counter.__next__))
    half = next(counter) // 2  # the clock was read once per env step
    execute(sc, checkpointer=Once(tmp_path / "saved", half, sc.digest(), clock=itertools.count().__next__))
    same_run(execute(sc, resume=checkpoint.load(tmp_path / "saved")), clean)


def _sha(optimizer: dict | None, **overrides) -> str:
    strategy = overrides.pop("strategy")
    if optimizer is not None:
        strategy = {**strategy, "optimizer": optimizer, "lr_schedule": SCHEDULE}
    scenario = tiny(stop={"max_updates": STEPS}, eval={"every_updates": 1000}, strategy=strategy, **overrides)
    return fred.run(scenario).summary["params_sha256"]


@st.composite
def layouts(draw):
    workers, aggregation = draw(st.integers(1, 16)), draw(st.sampled_from(["allreduce", "ps"]))
    network, workload = {}, {}
    if aggregation == "allreduce":  # the collective's algorithm, topology and buckets move only the timing
        network = {
            "allreduce": draw(st.sampled_from(ALGORITHMS)),
            "hierarchical": draw(st.booleans()) and workers % 2 == 0,
        }
        if draw(st.booleans()):
            workload = {
                "profile": "resnet50",
                "bucket_bytes": draw(st.sampled_from([10_000_000, 30_000_000])),
            }
    cluster_extra = {"devices_per_node": 2} if network.get("hierarchical") else {}
    return workers, aggregation, network, workload, cluster_extra


def _check(layout, batch, optimizer, tile):
    workers, aggregation, network, workload, cluster_extra = layout
    large_batch = _sha(
        optimizer,
        cluster={"workers": 1},
        data={"batch_size": workers * batch},
        strategy={"name": "sgd", "exact_tile": tile},
    )
    distributed = _sha(
        optimizer,
        cluster={"workers": workers, **cluster_extra},
        data={"batch_size": batch},
        network=network,
        workload=workload,
        strategy={"name": "ssgd", "aggregation": aggregation, "exact_tile": tile},
    )
    assert distributed == large_batch, (
        f"n={workers} b={batch} tile={tile} {aggregation} {network} {workload} {optimizer}"
    )


OPTIMIZERS = st.sampled_from([None, MOMENTUM, ADAM])
TILED_BATCHES = st.integers(1, 8).map(lambda tiles: 8 * tiles)  # whole tiles of the default 8 rows


# Each draw compiles programs of its own (the large batch's, the shards' calls, the assembly):
# 5-15 s on 2 cores. The default run draws one or two; `pytest -m slow` many more.
@settings(max_examples=1, deadline=None)
@given(layout=layouts(), batch=st.integers(1, 64), optimizer=OPTIMIZERS)
def test_ssgd_with_n_workers_of_any_batch_b_is_sgd_with_batch_nb(layout, batch, optimizer):
    _check(layout, batch, optimizer, tile=1)


@settings(max_examples=1, deadline=None)
@given(layout=layouts(), batch=TILED_BATCHES, optimizer=OPTIMIZERS)
def test_ssgd_with_n_workers_of_whole_tiles_is_sgd_with_batch_nb(layout, batch, optimizer):
    _check(layout, batch, optimizer, tile=8)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(layout=layouts(), batch=st.integers(1, 64), optimizer=OPTIMIZERS)
def test_ssgd_with_n_workers_of_any_batch_b_is_sgd_with_batch_nb_many_draws(layout, batch, optimizer):
    _check(layout, batch, optimizer, tile=1)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(layout=layouts(), batch=TILED_BATCHES, optimizer=OPTIMIZERS)
def test_ssgd_with_n_workers_of_whole_tiles_is_sgd_with_batch_nb_many_draws(layout, batch, optimizer):
    _check(layout, batch, optimizer, tile=8)


@pytest.mark.parametrize(("shards", "batch"), [(3, 5), (2, 3), (5, 7), (6, 1), (4, 4)])
def test_the_assembled_tree_is_pairwise_sum_bit_for_bit_with_signed_zeros(shards, batch):
    """Over made-up per-example values whose columns of -0.0 the padded tree turns to +0.0: XLA
    would keep them -0.0 if the padding were a zero it could see (it simplifies ``x + 0`` to ``x``)."""
    from fred.numerics.assembly import Stacked, pairwise_sum
    from fred.numerics.kernels import CHUNK_ROWS, _cover_plan, _cover_sums
    from fred.numerics.kernels import ZERO as _ZERO

    stream = rng.stream(shards, batch, "signed zeros")
    rows = shards * batch
    values = stream.standard_normal((CHUNK_ROWS, 4, 3)).astype(np.float32)
    values[:, 0, :] = -0.0  # every row -0.0: the sum is -0.0, +0.0 once padding is added
    values[stream.random(values.shape) < 0.1] = -0.0
    chunks = [(values[:, 0, 0], {"w": values})]
    starts = [s * batch for s in range(shards)]
    cover = jax.jit(lambda c, z: _cover_sums(c, _cover_plan(starts, batch), z))(chunks, np.asarray(_ZERO))
    stacked = Stacked(np.zeros(shards, np.float32), {"w": np.zeros((shards, 4, 3), np.float32)}, cover)
    total = sum_grads(parts_of(stacked, shards, batch, starts))
    expected = jax.jit(lambda v: pairwise_sum(v[None, :rows])[0])(values)
    assert np.asarray(total.grad["w"]).tobytes() == np.asarray(expected).tobytes()
    assert np.signbit(np.asarray(expected)[0]).any() == (rows & (rows - 1) == 0), (
        "the padding made +0.0 of -0.0"
    )
