"""The gradient calls of a run: :class:`Numerics` compiles and runs them for one model and task.

Why the ``exact`` reduction looks the way it does: on XLA CPU a batch mean
depends on the batch size in its last bits, so SSGD with n workers of batch b
would drift from SGD with batch n*b. Per-example gradients (vmap of grad),
computed in calls of exactly ``CHUNK_ROWS`` rows, do not depend on the batch or
on an example's position in it (one call over a whole large batch would not do: XLA
compiles a bigger vmap differently, and from a few hundred rows on the last bits
change). Summing them with one fixed pairwise tree whose
subtrees are exactly the workers' shards then gives the same bits whichever
way the global batch was split. One gradient call is one compiled program: the
chunks, then the sums (see :func:`fred.numerics.kernels.stored_chunks` for what keeps XLA
from fusing the two into something else). ``fast`` skips this and differentiates each shard's
summed loss in one go.

That fixed tree is the large batch's only when each shard is one of its subtrees: a batch
that is a power of two. For any other batch a call also returns the sums of the nodes of the
large batch's tree that lie inside each shard (:mod:`fred.numerics.canonical`), and an
all-reduce of shards that cover a global batch puts that tree together from them
(:func:`fred.numerics.assembly.assemble`), so SSGD gives large-batch SGD's bits for every split.

The pieces live in modules of their own: the sums and how they add up in
:mod:`fred.numerics.assembly`, the programs inside a call in :mod:`fred.numerics.kernels`, the
loss in :mod:`fred.numerics.losses`, evaluation in :mod:`fred.numerics.evaluation`. The names
other modules use are importable from here too.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fred.numerics import evaluation, kernels
from fred.numerics.assembly import (  # noqa: F401 - the names strategies and the engine import from here
    Cover,
    GradSum,
    Stacked,
    assemble,
    divide,
    mean_grad,
    pairwise_sum,
    parts_of,
    stacked_sum,
    sum_grads,
    take_row,
    tree_sum,
    unstack,
)
from fred.numerics.data import Dataset
from fred.numerics.evaluation import EVAL_BYTES, eval_chunk_rows  # noqa: F401 - as above
from fred.numerics.kernels import CHUNK_ROWS  # noqa: F401 - as above
from fred.numerics.losses import batch_loss, example_loss
from fred.numerics.models import Model, Params

# Rows of one exact gradient call serving several workers, at most: the same bits, and faster than
# one huge call, whose leaves no longer fit in cache. With tiles, also at most this many bytes of
# leaves (tiles' gradients) in one call, so that a large model's call stays in memory.
CALL_ROWS = 256
CALL_LEAF_BYTES = 256 * 2**20
# Equations (of the tiles' gradient programs, counted in their jaxprs) of one program: compile time
# and compile memory grow with them. An MLP [64]'s tile has about 60, a ResNet-20's about 1,500
# (one tile a program: less memory than two, at the same speed).
PROGRAM_EQUATIONS = 2000


class Numerics:
    """Jitted gradient and evaluation functions for one model and task.

    ``tile``: rows per leaf of the exact reduction's tree (``strategy.exact_tile``). One row
    makes per-example leaves, computed by a vmap in 64-row chunks; more make tiles, each one
    batched gradient (:func:`fred.numerics.kernels.stored_tiles`). A call's tiles are computed in
    one program when they are at most :meth:`tiles_per_program`, else in pieces of that many, summed
    by a program of their own: the same bits either way, a compile time that stays bounded.
    """

    def __init__(
        self, model: Model, task: Literal["classification", "regression"], reduction: str, tile: int = 1
    ):
        if reduction == "exact" and model.exact_issue:
            raise ValueError(model.exact_issue)
        self.model, self.task, self.reduction = model, task, reduction
        self.tile = tile if reduction == "exact" else 1
        one = functools.partial(example_loss, model, task)
        per_example = jax.vmap(jax.value_and_grad(one), in_axes=(None, 0, 0))
        self._per_example = jax.jit(per_example)  # one chunk alone: what the exact program must match
        summed = functools.partial(batch_loss, model, task)
        self._tile_grad = jax.value_and_grad(summed)
        if self.tile == 1:
            leaves_of = functools.partial(kernels.stored_chunks, per_example)
        else:
            leaves_of = functools.partial(kernels.stored_tiles, self._tile_grad, self.tile)
        self._exact_at = {
            stack: jax.jit(
                functools.partial(kernels.exact_gathered, leaves_of, stack), static_argnums=(5, 6, 7, 8)
            )
            for stack in (False, True)
        }
        self._piece = jax.jit(functools.partial(kernels.piece_leaves, leaves_of), static_argnums=(5,))
        self._pieces_at = {
            stack: jax.jit(functools.partial(kernels.pieces_summed, stack), static_argnums=(2, 3, 4))
            for stack in (False, True)
        }
        self._fast_at = {
            stack: jax.jit(functools.partial(kernels.fast_gathered, summed, stack), static_argnums=(4,))
            for stack in (False, True)
        }
        self._evaluate = jax.jit(functools.partial(evaluation.mean_loss, model, task))
        self._evaluate_sums = jax.jit(functools.partial(evaluation.chunk_sums, model, task))
        self._device_data: tuple[Dataset, str, jax.Array, jax.Array, jax.Array] | None = None
        self._most_tiles: dict[Any, int] = {}
        self._bytes: int | None = None

    def shard_sums_of(self, params: Params, dataset: Dataset, rows: np.ndarray, shards: int) -> list[GradSum]:
        """Gradient sums of ``shards`` equal, contiguous blocks of the training examples ``rows``
        at ``params``, gathered inside the call from a copy of the training set kept on the
        device (the same values, one small transfer)."""
        losses, grads = self._call(params, dataset, rows, shards, stack=False)
        return kernels.grad_sums(losses, grads, len(rows) // shards)

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
        self,
        params: Params | tuple[Params, ...],
        dataset: Dataset,
        rows: np.ndarray,
        shards: int,
        starts: Sequence[int] | None = None,
    ) -> list[GradSum] | Stacked:
        """What a run records as one gradient call: :meth:`shard_sums_of` for one shard,
        the same sums as one :class:`Stacked` for several (fewer arrays to make and track).
        With ``starts`` (:meth:`starts`) it also returns the sums of each shard's cover, in a
        :class:`Stacked` whatever the shards (:func:`parts_of` hands them out). ``params`` may
        be a tuple, one set a shard (only where :attr:`batches_parameters`): each shard's
        gradient at its own, the same bits as a call of its own."""
        if isinstance(
            params, tuple
        ):  # shards at several parameters are never summed whole: no stacked rows to split
            per_shard = len(rows) // shards // self.tile
            each = tuple(
                params[k // per_shard] for k in range(shards * per_shard)
            )  # a set a tile: one program a shape
            if starts is not None:
                placed = kernels.placed(starts, per_shard)
                return self._call(each, dataset, rows, shards, stack=True, starts=placed, per_tile=True)
            losses, grads = self._call(each, dataset, rows, shards, stack=False, per_tile=True)
            return kernels.grad_sums(losses, grads, len(rows) // shards)
        if starts is not None and self.reduction == "exact":
            placed = kernels.placed(starts, len(rows) // shards // self.tile)
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
            per_tile = kernels.equations(jax.make_jaxpr(self._tile_grad)(shapes, x, y).jaxpr)
            most = max(1, min(PROGRAM_EQUATIONS // max(per_tile, 1), CALL_ROWS // self.tile))
            self._most_tiles[key] = 1 << (most.bit_length() - 1)
        return self._most_tiles[key]

    def _call(
        self,
        params: Params,
        dataset: Dataset,
        rows: np.ndarray,
        shards: int,
        stack: bool,
        starts: tuple[int, ...] | None = None,
        per_tile: bool = False,
    ):
        """One gradient call's compiled programs on the rows ``rows``: the fast one in pieces of at most
        :meth:`tiles_per_program` blocks; the exact one over 64-row chunks, or over tiles in one
        program or in pieces summed by a program of their own."""
        x_all, y_all, zero = self._on_device(dataset)
        if (
            self.reduction == "fast"
        ):  # at most as many blocks a program as tiles: the same bound on compile time
            blocks, most = rows.reshape(shards, -1), self.tiles_per_program(params, dataset)
            if shards <= most:
                return self._fast_at[stack](params, x_all, y_all, blocks, shards)
            calls = [
                self._fast_at[stack](params, x_all, y_all, blocks[i : i + most], len(blocks[i : i + most]))
                for i in range(0, shards, most)
            ]
            if stack:
                return kernels.joined(calls)
            return [loss for call in calls for loss in call[0]], [grad for call in calls for grad in call[1]]
        if self.tile == 1:
            pad = (-len(rows)) % kernels.CHUNK_ROWS
            if pad:  # padding rows are real examples (row 0) whose gradients are dropped
                rows = np.concatenate([rows, np.zeros(pad, rows.dtype)])
            return self._exact_at[stack](
                params, x_all, y_all, rows, zero, len(rows) - pad, shards, starts, None
            )
        leaves = len(rows) // self.tile
        most = self.tiles_per_program(params[0] if per_tile else params, dataset)
        if leaves <= most:
            return self._exact_at[stack](params, x_all, y_all, rows, zero, leaves, shards, starts, per_tile)
        pieces = [
            self._piece(
                params[k : k + most] if per_tile else params,
                x_all,
                y_all,
                rows[k * self.tile : (k + most) * self.tile],
                zero,
                per_tile,
            )
            for k in range(0, leaves, most)
        ]
        return self._pieces_at[stack](pieces, zero, leaves, shards, starts)

    def _on_device(self, dataset: Dataset) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The training set as arrays on the default device, made once per data set and device,
        and the exact program's zero there too (a host scalar would be copied over on every call)."""
        device = str(jax.config.jax_default_device)
        cached = self._device_data
        if cached is None or cached[0] is not dataset or cached[1] != device:
            x_train, y_train = jnp.asarray(dataset.x_train), jnp.asarray(dataset.y_train)
            on_device = (x_train, y_train, jnp.asarray(kernels.ZERO))
            cached = self._device_data = (dataset, device, *on_device)
        return cached[2], cached[3], cached[4]

    def evaluate(self, params: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Mean loss and accuracy on ``x, y``, in chunks of :func:`eval_chunk_rows` rows when it has
        more (:func:`fred.numerics.evaluation.evaluate`: memory stays bounded, the result is the
        same on every machine). A NaN loss has no accuracy."""
        rows = eval_chunk_rows(self.model.width) if self.model.width else len(x)
        return evaluation.evaluate(self._evaluate, self._evaluate_sums, rows, self.task, params, x, y)
