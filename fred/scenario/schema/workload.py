"""The ``workload`` section: a large model's profile, buckets and timing-only runs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fred.scenario import workloads
from fred.scenario.schema.base import PositiveFloat, Section

# The workload library's names (fred/scenario/workloads.json), so that a misspelt one is refused listing them
# all.
ProfileName = Literal[tuple(workloads.names())]  # type: ignore[valid-type]


class WorkloadConfig(Section):
    profile: ProfileName | None = Field(  # type: ignore[valid-type]
        default=None,
        description="a model of the workload library (docs/workloads.md): its parameter bytes per "
        "message, and its training FLOPs per example when cluster.compute.device_flops is given",
    )
    param_bytes: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="bytes of one gradient or parameter message on the wire"
    )
    flops_per_example: PositiveFloat | None = Field(
        default=None, description="time compute as if one example cost this many FLOPs"
    )
    timing_only: bool = Field(
        default=False,
        description="simulate the timing without computing gradients: no losses, no parameters "
        "(scale studies; only strategies registered with timing_only)",
    )
    bucket_bytes: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="all-reduce gradients in buckets of about this many bytes, each as soon as the backward "
        "pass has made it (PyTorch DDP's bucket_cap_mb: 25 MiB = 26214400); cut from the profile's layers, "
        "or "
        "the scenario's own model's (a built-in kind)",
    )

    def resolved_param_bytes(self) -> int | None:
        if self.param_bytes is not None:
            return self.param_bytes
        return workloads.load(self.profile).timed_param_bytes if self.profile else None

    def resolved_flops_per_example(self) -> float | None:
        """FLOPs per example to time compute with (a profile's apply only with device_flops)."""
        if self.flops_per_example is not None:
            return self.flops_per_example
        return workloads.load(self.profile).timed_flops_per_example if self.profile else None
