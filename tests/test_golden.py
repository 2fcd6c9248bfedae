"""Golden summaries: every shipped scenario still tells the story it told when it was recorded.

Each run is also replayed from its tape (``fred replay``) and must give the same bits. The
scenarios that take longest are checked whole in ``pytest -m slow`` and, in the default run, cut
short against golden summaries of their own (``golden/short/``).
Regenerate after an intended change with ``FRED_UPDATE_GOLDEN=1 pytest tests/test_golden.py``
and say why in the commit. Simulated timing must match exactly, on any machine; the
numbers must match to float32 noise, and bit for bit on a platform (JAX version and CPU
instruction set) that recorded them: regenerating on a new platform adds its hash and keeps
the others as long as the trace is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import jax
import pytest

import fred
from fred.runs.host import cpu_isa
from fred.tools.replay import replay
from tests.conftest import missing_data, shipped_scenarios

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = shipped_scenarios()
GOLDEN = Path(__file__).parent / "golden"
EXACT_KEYS = [
    "status",
    "stop_reason",
    "strategy",
    "workers",
    "updates",
    "gradients",
    "sim_time_s",
    "bytes_sent",
]


def golden_name(path: Path) -> str:
    return str(path.relative_to(ROOT / "scenarios").with_suffix(".json")).replace(os.sep, "__")


def events_sha256(result: fred.RunResult) -> str:
    digest = hashlib.sha256()
    for column in result.events.columns:
        digest.update(
            result.events[column]
            .to_numpy(dtype=str if column in ("entity", "kind", "peer") else float)
            .tobytes()
        )
    return digest.hexdigest()


def platform_key() -> str:
    """Parameters are bit-identical only for the same JAX version on the same CPU
    instruction set (fred.runs.host), so their hashes are kept per such platform."""
    return f"jax-{jax.__version__}/{cpu_isa()}"


TRACE_KEYS = EXACT_KEYS + ["events_sha256"]  # the same on every platform


def record(result: fred.RunResult, old: dict | None) -> dict:
    summary = result.summary
    now = {
        **{key: summary[key] for key in EXACT_KEYS},
        "final_eval_loss": summary["final_eval_loss"],
        "final_eval_accuracy": summary["final_eval_accuracy"],
        "events_sha256": events_sha256(result),
    }
    # Other platforms' hashes stay only while they describe this same trace.
    same_trace = old is not None and all(old.get(key) == now[key] for key in TRACE_KEYS)
    params = dict(old["params_sha256"]) if same_trace else {}
    if params.get(platform_key(), summary["params_sha256"]) != summary["params_sha256"]:
        # this platform's bits changed, so did the numerics: the other platforms' hashes are stale
        params = {}
    params[platform_key()] = summary["params_sha256"]
    return {**now, "params_sha256": dict(sorted(params.items()))}


# A few shipped scenarios (the quickstart, SSGD, Pipe-SGD, SGP, faults) in the default run, a few
# seconds each; the others, the same strategies at other sizes, and Local SGD's, OSGP's, HPSGD's and
# D-PSGD's (5-10 s each), are marked slow (`pytest -m slow`, run by .ci/run). Every strategy runs
# in the default run's contract tests (tests/test_contract.py).
DEFAULT_RUN = {
    "quickstart", "baselines/ssgd_ps",
    "pipe_sgd/pipe_k1", "pipe_sgd/arsgd", "sgp/sgp_4", "faults/base",
}  # fmt: skip
# The strategies whose shipped scenarios all take long (3,000 updates, or 120 simulated seconds
# of 9 workers: 11-22 s each, run and replay, on 2 loaded cores): the default run checks one of
# each cut short, to a tenth of its stop, against a golden summary of its own (golden/short/):
# 10-17 s each, so they run in `pytest -m slow` with the whole runs (SHORT_SLOW: all of them).
SHORT = {
    "fasgd/fasgd_4": {"stop": {"max_updates": 300}},
    "fasgd/sasgd_4": {"stop": {"max_updates": 300}},
    "fasgd/bfasgd_16": {"stop": {"max_updates": 300}},
    "hybrid/grouped_hybrid": {"stop": {"max_sim_time_s": 12.0}},
}
SHORT_SLOW = {"fasgd/fasgd_4", "fasgd/sasgd_4", "fasgd/bfasgd_16", "hybrid/grouped_hybrid"}


def shipped_name(path: Path) -> str:
    return path.relative_to(ROOT / "scenarios").with_suffix("").as_posix()


def shipped_params() -> list:
    def marks(path: Path) -> tuple:
        missing = missing_data(path)  # a data set the user downloads (CIFAR-10): run where it is
        here = (pytest.mark.skip(reason=missing),) if missing else ()
        return here + (() if shipped_name(path) in DEFAULT_RUN else (pytest.mark.slow,))

    return [pytest.param(p, marks=marks(p), id=golden_name(p)) for p in SHIPPED]


def test_the_default_run_names_shipped_scenarios_only():
    names = {shipped_name(p) for p in SHIPPED}
    assert DEFAULT_RUN | set(SHORT) <= names, (DEFAULT_RUN | set(SHORT)) - names


@pytest.mark.parametrize("path", shipped_params())
def test_shipped_scenario_matches_its_golden_summary(path, tmp_path):
    matches_its_golden_summary(path, {}, GOLDEN / golden_name(path), tmp_path)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=(pytest.mark.slow,) if n in SHORT_SLOW else ()) for n in sorted(SHORT)]
)
def test_shipped_scenario_cut_short_matches_its_golden_summary(name, tmp_path):
    path = ROOT / "scenarios" / f"{name}.yaml"
    matches_its_golden_summary(path, SHORT[name], GOLDEN / "short" / golden_name(path), tmp_path)


def matches_its_golden_summary(path: Path, overrides: dict, golden_path: Path, tmp_path: Path) -> None:
    result = fred.run(path, out=tmp_path / "run", **overrides)
    if not result.scenario.workload.timing_only:  # a timing-only run has no numerics to replay
        assert replay(tmp_path / "run").passed, "its numerics replayed from the tape give the same bits"
    old = json.loads(golden_path.read_text()) if golden_path.exists() else None
    now = record(result, old)
    if os.environ.get("FRED_UPDATE_GOLDEN") or old is None:
        golden_path.parent.mkdir(exist_ok=True)
        golden_path.write_text(json.dumps(now, indent=2, sort_keys=True) + "\n")
        if not os.environ.get("FRED_UPDATE_GOLDEN"):
            pytest.fail(f"no golden summary for {path.name}; wrote {golden_path}, review and commit it")
    golden = json.loads(golden_path.read_text())
    for key in TRACE_KEYS:
        assert now[key] == golden[key], key
    if golden["final_eval_loss"] is None:  # timing-only: nothing evaluated
        assert (now["final_eval_loss"], now["final_eval_accuracy"]) == (None, None)
    else:
        assert now["final_eval_loss"] == pytest.approx(golden["final_eval_loss"], rel=1e-4)
        assert now["final_eval_accuracy"] == pytest.approx(golden["final_eval_accuracy"], abs=2e-3)
    recorded = golden["params_sha256"].get(platform_key())
    if recorded is not None:  # a platform never recorded adds its hash with FRED_UPDATE_GOLDEN=1
        assert now["params_sha256"][platform_key()] == recorded
