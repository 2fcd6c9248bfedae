"""Overlap-SGP (Assran et al.): SGP whose communication overlaps tau gradient steps.

Exactly SGP's push-sum step, except that at iteration k a node consumes every share
that has arrived from iterations <= k and waits only for shares of iterations
<= k - tau. A share that arrives late is added when it arrives, so push-sum's mass
is still conserved; 1-OSGP never blocks on the message it just caused.
``overlap: 0`` is SGP, bit for bit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.scenario.registry import register
from fred.simulation.engine import Simulation
from strategies._push_sum import run_push_sum
from strategies.sgp import SGP


class OSGP(SGP):
    name: Literal["osgp"] = "osgp"  # type: ignore[assignment]
    overlap: int = Field(default=1, ge=0, description="tau: iterations a share may be consumed late")


@register(OSGP, timing_only=True)
def start(sim: Simulation, config: OSGP):
    return run_push_sum(sim, config, overlap=config.overlap).average
