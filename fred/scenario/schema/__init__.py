"""Scenario: the validated description of one run.

A scenario is plain data. YAML files, ``--set`` overrides and Python code all go
through :func:`validate`, so the same rules and the same error messages apply
everywhere. Every section rejects unknown keys.
"""

from __future__ import annotations

from fred.scenario.schema.base import (  # noqa: F401
    NonNegFloat,
    PositiveFloat,
    Section,
    _absolute,
    _numeric,
    _takes_bool,
    absolute_path,
)
from fred.scenario.schema.cluster import (  # noqa: F401
    ClusterConfig,
    ComputeConfig,
    Jitter,
    RandomStraggle,
    SpeedChange,
    Straggler,
)
from fred.scenario.schema.data import (  # noqa: F401
    SEQUENCE_SOURCES,
    ArraysData,
    CIFAR10Data,
    CIFAR100Data,
    DataConfig,
    DataSource,
    DigitsData,
    MNISTData,
    SyntheticData,
    SyntheticImagesData,
    SyntheticTokensData,
    TextData,
)
from fred.scenario.schema.faults import (  # noqa: F401
    MAX_LOSS_PROBABILITY,
    FaultsConfig,
    LinkDegrade,
    MessageLoss,
    ServerCrash,
    ServerCrashAt,
    WorkerCrash,
)
from fred.scenario.schema.model import (  # noqa: F401
    KINDS,
    MAX_LAYERS,
    ModelConfig,
    ModelSection,
    _few_layers,
    default_model,
    kinds_taking,
)
from fred.scenario.schema.network import (  # noqa: F401
    INTRA_NODE_DEFAULT,
    LinkConfig,
    NcclConfig,
    NetworkConfig,
    SitesConfig,
)
from fred.scenario.schema.optimizer import (  # noqa: F401
    AdamOptimizer,
    AdamWOptimizer,
    ConstantSchedule,
    CosineDecaySchedule,
    ExponentialDecaySchedule,
    Fraction,
    LinearSchedule,
    OptimizerConfig,
    PiecewiseConstantSchedule,
    ScheduleConfig,
    ScheduleSteps,
    SGDOptimizer,
    StepCount,
    WarmupCosineDecaySchedule,
    _optimizer_by_kind,
    _schedule_by_kind,
)
from fred.scenario.schema.scenario import (  # noqa: F401
    CLOCK_RESOLUTION,
    MAX_ACTIVITY_S,
    MAX_CADENCE_EVENTS,
    MAX_NAME_BYTES,
    MAX_STEPS,
    Scenario,
    Work,
    _check_cadences,
    _check_crash_order,
    _check_durations,
    _check_faults,
    _check_messages,
    _check_model_data,
    _check_steps,
    _check_tile,
    _check_timing_only,
    _too_long,
    base_step_time_s,
    fastest_step,
    run_work,
    speed_spans,
    update_steps,
    worker_steps,
)
from fred.scenario.schema.stop import (  # noqa: F401
    EvalConfig,
    StopConfig,
)
from fred.scenario.schema.strategy import (  # noqa: F401
    DEFAULT_TILE_ROWS,
    MAX_TILE_ROWS,
    GradientSteps,
    StrategyConfig,
    _buckets_by_default,
    _validate_strategy,
    default_tile,
    with_default_tile,
)
from fred.scenario.schema.workload import (  # noqa: F401
    ProfileName,
    WorkloadConfig,
)


def __getattr__(name: str) -> type[ModelSection]:
    """A model kind's section by its class name (``MLPModel``), as scenarios built in Python name them."""
    for section in KINDS:
        if section.__name__ == name:
            return section
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
