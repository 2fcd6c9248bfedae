"""PowerSGD (Vogels et al., 2019, Algorithm 1 with the rank-r compressor of Algorithm 2 and the
authors' code), as one codec whose steps are :class:`PowerSGD`'s fields, in this order::

    init:           Q <- N(0, 1) draw per matrix;  e_i <- 0
    compress_p:     M_i <- G_i + e_i;  P_i <- M_i Q       (Q: last step's all-reduced Q, alike on every
    worker)
                    -- P <- all-reduce of the P_i;  vectors <- all-reduce of the vectors --
    orthogonalize:  P_hat <- orthonormalised P            (Gram-Schmidt, column by column)
    compress_q:     Q_i <- M_i^T P_hat
                    -- Q_sum <- all-reduce of the Q_i --
    feedback:       e_i <- M_i - P_hat (Q_sum / n)^T      (the authors' code: the aggregate's approximation)
    decompress:     g <- P_hat Q_sum^T per matrix and the vectors' sum;  Q <- Q_sum / n

A tensor of two or more axes is a matrix, its output axis (fred's last) first:
``n_out x (the product of the others)``, what the paper's ``tensor.view(shape[0], -1)`` makes of
PyTorch's ``(out, in, kh, kw)`` kernels; vectors (biases, norms' scales) are all-reduced as they
are. Each matrix uses rank ``r_t = min(rank, rows, cols)``. Q starts as a standard normal draw
from a key of the scenario's seed, the same on every worker.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from fred.numerics.codecs.base import FLOAT32_BYTES, ErrorMemory
from fred.numerics.models import Params
from fred.numerics.tape import op


class PowerSGDState(NamedTuple):
    """PowerSGD's state shared by all workers: per matrix (in tree-leaf order), last step's all-reduced Q."""

    q: tuple[jax.Array, ...]


# ----------------------------------------------------------------------------- shapes and bytes
def is_matrix(leaf: Any) -> bool:
    """Whether PowerSGD compresses this tensor: two axes or more (vectors and scalars go as they are)."""
    return len(leaf.shape) >= 2


def matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """``(rows, cols)`` of a tensor seen as a matrix: its last (output) axis by all the others."""
    return int(shape[-1]), math.prod(int(d) for d in shape[:-1])


def matrix_rank(rank: int, shape: Sequence[int]) -> int:
    """The rank a matrix of ``shape`` is compressed with: ``rank``, at most its ``min(rows, cols)``."""
    return min(rank, *matrix_shape(shape))


class PowerSGDBytes(NamedTuple):
    """One worker's PowerSGD messages: its P's, its Q's and its vectors' bytes, and the raw bytes of
    the matrices (what each pass of the codec reads)."""

    p: int
    q: int
    vectors: int
    matrices: int


def powersgd_bytes(rank: int, params: Params) -> PowerSGDBytes:
    """``P``: ``4 sum r_t rows_t``; ``Q``: ``4 sum r_t cols_t``; vectors: ``4 sum n_t`` (uncompressed)."""
    p = q = vectors = matrices = 0
    for leaf in jax.tree.leaves(params):
        if not is_matrix(leaf):
            vectors += FLOAT32_BYTES * leaf.size
            continue
        rows, cols = matrix_shape(leaf.shape)
        r = matrix_rank(rank, leaf.shape)
        p, q, matrices = (
            p + FLOAT32_BYTES * r * rows,
            q + FLOAT32_BYTES * r * cols,
            matrices + FLOAT32_BYTES * leaf.size,
        )
    return PowerSGDBytes(p, q, vectors, matrices)


def largest_rank(params: Params) -> tuple[int, tuple[int, ...] | None]:
    """The largest ``min(rows, cols)`` of the model's matrices, and that matrix's shape (0 and None without
    any)."""
    best: tuple[int, tuple[int, ...] | None] = (0, None)
    for leaf in jax.tree.leaves(params):
        if is_matrix(leaf) and min(matrix_shape(leaf.shape)) > best[0]:
            best = (min(matrix_shape(leaf.shape)), tuple(int(d) for d in leaf.shape))
    return best


def _as_matrix(x: jax.Array) -> jax.Array:
    return jnp.moveaxis(x, -1, 0).reshape(x.shape[-1], -1)


def _from_matrix(m: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.moveaxis(m.reshape(shape[-1], *shape[:-1]), 0, -1)


# ----------------------------------------------------------------------------- the steps, in order
@functools.cache
def powersgd_init(rank: int):
    """``init(params, key) -> (state, memory)``: Q of each matrix drawn from ``N(0, 1)`` (``cols x r_t``;
    matrix ``i`` in tree-leaf order from ``fold_in(key, i)``), and an empty error memory per matrix."""

    @op("fred.numerics.codecs.low_rank:powersgd_init", (rank,))
    @jax.jit
    def init(params: Params, key: jax.Array) -> tuple[PowerSGDState, ErrorMemory]:
        matrices = [x for x in jax.tree.leaves(params) if is_matrix(x)]
        q = tuple(
            jax.random.normal(
                jax.random.fold_in(key, i),
                (matrix_shape(x.shape)[1], matrix_rank(rank, x.shape)),
                jnp.float32,
            )
            for i, x in enumerate(matrices)
        )
        return PowerSGDState(q), ErrorMemory(
            tuple(jnp.zeros(matrix_shape(x.shape), x.dtype) for x in matrices)
        )

    return init


@op("fred.numerics.codecs.low_rank:compress_p")
@jax.jit
def compress_p(grad: Params, memory: ErrorMemory, state: PowerSGDState) -> tuple[tuple, tuple, tuple]:
    """One worker's ``(M, P, vectors)``: ``M = G + e`` per matrix, ``P = M Q``, and its uncompressed
    vectors."""
    leaves = jax.tree.leaves(grad)
    m = tuple(_as_matrix(g) + e for g, e in zip([g for g in leaves if is_matrix(g)], memory.error))
    return m, tuple(a @ q for a, q in zip(m, state.q)), tuple(g for g in leaves if not is_matrix(g))


def _orthonormal(p: jax.Array) -> jax.Array:
    """Gram-Schmidt as the authors' code does it: each column in turn is normalised, then taken
    out of the columns after it (a zero column stays zero)."""
    for i in range(p.shape[1]):
        col = p[:, i]
        norm = jnp.sqrt(jnp.sum(col * col))
        col = col / jnp.where(norm > 0, norm, 1.0)
        p = p.at[:, i].set(col)
        if i + 1 < p.shape[1]:
            rest = p[:, i + 1 :]
            p = p.at[:, i + 1 :].set(rest - jnp.sum(col[:, None] * rest, axis=0) * col[:, None])
    return p


@op("fred.numerics.codecs.low_rank:orthogonalize")
@jax.jit
def orthogonalize(p: tuple) -> tuple:
    """``P_hat``: each all-reduced P with orthonormal columns."""
    return tuple(_orthonormal(x) for x in p)


@op("fred.numerics.codecs.low_rank:compress_q")
@jax.jit
def compress_q(m: tuple, p_hat: tuple) -> tuple:
    """One worker's ``Q_i = M_i^T P_hat`` per matrix."""
    return tuple(a.T @ p for a, p in zip(m, p_hat))


@op("fred.numerics.codecs.low_rank:feedback")
@jax.jit
def feedback(m: tuple, p_hat: tuple, q_sum: tuple, n: int) -> ErrorMemory:
    """One worker's new error ``e_i = M_i - P_hat Q^T``, with Q the mean of the ``n`` workers' Q_i."""
    return ErrorMemory(tuple(a - p @ (q / n).T for a, p, q in zip(m, p_hat, q_sum)))


@op("fred.numerics.codecs.low_rank:decompress")
@jax.jit
def decompress(
    p_hat: tuple, q_sum: tuple, vectors: tuple, n: int, like: Params
) -> tuple[Params, PowerSGDState]:
    """The decompressed gradient sum over the workers, shaped as ``like`` (``P_hat Q_sum^T`` per
    matrix, the all-reduced vectors as they are), and the next step's state (Q, the mean)."""
    leaves, tree = jax.tree.flatten(like)
    matrices, rest = iter(zip(p_hat, q_sum)), iter(vectors)
    out = []
    for x in leaves:
        if is_matrix(x):
            p, q = next(matrices)
            out.append(_from_matrix(p @ q.T, x.shape))
        else:
            out.append(next(rest))
    return jax.tree.unflatten(tree, out), PowerSGDState(tuple(q / n for q in q_sum))


class PowerSGD(NamedTuple):
    """The PowerSGD codec for one ``rank``: its steps, in the order a round takes them (module doc)."""

    rank: int
    init: Callable[[Params, jax.Array], tuple[PowerSGDState, ErrorMemory]]
    compress_p: Callable[[Params, ErrorMemory, PowerSGDState], tuple[tuple, tuple, tuple]]
    orthogonalize: Callable[[tuple], tuple]
    compress_q: Callable[[tuple, tuple], tuple]
    feedback: Callable[[tuple, tuple, tuple, int], ErrorMemory]
    decompress: Callable[[tuple, tuple, tuple, int, Params], tuple[Params, PowerSGDState]]

    def message_bytes(self, params: Params) -> PowerSGDBytes:
        return powersgd_bytes(self.rank, params)


def powersgd(rank: int) -> PowerSGD:
    """PowerSGD with error feedback, compressing each matrix to rank ``min(rank, rows, cols)``."""
    return PowerSGD(rank, powersgd_init(rank), compress_p, orthogonalize, compress_q, feedback, decompress)
