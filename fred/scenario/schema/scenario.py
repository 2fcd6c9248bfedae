"""The whole scenario: its sections, the checks across them, its resolved form and digest, and the
quantities the checks derive from it (step times, work, cadences)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, NamedTuple

from pydantic import Field, ValidationInfo, field_validator, model_validator

from fred._version import __version__
from fred.scenario import model_workloads, registry, workloads
from fred.scenario.schema.base import Section
from fred.scenario.schema.cluster import ClusterConfig
from fred.scenario.schema.data import SEQUENCE_SOURCES, DataConfig
from fred.scenario.schema.faults import FaultsConfig
from fred.scenario.schema.model import ModelConfig, default_model, kinds_taking
from fred.scenario.schema.network import NetworkConfig
from fred.scenario.schema.stop import EvalConfig, StopConfig
from fred.scenario.schema.strategy import (
    GradientSteps,
    StrategyConfig,
    _buckets_by_default,
    _validate_strategy,
    with_default_tile,
)
from fred.scenario.schema.workload import WorkloadConfig

# with "-s<seed>-<hash>", ".partial-<host>-<pid>" or ".checkpoint", a run directory's name stays under 255
MAX_NAME_BYTES = 100


class Scenario(Section):
    """One run: what to train, on which simulated cluster, with which strategy, until when."""

    name: str = "run"
    seed: Annotated[int, Field(ge=0)] = 0
    model: ModelConfig = Field(default_factory=default_model)
    data: DataConfig = Field(default_factory=DataConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    strategy: StrategyConfig
    stop: StopConfig
    eval: EvalConfig = Field(default_factory=EvalConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)

    @model_validator(mode="before")
    @classmethod
    def _written_for(cls, data: Any) -> Any:
        # fred: "0.2" states the fred the file is written for: checked here, and no part of the
        # resolved scenario (a run's digest does not depend on it).
        if isinstance(data, dict) and "fred" in data:
            refusal = written_for_refusal(data["fred"])
            if refusal:
                raise ValueError(refusal)
            data = {key: value for key, value in data.items() if key != "fred"}
        return data

    @field_validator("strategy", mode="before")
    @classmethod
    def _dispatch_strategy(cls, value: Any, info: ValidationInfo) -> StrategyConfig:
        # data comes before strategy, so its batch is known here: a strategy naming no exact_tile
        # takes the batch's default tile, and the resolved scenario holds it.
        config = _validate_strategy(value)
        data = info.data.get("data")
        return with_default_tile(config, data.batch_size) if isinstance(data, DataConfig) else config

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        _check_model_data(self)
        compute = self.cluster.compute
        if self.workload.flops_per_example is not None and compute.device_flops is None:
            raise ValueError(
                "workload.flops_per_example needs cluster.compute.device_flops to turn FLOPs into seconds"
            )
        if compute.step_time_s is None and compute.device_flops is None:
            raise ValueError(
                "cluster.compute needs step_time_s, or device_flops with flops_per_example or a workload"
            )
        if (
            compute.step_time_s is None
            and compute.flops_per_example is None
            and self.workload.resolved_flops_per_example() is None
            and model_workloads.scenario_workload(self) is None
        ):
            raise ValueError(
                "cluster.compute.device_flops needs flops_per_example (here or in workload): fred derives a "
                "built-in model's own FLOPs only from data whose shape the scenario tells (not "
                f"{self._shape_unknown()}); give cluster.compute.flops_per_example or workload.profile"
            )
        self.strategy.check(self)
        _check_tile(self)
        per_node = self.cluster.devices_per_node * self.cluster.workers_per_device
        sites = self.network.sites
        if sites is not None and sum(sites.nodes) * per_node != self.cluster.workers:
            raise ValueError(
                f"network.sites.nodes {sites.nodes} hold {sum(sites.nodes)} nodes of {per_node} worker"
                f"{'s' * (per_node != 1)}, and cluster.workers {self.cluster.workers} make "
                f"{self.cluster.workers // per_node} nodes; give sites that add up to "
                f"{self.cluster.workers // per_node} nodes, or {sum(sites.nodes) * per_node} workers"
            )
        if self.network.hierarchical and per_node == 1 and self.network.hierarchy == "node":
            raise ValueError(
                "network.hierarchical: true reduces inside each node first, and every node here holds one "
                "worker (cluster.devices_per_node and workers_per_device are 1); give nodes several "
                "workers (devices_per_node: 8) or drop hierarchical"
            )
        if (
            self.workload.bucket_bytes is not None
            and self.workload.profile is None
            and not self.model.layers_known
        ):
            raise ValueError(
                f"workload.bucket_bytes {self.workload.bucket_bytes} needs workload.profile with a "
                f"{self.model.kind} model: buckets are cut from a model's layers, in backward order, and "
                f"fred knows the built-in models' only; name one of: {', '.join(workloads.names())}"
            )
        if self.cluster.compute.bucket_overhead_s and not self.strategy.buckets_gradients():
            buckets = ", ".join(s.name for s in registry.all_strategies() if _buckets_by_default(s.config))
            raise ValueError(
                f"cluster.compute.bucket_overhead_s {self.cluster.compute.bucket_overhead_s:g}: strategy "
                f"{self.strategy.name!r} does not all-reduce gradients as the backward pass makes them, so "
                f"it has no buckets to pay for; drop bucket_overhead_s or use {buckets}"
            )
        if self.workload.bucket_bytes is not None and not self.strategy.buckets_gradients():
            buckets = ", ".join(s.name for s in registry.all_strategies() if _buckets_by_default(s.config))
            raise ValueError(
                f"workload.bucket_bytes: strategy {self.strategy.name!r} does not all-reduce gradients as "
                f"the backward pass makes them; drop bucket_bytes or use {buckets}"
            )
        _check_faults(self)
        _check_durations(self)
        _check_cadences(self)
        if self.workload.timing_only:
            _check_timing_only(self)
        return self

    def _shape_unknown(self) -> str:
        """What keeps the scenario from telling its model's FLOPs (for the refusal's message)."""
        if not self.model.layers_known:
            return f"a {self.model.kind} model, whose layers fred does not know"
        source = self.data.source
        if source.kind == "text":
            return "a text file read by character: its vocabulary is the file's; give model.vocab"
        return f"data.source.kind {source.kind}, whose shape only its files tell"

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not value or any(c in value for c in "/\\\0") or value.startswith("."):
            raise ValueError(
                f"got {value[:100]!r}; use a plain, non-empty name without '/', '\\' or a leading '.'"
            )
        # else found only as the run directory is made, after the run:
        if len(value.encode("utf-8")) > MAX_NAME_BYTES:
            raise ValueError(
                f"got {value[:40]!r}... ({len(value):,} characters); use at most {MAX_NAME_BYTES} bytes "
                "(as many plain ASCII characters): it begins the run directory's name, and a file name "
                "has at most 255"
            )
        return value

    def resolved(self) -> dict[str, Any]:
        """The fully resolved scenario as plain JSON-compatible data (defaults filled in)."""
        data = self.model_dump(mode="json")
        data["strategy"] = self.strategy.model_dump(mode="json")
        return data

    def digest(self) -> str:
        """SHA-256 of the resolved scenario in canonical JSON: equal scenarios, equal digest."""
        canonical = json.dumps(self.resolved(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def written_for_refusal(version: Any) -> str | None:
    """Why a scenario whose top-level ``fred`` key is ``version`` cannot be read by this fred
    (a version newer than this fred's major.minor, or not a version); None if it can. An older
    version is read: fred reads the files of its earlier releases (CHANGELOG.md)."""
    ours = tuple(int(p) for p in __version__.split(".")[:2])
    parts = version.split(".") if isinstance(version, str) else []
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        quoted = f'; write it as a string, fred: "{version}"' if isinstance(version, float) else ""
        return (
            f"fred: got {repr(version)[:40]}; give the fred version the scenario is written for as "
            f'"MAJOR.MINOR" (this fred is {ours[0]}.{ours[1]}){quoted}'
        )
    wanted = (int(parts[0]), int(parts[1]))
    if wanted <= ours:
        return None
    return (
        f"fred: the scenario is written for fred {version}, newer than this fred {__version__}: it may "
        f"use keys or meanings this fred does not have (CHANGELOG.md); upgrade fred (pip install -U "
        f'fred), or set fred: "{ours[0]}.{ours[1]}" once the scenario uses only what this fred '
        "documents"
    )


MAX_CADENCE_EVENTS = 100_000  # evaluations, or server checkpoints, in one run: past this, a typo, not a plan
MAX_STEPS = 100_000_000  # gradient steps of all workers in one run: days of computing, or a typo
CLOCK_RESOLUTION = (
    2.0**-40
)  # a step shorter than this fraction of the time it starts at barely moves the clock


def base_step_time_s(scenario: Scenario) -> float:
    """Seconds per batch at speed 1, before jitter and stragglers."""
    compute = scenario.cluster.compute
    flops = scenario.workload.resolved_flops_per_example() or compute.flops_per_example
    if flops is not None and compute.device_flops is not None:  # a profile's FLOPs need device_flops
        return flops * scenario.data.batch_size / compute.device_flops
    if compute.step_time_s is not None:
        return compute.step_time_s
    own = model_workloads.scenario_workload(scenario)  # device_flops alone: the model's own training FLOPs
    if own is not None and compute.device_flops is not None:
        return own.flops_per_example * scenario.data.batch_size / compute.device_flops
    raise ValueError("cluster.compute needs step_time_s, or flops_per_example with device_flops")


def speed_spans(scenario: Scenario, worker: int) -> list[tuple[float, float, str]]:
    """``worker``'s steps as the scenario times them, before jitter: ``(from_s, step_s, field)``
    for each span of one speed, ``field`` naming what set it."""
    cluster = scenario.cluster
    slow, delay_s = 1.0, 0.0
    for s in cluster.stragglers:
        if s.worker == worker:
            slow, delay_s = slow * s.slow_factor, delay_s + s.delay_s
    base_s = base_step_time_s(scenario) * slow
    field = f"cluster.speed.{worker}" if worker in cluster.speed else "cluster.compute"
    spans = [(0.0, base_s / cluster.speed.get(worker, 1.0) + delay_s, field)]
    changes = sorted((c.at_s, i, c.speed) for i, c in enumerate(cluster.speed_changes) if c.worker == worker)
    for at_s, i, speed in changes:
        spans.append((at_s, base_s / speed + delay_s, f"cluster.speed_changes.{i}.speed"))
    return spans


def worker_steps(scenario: Scenario, until_s: float) -> float:
    """Gradient steps all workers take in ``until_s`` simulated seconds computing without a
    pause, as the scenario times them: more than any run of it takes in that time."""
    total = 0.0
    for worker in range(scenario.cluster.workers):
        spans = speed_spans(scenario, worker)
        for (from_s, step_s, _), (to_s, _, _) in zip(spans, [*spans[1:], (until_s, 0.0, "")]):
            total += max(min(to_s, until_s) - from_s, 0.0) / step_s
    return total


def fastest_step(scenario: Scenario) -> tuple[float, str]:
    """The shortest step any worker takes (jitter's rare short draws allowed for), and what set it."""
    jitter = scenario.cluster.jitter
    shrink = math.exp(-4 * jitter.sigma) if jitter.kind == "lognormal" else 1.0  # 1 draw in 30,000 is shorter
    step_s, field = min(
        (step_s, field)
        for w in range(scenario.cluster.workers)
        for _, step_s, field in speed_spans(scenario, w)
    )
    return step_s * shrink, field


# one step or one message, in simulated seconds (about 32 years): longer is a typo in a speed or a rate
MAX_ACTIVITY_S = 1e9


def _check_durations(scenario: Scenario) -> None:
    """Refuse a speed, a rate or a time that makes one step or one message last more than
    MAX_ACTIVITY_S: ``speed: {0: 5e-324}`` would make a step of inf s, and the run stall waiting for it."""
    cluster = scenario.cluster
    compute = cluster.compute
    flops = scenario.workload.resolved_flops_per_example() or compute.flops_per_example
    timed_by_flops = flops is not None and compute.device_flops is not None
    base_s = base_step_time_s(scenario)
    if not base_s <= MAX_ACTIVITY_S:
        if timed_by_flops:
            least = flops * scenario.data.batch_size / MAX_ACTIVITY_S
            _too_long(
                "cluster.compute.device_flops",
                compute.device_flops,
                f"a step at speed 1 would take {base_s:.3g} s "
                f"({flops:.3g} FLOPs x {scenario.data.batch_size} examples / device_flops)",
                f"give at least {least:.3g}",
            )
        _too_long(
            "cluster.compute.step_time_s",
            base_s,
            "a step at speed 1 would take that long",
            f"give at most {MAX_ACTIVITY_S:g}",
        )
    times = [
        ("cluster.compute.host_overhead_s", compute.host_overhead_s),
        ("cluster.random_straggle.delay_s", cluster.random_straggle.delay_s),
        *((f"cluster.stragglers.{i}.delay_s", s.delay_s) for i, s in enumerate(cluster.stragglers)),
    ]
    for field, seconds in times:
        if not seconds <= MAX_ACTIVITY_S:
            _too_long(
                field,
                seconds,
                "every step it delays would take that long",
                f"give at most {MAX_ACTIVITY_S:g}",
            )
    _check_steps(scenario, base_s)
    _check_messages(scenario)
    _check_fault_times(scenario)


def _check_steps(scenario: Scenario, base_s: float) -> None:
    """Each worker's steps at each of its speeds (stragglers' slow factors included) last at most
    MAX_ACTIVITY_S."""
    cluster = scenario.cluster
    named = sorted(
        set(cluster.speed)
        | {s.worker for s in cluster.stragglers}
        | {c.worker for c in cluster.speed_changes}
    )
    for worker in named:
        slow_s = base_s
        for i, straggler in enumerate(cluster.stragglers):
            if straggler.worker != worker:
                continue
            step_s = slow_s * straggler.slow_factor
            if not step_s <= MAX_ACTIVITY_S:  # the first factor that goes past: those before it fit
                factors = "the slow factors" + (" up to it" if slow_s != base_s else "")
                _too_long(
                    f"cluster.stragglers.{i}.slow_factor",
                    straggler.slow_factor,
                    f"worker {worker}'s steps would take {step_s:.3g} s ({base_s:.3g} s x {factors})",
                    f"give at most {MAX_ACTIVITY_S / slow_s:.3g}",
                )
            slow_s *= straggler.slow_factor
        speeds = [(f"cluster.speed.{worker}", cluster.speed[worker])] if worker in cluster.speed else []
        speeds += [
            (f"cluster.speed_changes.{i}.speed", c.speed)
            for i, c in enumerate(cluster.speed_changes)
            if c.worker == worker
        ]
        for field, speed in speeds:
            step_s = slow_s / speed
            if not step_s <= MAX_ACTIVITY_S:
                _too_long(
                    field,
                    speed,
                    f"worker {worker}'s steps would take {step_s:.3g} s ({slow_s:.3g} s / {speed:.3g})",
                    f"give a speed of at least {slow_s / MAX_ACTIVITY_S:.3g}",
                )


def _check_messages(scenario: Scenario) -> None:
    """A message over each link (the model's bytes, or one byte where the model's size is not known
    before it is built) lasts at most MAX_ACTIVITY_S: latency, transfer and reduction each."""
    network = scenario.network
    known = scenario.workload.resolved_param_bytes()
    nbytes = known or 1
    message = f"a message of {nbytes:,} bytes" if known else "one byte"
    most = f"give at most {MAX_ACTIVITY_S:g}"
    for where, latency_s, rate_field, rate_bps, share in _links(network):
        if not latency_s <= MAX_ACTIVITY_S:
            _too_long(f"{where}.latency_s", latency_s, "every message would wait that long", most)
        transfer_s = nbytes / rate_bps / share
        if not transfer_s <= MAX_ACTIVITY_S:
            rate = f"{rate_bps:.3g} bytes/s"
            rate += f" x {share:.3g} (efficiency / oversubscription)" if share != 1 else ""
            field, value, fix = _slow_part(network, nbytes, f"{where}.{rate_field}", rate_bps, share)
            _too_long(field, value, f"{message} would take {transfer_s:.3g} s at {rate}", fix)
    if not network.sync_s <= MAX_ACTIVITY_S:
        _too_long("network.sync_s", network.sync_s, "every all-reduce would wait that long", most)
    if not nbytes * network.reduce_s_per_byte <= MAX_ACTIVITY_S:
        _too_long(
            "network.reduce_s_per_byte",
            network.reduce_s_per_byte,
            f"reducing {message} would take {nbytes * network.reduce_s_per_byte:.3g} s",
            f"give at most {MAX_ACTIVITY_S / nbytes:.3g}",
        )


def _links(network: NetworkConfig) -> list[tuple[str, float, str, float, float]]:
    """Every link a message may cross, as ``(where, latency_s, its rate's field, bytes/s, the
    transport's share of them)``: the workers' network, a node's, the server's, a site's."""
    intra = network.intra_node
    links = [
        (
            "network",
            network.latency_s,
            "bandwidth_bps",
            network.bandwidth_bps,
            network.efficiency / network.oversubscription,
        ),
        (
            "network.intra_node",
            intra.latency_s,
            "busbw_bps" if intra.busbw_bps is not None else "bandwidth_bps",
            intra.rate_bps(),
            1.0,
        ),
    ]
    if network.server is not None:
        server = network.server
        links.append(
            ("network.server", server.latency_s, "bandwidth_bps", server.bandwidth_bps, network.efficiency)
        )
    if network.sites is not None:  # each site's wide-area link, at its line rate
        sites = network.sites
        links.append(("network.sites", sites.latency_s, "bandwidth_bps", sites.bandwidth_bps, 1.0))
    return links


def _slow_part(
    network: NetworkConfig, nbytes: int, field: str, rate_bps: float, share: float
) -> tuple[str, float, str]:
    """What makes ``nbytes`` too slow over a link of ``rate_bps`` and ``share``: the field, its
    value and the fix. The line rate, or where it would do, the transport's share of it."""
    line_s = nbytes / rate_bps
    if not line_s <= MAX_ACTIVITY_S:
        return field, rate_bps, f"give at least {nbytes / share / MAX_ACTIVITY_S:.3g}"
    if line_s / network.efficiency > MAX_ACTIVITY_S:
        return (
            "network.efficiency",
            network.efficiency,
            f"give at least {line_s * network.oversubscription / MAX_ACTIVITY_S:.3g}",
        )
    return (
        "network.oversubscription",
        network.oversubscription,
        f"give at most {MAX_ACTIVITY_S / (line_s / network.efficiency):.3g}",
    )


def _check_fault_times(scenario: Scenario) -> None:
    """What a fault makes the run wait for lasts at most MAX_ACTIVITY_S too: a server's restart, a
    resend's timeout, a wait for a crashed worker, a degraded link's extra latency and its message
    (``restart_s: 1e300`` would put every later update at 1e300 s). When a fault starts is not bounded:
    a crash after the run's end never happens."""
    faults = scenario.faults
    waits = [
        (
            "faults.sync_timeout_s",
            faults.sync_timeout_s,
            "anyone waiting for a crashed worker would wait that long",
        )
    ]
    waits += [
        (
            f"faults.link_degrade.{i}.extra_latency_s",
            d.extra_latency_s,
            "every message over it would wait that long",
        )
        for i, d in enumerate(faults.link_degrade)
    ]
    if faults.message_loss is not None:
        waits.append(
            (
                "faults.message_loss.retransmit_timeout_s",
                faults.message_loss.retransmit_timeout_s,
                "every lost message would be sent again that late",
            )
        )
    if faults.server_crash is not None:
        down = "the server would be down that long, and every later update would wait for it"
        waits += [
            (f"faults.server_crash.crashes.{i}.restart_s", c.restart_s, down)
            for i, c in enumerate(faults.server_crash.crashes)
        ]
    for field, seconds, what in waits:
        if seconds is not None and not seconds <= MAX_ACTIVITY_S:
            _too_long(field, seconds, what, f"give at most {MAX_ACTIVITY_S:g}")
    known = scenario.workload.resolved_param_bytes()
    nbytes = known or 1
    message = f"a message of {nbytes:,} bytes" if known else "one byte"
    for i, degrade in enumerate(faults.link_degrade):  # each window alone: overlapping windows multiply
        rate_bps = _link_rate_bps(scenario, degrade.entity)
        transfer_s = nbytes / (rate_bps * degrade.bandwidth_factor)
        if not transfer_s <= MAX_ACTIVITY_S:
            _too_long(
                f"faults.link_degrade.{i}.bandwidth_factor",
                degrade.bandwidth_factor,
                f"{message} over {degrade.entity}'s degraded link ({rate_bps:.3g} "
                f"bytes/s x the factor) would take {transfer_s:.3g} s",
                f"give at least {nbytes / rate_bps / MAX_ACTIVITY_S:.3g}",
            )


def _link_rate_bps(scenario: Scenario, entity: str) -> float:
    """The bytes per second of the link a fault of ``entity`` degrades: a site's wide-area link, the
    server's, or a worker's (its node's network link)."""
    network = scenario.network
    if entity.startswith("site") and network.sites is not None:
        return network.sites.bandwidth_bps
    if entity == "server" and network.server is not None:
        return network.server.bandwidth_bps * network.efficiency
    return network.bandwidth_bps * network.efficiency


def _too_long(field: str, value: float, what: str, fix: str) -> None:
    raise ValueError(
        f"{field} is {value:.3g}: {what}, more than the {MAX_ACTIVITY_S:g} simulated seconds (about 32 "
        f"years) one step or message may take (the run would wait for it for ever): {fix}"
    )


class Work(NamedTuple):
    """How much a run computes, as validation bounds it: it ends at ``stop.max_sim_time_s`` or once
    its ``stop.max_updates`` are made, whichever comes first, so it computes the fewer steps."""

    by_time: float  # gradient steps the workers can take in max_sim_time_s (inf without it)
    by_updates: float  # gradient steps the strategy's max_updates take (inf without it)
    fix: str  # what else makes an update take fewer steps, as the strategy says
    at_least_s: (
        float  # the simulated time the run lasts at least: max_sim_time_s, or its updates' steps side by side
    )

    @property
    def steps(self) -> float:
        return min(self.by_time, self.by_updates)


def run_work(scenario: Scenario) -> Work:
    """The scenario's :class:`Work`, steps counted as the strategy counts them."""
    end_s, updates = scenario.stop.max_sim_time_s, scenario.stop.max_updates
    by_time = worker_steps(scenario, end_s) if end_s is not None else math.inf
    by_updates, fix = update_steps(scenario) if updates is not None else (math.inf, "")
    step_s, _ = fastest_step(scenario)
    at_least_s = min(end_s if end_s is not None else math.inf, by_updates / scenario.cluster.workers * step_s)
    return Work(by_time, by_updates, fix, at_least_s)


def update_steps(scenario: Scenario) -> GradientSteps:
    """The gradient steps ``stop.max_updates`` takes, as the strategy counts them."""
    assert scenario.stop.max_updates is not None
    try:
        return scenario.strategy.gradient_steps(scenario, scenario.stop.max_updates)
    except NotImplementedError as err:  # no count where contract 1.1 needs one: named, not a traceback
        raise ValueError(str(err)) from None


def _check_cadences(scenario: Scenario) -> None:
    """Refuse what would take a run for ever: 1e-20 s evaluations or server checkpoints, steps of
    1e-22 s (a speed of 1e20), and steps too short to move the clock."""
    end_s, updates = scenario.stop.max_sim_time_s, scenario.stop.max_updates
    n = scenario.cluster.workers
    for worker in range(n):
        for from_s, step_s, field in speed_spans(scenario, worker):
            if step_s < from_s * CLOCK_RESOLUTION:
                raise ValueError(
                    f"{field}: worker {worker}'s steps from {from_s} s take {step_s:.3g} s, too short to "
                    "move "
                    f"a clock at {from_s} s (its resolution there is {from_s * 2.0**-52:.3g} s): give a "
                    "smaller speed"
                )
    by_time, by_updates, fix, at_least_s = run_work(scenario)
    step_s, field = fastest_step(scenario)
    if min(by_time, by_updates) > MAX_STEPS:
        if by_time <= by_updates:
            workers = f"{n} worker{'s' * (n > 1)} take{'s' * (n == 1)}"
            raise ValueError(
                f"stop.max_sim_time_s is {end_s} s: {workers} {by_time:.3g} steps in it (the fastest "
                f"{step_s:.3g} s, "
                f"from {field}); at most {MAX_STEPS:,}: give a shorter max_sim_time_s, slower steps, or "
                + ("a smaller stop.max_updates" if updates is not None else "stop.max_updates")
            )
        fixes = [
            "a smaller stop.max_updates",
            *([fix] if fix else []),
            "a shorter stop.max_sim_time_s" if end_s is not None else "stop.max_sim_time_s",
        ]
        raise ValueError(
            f"stop.max_updates is {updates}: strategy {scenario.strategy.name} takes {by_updates:.3g} "
            "gradient steps "
            f"of {n} worker{'s' * (n > 1)} for them; at most {MAX_STEPS:,}: give {', '.join(fixes[:-1])} or "
            f"{fixes[-1]}"
        )
    server = scenario.faults.server_crash
    for field, every_s in [
        ("eval.every_s", scenario.eval.every_s),
        ("faults.server_crash.checkpoint_every_s", server.checkpoint_every_s if server else None),
    ]:
        if every_s is None or at_least_s / every_s <= MAX_CADENCE_EVENTS:
            continue
        if at_least_s == end_s:
            raise ValueError(
                f"{field} is {every_s} s: {end_s / every_s:.3g} times in stop.max_sim_time_s {end_s} s; "
                f"give at most {MAX_CADENCE_EVENTS:,} (every_s >= {end_s / MAX_CADENCE_EVENTS:.3g})"
            )
        raise ValueError(
            f"{field} is {every_s} s: at least {at_least_s / every_s:.3g} times in the run, whose "
            f"stop.max_updates {updates} take {at_least_s:.3g} s or more ({n} workers, steps of {step_s:.3g} "
            "s "
            f"at the fastest); give at most {MAX_CADENCE_EVENTS:,} (every_s >= "
            f"{at_least_s / MAX_CADENCE_EVENTS:.3g})"
            + (", or eval.every_updates" if field == "eval.every_s" else "")
        )


def _check_model_data(scenario: Scenario) -> None:
    """Refuse a model that cannot take the data, as far as the scenario tells: sequence labels
    go with the models of sequences alone (and iid sharding); the model's kind refuses the rest."""
    model, data = scenario.model, scenario.data
    source = data.source
    sequences = source.kind in SEQUENCE_SOURCES
    if sequences and model.inputs != "sequences":
        fits = " or ".join(f"model: {{kind: {kind}}}" for kind in kinds_taking("sequences"))
        raise ValueError(
            f"model.kind {model.kind} cannot learn data.source.kind {source.kind}: its labels are the next "
            f"token at every position of a sequence; use {fits}"
        )
    if sequences and data.sharding != "iid":
        raise ValueError(
            f"data.sharding {data.sharding} deals examples out by their class, and a sequence's label is "
            "a token at every position, not one class; use data.sharding: iid"
        )
    model.check_data(data)


def _check_crash_order(faults: FaultsConfig) -> None:
    """Refuse a crash of a worker or server that is already down: the simulation would drop it
    silently, and with it the rejoin or restart time the user gave."""
    by_worker: dict[int, list[tuple[float, int]]] = {}
    for i, crash in enumerate(faults.worker_crash):
        by_worker.setdefault(crash.worker, []).append((crash.at_s, i))
    for worker in sorted(by_worker):
        entries = sorted(by_worker[worker])
        for (_, before), (at_s, i) in zip(entries, entries[1:]):
            back_s = faults.worker_crash[before].rejoin_at_s
            if back_s is None or at_s <= back_s:
                back = f"back at {back_s} s" if back_s is not None else "never back (no rejoin_at_s)"
                raise ValueError(
                    f"faults.worker_crash.{i} crashes worker {worker} at {at_s} s while it is down "
                    f"(faults.worker_crash.{before}: down from {faults.worker_crash[before].at_s} s, "
                    f"{back}); "
                    "a worker can crash again only after it has rejoined"
                )
    crashes = faults.server_crash.crashes if faults.server_crash is not None else []
    order = sorted(range(len(crashes)), key=lambda i: crashes[i].at_s)
    for before, i in zip(order, order[1:]):
        back_s = crashes[before].at_s + crashes[before].restart_s
        if crashes[i].at_s <= back_s:
            raise ValueError(
                f"faults.server_crash.crashes.{i} is at {crashes[i].at_s} s while the server is down "
                f"(crashes.{before}: from {crashes[before].at_s} s, back at {back_s} s); "
                "a server can crash again only after it has restarted"
            )


def _check_faults(scenario: Scenario) -> None:
    """Faults must name workers and links that exist, and behaviours the strategy models."""
    faults, n = scenario.faults, scenario.cluster.workers
    strategy, support = scenario.strategy.name, scenario.strategy.fault_support()
    server = scenario.strategy.has_server()
    entities = [f"worker{i}" for i in range(n)] + (["server"] if server else [])
    sites = scenario.network.sites
    site_links = [f"site{i}" for i in range(len(sites.nodes))] if sites is not None else []
    for i, crash in enumerate(faults.worker_crash):
        if crash.worker >= n:
            raise ValueError(f"faults.worker_crash.{i}.worker is {crash.worker}; workers are 0..{n - 1}")
        if crash.rejoin_at_s is not None and "rejoin" not in support:
            raise ValueError(
                f"faults.worker_crash.{i}.rejoin_at_s: strategy {strategy!r} does not model a worker "
                "rejoining; "
                "remove rejoin_at_s (see docs/failures.md for the strategies that do)"
            )
    _check_crash_order(faults)
    if faults.any() and getattr(scenario.strategy, "clock", "simulated") == "logical":
        raise ValueError(
            "faults are timed in simulated seconds, which clock: logical does not have; use clock: simulated"
        )
    for i, degrade in enumerate(faults.link_degrade):
        if degrade.entity.startswith("site") and degrade.entity not in site_links:
            raise ValueError(
                f"faults.link_degrade.{i}.entity is {degrade.entity!r}; the wide-area links are "
                f"{', '.join(site_links) or 'none (network.sites is not given)'}"
            )
    named = [
        (f"faults.link_degrade.{i}.entity", d.entity)
        for i, d in enumerate(faults.link_degrade)
        if d.entity not in site_links
    ]
    if faults.message_loss is not None:
        named += [
            (f"faults.message_loss.entities.{i}", e) for i, e in enumerate(faults.message_loss.entities)
        ]
    workers = "worker0" if n == 1 else f"worker0..worker{n - 1}"
    for where, entity in named:
        if entity not in entities:
            if server:
                raise ValueError(f"{where} is {entity!r}; links belong to {workers} or server")
            raise ValueError(
                f"{where} is {entity!r}; links belong to {workers} "
                f"(strategy {strategy!r} has no parameter server, so no server link)"
            )
    if faults.server_crash is not None and "server_crash" not in support:
        if server:
            raise ValueError(
                f"faults.server_crash: strategy {strategy!r} does not model its parameter server crashing "
                "(what a checkpoint keeps, what a restart loses); see docs/failures.md for the strategies "
                "that do"
            )
        raise ValueError(
            f"faults.server_crash: strategy {strategy!r} has no parameter server to crash; "
            "use asgd, sasgd, fasgd, bfasgd or ssgd with aggregation: ps"
        )


def _check_tile(scenario: Scenario) -> None:
    """The exact reduction's leaves are tiles of ``exact_tile`` rows: every batch must be whole tiles.
    The default tile divides every batch (:func:`default_tile`), so only a tile the scenario names
    can fail; a timing-only run computes no gradient and has no tiles."""
    tile, batch = scenario.strategy.exact_tile, scenario.data.batch_size
    if scenario.strategy.reduction != "exact" or scenario.workload.timing_only or batch % tile == 0:
        return
    lower = [t for t in (1, 2, 4, 8, 16, 32) if batch % t == 0 and t < tile][-1]
    below, above = batch - batch % tile, batch + tile - batch % tile
    multiples = ", ".join(str(b) for b in (below, above) if b > 0)
    raise ValueError(
        f"strategy.exact_tile is {tile} but data.batch_size {batch} is not a multiple of it: the exact "
        "reduction "
        f"sums tiles of {tile} rows. Set data.batch_size to a multiple of {tile} ({multiples}), "
        "strategy.exact_tile "
        f"to a divisor of {batch} ({lower}; 1 fits any batch) or strategy.reduction: fast"
    )


def _check_timing_only(scenario: Scenario) -> None:
    name = scenario.strategy.name
    if not registry.get(name).timing_only:
        supported = ", ".join(s.name for s in registry.all_strategies() if s.timing_only)
        raise ValueError(
            f"workload.timing_only: strategy {name!r} needs real gradients; timing-only runs support "
            f"{supported}. Pick one of those or set workload.timing_only: false"
        )
    if scenario.stop.target_eval_loss is not None:
        raise ValueError(
            "stop.target_eval_loss is never reached in a timing-only run (there are no losses); "
            "stop on max_updates or max_sim_time_s, or set workload.timing_only: false"
        )
