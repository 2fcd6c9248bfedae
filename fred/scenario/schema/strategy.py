"""The ``strategy`` section's base class, its dispatch to the registered strategies, and tiles."""

from __future__ import annotations

import warnings
from typing import Annotated, Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, Field, field_validator, model_validator

from fred.scenario import registry
from fred.scenario.schema.base import Section
from fred.scenario.schema.optimizer import (
    ConstantSchedule,
    OptimizerConfig,
    ScheduleConfig,
    SGDOptimizer,
    _optimizer_by_kind,
    _schedule_by_kind,
)

DEFAULT_TILE_ROWS = 8  # the default tile's rows, for every batch it divides (docs/determinism.md)
MAX_TILE_ROWS = 256


def default_tile(batch_size: int) -> int:
    """The rows of a tile for a scenario that names no ``exact_tile``: the largest divisor of
    ``batch_size`` not above :data:`DEFAULT_TILE_ROWS`. Every multiple of 8 takes 8 (the tile
    fred's goldens are recorded with), 12 takes 6, 4 takes 4, 20, 50 and 100 take 5, 1 and a prime
    above 8 take 1: a batch is always whole tiles, as large as the default allows (the fewest leaves)."""
    return max(t for t in range(1, DEFAULT_TILE_ROWS + 1) if batch_size % t == 0)


class GradientSteps(NamedTuple):
    """What a number of updates costs a strategy in gradient steps: the bounds on a run's work
    count them (:func:`_check_work`), and a refusal says what to lower."""

    steps: float  # gradient steps of all workers together, the updates' own (steps in flight aside)
    # besides a smaller stop.max_updates, what makes an update take fewer ("a smaller strategy.sync_every")
    fix: str = ""


class StrategyConfig(Section):
    """Base of every strategy's hyper-parameters; each strategy module subclasses it."""

    name: str
    reduction: Literal["exact", "fast"] = Field(
        default="exact",
        description="exact: fixed pairwise summation tree (bit-reproducible across layouts); "
        "fast: one batched gradient per worker",
    )
    exact_tile: Annotated[int, Field(ge=1, le=MAX_TILE_ROWS)] = Field(
        default=DEFAULT_TILE_ROWS,
        description="rows per leaf of the exact reduction's tree, each leaf one batched gradient; "
        "data.batch_size must be a multiple of it; 1: per-example leaves, for any batch. Default: the "
        "largest divisor of data.batch_size not above 8 (8 for every multiple of 8)",
    )
    optimizer: OptimizerConfig = Field(
        default_factory=SGDOptimizer,
        description="what turns a gradient into a step: sgd (default), adam or adamw",
    )
    lr_schedule: ScheduleConfig = Field(
        default_factory=ConstantSchedule,
        description="the learning rate by optimizer step, starting from (or peaking at) lr",
    )

    _optimizer_kind = field_validator("optimizer", mode="before")(_optimizer_by_kind)
    _schedule_kind = field_validator("lr_schedule", mode="before")(_schedule_by_kind)

    @model_validator(mode="after")
    def _optimizer_applies(self) -> "StrategyConfig":
        # A strategy that cannot apply the optimizer asked for says why; it is never ignored.
        refusal = self.optimizer_refusal()
        if refusal:
            raise ValueError(refusal)
        return self

    # The strategy contract the strategy is written for, "MAJOR.MINOR" (fred.strategy_api; a plug-in
    # states it so that a fred implementing another contract names the mismatch). None: 1.0, the
    # contract before versions, whose strategies may lack gradient_steps (deprecated).
    strategy_api: ClassVar[str | None] = None

    # Whether start() builds its update with fred.numerics.optim.optimizer_for(config). A strategy
    # that does not (a plug-in with its own update) refuses any optimizer but plain SGD at
    # constant lr, rather than run without it.
    applies_optimizer: ClassVar[bool] = False

    def optimizer_refusal(self) -> str | None:
        """Why this strategy cannot apply ``optimizer`` and ``lr_schedule``; None if it can."""
        if self.applies_optimizer or (
            self.optimizer == SGDOptimizer() and self.lr_schedule == ConstantSchedule()
        ):
            return None
        return (
            f"strategy {self.name!r} applies its own update, not a configurable optimizer; drop optimizer "
            "and lr_schedule (strategies that apply them: docs/strategies.md)"
        )

    def check(self, scenario: "Scenario") -> None:  # noqa: F821 (the section Scenario holds: no circle)
        """Raise ``ValueError`` naming the fix if this strategy cannot run ``scenario``."""

    def fault_support(self) -> frozenset[str]:
        """Optional fault behaviours this strategy models: ``rejoin``, ``server_crash``."""
        return frozenset()

    def has_server(self) -> bool:
        """Whether the strategy runs a parameter server, whose ``server`` link faults may name."""
        return "server_crash" in self.fault_support()

    def buckets_gradients(self) -> bool:
        """Whether the strategy all-reduces each gradient as the backward pass makes it, so that
        ``workload.bucket_bytes`` applies (synchronous all-reduce SGD)."""
        return False

    def model_copies_per_worker(self) -> int:
        """Parameter-sized arrays the strategy holds per worker (the parameters it read and its
        gradient; a strategy keeping a replica per worker holds more): the memory estimate's."""
        return 2

    def gradient_steps(self, scenario: "Scenario", updates: int) -> GradientSteps:  # noqa: F821
        """The gradient steps all workers together take for the run to make ``updates`` updates,
        as ``stop.max_updates`` counts them (one per gradient for ASGD, ``n`` a round for SSGD,
        ``n * sync_every`` for Local SGD, a pipeline's fill besides), with what else to lower
        when they are too many. Every strategy answers it: validation bounds a run's work with it
        (``stop.max_updates: 5`` of Local SGD with ``sync_every: 1e9`` would compute for ever), and
        the shortest time the updates can take (steps / workers x the fastest step).

        A plug-in of contract 1.0 (``strategy_api`` not stated, or ``"1.0"``) that does not
        define it gets one gradient step an update, ASGD's count and the fewest any strategy
        takes, with a ``DeprecationWarning``: the bounds then refuse the fewest of its runs, and a
        strategy whose updates take more steps (a round of every worker, local steps) computes
        more than the bounds count. Contract 1.1, and
        every strategy of fred's own, must define it."""
        if registry.api_version(self.strategy_api or "1.0") < (1, 1) and _plugin(self.name):
            warnings.warn(
                f"strategy {self.name!r} ({type(self).__module__}) does not say how many gradient steps "
                "its updates take; fred counts one an update. Define gradient_steps(scenario, updates) on "
                'its config and state strategy_api = "1.1" (docs/strategy-contract.md): the count is '
                "required from fred 0.3",
                DeprecationWarning,
                stacklevel=2,
            )
            return GradientSteps(updates)
        required = f", which strategy_api {self.strategy_api} requires" if self.strategy_api else ""
        raise NotImplementedError(
            f"strategy {self.name!r} does not say how many gradient steps its updates take: its config needs "
            "a "
            f"gradient_steps(scenario, updates) method{required} (docs/strategy-contract.md)"
        )


def _plugin(name: str) -> bool:
    """Whether the strategy ``name`` is an installed plug-in's (not one of fred's own)."""
    try:
        return registry.get(name).distribution is not None
    except ValueError:
        return False


def _validate_strategy(value: Any) -> StrategyConfig:
    if isinstance(value, StrategyConfig):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError(f"strategy needs a 'name', one of: {', '.join(registry.names())}")
    config_cls = registry.config_class(value["name"])
    if not issubclass(config_cls, StrategyConfig):  # a plug-in's mistake, not the scenario's
        raise TypeError(
            f"strategy {value['name']!r} registered {config_cls.__name__}, which is not a StrategyConfig"
        )
    return config_cls.model_validate(value)


def with_default_tile(config: StrategyConfig, batch_size: int) -> StrategyConfig:
    """``config`` with the default tile for ``batch_size`` (:func:`default_tile`) where it names
    no ``exact_tile`` and sums exactly; a ``fast`` reduction keeps the field's default, unused."""
    if "exact_tile" in config.model_fields_set or config.reduction != "exact":
        return config
    tile = default_tile(batch_size)
    return config if tile == config.exact_tile else config.model_copy(update={"exact_tile": tile})


def _buckets_by_default(config: type[BaseModel]) -> bool:
    try:
        return bool(config().buckets_gradients())  # type: ignore[attr-defined]
    except Exception:  # a plug-in's config that needs arguments, or is no StrategyConfig
        return False
