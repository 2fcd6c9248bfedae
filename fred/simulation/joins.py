"""A group's collective calls: the key of a group, one call's joiners, and what it sums.

The engine's :meth:`~fred.simulation.engine.Simulation.allreduce`,
:meth:`~fred.simulation.engine.Simulation.allgather` and
:meth:`~fred.simulation.engine.Simulation.reduce_scatter` join members into a
:class:`CollectiveCall` per group and call number; once every member still waited for has
joined, the call's values are added (:func:`sum_values`: an all-reduce's and a
reduce-scatter's alike) or gathered, and the run's collective object
(:mod:`fred.simulation.algorithms`) for its kind times it.
"""

from __future__ import annotations

from typing import Any, Callable

import simpy

from fred.numerics.gradients import GradSum, sum_grads, tree_sum
from fred.simulation.algorithms import SentBy

Tracer = Callable[[str, str, float, float, float, str], None]

# The kinds of collective call, as their events are named.
ALLREDUCE, ALLGATHER, REDUCE_SCATTER = "allreduce", "allgather", "reduce_scatter"


class GroupKey(tuple):
    """A group's member indices, hashed once: a tuple hashes all p of them at every lookup,
    and every join looks its group up several times, which would make a ring round cost p^2."""

    def __new__(cls, indices: Any) -> "GroupKey":
        key = super().__new__(cls, indices)
        key._hash = tuple.__hash__(key)
        return key

    def __hash__(self) -> int:
        return self._hash


def sum_values(values: list[Any]) -> Any:
    """The all-reduced value: gradient sums by :func:`sum_grads`, other pytrees by the same tree."""
    if any(v is None for v in values):
        return None
    if all(isinstance(v, GradSum) for v in values):
        return sum_grads(values)
    return values[0] if len(values) == 1 else tree_sum(values)


class CollectiveCall:
    """One collective call of a group (its ``kind``: an all-reduce, an all-gather or a
    reduce-scatter): who has joined, when it starts, when it ends.

    Members wait for ``done`` from the moment they join; the blocked time of those still there is
    recorded as ``started`` is processed (:meth:`trace_waits`), member by member in the order they joined.
    """

    __slots__ = (
        "started",
        "done",
        "arrived",
        "waiting",
        "participants",
        "result",
        "nbytes",
        "sent",
        "start_s",
        "kind",
    )

    def __init__(self, env: simpy.Environment, nbytes: float, trace: Tracer, kind: str = ALLREDUCE):
        self.started, self.done = env.event(), env.event()
        self.kind = kind  # ALLGATHER: the result is every value; the others': the sum
        self.arrived: list[tuple[int, Any]] = []
        self.waiting: list[tuple[str, float]] = []  # (member's name, when it joined), in joining order
        self.participants: list[int] = []  # who was in it, once started
        self.result: Any = None
        self.nbytes = nbytes
        self.sent: SentBy | None = None  # what each participant sent: asked of the run's collective once
        self.start_s = 0.0
        self.started.callbacks.append(lambda _: self.trace_waits(env.now, trace))  # type: ignore[union-attr]

    def trace_waits(self, now: float, trace: Tracer) -> None:
        """Record when the call started, and a ``wait`` for each member that joined before then."""
        self.start_s = now
        for name, arrived_s in self.waiting:
            if now > arrived_s:
                trace("wait", name, arrived_s, now, 0.0, "")
