"""Gradients, reductions and evaluation: the real numbers behind a simulated run.

Why the ``exact`` reduction looks the way it does: on XLA CPU a batch mean
depends on the batch size in its last bits, so SSGD with n workers of batch b
would drift from SGD with batch n*b. Per-example gradients (vmap of grad),
computed in calls of exactly ``CHUNK_ROWS`` rows, do not depend on the batch or
on an example's position in it (one call over a whole large batch would not do: XLA
compiles a bigger vmap differently, and from a few hundred rows on the last bits
change). Summing them with one fixed pairwise tree whose
subtrees are exactly the workers' shards then gives the same bits whichever
way the global batch was split. One gradient call is one compiled program: the
chunks, then the sums (see :func:`_exact_block_sums` for what keeps XLA from fusing
the two into something else). ``fast`` skips this and differentiates each shard's
summed loss in one go.

That fixed tree is the large batch's only when each shard is one of its subtrees: a batch
that is a power of two. For any other batch a call also returns the sums of the nodes of the
large batch's tree that lie inside each shard (:mod:`fred.numerics.canonical`), and an
all-reduce of shards that cover a global batch puts that tree together from them
(:func:`assemble`), so SSGD gives large-batch SGD's bits for every split.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fred.numerics import canonical
from fred.numerics.data import Dataset
from fred.numerics.models import Model, Params
from fred.numerics.tape import op

# Rows per per-example gradient chunk: batches are padded to a multiple of this and
# computed 64 rows at a time (each chunk as a 64-row call of its own would compute it),
# so an example's gradient always has the same bits, whatever batch (or batch of
# workers) it came in.
CHUNK_ROWS = 64
_ZERO = np.int32(0)  # a run-time argument of the exact gradient program: see _as_stored
# Activations of one evaluation call. An evaluation set whose activations take more is evaluated
# in chunks (an MLP [3000, 3000] on 70,000 examples allocated GBs at once); a smaller one in
# one call, as always, so the runs that fit keep their bits.
EVAL_BYTES = 64 * 2**20
# Rows of one exact gradient call serving several workers, at most: the same bits, and faster than
# one huge call, whose leaves no longer fit in cache. With tiles, also at most this many bytes of
# leaves (tiles' gradients) in one call, so that a large model's call stays in memory.
CALL_ROWS = 256
CALL_LEAF_BYTES = 256 * 2**20
# Equations (of the tiles' gradient programs, counted in their jaxprs) of one program: compile time
# and compile memory grow with them. An MLP [64]'s tile has about 60, a ResNet-20's about 1,500
# (one tile a program: measured, a process running 16-worker ResNet-20 SSGD peaked at 744 MB
# against 880 MB with two tiles a program, at the same speed).
PROGRAM_EQUATIONS = 2000


def eval_chunk_rows(width: int) -> int:
    """Rows of one evaluation call, for a model whose widest layer holds ``width`` floats a row
    (about four such float32 arrays are alive at once)."""
    return max(1, EVAL_BYTES // (16 * max(width, 1)))


class Stacked(NamedTuple):
    """The shard sums of one gradient call, stacked along a leading axis of length ``shards``;
    ``cover``, for a call told where its shards lie in the global batch, the sums of the global
    tree's nodes that cover them (shard after shard, in leaf order), then a row of zeros (:func:`_cover_sums`)."""

    loss: jax.Array
    grad: Params
    cover: Stacked | None = None


class Cover(NamedTuple):
    """Where a shard lies in the global batch (its ``leaves`` leaves from leaf ``start``) and where
    the sums of its cover (:func:`canonical.cover`: the global tree's largest nodes inside it) are:
    rows ``first ..`` of ``sums``."""

    start: int
    sums: Stacked
    first: int
    leaves: int


class _Source:
    """One gradient call's stacked result, shared by its parts; split into rows only when asked."""

    __slots__ = ("stacked", "size", "rows")

    def __init__(self, stacked: Stacked, size: int):
        # The row count is kept: a resumed run's stacked values are placeholders, shapeless until filled.
        self.stacked, self.size = stacked, size
        self.rows: dict[int, tuple[jax.Array, Params]] = {}  # copied out as read

    def row(self, i: int) -> tuple[jax.Array, Params]:
        if i not in self.rows:
            self.rows[i] = take_row(self.stacked, i)
        return self.rows[i]


@jax.tree_util.register_pytree_node_class
class GradSum:
    """A shard's gradient *sum* (not mean) with its loss sum and example count.

    Sums travel instead of means so that aggregation is one pairwise tree and
    the division by the global example count happens exactly once.

    A part of a gradient call that served several workers starts as a row of the
    call's :class:`Stacked` result; its ``grad`` and ``loss`` are split off (one
    call for all rows) only when something reads them. An all-reduce of whole calls
    in order never does: :func:`sum_grads` adds the rows where they are.
    """

    __slots__ = ("_grad", "_loss", "count", "source", "row", "cover")
    _fields = ("grad", "loss", "count")  # what it unpacks to; the tape writes it as it writes a named tuple

    def __init__(self, grad: Params, loss: jax.Array, count: int):
        self._grad, self._loss, self.count = grad, loss, count
        self.source: _Source | None = None
        self.row = 0
        self.cover: Cover | None = None  # set on the shards of a call told where they lie (Numerics.starts)

    @classmethod
    def part(cls, source: _Source, row: int, count: int) -> GradSum:
        """Row ``row`` of a stacked gradient call, not split off yet."""
        part = cls(None, None, count)
        part.source, part.row = source, row
        return part

    @property
    def grad(self) -> Params:
        self._split()
        return self._grad

    @property
    def loss(self) -> jax.Array:
        self._split()
        return self._loss

    def _split(self) -> None:
        if self._loss is None and self.source is not None:
            self._loss, self._grad = self.source.row(self.row)

    def loss_ref(self) -> tuple[jax.Array, int | None]:
        """Where the loss sum is, without splitting anything off and without holding the
        gradient: ``(array, row)`` for a part still stacked, ``(scalar, None)`` otherwise."""
        if self._loss is None and self.source is not None:
            return self.source.stacked.loss, self.row
        return self.loss, None

    def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
        return (self.grad, self.loss, self.count), None

    @classmethod
    def tree_unflatten(cls, _aux: None, children: tuple[Any, ...]) -> GradSum:
        return cls(*children)

    def __iter__(self):  # unpacks like the named tuple it was: grad, loss, count
        return iter((self.grad, self.loss, self.count))

    def __repr__(self) -> str:
        return f"GradSum(count={self.count}, row={self.row if self.source is not None else None})"


def pairwise_sum(x: jax.Array) -> jax.Array:
    """Sum over axis 1 of ``(groups, rows, ...)`` by a balanced binary tree of adjacent pairs.

    Rows are zero-padded to a power of two; ``x + 0 == x`` exactly, so padding never
    changes a sum's value (only its sign when it is ``-0.0``: :func:`assemble` keeps that).
    """
    rows = x.shape[1]
    width = 1 << max(rows - 1, 0).bit_length()
    if width != rows:
        x = jnp.concatenate([x, jnp.zeros((x.shape[0], width - rows, *x.shape[2:]), x.dtype)], axis=1)
    while x.shape[1] > 1:
        x = x[:, 0::2] + x[:, 1::2]
    return x[:, 0]


@op("fred.numerics.gradients:tree_sum")
@jax.jit
def tree_sum(trees: Sequence[Params]) -> Params:
    """Pairwise sum of several pytrees, in list order (the cross-worker step of the tree)."""
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves)[None], *trees)
    return jax.tree.map(lambda leaf: pairwise_sum(leaf)[0], stacked)  # type: ignore[return-value]


def sum_grads(parts: Sequence[GradSum]) -> GradSum:
    """Aggregate shard sums into one: the global batch's tree when the parts' covers hold leaves
    ``0 ..`` in order, the fixed tree over shards in the given order otherwise (which is that
    tree when every shard is one of its nodes)."""
    if len(parts) == 1:
        return parts[0]
    count = sum(p.count for p in parts)
    if _cover_from_zero(parts):
        grads, loss = assemble(*_assembly(parts))
    elif (whole := _whole_calls(parts)) is not None:  # the same adds in the same tree, on the rows where the calls left them
        grads, loss = stacked_sum(whole)
    else:
        grads, loss = tree_sum([(p.grad, p.loss) for p in parts])
    return GradSum(grads, loss, count)


def _cover_from_zero(parts: Sequence[GradSum]) -> bool:
    """Whether the parts have covers and lie end to end from the global batch's first leaf."""
    end = 0
    for part in parts:
        if part.cover is None or part.cover.start != end:
            return False
        end += part.cover.leaves
    return True


def _assembly(parts: Sequence[GradSum]) -> tuple[list[Stacked], str]:
    """:func:`assemble`'s arguments: the calls' cover sums, and where each part's are."""
    sources: dict[int, int] = {}
    sums: list[Stacked] = []
    layout = []
    for part in parts:
        cover = part.cover
        assert cover is not None
        if id(cover.sums) not in sources:
            sources[id(cover.sums)] = len(sums)
            sums.append(cover.sums)
        layout.append(f"{sources[id(cover.sums)]}:{cover.first}:{cover.start}:{cover.leaves}")
    return sums, " ".join(layout)


def _add(a: Any, b: Any) -> Any:
    """Two (loss, gradient) sums added leaf by leaf: one node of a pairwise tree."""
    return jax.tree.map(jnp.add, a, b)


@op("fred.numerics.gradients:assemble")
@functools.partial(jax.jit, static_argnums=1)
def assemble(sums: Sequence[Stacked], layout: str) -> tuple[Params, jax.Array]:
    """The global batch's tree from the sums of its nodes: (gradient sum, loss sum).

    ``layout`` says where each part's cover is, part after part: ``call:row:start:leaves``,
    its sums rows ``row ..`` of ``sums[call]`` (one string: the tape writes it as one value,
    where a tuple of numbers would be as many). The padding past the batch is the zero row the
    first call's cover ends with.
    """

    def at(call: int, row: int) -> tuple[Params, jax.Array]:
        return jax.tree.map(lambda g: g[row], sums[call].grad), sums[call].loss[row]

    nodes, end = {}, 0
    for part in layout.split():
        call, row, start, count = map(int, part.split(":"))
        nodes.update({node: at(call, row + k) for k, node in enumerate(canonical.cover(start, count))})
        end = max(end, start + count)
    return canonical.fold(nodes, 0, end, at(0, -1), _add)


def _whole_calls(parts: Sequence[GradSum]) -> list[Stacked] | None:
    """The stacked calls ``parts`` are, when they are every row of whole calls, in order."""
    calls: list[Stacked] = []
    expected = 0
    for part in parts:
        if part.source is None or part.row != expected or (expected and part.source.stacked is not calls[-1]):
            return None
        if expected == 0:
            calls.append(part.source.stacked)
        expected = 0 if part.row + 1 == part.source.size else part.row + 1
    return calls if expected == 0 else None


def parts_of(
    result: list[GradSum] | Stacked, shards: int, per_shard: int, starts: Sequence[int] | None = None, tile: int = 1
) -> list[GradSum]:
    """Each shard's :class:`GradSum` from what :meth:`Numerics.gradients` returned for shards of
    ``per_shard`` rows whose leaves (of ``tile`` rows) begin at ``starts`` in the global batch."""
    if not isinstance(result, Stacked):
        return result
    source = _Source(result, shards)
    parts = [GradSum.part(source, i, per_shard) for i in range(shards)]
    if result.cover is not None:
        assert starts is not None, "a call with covers was asked for the shards' starts"
        first, leaves = 0, per_shard // tile
        for part, start in zip(parts, starts):
            part.cover = Cover(int(start), result.cover, first, leaves)
            first += len(canonical.cover(int(start), leaves))
    return parts


@op("fred.numerics.gradients:stacked_sum")
@jax.jit
def stacked_sum(calls: Sequence[Stacked]) -> tuple[Params, jax.Array]:
    """:func:`tree_sum` of the rows of ``calls`` laid end to end: (gradient sum, loss sum)."""
    rows = lambda *leaves: jnp.concatenate(leaves)[None] if len(leaves) > 1 else leaves[0][None]
    stacked = jax.tree.map(rows, *[(c.grad, c.loss) for c in calls])
    return jax.tree.map(lambda leaf: pairwise_sum(leaf)[0], stacked)  # type: ignore[return-value]


@op("fred.numerics.gradients:take_row")
@jax.jit
def take_row(stacked: Stacked, i: jax.Array) -> tuple[jax.Array, Params]:
    """Row ``i`` of a stacked call as its own (loss, gradient sum): a copy, no arithmetic.

    The index is traced, so one program serves every row of every call of a shape. A
    program returning all N rows at once compiled in time and memory growing with N:
    24 s and GBs for the 256 rows of 1,024 workers' batch-1 first step.
    """
    return stacked.loss[i], jax.tree.map(lambda g: g[i], stacked.grad)


@op("fred.numerics.gradients:unstack")
@jax.jit
def unstack(stacked: Stacked) -> list[tuple[jax.Array, Params]]:
    """Every row of a stacked call in one call: what runs recorded before take_row replay with."""
    return [(stacked.loss[i], jax.tree.map(lambda g, i=i: g[i], stacked.grad)) for i in range(stacked.loss.shape[0])]


@op("fred.numerics.gradients:mean_grad")
@jax.jit
def mean_grad(total: GradSum) -> Params:
    return jax.tree.map(lambda g: g / total.count, total.grad)


@op("fred.numerics.gradients:divide")
@functools.partial(jax.jit, static_argnums=1)
def divide(tree: Params, n: int) -> Params:
    """Every leaf divided by ``n`` (an average from a sum)."""
    return jax.tree.map(lambda x: x / n, tree)


def _unstack(losses: jax.Array, grads: Params, blocks: int) -> tuple[list[jax.Array], list[Params]]:
    """Per-block losses and gradient trees, split inside jit (one call, not one slice per leaf)."""
    return [losses[i] for i in range(blocks)], [jax.tree.map(lambda g, i=i: g[i], grads) for i in range(blocks)]


def _concatenated_block_sums(
    chunks: list[tuple[jax.Array, Params]], rows: int, blocks: int
) -> tuple[list[jax.Array], list[Params]]:
    """In-block pairwise sums of per-example chunks: the first ``rows`` rows, laid end to end, in ``blocks``."""
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
    leaves (the same bits), without the copy of every leaf into one array that XLA made first.
    Blocks of at most a chunk's length lie side by side inside the chunks, so each chunk's blocks
    are summed together (one tree per chunk and leaf, not per block: at 16-row blocks of
    per-example leaves a quarter of the ops, 0.84 -> 0.51 ms for 16 workers' 256 rows).
    """
    chunk = chunks[0][0].shape[0]
    if per_block <= chunk:  # whole blocks side by side in each chunk: every chunk's trees at once
        in_chunk = lambda a: pairwise_sum(a.reshape(-1, per_block, *a.shape[1:]))
        sums = [jax.tree.map(in_chunk, chunk) for chunk in chunks]
        losses, grads = jax.tree.map(lambda *s: jnp.concatenate(s)[:blocks], *sums)
        return _unstack(losses, grads, blocks)
    columns = [[loss, *jax.tree.leaves(grad)] for loss, grad in chunks]  # per chunk: the loss, then each leaf
    sums = [
        [_chunked_tree([column[leaf] for column in columns], b * per_block, per_block, chunk) for b in range(blocks)]
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


def _grad_sums(losses: list[jax.Array], grads: list[Params], per_shard: int) -> list[GradSum]:
    return [GradSum(g, loss, per_shard) for g, loss in zip(grads, losses)]


def _output_loss(model: Model, task: str, out: jax.Array, y: jax.Array) -> jax.Array:
    """One example's loss from its outputs."""
    if model.loss is not None:  # the user's, or one chosen by name
        return model.loss(out, y)
    if task == "regression":
        return 0.5 * (out[0] - y) ** 2
    if y.ndim == 1:  # a sequence's labels, one token a position: the mean of its tokens' cross-entropies
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=-1))
    return -jax.nn.log_softmax(out)[y]


def _example_loss(model: Model, task: str, params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """One example's loss, the model applied to it alone (what per-example gradients differentiate)."""
    return _output_loss(model, task, model.apply(params, x[None])[0], y)


def _batch_loss(model: Model, task: str, params: Params, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """The summed loss of a batch, the model applied to the batch at once, as a training loop does
    (a tile's, a fast shard's: its examples' outputs are their own, Model.exact_issue)."""
    losses = jax.vmap(functools.partial(_output_loss, model, task))(model.apply(params, xs), ys)
    return jnp.sum(losses)


def _leaf_sums(chunks: list[tuple[jax.Array, Params]], zero: jax.Array, leaves: int, blocks: int,
               starts: tuple[int, ...] | None):
    """In-block pairwise sums of the first ``leaves`` leaves of ``chunks`` (stored leaf values laid
    end to end), in ``blocks`` blocks; with ``starts``, the blocks' covers too (:func:`_exact_covered_sums`)."""
    if starts is not None:
        return _exact_covered_sums(chunks, zero, leaves, blocks, starts)
    per_block = leaves // blocks
    if per_block & (per_block - 1) == 0:
        return _aligned_block_sums(chunks, per_block, blocks)
    return _concatenated_block_sums(chunks, leaves, blocks)


def _stored_chunks(per_example, params: Params, xs: jax.Array, ys: jax.Array, zero: jax.Array,
                   per_tile: bool = False) -> list[tuple[jax.Array, Params]]:
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


def _stored_tiles(tile_grad, tile: int, params: Params | tuple[Params, ...], xs: jax.Array, ys: jax.Array,
                  zero: jax.Array, per_tile: bool = False) -> list[tuple[jax.Array, Params]]:
    """The (loss, gradient) sums of each ``tile``-row tile of ``xs``, as one chunk of stored leaves;
    ``per_tile``: ``params`` is a tuple, tile ``k`` at ``params[k]``.

    Each tile is its own batched gradient, written out once per tile in the program (not a vmap
    over tiles, and not a loop: XLA compiles a vmap differently as it grows, and on CPU runs a
    convolution's gradient inside a loop body an order of magnitude slower). A tile's values are
    then the same bits in a program of one tile or of many (``tests/test_tiles.py``), so which
    call computed a tile never changes it; nor which parameters the program's other tiles were at.
    """
    at = (lambda k: params[k]) if per_tile else (lambda k: params)
    tiles = [
        _as_stored(tile_grad(at(k), xs[i : i + tile], ys[i : i + tile]), zero)
        for k, i in enumerate(range(0, xs.shape[0], tile))
    ]
    return [jax.tree.map(lambda *leaf: jnp.stack(leaf), *tiles)]


def _exact_covered_sums(chunks: list[tuple[jax.Array, Params]], zero: jax.Array, leaves: int, blocks: int,
                        starts: tuple[int, ...]):
    """For shards that begin at leaf ``starts`` in the global batch: each shard's own sum, the
    global tree restricted to its leaves, and the sums of its cover that make it (:func:`_cover_sums`)."""
    per_block = leaves // blocks
    cover = _cover_sums(chunks, _cover_plan(starts, per_block), zero)
    at = lambda k: (cover.loss[k], jax.tree.map(lambda g: g[k], cover.grad))
    losses, grads, first = [], [], 0
    for start in starts:
        nodes = canonical.cover(start, per_block)
        sums = {node: at(first + k) for k, node in enumerate(nodes)}
        loss, grad = canonical.fold(sums, start, start + per_block, at(-1), _add)
        losses.append(loss)
        grads.append(grad)
        first += len(nodes)
    return losses, grads, cover


def _cover_sums(chunks: list[tuple[jax.Array, Params]], plan: tuple[tuple[int, int], ...], zero: jax.Array) -> Stacked:
    """Pairwise sums of the rows ``plan`` lists ((first row, rows) each, rows a power of two), in
    its order, and then a row of zeros that XLA cannot see are zeros: the padding of a fold,
    where ``x + 0`` made ``x`` would keep a ``-0.0`` the padded tree makes ``+0.0``."""
    groups = {s: [first for first, size in plan if size == s] for s in sorted({size for _, size in plan})}
    made = {(s, first): k for k, (s, first) in enumerate((s, f) for s, firsts in groups.items() for f in firsts)}
    order = np.array([made[(size, first)] for first, size in plan])  # from size by size to plan's order
    rows = {s: np.array(firsts)[:, None] + np.arange(s) for s, firsts in groups.items()}  # (tiles, rows) to gather

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


def _placed(starts: Sequence[int], per_block: int) -> tuple[int, ...]:
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


def _exact_gathered(leaves_of, stack: bool, params: Params, x_all: jax.Array, y_all: jax.Array, rows: jax.Array,
                    zero: jax.Array, leaves: int, blocks: int, starts: tuple[int, ...] | None,
                    per_tile: bool):
    """The exact sums of the training rows ``rows`` (gathered inside the call): their leaves
    (``leaves_of``: per-example chunks or tiles; ``per_tile``: tile k at ``params[k]``), then
    :func:`_leaf_sums`."""
    chunks = leaves_of(params, x_all[rows], y_all[rows], zero, per_tile)
    return _stacked(stack, *_leaf_sums(chunks, zero, leaves, blocks, starts))


def _piece_leaves(leaves_of, params: Params, x_all: jax.Array, y_all: jax.Array, rows: jax.Array, zero: jax.Array,
                  per_tile: bool):
    """The stored leaves of the rows ``rows``: one piece of a call too large for one program."""
    [chunk] = leaves_of(params, x_all[rows], y_all[rows], zero, per_tile)
    return chunk


def _pieces_summed(stack: bool, pieces: list[tuple[jax.Array, Params]], zero: jax.Array, leaves: int, blocks: int,
                   starts: tuple[int, ...] | None):
    """:func:`_leaf_sums` of the leaves of pieces laid end to end: the adds one program would have made."""
    return _stacked(stack, *_leaf_sums(list(pieces), zero, leaves, blocks, starts))


def _fast_gathered(batch_loss, stack: bool, params: Params, x_all: jax.Array, y_all: jax.Array, rows: jax.Array, blocks: int):
    """Each block's summed loss differentiated in one go (``rows`` is ``(blocks, rows)``), written out
    once per block: a vmap over blocks made a convolution's weight gradient a grouped convolution,
    slow on CPU (a ResNet-20's 8 blocks of 32 rows: 1.78 s, 1.14 s written out)."""
    xs, ys = x_all[rows], y_all[rows]
    sums = [jax.value_and_grad(batch_loss)(params, xs[b], ys[b]) for b in range(blocks)]
    return _stacked(stack, [loss for loss, _ in sums], [grad for _, grad in sums])


@jax.jit
def _joined(calls: list[Stacked]) -> Stacked:
    """Stacked calls as one, their rows end to end (a copy)."""
    return jax.tree.map(lambda *rows: jnp.concatenate(rows), *calls)


def _equations(jaxpr: Any) -> int:
    """Equations of a jaxpr and of the jaxprs inside it: what a program's compile time grows with."""
    count = 0
    for eqn in jaxpr.eqns:
        count += 1
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                count += _equations(inner)
    return count


class Numerics:
    """Jitted gradient and evaluation functions for one model and task.

    ``tile``: rows per leaf of the exact reduction's tree (``strategy.exact_tile``). One row
    makes per-example leaves, computed by a vmap in 64-row chunks; more make tiles, each one
    batched gradient (:func:`_stored_tiles`). A call's tiles are computed in one program when
    they are at most :meth:`tiles_per_program`, else in pieces of that many, summed by a
    program of their own: the same bits either way, a compile time that stays bounded.
    """

    def __init__(self, model: Model, task: Literal["classification", "regression"], reduction: str, tile: int = 1):
        if reduction == "exact" and model.exact_issue:
            raise ValueError(model.exact_issue)
        self.model, self.task, self.reduction = model, task, reduction
        self.tile = tile if reduction == "exact" else 1
        loss = functools.partial(_example_loss, model, task)
        per_example = jax.vmap(jax.value_and_grad(loss), in_axes=(None, 0, 0))
        self._per_example = jax.jit(per_example)  # one chunk alone: what the exact program must match
        batch_loss = functools.partial(_batch_loss, model, task)
        self._tile_grad = jax.value_and_grad(batch_loss)
        if self.tile == 1:
            leaves_of = functools.partial(_stored_chunks, per_example)
        else:
            leaves_of = functools.partial(_stored_tiles, self._tile_grad, self.tile)
        self._exact_at = {
            stack: jax.jit(functools.partial(_exact_gathered, leaves_of, stack), static_argnums=(5, 6, 7, 8))
            for stack in (False, True)
        }
        self._piece = jax.jit(functools.partial(_piece_leaves, leaves_of), static_argnums=(5,))
        self._pieces_at = {
            stack: jax.jit(functools.partial(_pieces_summed, stack), static_argnums=(2, 3, 4)) for stack in (False, True)
        }
        self._fast_at = {
            stack: jax.jit(functools.partial(_fast_gathered, batch_loss, stack), static_argnums=(4,))
            for stack in (False, True)
        }
        self._evaluate = jax.jit(self._eval_fn)
        self._evaluate_sums = jax.jit(self._eval_sums_fn)
        self._device_data: tuple[Dataset, str, jax.Array, jax.Array, jax.Array] | None = None
        self._most_tiles: dict[Any, int] = {}
        self._bytes: int | None = None

    def shard_sums_of(self, params: Params, dataset: Dataset, rows: np.ndarray, shards: int) -> list[GradSum]:
        """Gradient sums of ``shards`` equal, contiguous blocks of the training examples ``rows``
        at ``params``, gathered inside the call from a copy of the training set kept on the
        device (the same values, one small transfer)."""
        losses, grads = self._call(params, dataset, rows, shards, stack=False)
        return _grad_sums(losses, grads, len(rows) // shards)

    def starts(self, workers: Sequence[int], batch: int) -> np.ndarray | None:
        """The leaf at which each of ``workers``' rows begin in the global batch (worker ``i``
        holds block ``i``, as iid sharding deals it), when :meth:`gradients` needs them to
        return the shards' covers: ``None`` when every shard is one node of the global tree (a
        power-of-two number of leaves) or the reduction is ``fast``."""
        leaves = batch // self.tile
        if self.reduction != "exact" or leaves & (leaves - 1) == 0:
            return None
        return np.asarray(workers, np.int64) * leaves

    def gradients(
        self, params: Params | tuple[Params, ...], dataset: Dataset, rows: np.ndarray, shards: int,
        starts: Sequence[int] | None = None,
    ) -> list[GradSum] | Stacked:
        """What a run records as one gradient call: :meth:`shard_sums_of` for one shard,
        the same sums as one :class:`Stacked` for several (fewer arrays to make and track).
        With ``starts`` (:meth:`starts`) it also returns the sums of each shard's cover, in a
        :class:`Stacked` whatever the shards (:func:`parts_of` hands them out). ``params`` may
        be a tuple, one set a shard (only where :attr:`batches_parameters`): each shard's
        gradient at its own, the same bits as a call of its own."""
        if isinstance(params, tuple):  # shards at several parameters are never summed whole: no stacked rows to split
            per_shard = len(rows) // shards // self.tile
            each = tuple(params[k // per_shard] for k in range(shards * per_shard))  # a set a tile: one program a shape
            if starts is not None:
                return self._call(each, dataset, rows, shards, stack=True, starts=_placed(starts, per_shard), per_tile=True)
            losses, grads = self._call(each, dataset, rows, shards, stack=False, per_tile=True)
            return _grad_sums(losses, grads, len(rows) // shards)
        if starts is not None and self.reduction == "exact":
            placed = _placed(starts, len(rows) // shards // self.tile)
            return self._call(params, dataset, rows, shards, stack=True, starts=placed)
        if shards == 1:
            return self.shard_sums_of(params, dataset, rows, 1)
        return self._call(params, dataset, rows, shards, stack=True)

    @property
    def batches_parameters(self) -> bool:
        """Whether one call may compute gradients at several parameter versions with each one's
        own bits (tiles: each is its own written-out gradient, whatever parameters it reads)."""
        return self.reduction == "exact" and self.tile > 1

    def workers_per_call(self, batch: int, workers: int) -> int:
        """How many workers' batches on the same parameters one gradient call serves: fast, all
        of them; exact, at most ``CALL_ROWS`` rows (the same bits, and faster than one huge call,
        whose leaves no longer fit in cache) and, for tiles, leaves of at most ``CALL_LEAF_BYTES``."""
        if self.reduction == "fast":
            return workers
        most = max(1, CALL_ROWS // batch)
        if self.tile > 1:
            most = min(most, max(1, CALL_LEAF_BYTES // (self._param_bytes() * (batch // self.tile))))
        return most

    def _param_bytes(self) -> int:
        """Bytes of one copy of the parameters, from the model's shapes (a resumed run's
        parameters are placeholders until it catches up)."""
        if self._bytes is None:
            shapes = jax.eval_shape(self.model.init, jax.random.PRNGKey(0))
            self._bytes = sum(int(np.prod(v.shape)) * v.dtype.itemsize for v in jax.tree.leaves(shapes))
        return self._bytes

    def tiles_per_program(self, params: Params, dataset: Dataset) -> int:
        """The most tiles one program computes: a power of two whose tiles' equations stay under
        ``PROGRAM_EQUATIONS`` (compile time grows with them), at most ``CALL_ROWS`` rows. It sets
        how a call is cut into programs, never a tile's bits."""
        key = jax.tree.structure(params), tuple(np.shape(v) for v in jax.tree.leaves(params))
        if key not in self._most_tiles:
            x = jax.ShapeDtypeStruct((self.tile, *dataset.x_train.shape[1:]), dataset.x_train.dtype)
            y = jax.ShapeDtypeStruct((self.tile, *dataset.y_train.shape[1:]), dataset.y_train.dtype)
            shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(np.shape(v), v.dtype), params)
            per_tile = _equations(jax.make_jaxpr(self._tile_grad)(shapes, x, y).jaxpr)
            most = max(1, min(PROGRAM_EQUATIONS // max(per_tile, 1), CALL_ROWS // self.tile))
            self._most_tiles[key] = 1 << (most.bit_length() - 1)
        return self._most_tiles[key]

    def _call(self, params: Params, dataset: Dataset, rows: np.ndarray, shards: int, stack: bool,
              starts: tuple[int, ...] | None = None, per_tile: bool = False):
        x_all, y_all, zero = self._on_device(dataset)
        if self.reduction == "fast":  # at most as many blocks a program as tiles: the same bound on compile time
            blocks, most = rows.reshape(shards, -1), self.tiles_per_program(params, dataset)
            if shards <= most:
                return self._fast_at[stack](params, x_all, y_all, blocks, shards)
            calls = [self._fast_at[stack](params, x_all, y_all, blocks[i : i + most], len(blocks[i : i + most]))
                     for i in range(0, shards, most)]
            if stack:
                return _joined(calls)
            return [loss for call in calls for loss in call[0]], [grad for call in calls for grad in call[1]]
        if self.tile == 1:
            pad = (-len(rows)) % CHUNK_ROWS
            if pad:  # padding rows are real examples (row 0) whose gradients are dropped
                rows = np.concatenate([rows, np.zeros(pad, rows.dtype)])
            return self._exact_at[stack](params, x_all, y_all, rows, zero, len(rows) - pad, shards, starts, None)
        leaves = len(rows) // self.tile
        most = self.tiles_per_program(params[0] if per_tile else params, dataset)
        if leaves <= most:
            return self._exact_at[stack](params, x_all, y_all, rows, zero, leaves, shards, starts, per_tile)
        pieces = [self._piece(params[k : k + most] if per_tile else params, x_all, y_all,
                              rows[k * self.tile : (k + most) * self.tile], zero, per_tile) for k in range(0, leaves, most)]
        return self._pieces_at[stack](pieces, zero, leaves, shards, starts)

    def _on_device(self, dataset: Dataset) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The training set as arrays on the default device, made once per data set and device,
        and the exact program's zero there too (a host scalar would be copied over on every call)."""
        device = str(jax.config.jax_default_device)
        cached = self._device_data
        if cached is None or cached[0] is not dataset or cached[1] != device:
            on_device = (jnp.asarray(dataset.x_train), jnp.asarray(dataset.y_train), jnp.asarray(_ZERO))
            cached = self._device_data = (dataset, device, *on_device)
        return cached[2], cached[3], cached[4]

    def _eval_fn(self, params: Params, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = self.model.apply(params, x)
        if self.model.loss is not None:
            return jnp.mean(jax.vmap(self.model.loss)(out, y)), self._accuracy(out, y)
        if self.task == "regression":
            return jnp.mean(0.5 * (out[:, 0] - y) ** 2), jnp.float32(jnp.nan)
        if y.ndim == 2:  # sequences of equal length: the mean over examples of their token means is over tokens
            loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[..., None], axis=-1))
            return loss, self._accuracy(out, y)
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=1))
        return loss, jnp.mean(jnp.argmax(out, axis=1) == y)

    def _eval_sums_fn(self, params: Params, x: jax.Array, y: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Summed loss and correct predictions of the first ``valid`` rows (the rest pad a last chunk)."""
        out = self.model.apply(params, x)
        keep = jnp.arange(x.shape[0]) < valid
        if self.model.loss is not None:
            hits = jnp.int32(0) if self.task == "regression" else jnp.sum(keep & (jnp.argmax(out, axis=1) == y))
            return jnp.sum(jnp.where(keep, jax.vmap(self.model.loss)(out, y), 0.0)), hits
        if self.task == "regression":
            return jnp.sum(jnp.where(keep, 0.5 * (out[:, 0] - y) ** 2, 0.0)), jnp.int32(0)
        if y.ndim == 2:  # sequences: each example's mean token loss, and its share of correct tokens
            losses = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[..., None], axis=-1)[..., 0], axis=1)
            shares = jnp.mean(jnp.argmax(out, axis=-1) == y, axis=1)
            return jnp.sum(jnp.where(keep, losses, 0.0)), jnp.sum(jnp.where(keep, shares, 0.0))
        losses = -jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=1)[:, 0]
        return jnp.sum(jnp.where(keep, losses, 0.0)), jnp.sum(keep & (jnp.argmax(out, axis=1) == y))

    def _accuracy(self, out: jax.Array, y: jax.Array) -> jax.Array:
        if self.task == "regression":
            return jnp.float32(jnp.nan)
        if y.ndim == 2:  # sequences: per token
            return jnp.mean(jnp.argmax(out, axis=-1) == y)
        return jnp.mean(jnp.argmax(out, axis=1) == y)

    def evaluate(self, params: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Mean loss and accuracy on ``x, y``. A NaN loss (NaN outputs: parameters gone to NaN
        in a diverged run) has no accuracy: argmax of NaN logits is class 0, not a prediction.

        An evaluation set larger than :func:`eval_chunk_rows` is evaluated in chunks of that
        many rows (the last one padded, so one program serves them all), adding up the chunks'
        sums in order: memory stays bounded, and the result is the same on every machine."""
        rows = eval_chunk_rows(self.model.width) if self.model.width else len(x)
        if len(x) <= rows:
            loss, accuracy = self._evaluate(params, x, y)
            loss = float(loss)
            return loss, math.nan if math.isnan(loss) else float(accuracy)
        total, correct = 0.0, 0
        for start in range(0, len(x), rows):
            xs, ys = x[start : start + rows], y[start : start + rows]
            valid = len(xs)
            if valid < rows:
                xs = np.concatenate([xs, np.zeros((rows - valid, *xs.shape[1:]), xs.dtype)])
                ys = np.concatenate([ys, np.zeros(rows - valid, ys.dtype)])
            loss_sum, hits = self._evaluate_sums(params, xs, ys, np.int32(valid))
            total += float(loss_sum)
            correct += float(hits)  # a count of examples, or sequences' shares of tokens: exact either way
        loss = total / len(x)
        if self.task == "regression" or math.isnan(loss):
            return loss, math.nan
        return loss, correct / len(x)
