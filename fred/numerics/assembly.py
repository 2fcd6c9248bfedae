"""Gradient sums and how they add up: what a gradient call returns, and the pairwise trees that
combine the shards' sums into one.

Sums travel instead of means so that aggregation is one pairwise tree and the division by the
global example count happens once. A call's shard sums come stacked (:class:`Stacked`); each
worker's share is a :class:`GradSum`, split off its call only when read. :func:`sum_grads` adds
shards by the fixed tree, or puts the global batch's own tree together from the sums of its
nodes that the shards cover (:func:`assemble`, :mod:`fred.numerics.canonical`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from fred.numerics import canonical
from fred.numerics.models import Params
from fred.numerics.tape import op

# The module the numerics tape names this one's functions and classes by (``module:name``, its
# calls' and trees' names): the one that re-exports them. Tapes and checkpoints hold these names,
# so that replay and resume find the same calls; a tape's digest does not depend on where code lives.
TAPE_MODULE = "fred.numerics.gradients"


class Stacked(NamedTuple):
    """The shard sums of one gradient call, stacked along a leading axis of length ``shards``;
    ``cover``, for a call told where its shards lie in the global batch, the sums of the global
    tree's nodes that cover them (shard after shard, in leaf order), then a row of zeros (the
    padding of a fold, :mod:`fred.numerics.kernels`)."""

    loss: jax.Array
    grad: Params
    cover: Stacked | None = None


Stacked.__module__ = TAPE_MODULE  # the tape writes a named tuple by its class's module and name


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

    def __iter__(self):  # unpacks like a named tuple: grad, loss, count
        return iter((self.grad, self.loss, self.count))

    def __repr__(self) -> str:
        return f"GradSum(count={self.count}, row={self.row if self.source is not None else None})"


GradSum.__module__ = TAPE_MODULE  # as Stacked's


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


@op(f"{TAPE_MODULE}:tree_sum")
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
    elif (
        whole := _whole_calls(parts)
    ) is not None:  # the same adds in the same tree, on the rows where the calls left them
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


def add_pair(a: Any, b: Any) -> Any:
    """Two (loss, gradient) sums added leaf by leaf: one node of a pairwise tree."""
    return jax.tree.map(jnp.add, a, b)


@op(f"{TAPE_MODULE}:assemble")
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
    return canonical.fold(nodes, 0, end, at(0, -1), add_pair)


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
    result: list[GradSum] | Stacked,
    shards: int,
    per_shard: int,
    starts: Sequence[int] | None = None,
    tile: int = 1,
) -> list[GradSum]:
    """Each shard's :class:`GradSum` from what :meth:`fred.numerics.gradients.Numerics.gradients`
    returned for shards of ``per_shard`` rows whose leaves (of ``tile`` rows) begin at ``starts``
    in the global batch."""
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


@op(f"{TAPE_MODULE}:stacked_sum")
@jax.jit
def stacked_sum(calls: Sequence[Stacked]) -> tuple[Params, jax.Array]:
    """:func:`tree_sum` of the rows of ``calls`` laid end to end: (gradient sum, loss sum)."""
    rows = lambda *leaves: jnp.concatenate(leaves)[None] if len(leaves) > 1 else leaves[0][None]
    stacked = jax.tree.map(rows, *[(c.grad, c.loss) for c in calls])
    return jax.tree.map(lambda leaf: pairwise_sum(leaf)[0], stacked)  # type: ignore[return-value]


@op(f"{TAPE_MODULE}:take_row")
@jax.jit
def take_row(stacked: Stacked, i: jax.Array) -> tuple[jax.Array, Params]:
    """Row ``i`` of a stacked call as its own (loss, gradient sum): a copy, no arithmetic.

    The index is traced, so one program serves every row of every call of a shape (a program
    returning all the rows at once compiles in time and memory that grow with their number).
    """
    return stacked.loss[i], jax.tree.map(lambda g: g[i], stacked.grad)


@op(f"{TAPE_MODULE}:unstack")
@jax.jit
def unstack(stacked: Stacked) -> list[tuple[jax.Array, Params]]:
    """Every row of a stacked call in one call, for the tapes that record it (a run itself
    uses :func:`take_row`)."""
    return [
        (stacked.loss[i], jax.tree.map(lambda g, i=i: g[i], stacked.grad))
        for i in range(stacked.loss.shape[0])
    ]


@op(f"{TAPE_MODULE}:mean_grad")
@jax.jit
def mean_grad(total: GradSum) -> Params:
    """The mean gradient of a sum: every leaf divided by its example count."""
    return jax.tree.map(lambda g: g / total.count, total.grad)


@op(f"{TAPE_MODULE}:divide")
@functools.partial(jax.jit, static_argnums=1)
def divide(tree: Params, n: int) -> Params:
    """Every leaf divided by ``n`` (an average from a sum)."""
    return jax.tree.map(lambda x: x / n, tree)
