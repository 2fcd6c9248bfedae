"""The canonical tree of a global batch, put together from the pieces of any split.

The exact reduction sums the ``N`` leaves of a batch (its examples, or its tiles of
``strategy.exact_tile`` rows) by one balanced tree of adjacent pairs over leaves ``0 .. W-1``
(``W`` the power of two at or above ``N``, leaves from ``N`` on zeros):
:func:`fred.numerics.gradients.pairwise_sum`. Its node ``(level, index)`` is the sum of leaves
``index * 2**level`` to ``(index + 1) * 2**level``. A shard of leaves ``start .. start + count``
holds whole nodes: its *cover* is the largest nodes inside it, at most two per level
(:func:`cover`). A node's sum is the same tree over the same leaves wherever it is computed, so
from the covers of shards that span ``0 .. N`` :func:`fold` makes, node by node, the additions
of the large batch's tree: its bits, however the batch was split, into however many shards
of whatever sizes. A shard's own sum is the same tree restricted to its leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")
Node = tuple[int, int]  # (level, index): leaves index * 2**level .. (index + 1) * 2**level


def cover(start: int, count: int) -> tuple[Node, ...]:
    """The largest tree nodes that lie inside leaves ``start .. start + count``, in leaf order."""
    found, at, end = [], start, start + count
    while at < end:
        level = (end - at).bit_length() - 1  # the largest block that fits...
        if at:
            level = min(level, (at & -at).bit_length() - 1)  # ...and starts on a multiple of its size
        found.append((level, at >> level))
        at += 1 << level
    return tuple(found)


def root(start: int, end: int) -> Node:
    """The smallest node holding leaves ``start .. end``: for ``start`` 0, the whole padded tree."""
    level = max(end - 1, 0).bit_length()
    while level and (start >> (level - 1)) == ((end - 1) >> (level - 1)):
        level -= 1
    return (level, start >> level)


def fold(sums: Mapping[Node, T], start: int, end: int, zero: T, add: Callable[[T, T], T]) -> T:
    """The tree sum of leaves ``start .. end`` from the sums of nodes that cover them exactly once.

    A node is its given sum; past ``end`` it is ``zero`` (the padding leaves); before
    ``start`` it is left out (a shard's own sum is the global tree restricted to its leaves);
    otherwise it is its children's sum. From ``start`` 0 this is the padded tree's sum.
    ``zero`` must be a value the compiler cannot see is zero: XLA turns ``x + 0`` into
    ``x``, which keeps a ``-0.0`` that the padded tree makes ``+0.0``.
    """

    def node(level: int, index: int) -> T | None:
        if (level, index) in sums:
            return sums[(level, index)]
        if index << level >= end:
            return zero
        if (index + 1) << level <= start:
            return None
        if level == 0:
            raise ValueError(
                f"leaf {index} of {start}..{end} is in no node: the shards do not cover the leaves"
            )
        left, right = node(level - 1, 2 * index), node(level - 1, 2 * index + 1)
        return right if left is None else add(left, right)  # type: ignore[arg-type]

    total = node(*root(start, end))
    assert total is not None
    return total
