"""``fred replay``: re-execute a run's numerics from its tape, without the simulator, and check them.

The run directory's ``tape.npz`` (:mod:`fred.tape`) lists every jitted call of the
run in order, with the batch rows of every gradient. Replay rebuilds the data set and
the model from ``scenario.yaml``, runs the calls that lead to the final parameters on
the chosen JAX backend, and compares the result with ``params.npz``: bit for bit on the
backend that made the run, within a tolerance across backends. It also times every
gradient call, next to the simulated compute time the run assumed for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np
import pandas as pd

from fred import rng, tape
from fred.api import load_run
from fred.calibrate import device_for
from fred.data import load_dataset
from fred.models import Params
from fred.runner import _model_and_numerics
from fred.scenario import Scenario
from fred.tape import Call, Recorded


class ReplayError(ValueError):
    """The run directory cannot be replayed as it is (missing or altered files)."""


@dataclass
class ReplayReport:
    """What replay did and found."""

    backend: str
    device: str
    recorded_calls: int
    replayed_calls: int
    wall_s: float
    gradients: pd.DataFrame  # call, shards, rows, real_s, simulated_s, compiled (first of its shape)
    leaves: pd.DataFrame  # leaf, equal, max_abs_diff, max_rel_diff
    check: str
    passed: bool


def replay(run_dir: str | Path, backend: str = "cpu", check: str = "bitwise", rtol: float = 1e-5, atol: float = 1e-6) -> ReplayReport:
    """Replay ``run_dir`` on ``backend``; ``check`` is ``bitwise`` or ``close`` (``rtol``/``atol``)."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    if run.scenario.workload.timing_only:
        raise ReplayError(f"{run_dir} is a timing-only run (workload.timing_only): it computed no numbers to replay")
    recorded = _read_tape(run_dir, run.summary)
    device = device_for(backend)
    context = {"gradients": _gradients(run.scenario)}
    start = time.perf_counter()
    with jax.default_device(device):
        final, gradients, replayed = _execute(recorded, context)
    wall_s = time.perf_counter() - start
    leaves = compare(final, run.params)
    passed = bool(leaves["equal"].all()) if check == "bitwise" else _close(final, run.params, rtol, atol)
    return ReplayReport(backend, str(device), len(recorded.calls), replayed, wall_s, gradients, leaves, check, passed)


def _read_tape(run_dir: Path, summary: dict[str, Any]) -> Recorded:
    path = run_dir / "tape.npz"
    if not path.is_file():
        raise ReplayError(f"{run_dir} has no tape.npz, so it cannot be replayed; run the scenario again with this fred to record one")
    try:
        doc, large, _ = tape.read(path)
    except (OSError, ValueError, KeyError) as err:
        raise ReplayError(f"{path} cannot be read ({err}); the run directory is damaged") from None
    if tape.digest(doc, large) != summary.get("tape_sha256"):
        raise ReplayError(
            f"{path} does not match tape_sha256 in {run_dir / 'summary.json'}: the run directory was changed after the run"
        )
    return tape.parse(doc, large)


def _gradients(scenario: Scenario) -> Callable[..., Any]:
    """The run's gradient function, rebuilt from its scenario (the same data, model and reduction)."""
    dataset = load_dataset(scenario.data, rng.stream(scenario.seed, "data", "load"))
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    _, numerics = _model_and_numerics(
        scenario.model.model_dump_json(), dataset.feature_shape, outputs, dataset.task, scenario.strategy.reduction
    )
    return lambda params, rows, shards: numerics.shard_sums_of(params, dataset, rows, shards)


def needed(calls: list[Call], final: tuple[int, Sequence[Any]]) -> list[bool]:
    """Which calls the final parameters depend on (evaluations and dead ends are skipped)."""
    wanted = set(tape.refs(final[1]))
    keep = [False] * len(calls)
    for i in range(len(calls) - 1, -1, -1):
        if any(r in wanted for r in tape.refs(calls[i].out_codes)):
            keep[i] = True
            wanted.update(tape.refs(calls[i].arg_codes))
    return keep


def _execute(recorded: Recorded, context: dict[str, Callable[..., Any]]) -> tuple[Params, pd.DataFrame, int]:
    calls, treedefs = recorded.calls, recorded.treedefs
    keep = needed(calls, recorded.final)
    last_use = _last_uses(calls, keep, recorded.final)
    values: dict[int, Any] = {}

    def build(treedef: int, codes: Sequence[Any]) -> Any:
        leaves = [_value(c[0], values, recorded.constants) if tape.is_ref(c) else c for c in codes]
        return jax.tree.unflatten(treedefs[treedef], leaves)

    timings, shapes = [], set()
    for i, call in enumerate(calls):
        if not keep[i]:
            continue
        fn = _function(call, context)
        args = build(call.args, call.arg_codes)
        began = time.perf_counter()
        result = fn(*args)
        if call.name == "gradients":
            jax.block_until_ready(result)
            shape = (len(args[1]), args[2])
            simulated = recorded.compute_s.get(i, [])
            real_s = time.perf_counter() - began
            timings.append((i, args[2], len(args[1]), real_s, float(np.mean(simulated)) if simulated else np.nan, shape not in shapes))
            shapes.add(shape)
        for code, value in zip(call.out_codes, jax.tree.leaves(result)):
            if tape.is_ref(code):
                values[code[0]] = value
        for r in tape.refs(call.arg_codes):
            if last_use.get(r) == i:
                values.pop(r, None)  # free what no later call reads
    final = build(*recorded.final)
    columns = ["call", "shards", "rows", "real_s", "simulated_s", "compiled"]
    return final, pd.DataFrame(timings, columns=columns), sum(keep)


def _value(index: int, values: dict[int, Any], constants: dict[int, np.ndarray]) -> Any:
    if index in values:
        return values[index]
    if index in constants:  # numpy, as recorded: jitted calls take it as they took the original
        return constants[index]
    raise ReplayError(f"the tape reads value {index} before any call made it; the tape is damaged")


def _last_uses(calls: list[Call], keep: list[bool], final: tuple[int, Sequence[Any]]) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, call in enumerate(calls):
        if keep[i]:
            for r in tape.refs(call.arg_codes):
                last[r] = i
    for r in tape.refs(final[1]):
        last[r] = len(calls)  # never freed
    return last


def _function(call: Call, context: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    if call.name in context:
        return context[call.name]
    target = tape.resolve(call.name)
    return target(*call.key) if call.key is not None else target


def compare(replayed: Params, recorded: Params) -> pd.DataFrame:
    """Per leaf: bit-equal?, max |difference|, max relative difference."""
    rows = []
    for name in sorted(recorded):
        a, b = np.asarray(replayed[name]), np.asarray(recorded[name])
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        rel = diff / np.maximum(np.abs(b.astype(np.float64)), np.finfo(np.float32).tiny)
        equal = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        rows.append((name, equal, float(diff.max(initial=0.0)), float(rel.max(initial=0.0))))
    return pd.DataFrame(rows, columns=["leaf", "equal", "max_abs_diff", "max_rel_diff"])


def _close(replayed: Params, recorded: Params, rtol: float, atol: float) -> bool:
    return all(np.allclose(np.asarray(replayed[k]), recorded[k], rtol=rtol, atol=atol) for k in recorded)
