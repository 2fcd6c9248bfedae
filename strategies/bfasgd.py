"""B-FASGD: FASGD that skips pushes and fetches while gradient statistics say it is safe.

    at each push / fetch opportunity, worker draws r ~ U[0, 1) from its own stream:
        transmit  iff  r < 1 / (1 + c / (v + drop_eps))      (c_push or c_fetch)
    v: the server's statistic, size-weighted mean over all elements, as of the
       worker's last reply from the server
    dropped fetch: keep computing on the parameters it has
    dropped push:  the server re-applies this worker's last gradient, with that
                   gradient's original version (so its staleness keeps growing)
    a worker's first push always goes through

``k_push`` / ``k_fetch`` instead transmit at every k-th opportunity (Dean et al.).
With ``c_push = c_fetch = 0`` nothing is dropped and the run is FASGD's, bit for bit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fred.numerics import rng
from fred.scenario.registry import register
from fred.simulation.engine import Simulation, Worker
from strategies._parameter_server import Gate, run_parameter_server
from strategies.fasgd import FASGD, rule_for


class BFASGD(FASGD):
    name: Literal["bfasgd"] = "bfasgd"  # type: ignore[assignment]
    c_push: float = Field(default=0.0, ge=0, description="push threshold constant; 0 never drops")
    c_fetch: float = Field(default=0.0, ge=0, description="fetch threshold constant; 0 never drops")
    k_push: int | None = Field(default=None, ge=1, description="push every k-th opportunity instead")
    k_fetch: int | None = Field(default=None, ge=1, description="fetch every k-th opportunity instead")
    drop_eps: float = Field(default=1e-4, gt=0)

    @model_validator(mode="after")
    def _one_policy_each(self) -> "BFASGD":
        for kind in ("push", "fetch"):
            if getattr(self, f"k_{kind}") is not None and getattr(self, f"c_{kind}") > 0:
                raise ValueError(f"give c_{kind} (probabilistic) or k_{kind} (every k-th), not both")
        return self


def transmit_probability(c: float, v: float, eps: float) -> float:
    """The paper's ``1 / (1 + c / (v + eps))``: near 1 when the statistic is large."""
    return 1.0 / (1.0 + c / (v + eps))


def _decider(config: BFASGD, kind: str, seed: int, workers: int):
    every = getattr(config, f"k_{kind}")
    if every is not None:
        return lambda w, opportunity, v: opportunity % every == 0
    c = getattr(config, f"c_{kind}")
    streams = [rng.stream(seed, "bfasgd", kind, i) for i in range(workers)]

    def decide(w: Worker, opportunity: int, v: float | None) -> bool:
        r = streams[w.index].random()  # drawn at every opportunity, so the stream's use is fixed
        return bool(r < transmit_probability(c, v or 0.0, config.drop_eps))

    return decide


@register(BFASGD)
def start(sim: Simulation, config: BFASGD):
    n = len(sim.workers)
    gate = Gate(_decider(config, "push", sim.seed, n), _decider(config, "fetch", sim.seed, n))
    return run_parameter_server(sim, rule_for(config), config.gradients_per_update(n), config.clock, gate)
