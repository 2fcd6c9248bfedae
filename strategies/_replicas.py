"""Model replicas of several workers each, synchronous data parallel inside (DiLoCo, asynchronous
Local-SGD): the field that sizes them and the refusal of a size that does not divide the workers."""

from __future__ import annotations

from typing import Any

from pydantic import Field


def replica_workers_field() -> Any:
    """``replica_workers``: workers a model replica, 1 by default."""
    return Field(
        default=1,
        ge=1,
        description="workers a model replica, synchronous data parallel inside it; must divide "
        "cluster.workers (cluster.workers / replica_workers replicas)",
    )


def check_replicas(replica_workers: int, workers: int) -> None:
    """Refuse replicas that do not split ``workers`` evenly, naming the divisors that would."""
    if workers % replica_workers:
        divisors = ", ".join(str(d) for d in range(1, workers + 1) if workers % d == 0)
        raise ValueError(
            f"strategy.replica_workers is {replica_workers} but cluster.workers is {workers}, which it "
            f"does not divide: replicas are replica_workers workers each; use a divisor of {workers}: "
            f"{divisors}"
        )
