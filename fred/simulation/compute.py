"""How long a worker's gradient step takes in simulated seconds.

The base time comes from the scenario (``step_time_s`` per batch, or FLOPs per
example over device FLOP/s); per-worker speed factors, named stragglers,
lognormal jitter and random straggle events then shape each worker's draws.
Each worker draws from its own stream, in a fixed order, so one worker's
randomness never depends on another's progress.
"""

from __future__ import annotations

import math

import numpy as np

from fred.numerics import rng
from fred.scenario.schema import Scenario, base_step_time_s

NORMALS_AHEAD = (
    64  # a worker's jitter draws taken from its stream at once: the same values, ~30x cheaper each
)


class ComputeModel:
    """Draws per-iteration compute durations for every worker of a scenario."""

    def __init__(self, scenario: Scenario):
        cluster = scenario.cluster
        self.base_step_s = base_step_time_s(scenario)
        self.host_overhead_s = scenario.cluster.compute.host_overhead_s
        self.collective_share = scenario.cluster.compute.collective_share
        self.bucket_overhead_s = scenario.cluster.compute.bucket_overhead_s
        n = cluster.workers
        self.scale = np.array([1.0 / cluster.speed.get(w, 1.0) for w in range(n)])
        self.delay_s = np.zeros(n)
        for s in cluster.stragglers:
            self.scale[s.worker] *= s.slow_factor
            self.delay_s[s.worker] += s.delay_s
        # Python floats from here on: numpy scalar arithmetic costs microseconds per draw.
        self.scale, self.delay_s = self.scale.tolist(), self.delay_s.tolist()
        self.sigma = cluster.jitter.sigma if cluster.jitter.kind == "lognormal" else 0.0
        self.changes = sorted(
            ((c.at_s, c.worker, c.speed) for c in cluster.speed_changes), key=lambda c: c[0]
        )
        self.base_speed = [cluster.speed.get(w, 1.0) for w in range(n)]
        self.straggle = cluster.random_straggle
        self.seed = scenario.seed
        # Made at a worker's first draw: most scenarios draw nothing (no jitter, no random
        # straggle), and making 64 workers' streams up front costs about 1 ms of a run's set-up.
        self._streams: list[np.random.Generator | None] = [None] * n
        # Jitter drawn ahead, last first: a stream's block of normals is the same numbers as as many
        # single draws. Only when the stream draws nothing else (no random straggle between them).
        self._normals: list[list[float]] | None = (
            [[] for _ in range(n)] if self.straggle.probability == 0 else None
        )

    def speed_at(self, worker: int, now_s: float) -> float:
        """The worker's speed factor at ``now_s``: its latest change at or before then."""
        speed = self.base_speed[worker]
        for at_s, who, new in self.changes:
            if at_s > now_s:
                break
            if who == worker:
                speed = new
        return speed

    def duration_s(self, worker: int, now_s: float = 0.0, with_host: bool = True) -> float:
        """The duration of ``worker``'s gradient step starting at ``now_s``, its host overhead
        included unless ``with_host`` is false (a shared device's turn, spent after it)."""
        seconds = self._steady_s(worker, now_s)
        if self.sigma > 0:
            # math.exp, not np.exp: numpy's AVX-512 exp differs from libm's in the last bit
            # (numpy issue 23523), which would make the event trace depend on the CPU.
            seconds *= math.exp(self.sigma * self._normal(worker))
        seconds += self.delay_s[worker]
        if self.straggle.probability > 0 and self._stream(worker).random() < self.straggle.probability:
            seconds += self.straggle.delay_s
        return float(seconds + self.host_overhead_s) if self.host_overhead_s and with_host else float(seconds)

    def expected_step_s(self, worker: int, now_s: float) -> float:
        """``worker``'s step starting at ``now_s`` before jitter and random straggles: its speed
        factor (and changes), straggler slow factor and delay; no host overhead."""
        return float(self._steady_s(worker, now_s) + self.delay_s[worker])

    def _steady_s(self, worker: int, now_s: float) -> float:
        seconds = self.base_step_s * self.scale[worker]
        if self.changes:
            seconds *= self.base_speed[worker] / self.speed_at(worker, now_s)
        return seconds

    def _normal(self, worker: int) -> float:
        """The worker's next standard normal draw."""
        if self._normals is None:
            return float(self._stream(worker).standard_normal())
        ahead = self._normals[worker]
        if not ahead:
            ahead.extend(reversed(self._stream(worker).standard_normal(NORMALS_AHEAD).tolist()))
        return ahead.pop()

    def _stream(self, worker: int) -> np.random.Generator:
        """The worker's own stream: its draws depend on its path alone, not on when it was made."""
        stream = self._streams[worker]
        if stream is None:
            stream = self._streams[worker] = rng.stream(self.seed, "compute", worker)
        return stream
