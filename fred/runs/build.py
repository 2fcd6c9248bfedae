"""Building a run: a scenario's data set, model and numerics, and its simulated cluster.

:func:`build_run` makes everything a run needs before any simulated time passes; the
runner steps what it makes, ``fred calibrate`` times its gradients. :func:`build_numerics`
is the part without the cluster, what ``fred replay`` needs to compute a tape's calls again.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import simpy
from pydantic import TypeAdapter

from fred.numerics import rng
from fred.numerics.data import BatchStream, Dataset, GlobalBatchStream, data_stream, load_dataset, shard
from fred.numerics.gradients import Numerics
from fred.numerics.models import Model, build_model, param_count
from fred.scenario import model_workloads, workloads
from fred.scenario.schema import ModelConfig, Scenario
from fred.simulation import buckets
from fred.simulation.compute import ComputeModel
from fred.simulation.engine import GradientService, Simulation, Worker
from fred.simulation.network import Network


@dataclass
class Built:
    """Everything a run needs, before any simulated time passes."""

    scenario: Scenario
    sim: Simulation
    dataset: Dataset
    numerics: Numerics


def build_run(scenario: Scenario) -> Built:
    """Load the data, build the model and the simulated cluster of ``scenario``.

    A batch that a worker's share of the data cannot fill is refused with a ``ValueError``
    naming ``data.batch_size`` and what would fit.
    """
    seed = scenario.seed
    dataset, model, numerics = build_numerics(scenario)
    outputs = _outputs(dataset)
    init_params = model.init(rng.jax_key(seed, "model", "init"))
    workers = _workers(scenario, dataset)
    param_bytes = scenario.workload.resolved_param_bytes() or 4 * param_count(init_params)
    sim = Simulation(
        env=simpy.Environment(),
        workers=workers,
        network=Network(
            scenario.network, scenario.cluster.workers_per_device, scenario.cluster.devices_per_node
        ),
        compute_model=ComputeModel(scenario),
        gradients=None if scenario.workload.timing_only else GradientService(numerics, dataset),
        init_params=init_params,
        param_bytes=param_bytes,
        seed=seed,
        faults=scenario.faults,
        buckets=_buckets(scenario, param_bytes, dataset.feature_shape, outputs),
        layers=_layers(scenario, param_bytes, dataset.feature_shape, outputs),
    )
    return Built(scenario, sim, dataset, numerics)


def _layers(
    scenario: Scenario, param_bytes: float, feature_shape: tuple[int, ...], outputs: int
) -> tuple[buckets.LayerShare, ...]:
    """The model's layers as shares of a step and of the message, for ZeRO-3's per-layer
    gathers (``strategy.sharding: zero3``): the profile's, or else the model's own; () otherwise."""
    if getattr(scenario.strategy, "sharding", "none") != "zero3":
        return ()
    workload = scenario.workload
    if workload.profile is not None:
        return buckets.layer_plan(workloads.load(workload.profile).layers, param_bytes)
    own = model_workloads.model_workload(scenario.model, feature_shape, outputs)
    return () if own is None else buckets.layer_plan(own.layers, param_bytes)


def build_numerics(scenario: Scenario) -> tuple[Dataset, Model, Numerics]:
    """The data set ``scenario`` loads, its model and the numerics that compute its gradients
    and evaluations (the reduction and tile it names); no cluster. Runs of one model in one
    process share the model's compiled functions."""
    dataset = load_dataset(scenario.data, data_stream(scenario.seed))
    strategy = scenario.strategy
    model, numerics = _model_and_numerics(
        scenario.model.model_dump_json(),
        dataset.feature_shape,
        _outputs(dataset),
        dataset.task,
        strategy.reduction,
        strategy.exact_tile,
    )
    return dataset, model, numerics


def numerics_device() -> jax.Device:
    """Where a run's numbers are computed: always JAX's CPU backend.

    A GPU computes the same steps with other roundings (and TF32 matrix products by
    default), so a run's bits would depend on the machine it ran on; on CPU they do not.
    Other backends are for ``fred replay`` and ``fred calibrate``, which say which they use.
    """
    return jax.devices("cpu")[0]


def _outputs(dataset: Dataset) -> int:
    """The model's outputs: a logit per class, or one value for a regression."""
    return dataset.num_classes if dataset.task == "classification" else 1


@functools.lru_cache(maxsize=32)
def _model_and_numerics(
    model_json: str, feature_shape: tuple[int, ...], outputs: int, task: str, reduction: str, tile: int = 1
) -> tuple[Model, Numerics]:
    # Cached so that runs of the same model in one process share compiled functions.
    model = build_model(TypeAdapter(ModelConfig).validate_json(model_json), feature_shape, outputs)
    return model, Numerics(model, task, reduction, tile)  # type: ignore[arg-type]


def _buckets(
    scenario: Scenario, param_bytes: int, feature_shape: tuple[int, ...], outputs: int
) -> tuple[buckets.Bucket, ...]:
    """The scenario's gradient buckets, in backward order (none without ``workload.bucket_bytes``),
    cut from the profile's layers, or else from the model's own (for the data's shape)."""
    workload = scenario.workload
    if workload.bucket_bytes is None:
        return ()
    if workload.profile is not None:
        return buckets.plan(workloads.load(workload.profile).layers, workload.bucket_bytes, param_bytes)
    own = model_workloads.model_workload(scenario.model, feature_shape, outputs)
    if own is None:  # pragma: no cover - validation refuses bucket_bytes for a python model without a profile
        raise ValueError("workload.bucket_bytes needs workload.profile: this model's layers are not known")
    return buckets.plan(own.layers, workload.bucket_bytes, param_bytes)


def _no_batch() -> Any:
    raise AssertionError("a timing-only run draws no batch")


def _workers(scenario: Scenario, dataset: Dataset) -> list[Worker]:
    n, data = scenario.cluster.workers, scenario.data
    if scenario.workload.timing_only:  # no gradient is computed, so the data need not hold the batches
        return [Worker(i, _no_batch) for i in range(n)]
    tile = scenario.strategy.exact_tile if scenario.strategy.reduction == "exact" else 1
    if data.sharding == "iid":
        total = len(dataset.y_train)
        _check_fits(
            data.batch_size,
            n,
            total // n,
            f"{total} training examples "
            f"(iid sharding cuts every step's {n} batches from all of them, {data.batch_size * n} rows)",
            total,
            tile,
        )
        # One global permutation per epoch; worker i takes block i of every global batch,
        # so n workers of batch b see exactly what one worker of batch n*b sees.
        stream = GlobalBatchStream(
            len(dataset.y_train), n, data.batch_size, rng.stream(scenario.seed, "data", "batches")
        )
        return [Worker(i, lambda i=i: stream.next_for(i)) for i in range(n)]
    shards = shard(dataset.y_train, n, data, rng.stream(scenario.seed, "data", "shard"))
    smallest = min(range(n), key=lambda i: len(shards[i]))
    _check_fits(
        data.batch_size,
        n,
        len(shards[smallest]),
        f"worker {smallest}'s {data.sharding} shard of {len(shards[smallest])} examples",
        len(dataset.y_train),
        tile,
    )
    streams = [
        BatchStream(s, data.batch_size, rng.stream(scenario.seed, "data", "batches", i))
        for i, s in enumerate(shards)
    ]
    return [Worker(i, streams[i].next) for i in range(n)]


def _check_fits(batch_size: int, workers: int, most: int, where: str, total: int, tile: int = 1) -> None:
    """Refuse a batch that ``where`` cannot fill, naming the field and what would fit (``most``
    rows a batch here, in whole tiles of ``tile`` rows; ``total`` training examples, what one
    worker would have)."""
    if batch_size <= most:
        return
    fixes = [_at_most(most, tile)] if most >= 1 else []
    if workers > 1 and batch_size <= total:  # fewer workers helps only if one worker's all would do
        fixes.append(f"use fewer than {workers} workers")
    if not fixes:
        fixes.append(
            f"{_at_most(total, tile)} and use fewer than {workers} workers"
            if workers > 1 and total >= 1
            else "give a data set with more examples"
        )
    raise ValueError(f"data.batch_size: {batch_size} rows a batch do not fit {where}: {', or '.join(fixes)}")


def _at_most(rows: int, tile: int) -> str:
    """The fix of a batch too large: at most ``rows``, in whole tiles of the exact reduction."""
    whole = rows // tile * tile
    if whole == rows:
        return f"set data.batch_size to at most {rows}"
    if whole:
        return f"set data.batch_size to at most {whole} (whole tiles of strategy.exact_tile {tile})"
    return f"set data.batch_size to at most {rows} with strategy.exact_tile: 1"
