"""Checkpoints and ``fred run --resume``: an interrupted run finishes bit-identical to an uninterrupted
one."""

from __future__ import annotations

import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import pandas as pd
import pytest
import yaml

import fred
import fred.runs.api
import fred.runs.controller
import fred.runs.runner
from fred.numerics.gradients import Numerics
from fred.numerics.tape import NeedsValue
from fred.runs import checkpoint
from fred.runs.checkpoint import Checkpointer, checkpoint_dir
from fred.runs.records import is_complete
from fred.runs.runner import WALL_CLOCK_KEYS, RanOutOfMemory, execute
from fred.scenario import registry
from fred.scenario.loading import validate
from fred.tools.cli import main
from tests.conftest import READS_NUMBERS, cluster_for, tiny


@pytest.fixture(autouse=True)
def _signals(python_signals):
    """Every test here sends its own process SIGINT (conftest's ``python_signals``)."""
    yield


VARIANTS = {
    "ssgd_ps": {"name": "ssgd", "aggregation": "ps"},
    "pipe_sgd_int8": {"name": "pipe_sgd", "compression": {"kind": "int8"}},
    "sgp_crash": {"name": "sgp"},
    "asgd_lossy": {"name": "asgd"},
    # optimizer state fast-forwarded and filled from the checkpoint: the server's, each replica's, each node's
    "sasgd_adam": {
        "name": "sasgd",
        "optimizer": "adam",
        "lr_schedule": {"kind": "cosine_decay", "decay_steps": 20},
    },
    "hpsgd_adamw": {"name": "hpsgd", "optimizer": "adamw"},
    "sgp_nesterov": {"name": "sgp", "optimizer": {"momentum": 0.9, "nesterov": True}},
}
FAULTS = {
    "sgp_crash": {"worker_crash": [{"worker": 2, "at_s": 0.05}], "sync_timeout_s": 0.01},
    "asgd_lossy": {"message_loss": {"probability": 0.2, "retransmit_timeout_s": 0.002}},
}


class Once(Checkpointer):
    """One checkpoint, after ``every_s`` env steps (the clock counts steps)."""

    def due(self) -> bool:
        return self.saved == 0 and super().due()


def scenario(name: str):
    data = tiny(
        strategy=VARIANTS.get(name, {"name": name}),
        cluster=cluster_for(name),
        stop={"max_updates": 30},
        faults=FAULTS.get(name, {}),
    )
    return validate(data)


def interrupted(sc, run_dir, kind: type[Checkpointer], steps: int, **kwargs) -> Checkpointer:
    """``sc`` run to its end with checkpoints every ``steps`` env steps where ``fred run
    --checkpoint-every-s`` keeps them for ``run_dir``, its scenario beside them; the checkpointer."""
    checkpointer = kind(
        checkpoint_dir(run_dir), steps, sc.digest(), clock=itertools.count().__next__, **kwargs
    )
    checkpointer.path.mkdir(parents=True)
    (checkpointer.path / "scenario.yaml").write_text(yaml.safe_dump(sc.resolved()))
    execute(sc, checkpointer=checkpointer)
    return checkpointer


def gradient_calls(monkeypatch, at_each: Callable[[int], None] = lambda count: None) -> list[int]:
    """Count every gradient call (one shard or several); ``at_each(count)`` runs as each begins."""
    calls = [0]
    real = Numerics._call

    def counted(self, *args, **kwargs):
        calls[0] += 1
        at_each(calls[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Numerics, "_call", counted)
    return calls


def same_run(a: fred.RunResult, b: fred.RunResult) -> None:
    assert a.summary["params_sha256"] == b.summary["params_sha256"]
    assert a.summary["tape_sha256"] == b.summary["tape_sha256"]
    for table in ("events", "updates", "metrics"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))


@pytest.mark.parametrize("name", registry.names() + list(VARIANTS))
def test_a_run_resumed_from_a_mid_run_checkpoint_is_the_uninterrupted_run(name, tmp_path, monkeypatch):
    sc = scenario(name)
    counter = itertools.count()
    clean = execute(sc, checkpointer=Once(tmp_path / "never", 10**9, sc.digest(), clock=counter.__next__))
    half = next(counter) // 2  # the clock was read once per env step
    execute(sc, checkpointer=Once(tmp_path, half, sc.digest(), clock=itertools.count().__next__))
    saved = checkpoint.load(tmp_path)
    assert saved.steps == half and saved.values
    calls = gradient_calls(monkeypatch)
    if name in READS_NUMBERS:  # fred.runs.api.resume then runs it from the start (tested below)
        with pytest.raises(NeedsValue):
            execute(sc, resume=saved)
        return
    resumed = execute(sc, resume=saved)
    same_run(resumed, clean)
    computed = calls[0]
    calls[0] = 0
    execute(sc)
    assert computed < calls[0], "the steps before the checkpoint were fast-forwarded, not computed"


class Every(Checkpointer):
    """A checkpoint every ``every_s`` env steps, at most ``times`` of them; keeps what each one loads as."""

    times = 4

    def due(self) -> bool:
        return self.saved < self.times and super().due()

    def save(self, steps, tape, metrics, train=(0, 0)):
        super().save(steps, tape, metrics, train)
        self.seen = getattr(self, "seen", []) + [
            (sorted(p.name for p in self.path.glob("tape-*")), len(tape.calls))
        ]


def test_each_checkpoint_writes_only_the_calls_made_since_the_last(tmp_path):
    sc = scenario("asgd")
    every = Every(tmp_path, 40, sc.digest(), clock=itertools.count().__next__)
    clean = execute(sc, checkpointer=every)
    (segments, calls), *_ = every.seen
    assert segments == [f"tape-0-{calls}.npz"]
    names, ends = every.seen[-1][0], [n for _, n in every.seen]
    assert len(names) == 4 and sorted(names) == sorted(f"tape-{a}-{b}.npz" for a, b in zip([0] + ends, ends))
    saved = checkpoint.load(tmp_path)
    whole = fred.numerics.tape.parse(*clean.tape)  # the uninterrupted run's whole tape
    assert saved.recorded.calls == whole.calls[: ends[-1]]
    assert saved.recorded.treedefs == whole.treedefs[: len(saved.recorded.treedefs)]
    as_lists = lambda times: {i: list(d) for i, d in times.items()}  # noqa: E731
    assert as_lists(saved.recorded.compute_s) == {
        i: d for i, d in as_lists(whole.compute_s).items() if i < ends[-1]
    }
    assert saved.recorded.constants and all(
        (v == whole.constants[i]).all() for i, v in saved.recorded.constants.items()
    )
    same_run(execute(sc, resume=saved), clean)


def test_a_missing_segment_makes_resume_run_from_the_start(tmp_path):
    sc = scenario("asgd")
    run_dir = tmp_path / "run"
    every = interrupted(sc, run_dir, Every, 40)
    (every.path / every.seen[-1][0][0]).unlink()
    with pytest.raises(ValueError, match="segment tape-0-.* is missing"):
        checkpoint.load(every.path)
    result, reason = fred.runs.api.resume(run_dir)
    assert "is missing" in reason
    same_run(result, execute(sc))


def test_a_truncated_checkpoint_is_named_in_the_reason_resume_ran_from_the_start(tmp_path):
    sc = scenario("asgd")
    run_dir = tmp_path / "run"
    once = interrupted(sc, run_dir, Once, 40)
    whole = (once.path / "checkpoint.npz").read_bytes()
    (once.path / "checkpoint.npz").write_bytes(whole[: len(whole) // 2])  # cut short, as by a full disk
    result, reason = fred.runs.api.resume(run_dir)
    assert reason.startswith(f"BadZipFile reading {once.path}:")  # it said only "File is not a zip file"
    same_run(result, execute(sc))


def test_a_resumed_run_checkpoints_afresh_and_drops_the_old_segments(tmp_path):
    sc = scenario("asgd")
    first = Every(tmp_path, 40, sc.digest(), clock=itertools.count().__next__)
    execute(sc, checkpointer=first)
    saved = checkpoint.load(tmp_path)
    (tmp_path / "tape-7-9.npz").write_bytes(b"left by an interrupted save")
    second = Every(tmp_path, 20, sc.digest(), clock=itertools.count().__next__)
    second.times = 1
    execute(sc, checkpointer=second, resume=saved)
    ((names, calls),) = second.seen
    assert names == [f"tape-0-{calls}.npz"] and calls > len(saved.recorded.calls)


def test_train_losses_added_up_as_the_run_goes_give_the_same_bits_and_resume(tmp_path, monkeypatch):
    """A run evaluated rarely adds its oldest train losses up as it goes (fred.runs.controller.FOLD_LOSSES);
    the train loss is the same float as adding them all at the evaluation, and a checkpoint
    taken between carries the partial sum."""
    sc = validate(tiny(strategy={"name": "asgd"}, stop={"max_updates": 120}, eval={"every_updates": 60}))
    whole = execute(sc)  # 120 losses at most between evaluations: nothing added up early
    folds = []
    real_fold = fred.runs.controller.Controller._fold
    monkeypatch.setattr(fred.runs.controller, "FOLD_LOSSES", 4)
    monkeypatch.setattr(
        fred.runs.controller.Controller, "_fold", lambda self: (folds.append(1), real_fold(self))
    )
    early = execute(sc)
    assert len(folds) > 20
    same_run(early, whole)
    assert early.metrics["train_loss"].notna().sum() == 2
    every = Every(tmp_path, 150, sc.digest(), clock=itertools.count().__next__)
    every.times = 1
    execute(sc, checkpointer=every)
    saved = checkpoint.load(tmp_path)
    assert saved.train[1] > 0  # a partial sum was saved
    same_run(execute(sc, resume=saved), whole)


def test_a_checkpoint_from_before_segments_still_resumes(tmp_path):
    """The single-file layout fred wrote until 2026-11-24: the whole tape and one entry per value."""
    sc = scenario("asgd")
    every = Every(tmp_path / "new", 40, sc.digest(), clock=itertools.count().__next__)
    clean = execute(sc, checkpointer=every)
    saved = checkpoint.load(every.path)
    old = fred.numerics.tape.Tape()  # the same tape, rebuilt to be documented whole
    old.calls, old.treedefs, old.constants, old.compute_s = (
        saved.recorded.calls,
        saved.recorded.treedefs,
        saved.recorded.constants,
        saved.recorded.compute_s,
    )
    doc, blobs = fred.numerics.tape.document(old, (0, []))
    state = {"steps": saved.steps, "metrics": saved.metrics, "scenario_sha256": saved.scenario_sha256}
    (tmp_path / "old").mkdir()
    fred.numerics.tape.write(
        tmp_path / "old" / "checkpoint.npz",
        doc,
        blobs,
        state=fred.numerics.tape.json_array(state),
        **{f"v{i}": v for i, v in saved.values.items()},
    )
    same_run(execute(sc, resume=checkpoint.load(tmp_path / "old")), clean)


def test_resume_falls_back_to_a_full_run_when_it_cannot_fast_forward(tmp_path):
    # B-FASGD's gates read the server's statistic: a number fast-forward does not have.
    sc = validate(tiny(strategy={"name": "bfasgd", "c_fetch": 0.03}, stop={"max_updates": 30}))
    run_dir = tmp_path / "run"
    interrupted(sc, run_dir, Once, 80)
    told = []
    result, reason = fred.runs.api.resume(
        run_dir, restarting=lambda why: told.append((why, checkpoint_dir(run_dir).exists()))
    )
    assert reason is not None and told == [(reason, True)], "told before the run went again, not after it"
    same_run(result, execute(sc))
    assert (run_dir / "summary.json").is_file() and not checkpoint_dir(run_dir).exists()


def reading_asgd(read):
    """The shipped asgd, beside a process that ``read``s a leaf of the global parameters every 0.01 s."""
    shipped = registry.get("asgd")

    def start(sim, config):
        params = shipped.start(sim, config)

        def watch():
            while True:
                yield sim.env.timeout(0.01)
                read(jax.tree.leaves(params())[0])

        sim.process(watch())
        return params

    return shipped._replace(start=start)


@pytest.mark.parametrize(
    "read", [lambda leaf: leaf * 2.0, jax.jit(lambda leaf: leaf.sum())], ids=["arithmetic", "unrecorded jit"]
)
def test_a_strategy_computing_outside_the_tape_resumes_by_running_from_the_start(read, tmp_path, monkeypatch):
    # Only float() and np.asarray() of a fast-forwarded value fell back; these were tracebacks.
    monkeypatch.setitem(registry._REGISTRY, "asgd", reading_asgd(read))
    sc = scenario("asgd")
    run_dir = tmp_path / "run"
    interrupted(sc, run_dir, Once, 40)
    result, reason = fred.runs.api.resume(run_dir)
    assert reason is not None and ("Placeholder" in reason or "does not record" in reason), reason
    same_run(result, execute(sc))


def test_a_resumed_run_reports_the_wall_time_of_the_whole_run(tmp_path):
    # It reported only the resumed part (13 s of a 53 s run).
    sc = scenario("asgd")
    run_dir = tmp_path / "run"
    checkpointer = interrupted(sc, run_dir, Once, 40, wall_before_s=1000.0)
    assert checkpoint.load(checkpointer.path).wall_s > 1000.0
    result, reason = fred.runs.api.resume(run_dir)
    assert reason is None and result.summary["wall_time_s"] > 1000.0


def test_a_resumed_run_reports_the_evaluation_time_of_the_whole_run(tmp_path):
    # The evaluations before the checkpoint are read back, not made again: their time is the checkpoint's.
    sc = scenario("asgd")
    checkpointer = interrupted(sc, tmp_path / "run", Once, 40)
    saved = checkpoint.load(checkpointer.path)
    assert saved.eval_wall_s > 0  # the evaluation at 0 s at least
    saved.eval_wall_s += 1000.0  # as if they had taken long
    assert execute(sc, resume=saved).summary["eval_wall_s"] > 1000.0
    resumed = Once(tmp_path / "again", 1, sc.digest(), clock=itertools.count().__next__)
    execute(sc, checkpointer=resumed, resume=saved)  # a resumed run's checkpoints carry it on
    assert checkpoint.load(resumed.path).eval_wall_s > 1000.0


def unable_to_allocate(*args) -> None:
    raise MemoryError(
        "Unable to allocate 1.00 TiB for an array with shape (1000000, 275000) and data type float32"
    )


def test_a_checkpointed_run_out_of_memory_between_steps_checkpoints_its_last_step_and_resumes(
    tmp_path, monkeypatch, capsys
):
    # An evaluation on the simulated clock is made between two steps: the run is whole there.
    data = tiny(stop={"max_updates": 40}, eval={"every_s": 0.02, "every_updates": None})
    clean = execute(validate(data))
    path, run_dir = tmp_path / "s.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(data))
    real, evaluations = Numerics.evaluate, []
    monkeypatch.setattr(
        Numerics,
        "evaluate",
        lambda self, *args: (
            evaluations.append(1),
            unable_to_allocate() if len(evaluations) == 4 else None,
            real(self, *args),
        )[-1],
    )
    assert run_checkpointed(path, run_dir, "3600") == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("fred: out of memory at ") and "(Unable to allocate 1.00 TiB" in line
    assert line.endswith(
        f"the run is not recorded, its checkpoint is kept: fred run --resume {run_dir} finishes it"
    )
    assert not run_dir.exists()
    saved = checkpoint.load(checkpoint_dir(run_dir))
    assert saved.steps > 0 and [row[0] for row in saved.metrics] == [
        0.0,
        0.02,
        0.04,
    ]  # not the one that failed
    monkeypatch.setattr(Numerics, "evaluate", real)  # a machine with more memory
    result, reason = fred.runs.api.resume(run_dir)
    assert reason is None
    same_run(result, clean)


def test_a_checkpointed_run_out_of_memory_inside_a_step_keeps_its_last_checkpoint(tmp_path, monkeypatch):
    # A gradient's allocation fails inside a step, which is left cut: the last checkpoint is the run's last
    # whole state.
    sc = scenario("asgd")
    clean = execute(sc)
    checkpointer = Once(checkpoint_dir(tmp_path / "run"), 40, sc.digest(), clock=itertools.count().__next__)
    checkpointer.path.mkdir(parents=True)
    (checkpointer.path / "scenario.yaml").write_text(yaml.safe_dump(sc.resolved()))
    gradient_calls(monkeypatch, lambda count: unable_to_allocate() if checkpointer.saved else None)
    with pytest.raises(RanOutOfMemory, match="its checkpoint is kept"):
        execute(sc, checkpointer=checkpointer)
    assert checkpoint.load(checkpointer.path).steps == 40
    monkeypatch.undo()
    result, reason = fred.runs.api.resume(tmp_path / "run")
    assert reason is None
    same_run(result, clean)


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start(tmp_path):
    sc = scenario("asgd")
    path = checkpoint_dir(tmp_path / "run")
    path.mkdir()
    (path / "scenario.yaml").write_text(yaml.safe_dump(sc.resolved()))
    result, reason = fred.runs.api.resume(tmp_path / "run")
    assert "holds no checkpoint" in reason
    same_run(result, execute(sc))


def test_resume_without_a_checkpoint_or_with_a_scenario_is_a_clear_error(tmp_path, capsys):
    assert main(["run", "--resume", str(tmp_path / "nothing")]) == 2
    assert "no checkpoint for" in capsys.readouterr().err
    assert main(["run", "x.yaml", "--resume", str(tmp_path / "nothing")]) == 2
    assert "only the run directory" in capsys.readouterr().err
    fred.run(tiny(), out=tmp_path / "done")
    assert (
        main(["run", "--resume", str(tmp_path / "done")]) == 2
    )  # it said to start runs with --checkpoint-every-s
    assert "is a finished run: there is nothing to resume" in capsys.readouterr().err


@pytest.mark.parametrize("every_s", ["0", "-5"])
def test_a_checkpoint_interval_must_be_positive(tmp_path, capsys, every_s):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(tiny()))
    out = tmp_path / "run"
    assert run_checkpointed(scenario, out, every_s) == 2
    assert f"--checkpoint-every-s {float(every_s)}: give a positive number" in capsys.readouterr().err
    assert not out.exists() and not checkpoint_dir(out).exists()
    assert main(["run", "--resume", str(out), "--checkpoint-every-s", every_s]) == 2  # resuming too
    assert f"--checkpoint-every-s {float(every_s)}: give a positive number" in capsys.readouterr().err


FRED_CLI = [sys.executable, "-m", "fred.tools.cli"]


def checkpointed_cli_run(
    tmp_path, updates: int, out, **popen
) -> tuple[Path, dict[str, str], subprocess.Popen]:
    """A ``fred run --checkpoint-every-s 0.2`` process of an ASGD scenario of ``updates``, once its
    first checkpoint is written: (the scenario file, the environment, the process)."""
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            tiny(strategy={"name": "asgd"}, stop={"max_updates": updates}, eval={"every_updates": 100})
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [*FRED_CLI, "run", str(path), "--out", str(out), "--quiet", "--checkpoint-every-s", "0.2"],
        env=env,
        **popen,
    )
    while not (checkpoint_dir(out) / "checkpoint.npz").exists() and process.poll() is None:
        time.sleep(0.05)  # no deadline: the run ends by itself, and the test then fails
    return path, env, process


# 11 s on 2 cores: a process killed and resumed; the default run resumes every strategy in process
@pytest.mark.slow
def test_fred_run_killed_with_sigkill_resumes_bit_identical(tmp_path):
    path, env, killed = checkpointed_cli_run(tmp_path, 3000, tmp_path / "killed")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not (tmp_path / "killed" / "summary.json").exists()
    subprocess.run([*FRED_CLI, "run", "--resume", str(tmp_path / "killed")], env=env, check=True)
    subprocess.run(
        [*FRED_CLI, "run", str(path), "--out", str(tmp_path / "clean"), "--quiet"], env=env, check=True
    )
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("killed", "clean"))
    assert {k: v for k, v in a.items() if k not in WALL_CLOCK_KEYS} == {
        k: v for k, v in b.items() if k not in WALL_CLOCK_KEYS
    }
    for table in ("events", "updates", "metrics"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "killed" / f"{table}.parquet"),
            pd.read_parquet(tmp_path / "clean" / f"{table}.parquet"),
        )
    assert not checkpoint_dir(tmp_path / "killed").exists()


# Slow (20-34 s on 2 loaded cores): 20,000 updates, so that the process is still running when the
# signal comes, resumed and then run again whole. The default run keeps the SIGKILL test above
# (a fresh process killed and resumed) and the stops by Ctrl-C below, in this process and by `fred run`.
@pytest.mark.slow
def test_fred_run_stopped_by_sigterm_keeps_a_last_checkpoint_says_so_and_resumes_bit_identical(tmp_path):
    # SIGTERM (timeout, kill, a job scheduler before its SIGKILL) ended the process where it
    # was: the work since the last periodic checkpoint was lost, and nothing was said.
    out = tmp_path / "stopped"
    path, env, stopped = checkpointed_cli_run(tmp_path, 20000, out, stderr=subprocess.PIPE, text=True)
    stopped.send_signal(signal.SIGTERM)
    _, err = stopped.communicate(timeout=600)  # a hang guard
    assert stopped.returncode == 143, err
    assert (
        f"fred: terminated; no run directory was written; its checkpoint is kept: fred run --resume {out}"
        in err
    )
    assert "Traceback" not in err and not (out / "summary.json").exists()
    subprocess.run([*FRED_CLI, "run", "--resume", str(out), "--quiet"], env=env, check=True)
    a = json.loads((out / "summary.json").read_text())
    b = fred.run(yaml.safe_load(path.read_text())).summary
    assert {k: v for k, v in a.items() if k not in WALL_CLOCK_KEYS} == {
        k: v for k, v in b.items() if k not in WALL_CLOCK_KEYS
    }


def test_fred_run_from_python_leaves_sigterm_to_the_system(monkeypatch):
    # Only the fred command takes SIGTERM as a stop: a Jupyter kernel told to stop must stop.
    seen = []
    gradient_calls(monkeypatch, lambda count: seen.append(signal.getsignal(signal.SIGTERM)))
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    fred.run(tiny(stop={"max_updates": 2}))
    assert seen and all(handler == signal.SIG_DFL for handler in seen)


def test_a_ctrl_c_during_a_checkpoints_collection_stops_the_run():
    # Raised inside a collection callback (JAX has one), Python printed and dropped it.
    from fred.runs.checkpoint import collect

    def interrupt(phase, info):
        if phase == "start":
            gc.callbacks.remove(interrupt)
            os.kill(os.getpid(), signal.SIGINT)

    gc.callbacks.append(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            collect()
    finally:
        if interrupt in gc.callbacks:
            gc.callbacks.remove(interrupt)


def ctrl_c_now():
    os.kill(os.getpid(), signal.SIGINT)


def ctrl_c_in_a_collection():
    # Raised in a collector callback (JAX has one) or a weak reference's, Python prints and drops it.

    def interrupt(phase, info):
        gc.callbacks.remove(interrupt)
        ctrl_c_now()

    gc.callbacks.append(interrupt)
    gc.collect()


@pytest.mark.parametrize("press", [ctrl_c_now, ctrl_c_in_a_collection])
def test_ctrl_c_inside_a_step_stops_the_run_and_leaves_the_last_checkpoint_whole(
    press, tmp_path, monkeypatch
):
    # SimPy caught the interrupt in the process it hit and it came out a step later, after a
    # checkpoint of the cut step had replaced the good one (resume then ran from the start);
    # in a callback it was dropped and the run went on to its end.
    sc = scenario("asgd")
    real = Numerics._call
    gradient_calls(monkeypatch, lambda count: press() if count == 3 else None)
    path = checkpoint_dir(tmp_path / "run")
    path.mkdir(parents=True)
    (path / "scenario.yaml").write_text(yaml.safe_dump(sc.resolved()))
    every_step = Checkpointer(path, 1, sc.digest(), clock=itertools.count().__next__)
    with pytest.raises(KeyboardInterrupt):
        execute(sc, checkpointer=every_step)
    monkeypatch.setattr(Numerics, "_call", real)
    result, reason = fred.runs.api.resume(tmp_path / "run")
    assert reason is None, "the checkpoint left is whole: the run fast-forwarded to it"
    same_run(result, execute(sc))


class Never(Checkpointer):
    """A checkpointer whose periodic checkpoint never comes due: only a stop asks for one."""

    def due(self) -> bool:
        return False


def stopped_with_no_checkpoint_due(sc, run_dir, monkeypatch, at_each: Callable[[int], None]) -> Checkpointer:
    """``sc`` checkpointed for ``run_dir`` with none due, ``at_each(gradient call)`` pressing; it must
    stop."""
    checkpointer = Never(checkpoint_dir(run_dir), 1, sc.digest(), clock=itertools.count().__next__)
    checkpointer.path.mkdir(parents=True)
    (checkpointer.path / "scenario.yaml").write_text(yaml.safe_dump(sc.resolved()))
    real = Numerics._call
    gradient_calls(monkeypatch, at_each)
    with pytest.raises(KeyboardInterrupt):
        execute(sc, checkpointer=checkpointer)
    monkeypatch.setattr(Numerics, "_call", real)
    return checkpointer


def test_a_stopped_run_keeps_a_checkpoint_of_its_last_whole_step_and_resumes_losing_nothing(
    tmp_path, monkeypatch
):
    # Ctrl-C (or the fred command's SIGTERM) stopped the run with only the last periodic
    # checkpoint kept: up to --checkpoint-every-s of work lost, all of it before the first.
    sc = scenario("asgd")
    checkpointer = stopped_with_no_checkpoint_due(
        sc, tmp_path / "run", monkeypatch, lambda n: ctrl_c_now() if n == 5 else None
    )
    assert checkpointer.saved == 1
    saved = checkpoint.load(checkpointer.path)
    assert saved.steps > 0
    result, reason = fred.runs.api.resume(tmp_path / "run")
    assert reason is None, "the stop's checkpoint is whole: the run fast-forwarded to it"
    same_run(result, execute(sc))


def test_a_second_ctrl_c_stops_at_once_and_keeps_no_checkpoint_of_the_step_it_cut(tmp_path, monkeypatch):
    sc = scenario("asgd")
    twice = lambda n: (ctrl_c_now(), ctrl_c_now()) if n == 5 else None  # noqa: E731
    checkpointer = stopped_with_no_checkpoint_due(sc, tmp_path / "run", monkeypatch, twice)
    assert checkpointer.saved == 0 and not (checkpointer.path / "checkpoint.npz").exists()


@pytest.mark.parametrize("where", ["build", "first evaluation"])
def test_ctrl_c_before_the_first_step_stops_the_run(where, monkeypatch):
    # Pressed while the data loaded or the first programs compiled, it landed in a JAX callback,
    # was dropped, and the run went on to its end (4 of 14 early presses of a fred run).
    import fred.runs.runner

    if where == "build":
        real_build = fred.runs.runner.build
        monkeypatch.setattr(
            fred.runs.runner, "build", lambda sc: (ctrl_c_in_a_collection(), real_build(sc))[1]
        )
    else:
        real_evaluate = Numerics.evaluate
        monkeypatch.setattr(
            Numerics, "evaluate", lambda self, *a: (ctrl_c_in_a_collection(), real_evaluate(self, *a))[1]
        )
    with pytest.raises(KeyboardInterrupt):
        execute(scenario("asgd"))


def interrupted_cli_run(tmp_path, monkeypatch, capsys) -> tuple[str, object]:
    """``fred run --checkpoint-every-s`` stopped by Ctrl-C at its fifth gradient call."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(strategy={"name": "asgd"}, stop={"max_updates": 30})))
    real = Numerics._call
    gradient_calls(monkeypatch, lambda count: ctrl_c_now() if count == 5 else None)
    out = tmp_path / "run"
    assert run_checkpointed(path, out, "1e-9") == 130
    monkeypatch.setattr(Numerics, "_call", real)
    return capsys.readouterr().err, out


def test_ctrl_c_says_how_to_resume_and_resume_refuses_a_finished_run_with_a_stale_checkpoint(
    tmp_path, monkeypatch, capsys
):
    err, out = interrupted_cli_run(tmp_path, monkeypatch, capsys)
    assert f"its checkpoint is kept: fred run --resume {out}" in err
    assert main(["run", "--resume", str(checkpoint_dir(out))]) == 2  # the folder `ls` shows
    assert (
        f"is a checkpoint folder; give the run directory it is for: fred run --resume {out}"
        in capsys.readouterr().err
    )
    # Another run to the same --out finishes: resuming the old checkpoint silently replaced it.
    fred.run(tiny(stop={"max_updates": 3}, seed=99), out=out)
    assert main(["run", "--resume", str(out)]) == 2
    assert "is a finished run, and" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["updates"] == 3


def test_ctrl_c_during_a_resume_says_the_checkpoint_is_still_there(tmp_path, monkeypatch, capsys):
    # It said only "no run directory was written", as if the resume had lost the checkpoint.
    _, out = interrupted_cli_run(tmp_path, monkeypatch, capsys)
    real = Numerics._call
    gradient_calls(monkeypatch, lambda count: ctrl_c_now() if count == 2 else None)
    assert main(["run", "--resume", str(out)]) == 130
    monkeypatch.setattr(Numerics, "_call", real)
    assert f"its checkpoint is kept: fred run --resume {out}" in capsys.readouterr().err
    assert main(["run", "--resume", str(out), "--quiet"]) == 0 and is_complete(out)


def test_a_failure_of_the_resumed_run_itself_is_not_met_by_running_it_again(tmp_path, monkeypatch):
    # Any error at all ran the scenario again from its start, and failed a second time.
    sc = scenario("asgd")
    run_dir = tmp_path / "run"
    interrupted(sc, run_dir, Once, 40)
    runs = [0]
    real = fred.runs.api.execute

    def counted(*args, **kwargs):
        runs[0] += 1
        return real(*args, **kwargs)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fred.runs.api, "execute", counted)
    monkeypatch.setattr(Checkpointer, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        fred.runs.api.resume(run_dir, checkpoint_every_s=1e-9)
    assert runs[0] == 1


def run_checkpointed(scenario_file: Path, out: Path, every_s: str) -> int:
    """``fred run SCENARIO --out OUT --quiet --checkpoint-every-s EVERY_S``: its exit status."""
    return main(["run", str(scenario_file), "--out", str(out), "--quiet", "--checkpoint-every-s", every_s])


def test_a_file_where_the_checkpoints_go_is_refused(tmp_path, capsys):
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(tiny()))
    checkpoint_dir(tmp_path / "run").write_text("mine")
    assert run_checkpointed(scenario_file, tmp_path / "run", "5") == 2
    assert "run.checkpoint is a file; checkpoints go in a directory of that name" in capsys.readouterr().err


def files_under(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_checkpoint_folder_of_other_files_is_refused_and_left_as_it_was(tmp_path, capsys):
    # fred wrote its checkpoints into the user's folder and deleted it, notes and all, at the run's end.
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(tiny()))
    folder = checkpoint_dir(tmp_path / "run")
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / "tape-0-1.npz").write_text("also mine: a name fred uses, in a folder fred did not make")
    before = files_under(folder)
    assert run_checkpointed(scenario_file, tmp_path / "run", "0.001") == 2
    err = capsys.readouterr().err
    assert "run.checkpoint holds files fred did not write (notes.txt)" in err and "Traceback" not in err
    assert files_under(folder) == before and not (tmp_path / "run").exists()
    assert main(["run", "--resume", str(tmp_path / "run")]) == 2  # resuming would delete them too
    assert "holds files fred did not write (notes.txt); " in capsys.readouterr().err
    assert files_under(folder) == before


def test_the_scenario_file_in_the_checkpoint_folder_is_refused_not_deleted(tmp_path, capsys):
    folder = checkpoint_dir(tmp_path / "run")
    folder.mkdir()
    (folder / "scenario.yaml").write_text(
        yaml.safe_dump(tiny())
    )  # a name fred writes there: only where it was read says whose
    assert run_checkpointed(folder / "scenario.yaml", tmp_path / "run", "0.001") == 2
    assert "scenario.yaml is in " in capsys.readouterr().err
    assert (folder / "scenario.yaml").read_text() == yaml.safe_dump(tiny()) and not (
        tmp_path / "run"
    ).exists()
    with pytest.raises(ValueError, match="the checkpoint folder this run writes and deletes"):
        fred.run(folder / "scenario.yaml", out=tmp_path / "run", checkpoint_every_s=0.001)


def test_a_link_at_the_checkpoint_folder_is_refused_and_its_target_untouched(tmp_path, capsys):
    # fred followed the link: it overwrote scenario.yaml there and deleted tape-*.npz files it had not
    # written.
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(tiny()))
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "scenario.yaml").write_text("precious")
    (target / "tape-0-5.npz").write_text("precious too")
    before = files_under(target)
    checkpoint_dir(tmp_path / "run").symlink_to(target)
    assert run_checkpointed(scenario_file, tmp_path / "run", "0.001") == 2
    assert "run.checkpoint is a link" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path / "run")]) == 2
    assert "run.checkpoint is a link" in capsys.readouterr().err
    assert files_under(target) == before and not (tmp_path / "run").exists()


def test_a_run_deletes_only_the_files_it_wrote_in_its_checkpoint_folder(tmp_path, monkeypatch):
    sc = scenario("asgd")
    folder = checkpoint_dir(tmp_path / "run")
    folder.mkdir()
    (folder / "scenario.yaml").write_text("an earlier checkpoint of this run directory: fred's, replaced")
    (folder / "tape-0-3.npz").write_text("an earlier segment")
    save = Checkpointer.save

    def save_and_add_a_file(
        self, *args, **kwargs
    ):  # a file put there while the run goes on stays, with its folder
        save(self, *args, **kwargs)
        (self.path / "added.txt").write_text("mine")

    monkeypatch.setattr(Checkpointer, "save", save_and_add_a_file)
    fred.run(sc, out=tmp_path / "run", checkpoint_every_s=1e-9)
    assert is_complete(tmp_path / "run")
    assert [p.name for p in folder.iterdir()] == ["added.txt"]
