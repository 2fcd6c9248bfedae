"""``fred calibrate``: measure real per-batch gradient time, so simulated compute can be measured.

The measured step is exactly what a simulated worker computes: one gradient of one
batch of the scenario's model, with the scenario's reduction, timed after a warm-up
(compilation) and repeated; the median becomes ``step_time_s`` in a compute profile
that scenarios include with ``cluster.compute.profile: path/to/profile.yaml``.
"""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

from fred import rng
from fred.runner import build
from fred.scenario import Scenario


def device_for(backend: str) -> jax.Device:
    try:
        return jax.devices(backend)[0]
    except RuntimeError:
        seen = sorted({d.platform for d in jax.devices()})
        raise ValueError(f"no {backend} backend here; JAX sees: {', '.join(seen)}") from None


def measure(scenario: Scenario, backend: str = "cpu", repeats: int = 20, warmup: int = 3) -> dict[str, Any]:
    """Time one batch's gradient ``repeats`` times after ``warmup`` untimed calls."""
    built = build(scenario)
    device = device_for(backend)
    batch = scenario.data.batch_size
    pick = rng.stream(scenario.seed, "calibrate")
    ds = built.dataset
    with jax.default_device(device):
        params = jax.device_put(built.sim.init_params, device)
        times = []
        for i in range(warmup + repeats):
            rows = pick.choice(len(ds.y_train), size=batch, replace=len(ds.y_train) < batch)
            start = time.perf_counter()
            [g] = built.numerics.shard_sums_of(params, ds, rows, 1)  # what a run's gradient call computes
            jax.block_until_ready(g.grad)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(times),
        "p10_s": float(np.percentile(times, 10)),
        "p90_s": float(np.percentile(times, 90)),
        "repeats": repeats,
        "backend": backend,
        "device": str(device),
        "jax_version": jax.__version__,
        "host": platform.node(),
        "model": scenario.model.model_dump(mode="json"),
        "batch_size": batch,
        "reduction": scenario.strategy.reduction,
    }


def write_profile(measured: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    header = "# fred compute profile, measured by `fred calibrate`; include it with\n# cluster: {compute: {profile: <this file>}}\n"
    body = yaml.safe_dump({"step_time_s": measured["median_s"], "measured": measured}, sort_keys=False)
    path.write_text(header + body)
    return path


def read_profile(path: Path) -> float:
    """The ``step_time_s`` of a profile file, with errors that name the file."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"cluster.compute.profile: no such file {path}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"cluster.compute.profile: {path} is not valid YAML ({err})") from None
    value = data.get("step_time_s") if isinstance(data, dict) else None
    if not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"cluster.compute.profile: {path} has no positive step_time_s; make it with fred calibrate")
    return float(value)
