"""What the codecs share: the sizes of what they send, their state types, and an exact sum of trees."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from fred.numerics.gradients import pairwise_sum

FLOAT32_BYTES = 4
INDEX_BYTES = 4  # a top-k entry's position, int32


class EmptyState(NamedTuple):
    """The state of a codec that keeps none (``fp16``, ``int8``)."""


class ErrorMemory(NamedTuple):
    """One worker's error memory e_i: per tensor (top-k) or per matrix (PowerSGD), what it has not sent
    yet."""

    error: Any


def pairwise(trees: Sequence[Any]) -> Any:
    """Trees added in list order by the pairwise tree (:func:`fred.numerics.gradients.tree_sum`'s)."""
    return jax.tree.map(lambda *leaves: pairwise_sum(jnp.stack(leaves)[None])[0], *trees)
