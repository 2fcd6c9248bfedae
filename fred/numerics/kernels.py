"""The programs inside one gradient call: the leaves of the exact reduction and their in-call sums.

The ``exact`` reduction's leaves are per-example gradients, computed in calls of exactly
``CHUNK_ROWS`` rows (:func:`stored_chunks`), or tiles, each one batched gradient
(:func:`stored_tiles`). Every leaf is made the rounded float a separate call would return
(:func:`_as_stored`), and each shard's leaves are summed by the fixed pairwise tree
(:func:`leaf_sums`), or by the global tree's nodes inside it when told where it lies
(:func:`_exact_covered_sums`). ``fast`` differentiates each shard's summed loss in one go
(:func:`fast_gathered`). :class:`fred.numerics.gradients.Numerics` compiles these.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fred.numerics import canonical
from fred.numerics.assembly import GradSum, Stacked, add_pair, pairwise_sum
from fred.numerics.models import Params

# Rows per per-example gradient chunk: batches are padded to a multiple of this and
# computed 64 rows at a time (each chunk as a 64-row call of its own would compute it),
# so an example's gradient always has the same bits, whatever batch (or batch of
# workers) it came in.
CHUNK_ROWS = 64
ZERO = np.int32(0)  # a run-time argument of the exact gradient program: see _as_stored


def _unstack(losses: jax.Array, grads: Params, blocks: int) -> tuple[list[jax.Array], list[Params]]:
    """Per-block losses and gradient trees, split inside jit (one call, not one slice per leaf)."""
    return [losses[i] for i in range(blocks)], [
        jax.tree.map(lambda g, i=i: g[i], grads) for i in range(blocks)
    ]


def _concatenated_block_sums(
    chunks: list[tuple[jax.Array, Params]], rows: int, blocks: int
) -> tuple[list[jax.Array], list[Params]]:
    """In-block pairwise sums of per-example chunks: the first ``rows`` rows, laid end to end, in
    ``blocks``."""
    losses = jnp.concatenate([loss for loss, _ in chunks])
    grads = jax.tree.map(lambda *parts: jnp.concatenate(parts), *[g for _, g in chunks])
    split = lambda a: pairwise_sum(a[:rows].reshape(blocks, -1, *a.shape[1:]))
    return _unstack(split(losses), jax.tree.map(split, grads), blocks)


def _aligned_block_sums(
    chunks: list[tuple[jax.Array, Params]], per_block: int, blocks: int
) -> tuple[list[jax.Array], list[Params]]:
    """In-block pairwise sums of chunks of leaves, for blocks of a power-of-two number of leaves.

    Such a block needs no padding, and each of its subtrees of up to a chunk's length (a power of
    two; only the last chunk may be shorter) lies inside one chunk, so the sums can read the chunks
    where they are: the same adds in the same tree as :func:`pairwise_sum` over the concatenated
    leaves (the same bits), without copying every leaf into one array first. Blocks of at most a
    chunk's length lie side by side inside the chunks, so each chunk's blocks are summed together
    (one tree per chunk and leaf, not per block: far fewer ops for small blocks).
    """
    chunk = chunks[0][0].shape[0]
    if per_block <= chunk:  # whole blocks side by side in each chunk: every chunk's trees at once
        in_chunk = lambda a: pairwise_sum(a.reshape(-1, per_block, *a.shape[1:]))
        sums = [jax.tree.map(in_chunk, chunk) for chunk in chunks]
        losses, grads = jax.tree.map(lambda *s: jnp.concatenate(s)[:blocks], *sums)
        return _unstack(losses, grads, blocks)
    columns = [[loss, *jax.tree.leaves(grad)] for loss, grad in chunks]  # per chunk: the loss, then each leaf
    sums = [
        [
            _chunked_tree([column[leaf] for column in columns], b * per_block, per_block, chunk)
            for b in range(blocks)
        ]
        for leaf in range(len(columns[0]))
    ]
    treedef = jax.tree.structure(chunks[0][1])
    return sums[0], [jax.tree.unflatten(treedef, [leaf[b] for leaf in sums[1:]]) for b in range(blocks)]


def _chunked_tree(parts: list[jax.Array], start: int, rows: int, chunk: int) -> jax.Array:
    """:func:`pairwise_sum` of rows ``start`` to ``start + rows`` (a power of two) of ``parts``
    laid end to end, each ``chunk`` rows long: a subtree inside one part is summed there."""
    part, offset = divmod(start, chunk)
    if offset + rows <= chunk:
        return pairwise_sum(parts[part][None, offset : offset + rows])[0]
    half = rows // 2
    return _chunked_tree(parts, start, half, chunk) + _chunked_tree(parts, start + half, half, chunk)


def grad_sums(losses: list[jax.Array], grads: list[Params], per_shard: int) -> list[GradSum]:
    """Per-block sums as :class:`GradSum` values of ``per_shard`` examples each."""
    return [GradSum(g, loss, per_shard) for g, loss in zip(grads, losses)]


def leaf_sums(
    chunks: list[tuple[jax.Array, Params]],
    zero: jax.Array,
    leaves: int,
    blocks: int,
    starts: tuple[int, ...] | None,
):
    """In-block pairwise sums of the first ``leaves`` leaves of ``chunks`` (stored leaf values laid
    end to end), in ``blocks`` blocks; with ``starts``, the blocks' covers too
    (:func:`_exact_covered_sums`)."""
    if starts is not None:
        return _exact_covered_sums(chunks, zero, leaves, blocks, starts)
    per_block = leaves // blocks
    if per_block & (per_block - 1) == 0:
        return _aligned_block_sums(chunks, per_block, blocks)
    return _concatenated_block_sums(chunks, leaves, blocks)


def stored_chunks(
    per_example, params: Params, xs: jax.Array, ys: jax.Array, zero: jax.Array, per_tile: bool = False
) -> list[tuple[jax.Array, Params]]:
    """Per-example (loss, gradient) of ``CHUNK_ROWS``-row chunks, each value as a call would store it:
    the leaves of ``exact_tile: 1``.

    The chunks and the sums are one compiled program. Left to itself XLA would fuse the last
    multiply of a per-example gradient (an outer product) into the first add of the tree, where
    LLVM contracts the two into one fused multiply-add: a different rounding, and the exactness
    is lost (an ``optimization_barrier`` does not stop it: XLA removes barriers before fusing).
    :func:`_as_stored` makes every value the rounded float a separate call would have returned,
    so the sums add exactly what one call per chunk gave.
    """
    return [
        _as_stored(per_example(params, xs[i : i + CHUNK_ROWS], ys[i : i + CHUNK_ROWS]), zero)
        for i in range(0, xs.shape[0], CHUNK_ROWS)
    ]


def stored_tiles(
    tile_grad,
    tile: int,
    params: Params | tuple[Params, ...],
    xs: jax.Array,
    ys: jax.Array,
    zero: jax.Array,
    per_tile: bool = False,
) -> list[tuple[jax.Array, Params]]:
    """The (loss, gradient) sums of each ``tile``-row tile of ``xs``, each a chunk of one stored
    leaf (a leading axis of 1); ``per_tile``: ``params`` is a tuple, tile ``k`` at ``params[k]``.

    Each tile is its own batched gradient, written out once per tile in the program (not a vmap
    over tiles, and not a loop: XLA compiles a vmap differently as it grows, and on CPU runs a
    convolution's gradient inside a loop body an order of magnitude slower). A tile's values are
    then the same bits in a program of one tile or of many (``tests/test_tiles.py``), so which
    call computed a tile never changes it; nor which parameters the program's other tiles were at.

    The tiles stay apart, not stacked into one array: the sums (:func:`leaf_sums`) read each
    where its gradient wrote it, so a large weight's tiles are not copied once more before they
    are added (the same adds in the same tree either way).
    """
    at = (lambda k: params[k]) if per_tile else (lambda k: params)
    return [
        jax.tree.map(
            lambda leaf: leaf[None], _as_stored(tile_grad(at(k), xs[i : i + tile], ys[i : i + tile]), zero)
        )
        for k, i in enumerate(range(0, xs.shape[0], tile))
    ]


def _exact_covered_sums(
    chunks: list[tuple[jax.Array, Params]], zero: jax.Array, leaves: int, blocks: int, starts: tuple[int, ...]
):
    """For shards that begin at leaf ``starts`` in the global batch: each shard's own sum, the
    global tree restricted to its leaves, and the sums of its cover that make it (:func:`_cover_sums`)."""
    per_block = leaves // blocks
    cover = _cover_sums(chunks, _cover_plan(starts, per_block), zero)
    at = lambda k: (cover.loss[k], jax.tree.map(lambda g: g[k], cover.grad))
    losses, grads, first = [], [], 0
    for start in starts:
        nodes = canonical.cover(start, per_block)
        sums = {node: at(first + k) for k, node in enumerate(nodes)}
        loss, grad = canonical.fold(sums, start, start + per_block, at(-1), add_pair)
        losses.append(loss)
        grads.append(grad)
        first += len(nodes)
    return losses, grads, cover


def _cover_sums(
    chunks: list[tuple[jax.Array, Params]], plan: tuple[tuple[int, int], ...], zero: jax.Array
) -> Stacked:
    """Pairwise sums of the rows ``plan`` lists ((first row, rows) each, rows a power of two), in
    its order, and then a row of zeros that XLA cannot see are zeros: the padding of a fold,
    where ``x + 0`` made ``x`` would keep a ``-0.0`` the padded tree makes ``+0.0``."""
    groups = {s: [first for first, size in plan if size == s] for s in sorted({size for _, size in plan})}
    made = {
        (s, first): k for k, (s, first) in enumerate((s, f) for s, firsts in groups.items() for f in firsts)
    }
    order = np.array([made[(size, first)] for first, size in plan])  # from size by size to plan's order
    rows = {
        s: np.array(firsts)[:, None] + np.arange(s) for s, firsts in groups.items()
    }  # (tiles, rows) to gather

    def leaf(a: jax.Array) -> jax.Array:  # a: every row of the call, end to end
        summed = jnp.concatenate([pairwise_sum(a[index]) for index in rows.values()])
        padding = _as_stored(jnp.zeros((1, *a.shape[1:]), a.dtype), zero)
        return jnp.concatenate([summed[order], padding])

    every_row = jax.tree.map(lambda *parts: jnp.concatenate(parts), *chunks)
    loss, grad = jax.tree.map(leaf, every_row)
    return Stacked(loss, grad)


def _cover_plan(starts: Sequence[int], per_block: int) -> tuple[tuple[int, int], ...]:
    """(first row in the call, rows) of each tile of each shard, shard after shard."""
    return tuple(
        (block * per_block + (index << level) - start, 1 << level)
        for block, start in enumerate(starts)
        for level, index in canonical.cover(start, per_block)
    )


def placed(starts: Sequence[int], per_block: int) -> tuple[int, ...]:
    """``starts``, each less a multiple of the size of the smallest node holding its shard: the
    same tiles and folds, relative to the shard, so calls at other places share one program."""
    return tuple(int(s) % (1 << canonical.root(int(s), int(s) + per_block)[0]) for s in starts)


def _as_stored(tree, zero: jax.Array):
    """Each leaf, bit for bit, through its integer bits XOR a zero known only at run time.

    Nothing changes, but XLA and LLVM cannot prove it: a product has to be rounded to
    its stored float before the XOR, so it cannot become half of a fused multiply-add.
    """

    def leaf(a: jax.Array) -> jax.Array:
        bits = jax.lax.bitcast_convert_type(a, jnp.dtype(f"int{a.dtype.itemsize * 8}"))
        return jax.lax.bitcast_convert_type(bits ^ zero.astype(bits.dtype), a.dtype)

    return jax.tree.map(leaf, tree)


def _stacked(stack: bool, losses: list[jax.Array], grads: list[Params], *cover: Stacked):
    """One :class:`Stacked` of per-block sums when ``stack``, else the per-block lists."""
    if stack:
        return Stacked(jnp.stack(losses), jax.tree.map(lambda *g: jnp.stack(g), *grads), *cover)
    return losses, grads


def exact_gathered(
    leaves_of,
    stack: bool,
    params: Params,
    x_all: jax.Array,
    y_all: jax.Array,
    rows: jax.Array,
    zero: jax.Array,
    leaves: int,
    blocks: int,
    starts: tuple[int, ...] | None,
    per_tile: bool,
):
    """The exact sums of the training rows ``rows`` (gathered inside the call): their leaves
    (``leaves_of``: per-example chunks or tiles; ``per_tile``: tile k at ``params[k]``), then
    :func:`leaf_sums`."""
    chunks = leaves_of(params, x_all[rows], y_all[rows], zero, per_tile)
    return _stacked(stack, *leaf_sums(chunks, zero, leaves, blocks, starts))


def piece_leaves(
    leaves_of,
    params: Params,
    x_all: jax.Array,
    y_all: jax.Array,
    rows: jax.Array,
    zero: jax.Array,
    per_tile: bool,
):
    """The stored leaves of the rows ``rows``, end to end in one chunk: one piece of a call too large
    for one program."""
    chunks = leaves_of(params, x_all[rows], y_all[rows], zero, per_tile)
    return jax.tree.map(lambda *parts: jnp.concatenate(parts), *chunks)


def pieces_summed(
    stack: bool,
    pieces: list[tuple[jax.Array, Params]],
    zero: jax.Array,
    leaves: int,
    blocks: int,
    starts: tuple[int, ...] | None,
):
    """:func:`leaf_sums` of the leaves of pieces laid end to end: the adds one program makes."""
    return _stacked(stack, *leaf_sums(list(pieces), zero, leaves, blocks, starts))


def fast_gathered(
    batch_loss, stack: bool, params: Params, x_all: jax.Array, y_all: jax.Array, rows: jax.Array, blocks: int
):
    """Each block's summed loss differentiated in one go (``rows`` is ``(blocks, rows)``), written out
    once per block: a vmap over blocks would make a convolution's weight gradient a grouped
    convolution, slow on CPU."""
    xs, ys = x_all[rows], y_all[rows]
    sums = [jax.value_and_grad(batch_loss)(params, xs[b], ys[b]) for b in range(blocks)]
    return _stacked(stack, [loss for loss, _ in sums], [grad for _, grad in sums])


@jax.jit
def joined(calls: list[Stacked]) -> Stacked:
    """Stacked calls as one, their rows end to end (a copy)."""
    return jax.tree.map(lambda *rows: jnp.concatenate(rows), *calls)


def equations(jaxpr: Any) -> int:
    """Equations of a jaxpr and of the jaxprs inside it: what a program's compile time grows with."""
    count = 0
    for eqn in jaxpr.eqns:
        count += 1
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                count += equations(inner)
    return count
