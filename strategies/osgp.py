"""Overlap-SGP (Assran et al.): SGP whose communication overlaps tau gradient steps.

    every node i, iteration k = 0, 1, ...:
        z_i <- x_i / w_i
        g   <- gradient on the next batch at z_i
        x_i <- x_i - lr * g
        send (p_ji x_i, p_ji w_i) to each out-neighbour j;  keep (p_ii x_i, p_ii w_i)
        receive every share that has come; wait only for those of iterations <= k - tau
        x_i <- own share + received x shares;  w_i <- own share + received w shares

It is SGP's push-sum step (:mod:`strategies._push_sum`), except that at iteration k a
node consumes every share that has arrived from iterations <= k and waits only for
shares of iterations <= k - tau. A share that arrives late is added when it arrives, so
push-sum's mass stays conserved; 1-OSGP never blocks on the message it just caused.
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
