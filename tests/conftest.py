"""Shared helpers: tiny scenarios that run in well under a second."""

from __future__ import annotations

import copy
import gc
import os
import signal
from pathlib import Path
from typing import Any

import jax
import pytest

from fred.scenario.loading import merge
from fred.tools import compilation_cache

# The suite checks fred's CPU bits (fred.run computes on CPU anyway); on a machine with a GPU,
# helpers that call jitted code directly would otherwise run there. gpu-marked tests ask for it.
jax.config.update("jax_default_device", jax.devices("cpu")[0])


@pytest.fixture(scope="session", autouse=True)
def _compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The commands' on-disk cache of compiled programs, as users have it, in a folder of the
    suite's own (not the user's home): the processes tests start (a fresh-process contract
    check, the CLI, notebooks) load what earlier ones compiled, and must get the same bits."""
    os.environ[compilation_cache.ENV] = str(tmp_path_factory.mktemp("jax-cache"))
    compilation_cache.enable()


@pytest.fixture(scope="module", autouse=True)
def _earlier_objects_frozen() -> None:
    """What is alive as a test module starts (JAX's and the suite's own objects) is moved out of
    the collector's sight (gc.freeze); what the tests make is collected as before. A checkpoint
    calls gc.collect() (fred.runs.checkpoint.collect), whose cost grows with every object the
    process holds: 0.18 s per checkpoint in a fresh process, more late in the suite, where the
    tests that checkpoint every step took 20-115 s each (0.006 s per checkpoint frozen)."""
    gc.collect()
    gc.freeze()


TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 7,
    "model": {"kind": "mlp", "hidden": [16]},
    "data": {"source": {"kind": "digits"}, "batch_size": 8},
    "cluster": {"workers": 4, "compute": {"step_time_s": 0.01}},
    "strategy": {"name": "asgd", "lr": 0.1},
    "stop": {"max_updates": 12},
    "eval": {"every_updates": 4},
}


# What the tests that run every registered strategy (contract, replay, resume, faults,
# timing-only) must know of a strategy beyond its registration: the one place a new
# strategy may need a line. One that runs on four workers, waits for particular workers
# and reads no computed number to decide what to do needs none.
ONE_WORKER = {"sgd"}  # runs on exactly one worker
NEVER_WAITS = {
    "asgd",
    "sasgd",
    "fasgd",
    "bfasgd",
    "async_local_sgd",
}  # waits for no particular worker: survives a crash without sync_timeout_s
READS_NUMBERS = {"bfasgd"}  # reads a computed number to decide (its gates): resume must run it from the start


def shipped_scenarios() -> list[Path]:
    """Every scenario file under ``scenarios/``, without the files of shared sections that
    scenarios ``include:`` (a cluster several scenarios describe alike): those are not runs."""
    import yaml

    root = Path(__file__).resolve().parents[1] / "scenarios"
    paths = sorted(root.rglob("*.yaml"))
    included = set()
    for path in paths:
        data = yaml.safe_load(path.read_text())
        named = data.get("include", []) if isinstance(data, dict) else []
        for name in [named] if isinstance(named, str) else named:
            included.add((path.parent / name).resolve())
    return [p for p in paths if p.resolve() not in included]


def missing_data(path: Path) -> str | None:
    """Why the shipped scenario at ``path`` cannot run here (None if it can): the files of a data
    set users download themselves (CIFAR-10) are not in the repository, nor fetched."""
    from fred.scenario.loading import ScenarioError, load_scenario

    try:
        load_scenario(path)
    except ScenarioError as err:
        if not any("does not exist" in problem for problem in err.problems):
            raise
        return f"{path.name}: {err.problems[0]} (its files are the user's own)"
    return None


def load_shipped(path: Path):
    """The shipped scenario at ``path``, validated as written: one whose data set users download
    (CIFAR-10) is given its own folder as the data's path, which is there (nothing reads it)."""
    from fred.scenario.loading import load_scenario

    if missing_data(path) is None:
        return load_scenario(path)
    return load_scenario(path, [f"data.source.path={path.parent}"])


def cluster_for(name: str) -> dict[str, Any]:
    """The tiny cluster ``name`` runs on."""
    return {"workers": 1} if name in ONE_WORKER else {}


def tiny(**overrides: Any) -> dict[str, Any]:
    """The tiny scenario with deep-merged overrides (``tiny(cluster={"workers": 2})``).

    Its ``lr`` goes only to a strategy that has one.
    """
    data = merge(copy.deepcopy(TINY), overrides)
    strategy = data["strategy"]
    if "lr" in strategy and "lr" not in overrides.get("strategy", {}) and not _has_lr(strategy.get("name")):
        del strategy["lr"]
    return data


def _has_lr(name: Any) -> bool:
    from fred.scenario import registry

    try:
        return "lr" in registry.config_class(name).model_fields
    except ValueError:  # an unknown name: left for validation to refuse
        return True


@pytest.fixture
def tiny_scenario():
    return tiny


@pytest.fixture
def python_signals():
    """For a test that sends its own process SIGINT and expects Python's KeyboardInterrupt: Python's
    handler, SIGINT unblocked, garbage collection on and no ``fred`` command's stop pending, as a
    fresh process has them. Under ``pytest -n`` a worker process runs other modules' tests first,
    and one of them may leave a ``fred`` command's handler or a pending stop behind."""
    from fred.runs import interrupt

    handler = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    command, interrupt._command = interrupt._command, None
    collecting = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        interrupt._command = command
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
        if not collecting:
            gc.disable()
