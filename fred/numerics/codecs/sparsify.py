"""Top-k sparsification with error feedback (Stich et al., 2018; Lin et al., 2018, DGC without its
momentum correction), per worker i and per tensor t of n_t entries, ``k_t = ceil(ratio n_t)``::

    init:    e_i <- 0
    update:  m_i <- g_i + e_i
             send the k_t entries of m_i of largest |m_i| (ties: the lower index)
                  as (int32 index, float32 value)
             e_i <- m_i with those entries zeroed      (what was not sent waits for the next step)
    decode:  every worker gathers the p payloads and adds them up, in worker order, by the pairwise tree
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fred.numerics.codecs.base import FLOAT32_BYTES, INDEX_BYTES, ErrorMemory, pairwise
from fred.numerics.models import Params
from fred.numerics.tape import op


class Sparse(NamedTuple):
    """A top-k payload: per tensor, the kept entries' flat positions (int32) and values (float32)."""

    index: Params
    value: Params


def keep_count(ratio: float, size: int) -> int:
    """Top-k's ``k = ceil(ratio * size)``, with ``ratio`` read as the decimal it was written as
    (``0.01 * 300`` is 3 entries, where float arithmetic would give 3.0000000000000004 and 4)."""
    return max(1, math.ceil(Fraction(repr(float(ratio))) * size)) if size else 0


def topk_payload_bytes(ratio: float, params: Params) -> int:
    """Bytes of one worker's top-k payload: ``k_t (4 B value + 4 B index)`` summed over the tensors."""
    return sum(
        keep_count(ratio, leaf.size) * (FLOAT32_BYTES + INDEX_BYTES) for leaf in jax.tree.leaves(params)
    )


@op("fred.numerics.codecs.sparsify:memory_init")
@jax.jit
def memory_init(params: Params) -> ErrorMemory:
    """An empty error memory shaped as ``params``."""
    return ErrorMemory(jax.tree.map(jnp.zeros_like, params))


@functools.cache
def topk_compress(ratio: float):
    """``compress(grad, memory) -> (payload, memory)``: top-k of ``grad + e`` per tensor; the rest is the new
    ``e``."""

    @op("fred.numerics.codecs.sparsify:topk_compress", (ratio,))
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


@op("fred.numerics.codecs.sparsify:sparse_sum")
@jax.jit
def sparse_sum(payloads: list[Sparse], losses: list[jax.Array], like: Params) -> tuple[Params, jax.Array]:
    """The dense sum of the gathered payloads (each scattered into zeros shaped as ``like``), and
    of their losses, in list order by the pairwise tree: what every worker of the all-gather gets."""

    def dense(payload: Sparse) -> Params:
        return jax.tree.map(
            lambda i, v, x: jnp.zeros(x.size, x.dtype).at[i].set(v).reshape(x.shape),
            payload.index,
            payload.value,
            like,
        )

    return pairwise([dense(p) for p in payloads]), pairwise(losses)


class TopK(NamedTuple):
    """The top-k codec for one ``ratio``: its steps in the order of the module's pseudo-code."""

    ratio: float
    init: Callable[[Params], ErrorMemory]  # e_i <- 0
    update: Callable[[Params, ErrorMemory], tuple[Sparse, ErrorMemory]]  # payload, and e_i
    decode: Callable[[list[Sparse], list[jax.Array], Params], tuple[Params, jax.Array]]  # the gathered sum

    def payload_bytes(self, params: Params) -> int:
        return topk_payload_bytes(self.ratio, params)


def topk(ratio: float) -> TopK:
    """Top-k with error feedback, sending ``ceil(ratio n_t)`` entries of every tensor."""
    return TopK(ratio, memory_init, topk_compress(ratio), sparse_sum)
