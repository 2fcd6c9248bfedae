"""Compressed all-reduce with error feedback: top-k sparsification and PowerSGD, in JAX.

Pure functions on pytrees of float32 arrays, in the optax style: an ``init`` gives the state
(a :class:`NamedTuple` of arrays), the other functions take it and return the new one, and a
hyper-parameter (``ratio``, ``rank``) is closed over by a factory whose key the numerics tape
records, so ``fred replay`` rebuilds the function. Strategies call them; the engine moves the
bytes (``strategies/ssgd.py`` composes them with ``sim.allgather`` and ``sim.allreduce``).

Units: fred's gradients travel as *sums* over a worker's batch (:class:`~fred.numerics.gradients.GradSum`),
and so do the codecs' inputs and error memories. Both codecs commute with a positive scale (top-k
keeps the same entries; PowerSGD orthonormalises P), so this is the papers' algorithm on mean
gradients, times the batch size.

Top-k with error memory (Stich et al., 2018; Lin et al., 2018, DGC without its momentum
correction), per worker i and per tensor t of n_t entries, ``k_t = ceil(ratio n_t)``::

    m_i <- g_i + e_i
    send the k_t entries of m_i of largest |m_i| (ties: the lower index) as (int32 index, float32 value)
    e_i <- m_i with those entries zeroed          (what was not sent waits for the next step)
    every worker gathers the p payloads and adds them up, in worker order, by the pairwise tree

PowerSGD (Vogels et al., 2019, Algorithm 1 with the rank-r compressor of Algorithm 2 and the
authors' code). A tensor of two or more axes is a matrix, its output axis (fred's last) first:
``n_out x (the product of the others)``, what the paper's ``tensor.view(shape[0], -1)`` makes of
PyTorch's ``(out, in, kh, kw)`` kernels; vectors (biases, norms' scales) are all-reduced as they
are. Each matrix uses rank ``r_t = min(rank, rows, cols)``::

    M_i <- G_i + e_i
    P_i <- M_i Q                  (Q: last step's all-reduced Q, the same on every worker)
    P   <- all-reduce of the P_i; P_hat <- orthonormalised P (Gram-Schmidt, column by column)
    Q_i <- M_i^T P_hat
    Q   <- all-reduce mean of the Q_i
    e_i <- M_i - P_hat Q^T        (as the authors' code: the aggregate's approximation, not one's own)
    the update uses P_hat Q^T (P_hat Q_sum^T as a sum over the workers) and the vectors' all-reduced sum

Q starts as a standard normal draw from a key of the scenario's seed, the same on every worker.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from fred.numerics.gradients import pairwise_sum
from fred.numerics.models import Params
from fred.numerics.tape import op

FLOAT32_BYTES = 4
INDEX_BYTES = 4  # a top-k entry's position, int32


class ErrorMemory(NamedTuple):
    """One worker's error memory e_i: per tensor (top-k) or per matrix (PowerSGD), what it has not sent yet."""

    error: Any


class Sparse(NamedTuple):
    """A top-k payload: per tensor, the kept entries' flat positions (int32) and values (float32)."""

    index: Params
    value: Params


class PowerSGDState(NamedTuple):
    """PowerSGD's state shared by all workers: per matrix (in tree-leaf order), last step's all-reduced Q."""

    q: tuple[jax.Array, ...]


# ----------------------------------------------------------------------------- shapes and bytes
def keep_count(ratio: float, size: int) -> int:
    """Top-k's ``k = ceil(ratio * size)``, with ``ratio`` read as the decimal it was written as
    (``0.01 * 300`` is 3 entries, where float arithmetic would give 3.0000000000000004 and 4)."""
    return max(1, math.ceil(Fraction(repr(float(ratio))) * size)) if size else 0


def is_matrix(leaf: Any) -> bool:
    """Whether PowerSGD compresses this tensor: two axes or more (vectors and scalars go as they are)."""
    return len(leaf.shape) >= 2


def matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """``(rows, cols)`` of a tensor seen as a matrix: its last (output) axis by all the others."""
    return int(shape[-1]), math.prod(int(d) for d in shape[:-1])


def matrix_rank(rank: int, shape: Sequence[int]) -> int:
    """The rank a matrix of ``shape`` is compressed with: ``rank``, at most its ``min(rows, cols)``."""
    return min(rank, *matrix_shape(shape))


def topk_payload_bytes(ratio: float, params: Params) -> int:
    """Bytes of one worker's top-k payload: ``k_t (4 B value + 4 B index)`` summed over the tensors."""
    return sum(keep_count(ratio, leaf.size) * (FLOAT32_BYTES + INDEX_BYTES) for leaf in jax.tree.leaves(params))


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
        p, q, matrices = p + FLOAT32_BYTES * r * rows, q + FLOAT32_BYTES * r * cols, matrices + FLOAT32_BYTES * leaf.size
    return PowerSGDBytes(p, q, vectors, matrices)


def largest_rank(params: Params) -> tuple[int, tuple[int, ...] | None]:
    """The largest ``min(rows, cols)`` of the model's matrices, and that matrix's shape (0 and None without any)."""
    best: tuple[int, tuple[int, ...] | None] = (0, None)
    for leaf in jax.tree.leaves(params):
        if is_matrix(leaf) and min(matrix_shape(leaf.shape)) > best[0]:
            best = (min(matrix_shape(leaf.shape)), tuple(int(d) for d in leaf.shape))
    return best


def _pairwise(trees: Sequence[Any]) -> Any:
    """Trees added in list order by the pairwise tree (:func:`fred.numerics.gradients.tree_sum`'s)."""
    return jax.tree.map(lambda *leaves: pairwise_sum(jnp.stack(leaves)[None])[0], *trees)


# ----------------------------------------------------------------------------- top-k
@op("fred.numerics.error_feedback:memory_init")
@jax.jit
def memory_init(params: Params) -> ErrorMemory:
    """An empty error memory shaped as ``params`` (top-k's; PowerSGD's is :func:`powersgd_init`'s)."""
    return ErrorMemory(jax.tree.map(jnp.zeros_like, params))


@functools.cache
def topk_compress(ratio: float):
    """``compress(grad, memory) -> (payload, memory)``: top-k of ``grad + e`` per tensor; the rest is the new ``e``."""

    @op("fred.numerics.error_feedback:topk_compress", (ratio,))
    @jax.jit
    def compress(grad: Params, memory: ErrorMemory) -> tuple[Sparse, ErrorMemory]:
        def one(g: jax.Array, e: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
            m = (g + e).reshape(-1)
            _, index = jax.lax.top_k(jnp.abs(m), keep_count(ratio, m.size))  # ties: the lower index first
            return index.astype(jnp.int32), m[index], m.at[index].set(0.0).reshape(g.shape)

        leaves, tree = jax.tree.flatten(grad)
        kept = [one(g, e) for g, e in zip(leaves, jax.tree.leaves(memory.error))]
        index, value, error = (jax.tree.unflatten(tree, [k[i] for k in kept]) for i in range(3))
        return Sparse(index, value), ErrorMemory(error)

    return compress


@op("fred.numerics.error_feedback:sparse_sum")
@jax.jit
def sparse_sum(payloads: list[Sparse], losses: list[jax.Array], like: Params) -> tuple[Params, jax.Array]:
    """The dense sum of the gathered payloads (each scattered into zeros shaped as ``like``), and
    of their losses, in list order by the pairwise tree: what every worker of the all-gather gets."""

    def dense(payload: Sparse) -> Params:
        return jax.tree.map(lambda i, v, x: jnp.zeros(x.size, x.dtype).at[i].set(v).reshape(x.shape),
                            payload.index, payload.value, like)

    return _pairwise([dense(p) for p in payloads]), _pairwise(losses)


# ----------------------------------------------------------------------------- PowerSGD
def _as_matrix(x: jax.Array) -> jax.Array:
    return jnp.moveaxis(x, -1, 0).reshape(x.shape[-1], -1)


def _from_matrix(m: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.moveaxis(m.reshape(shape[-1], *shape[:-1]), 0, -1)


@functools.cache
def powersgd_init(rank: int):
    """``init(params, key) -> (state, memory)``: Q of each matrix drawn from ``N(0, 1)`` (``cols x r_t``;
    matrix ``i`` in tree-leaf order from ``fold_in(key, i)``), and an empty error memory per matrix."""

    @op("fred.numerics.error_feedback:powersgd_init", (rank,))
    @jax.jit
    def init(params: Params, key: jax.Array) -> tuple[PowerSGDState, ErrorMemory]:
        matrices = [x for x in jax.tree.leaves(params) if is_matrix(x)]
        q = tuple(jax.random.normal(jax.random.fold_in(key, i), (matrix_shape(x.shape)[1], matrix_rank(rank, x.shape)),
                                    jnp.float32) for i, x in enumerate(matrices))
        return PowerSGDState(q), ErrorMemory(tuple(jnp.zeros(matrix_shape(x.shape), x.dtype) for x in matrices))

    return init


@op("fred.numerics.error_feedback:powersgd_p")
@jax.jit
def powersgd_p(grad: Params, memory: ErrorMemory, state: PowerSGDState) -> tuple[tuple, tuple, tuple]:
    """One worker's ``(M, P, vectors)``: ``M = G + e`` per matrix, ``P = M Q``, and its uncompressed vectors."""
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


@op("fred.numerics.error_feedback:orthogonalize")
@jax.jit
def orthogonalize(p: tuple) -> tuple:
    """``P_hat``: each all-reduced P with orthonormal columns."""
    return tuple(_orthonormal(x) for x in p)


@op("fred.numerics.error_feedback:powersgd_q")
@jax.jit
def powersgd_q(m: tuple, p_hat: tuple) -> tuple:
    """One worker's ``Q_i = M_i^T P_hat`` per matrix."""
    return tuple(a.T @ p for a, p in zip(m, p_hat))


@op("fred.numerics.error_feedback:powersgd_memory")
@jax.jit
def powersgd_memory(m: tuple, p_hat: tuple, q_sum: tuple, n: int) -> ErrorMemory:
    """One worker's new error ``e_i = M_i - P_hat Q^T``, with Q the mean of the ``n`` workers' Q_i."""
    return ErrorMemory(tuple(a - p @ (q / n).T for a, p, q in zip(m, p_hat, q_sum)))


@op("fred.numerics.error_feedback:powersgd_aggregate")
@jax.jit
def powersgd_aggregate(p_hat: tuple, q_sum: tuple, vectors: tuple, n: int, like: Params) -> tuple[Params, PowerSGDState]:
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
