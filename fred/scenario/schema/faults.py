"""The ``faults`` section: worker and server crashes, lost messages, degraded links."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from fred.scenario.schema.base import NonNegFloat, PositiveFloat, Section


class WorkerCrash(Section):
    """``worker`` stops at ``at_s``; with ``rejoin_at_s`` it comes back then."""

    worker: Annotated[int, Field(ge=0)]
    at_s: NonNegFloat
    rejoin_at_s: PositiveFloat | None = Field(
        default=None, description="when the worker comes back (simulated s)"
    )
    rejoin_from: Literal["global", "own"] = Field(
        default="global", description="global: fetch the current model; own: resume from its stale copy"
    )

    @model_validator(mode="after")
    def _rejoin_after_crash(self) -> "WorkerCrash":
        if self.rejoin_at_s is not None and self.rejoin_at_s <= self.at_s:
            raise ValueError(f"rejoin_at_s ({self.rejoin_at_s}) must be after at_s ({self.at_s})")
        return self


class LinkDegrade(Section):
    """From ``at_s`` for ``duration_s``, ``entity``'s link runs at a fraction of its bandwidth."""

    entity: str = Field(description="whose link: 'worker3', or 'server'")
    at_s: NonNegFloat
    duration_s: PositiveFloat | None = Field(default=None, description="how long; default: to the end")
    bandwidth_factor: Annotated[float, Field(gt=0, le=1)] = 1.0
    extra_latency_s: NonNegFloat = 0.0


class MessageLoss(Section):
    """Each transfer touching ``entities`` (default: every link) is lost with ``probability``."""

    probability: Annotated[float, Field(ge=0, lt=1)] = Field(
        description="at most 0.99: a transfer is sent 1 / (1 - p) times on average"
    )
    retransmit_timeout_s: PositiveFloat = Field(
        description="the sender resends this long after a lost send began"
    )
    entities: list[str] = Field(default_factory=list, description="links affected; empty means all")

    @field_validator("probability")
    @classmethod
    def _sends_end(cls, p: float) -> float:
        # 0.999999999 sent each message a billion times on average: the run never ended.
        if p > MAX_LOSS_PROBABILITY:
            raise ValueError(
                f"got {p}; at most {MAX_LOSS_PROBABILITY}: a lost transfer is sent again until it gets "
                f"through, 1 / (1 - p) = {1 / (1 - p):.3g} times on average here (100 at 0.99)"
            )
        return p


MAX_LOSS_PROBABILITY = 0.99


class ServerCrashAt(Section):
    at_s: NonNegFloat
    restart_s: PositiveFloat = Field(description="seconds until the server is back, from its last checkpoint")


class ServerCrash(Section):
    """Parameter-server crashes: each restarts from the last checkpoint, losing the updates since."""

    checkpoint_every_s: PositiveFloat = Field(description="simulated seconds between server checkpoints")
    crashes: list[ServerCrashAt] = Field(min_length=1)


class FaultsConfig(Section):
    """Injected failures, all timed in simulated seconds and seeded."""

    worker_crash: list[WorkerCrash] = Field(default_factory=list)
    sync_timeout_s: PositiveFloat | None = Field(
        default=None,
        description="how long anyone waiting for a crashed worker waits before going on without it; "
        "null: a strategy that must wait for it fails the run",
    )
    link_degrade: list[LinkDegrade] = Field(default_factory=list)
    message_loss: MessageLoss | None = None
    server_crash: ServerCrash | None = None

    def any(self) -> bool:
        return bool(self.worker_crash or self.link_degrade or self.message_loss or self.server_crash)
