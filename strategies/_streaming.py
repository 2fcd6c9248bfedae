"""Streaming DiLoCo's pieces (Douillard et al., 2025): the model's fragments, when each is
synchronised and merged, and the merge.

Layers: a parameter's layer is its name up to the last ``.`` or ``_`` (``dense0_w`` and ``dense0_b``
are layer ``dense0``; ``h.1.mlp.c_fc.w`` is ``h.1.mlp.c_fc``; ``wte`` is ``wte``), and the layers are
ordered by name, runs of digits compared as numbers (``h.2`` before ``h.10``). Layer ``j`` of that
order belongs to fragment ``j mod P`` (the paper's strided fragments).

Schedule, with ``H`` inner steps, ``P`` fragments and an overlap of ``tau`` inner steps: the outer
steps ``u = 0, 1, ...`` are started after inner step ``H + u H/P`` and are of fragment ``u mod P``,
so fragment ``p`` is synchronised every ``H`` steps, offset by ``p H/P``, each time over the ``H``
steps since its last; outer step ``u`` is merged after inner step ``H + u H/P + tau``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax

from fred.numerics.models import Params
from fred.numerics.tape import op


def layer_of(name: str) -> str:
    """A parameter's layer: its name up to the last ``.`` or ``_`` (the whole name without one)."""
    return re.split(r"[._](?=[^._]*$)", name)[0]


def _natural(name: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def layers(params: Params) -> list[list[str]]:
    """The model's parameter names grouped by layer, the layers in name order (digits as numbers)."""
    grouped: dict[str, list[str]] = {}
    for name in sorted(params, key=_natural):
        grouped.setdefault(layer_of(name), []).append(name)
    return [grouped[layer] for layer in sorted(grouped, key=_natural)]


def fragments(params: Params, count: int) -> list[tuple[str, ...]]:
    """The parameter names of each of ``count`` fragments: layer ``j`` goes to fragment ``j mod count``."""
    grouped = layers(params)
    return [
        tuple(name for j, layer in enumerate(grouped) if j % count == p for name in layer)
        for p in range(count)
    ]


def fragment_refusal(params: Params, count: int) -> str | None:
    """Why ``count`` fragments do not fit the model (more than its layers, or not a divisor of them),
    naming what does; None when they fit."""
    n = len(layers(params))
    if count <= n and n % count == 0:
        return None
    divisors = ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
    return (
        f"strategy.fragments: got {count}, but the model has {n} layers, which {count} fragments "
        f"{'exceed' if count > n else 'do not divide'}; use a divisor of {n}: {divisors}"
    )


def fragment_plan(
    params: Params, count: int, param_bytes: float
) -> tuple[list[tuple[str, ...]], list[float]]:
    """The names of each of ``count`` fragments and the bytes of its all-reduce (its share of
    ``param_bytes``: its floats over the model's; one fragment is ``param_bytes`` itself); a
    ``count`` that does not fit the model's layers is refused with the fix (the model is known only
    now)."""
    refused = fragment_refusal(params, count)
    if refused is not None:
        from fred.scenario.loading import ScenarioError

        raise ScenarioError([refused], "scenario")
    names = fragments(params, count)
    sizes = [sum(params[name].size for name in fragment) for fragment in names]
    return names, [param_bytes * (size / sum(sizes)) for size in sizes]


class Schedule(NamedTuple):
    """When the outer steps of ``fragments`` fragments start and merge (the module's schedule)."""

    inner_steps: int
    fragments: int
    overlap_steps: int

    @property
    def period(self) -> int:
        """Inner steps between two outer steps: ``H / P``."""
        return self.inner_steps // self.fragments

    def started_after(self, step: int) -> int | None:
        """The outer step started after inner step ``step`` (counted from 1), or None."""
        since = step - self.inner_steps
        if since < 0 or since % self.period:
            return None
        return since // self.period

    def merged_after(self, outer_step: int) -> int:
        """The inner step after which outer step ``outer_step`` is merged."""
        return self.inner_steps + outer_step * self.period + self.overlap_steps

    def fragment(self, outer_step: int) -> int:
        return outer_step % self.fragments


def part(params: Params, names: tuple[str, ...]) -> Params:
    """The parameters of one fragment."""
    return {name: params[name] for name in names}


@op("strategies._streaming:mix")
@jax.jit
def mix(live: Params, outer: Params, alpha: float) -> Params:
    """``alpha live + (1 - alpha) outer``: a replica's fragment merged with its outer update."""
    return jax.tree.map(lambda a, b: alpha * a + (1 - alpha) * b, live, outer)


def merged(live: Params, outer: Params, names: tuple[str, ...], alpha: float) -> Params:
    """``live`` with fragment ``names`` merged with ``outer`` at mixing factor ``alpha`` (0: replaced)."""
    if len(names) == len(live):
        return outer if alpha == 0 else mix(live, outer, alpha)
    fragment = part(outer, names) if alpha == 0 else mix(part(live, names), part(outer, names), alpha)
    return {**live, **fragment}
