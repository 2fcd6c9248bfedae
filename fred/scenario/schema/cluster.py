"""The ``cluster`` section: workers, nodes and devices, compute speed, jitter and stragglers."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from fred.scenario.schema.base import NonNegFloat, PositiveFloat, Section


class Jitter(Section):
    kind: Literal["none", "lognormal"] = "none"
    # exp(sigma * N(0, 1)) scales a step: past ~10 the factor overflows a float on a rare draw
    sigma: Annotated[float, Field(ge=0, le=10)] = 0.0

    @model_validator(mode="after")
    def _sigma_with_its_kind(self) -> "Jitter":
        # Either half alone was accepted and gave steps of exactly step_time_s: no jitter, silently.
        if self.kind == "none" and self.sigma != 0:
            raise ValueError(
                f"sigma {self.sigma} is given with kind 'none', which ignores it; add kind: lognormal"
            )
        if self.kind == "lognormal" and "sigma" not in self.model_fields_set:
            raise ValueError("kind: lognormal needs its sigma, e.g. {kind: lognormal, sigma: 0.1}")
        return self


class Straggler(Section):
    worker: Annotated[int, Field(ge=0)]
    slow_factor: Annotated[float, Field(ge=1)] = 1.0
    delay_s: NonNegFloat = 0.0


class RandomStraggle(Section):
    probability: Annotated[float, Field(ge=0, le=1)] = 0.0
    delay_s: NonNegFloat = 0.0


class SpeedChange(Section):
    """From ``at_s`` on (simulated seconds), ``worker`` runs at ``speed`` (a drifting machine)."""

    worker: Annotated[int, Field(ge=0)]
    at_s: NonNegFloat
    speed: PositiveFloat


class ComputeConfig(Section):
    step_time_s: PositiveFloat | None = Field(
        default=None, description="seconds per batch at speed 1 (0.01 when cluster.compute is left out)"
    )
    flops_per_example: PositiveFloat | None = None
    device_flops: PositiveFloat | None = None
    host_overhead_s: NonNegFloat = Field(
        default=0.0,
        description="host time added to every step (framework, copies, data loading), whatever the speed",
    )
    collective_share: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0,
        description="the share of a device's compute that a collective of its own in flight takes (NCCL's "
        "kernels "
        "on its SMs and memory bandwidth): compute runs at 1 - share of its speed meanwhile; 0: no "
        "interference",
    )
    bucket_overhead_s: NonNegFloat = Field(
        default=0.0,
        description="compute time per gradient bucket per step in an all-reduced backward pass (DDP copying "
        "a "
        "bucket's gradients into its flat buffer and launching its all-reduce): the bucket is ready after it",
    )

    @model_validator(mode="after")
    def _one_compute_model(self) -> "ComputeConfig":
        if self.step_time_s is not None and self.flops_per_example is not None:
            raise ValueError("give either step_time_s, or flops_per_example with device_flops, not both")
        if self.flops_per_example is not None and self.device_flops is None:
            raise ValueError("flops_per_example needs device_flops to turn FLOPs into seconds")
        return self


class ClusterConfig(Section):
    workers: Annotated[int, Field(ge=1, le=4096)] = 1
    compute: ComputeConfig = Field(default_factory=lambda: ComputeConfig(step_time_s=0.01))
    speed: dict[int, PositiveFloat] = Field(
        default_factory=dict, description="per-worker speed factor (default 1); 2 means twice as fast"
    )
    jitter: Jitter = Field(default_factory=Jitter)
    stragglers: list[Straggler] = Field(default_factory=list)
    random_straggle: RandomStraggle = Field(default_factory=RandomStraggle)
    speed_changes: list[SpeedChange] = Field(default_factory=list)
    workers_per_device: Annotated[int, Field(ge=1)] = Field(
        default=1,
        description="worker processes sharing one device: they take turns computing (first come, first "
        "served)",
    )
    devices_per_node: Annotated[int, Field(ge=1)] = Field(
        default=1,
        description="devices in one node: they share its NIC and talk to each other over network.intra_node",
    )

    @field_validator("speed")
    @classmethod
    def _in_worker_order(cls, speed: dict[int, float]) -> dict[int, float]:
        # the resolved scenario.yaml is then the same text whatever order the input gave
        return dict(sorted(speed.items()))

    @model_validator(mode="after")
    def _workers_exist(self) -> "ClusterConfig":
        named = [(f"speed.{w}", w) for w in self.speed]
        named += [(f"stragglers.{i}.worker", s.worker) for i, s in enumerate(self.stragglers)]
        named += [(f"speed_changes.{i}.worker", c.worker) for i, c in enumerate(self.speed_changes)]
        bad = [(path, w) for path, w in named if not 0 <= w < self.workers]
        if bad:
            path, w = bad[0]
            raise ValueError(
                f"{path}: worker index {w} does not exist; workers are 0..{self.workers - 1} "
                f"(cluster.workers is {self.workers}): drop the entry or give more workers"
            )
        return self

    @model_validator(mode="after")
    def _nodes_are_full(self) -> "ClusterConfig":
        per_node = self.workers_per_device * self.devices_per_node
        if self.workers % per_node:
            raise ValueError(
                f"workers: {self.workers} workers do not fill whole nodes of devices_per_node "
                f"{self.devices_per_node} x "
                f"workers_per_device {self.workers_per_device} = {per_node} workers; give a multiple of "
                f"{per_node} workers "
                f"or change devices_per_node / workers_per_device"
            )
        return self
