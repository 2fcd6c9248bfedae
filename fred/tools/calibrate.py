"""``fred calibrate``: measure real per-batch gradient time, so simulated compute can be measured.

The measured step is exactly what a simulated worker computes: one gradient of one
batch of the scenario's model, with the scenario's reduction, timed after a warm-up
(compilation) and repeated; the median becomes ``step_time_s`` in a compute profile
that scenarios include with ``cluster.compute.profile: path/to/profile.yaml``.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

from fred.numerics import rng
from fred.runs.build import build_run
from fred.runs.paths import output_file, write_whole
from fred.scenario.loading import (
    ScenarioError,
    apply_overrides,
    blaming_sets,
    include_profiles,
    load_scenario,
    validate,
    yaml_value,
)
from fred.scenario.schema import KINDS, Scenario

# What ``fred calibrate`` times without a scenario file: fred's defaults (digits, an MLP with
# one hidden layer of 64, batch 32, the exact reduction). The strategy and stop are required
# by a scenario but play no part in one gradient step.
DEFAULTS: dict[str, Any] = {"name": "calibrate", "strategy": {"name": "sgd"}, "stop": {"max_updates": 1}}
MODEL_KINDS = tuple(section.model_fields["kind"].default for section in KINDS)


def calibration_scenario(
    path: str | Path | None = None,
    sets: list[str] | None = None,
    model: str | None = None,
    batch: int | None = None,
    reduction: str | None = None,
) -> Scenario:
    """The scenario whose gradient step ``fred calibrate`` times.

    A scenario file's model, data, batch size and reduction, or fred's defaults without one;
    then ``--set`` overrides; then the flags: ``model`` is a kind (``mlp``) or a YAML mapping
    (``{kind: mlp, hidden: [128, 64]}``) that replaces the model section, ``batch`` the batch
    size and ``reduction`` the strategy's reduction.
    """
    overrides = list(sets or [])
    if model is not None:  # JSON is YAML: the section goes through --set's parser whole
        overrides.append(f"model={json.dumps(_model_section(model))}")
    if batch is not None:
        overrides.append(f"data.batch_size={batch}")
    if reduction is not None:
        overrides.append(f"strategy.reduction={reduction}")
    if path is not None:
        return load_scenario(path, overrides, typed=list(sets or []))
    with blaming_sets(list(sets or [])):
        return validate(include_profiles(apply_overrides(DEFAULTS, overrides), Path.cwd()), "fred calibrate")


def _model_section(spec: str) -> dict[str, Any]:
    """``--model``: a kind, or a YAML mapping with one."""
    try:
        value = yaml_value(spec)
    except yaml.YAMLError:
        value = None
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise ScenarioError(
            [
                f"--model {spec!r}: give a kind ({', '.join(MODEL_KINDS)}) or a mapping like '{{kind: mlp, "
                f"hidden: [128, 64]}}'"
            ],
            "--model",
        )
    return value


def device_for(backend: str) -> jax.Device:
    try:
        return jax.devices(backend)[0]
    except RuntimeError:
        seen = sorted({d.platform for d in jax.devices()})
        raise ValueError(
            f"no {backend} backend here; JAX sees: {', '.join(seen)}. {install_hint(backend)}"
        ) from None


JAX_INSTALL = "https://docs.jax.dev/en/latest/installation.html"


def install_hint(backend: str) -> str:
    """How to get a JAX that has ``backend``, as JAX's installation guide says, at this JAX's
    version (another version may compute other bits, on the CPU too)."""
    version = jax.__version__
    nvidia = (
        f'for an NVIDIA GPU, pip install "jax[cuda13]=={version}" (a CUDA 13 driver; '
        f'"jax[cuda12]=={version}" '
        "for CUDA 12)"
    )
    amd = f'for an AMD GPU, pip install "jax[rocm7-local]=={version}" (ROCm 7 installed)'
    ways = {
        "gpu": [nvidia, amd],
        "cuda": [nvidia],
        "rocm": [amd],
        "tpu": [f'on a Cloud TPU VM, pip install "jax[tpu]=={version}"'],
    }.get(backend.lower(), [])
    said = "; ".join(ways)
    return (
        f"To get one: {said}; see {JAX_INSTALL}"
        if said
        else f"See {JAX_INSTALL} for the JAX builds with other backends"
    )


def measure(scenario: Scenario, backend: str = "cpu", repeats: int = 20, warmup: int = 3) -> dict[str, Any]:
    """Time one batch's gradient ``repeats`` times after ``warmup`` untimed calls."""
    if repeats < 1:
        raise ValueError(f"--repeats {repeats}: a median needs at least 1 timed call (20 is the default)")
    if warmup < 0:
        raise ValueError(
            f"--warmup {warmup}: give 0 or more untimed calls (the first one compiles; 3 is the default)"
        )
    built = build_run(scenario)
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
        "exact_tile": scenario.strategy.exact_tile,
    }


def write_profile(measured: dict[str, Any], path: str | Path) -> Path:
    """Write the profile to ``path`` (``path/profile.yaml`` when it is a directory)."""
    path = output_file(path, "profile.yaml")
    header = (
        "# fred compute profile, measured by `fred calibrate`; include it with\n# cluster: {compute: "
        "{profile: <this file>}}\n"
    )
    body = yaml.safe_dump({"step_time_s": measured["median_s"], "measured": measured}, sort_keys=False)
    return write_whole(path, lambda partial: partial.write_text(header + body))
