"""SIGINT and SIGTERM end ``fred run`` promptly, at any moment, with one line and status 130 or 143.

Each test starts ``python -m fred run`` as a process of its own and signals it: while it loads
its libraries, while its main thread is held in native code (as XLA holds it while compiling),
with the stop's KeyboardInterrupt dropped by Python inside a collection callback, in the middle
of the run, and after its run directory is written. Whenever the signal comes the command
ends with the signal's status, or 0 when it had ended already (or is ended by the signal itself
in the last instants of Python's shutdown, after its run directory is complete), writes no
traceback, no "Exception ignored" and at most a couple of lines, and leaves a complete run
directory or none.
Signals are sent once the command has taken SIGTERM over (its /proc status says so): a signal
in the tens of milliseconds before, while Python itself starts, is Python's own.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fred.runs.paths import RUN_FILES

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
HANG_S = 60  # from the signal to the process's end: a hang guard, not a speed check
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
SAYS = {signal.SIGINT: "fred: interrupted", signal.SIGTERM: "fred: terminated"}
RECORDS = RUN_FILES  # every record a finished run directory holds

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").is_file(), reason="reads a process's signal mask in /proc"
)

# The command with a line of set-up run first (patching fred to hold the main thread, say).
WITH_SETUP = """
import sys
sys.argv[0] = "fred"
{setup}
from fred.tools.cli import entry
entry()
"""


def start(
    tmp_path: Path, *args: str, setup: str = "", env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, Path]:
    """``fred run`` of the quickstart into ``tmp_path/run``, once it takes SIGTERM."""
    out = tmp_path / "run"
    head = [sys.executable, "-c", WITH_SETUP.format(setup=setup)] if setup else [sys.executable, "-m", "fred"]
    proc = subprocess.Popen(
        [*head, "run", str(QUICKSTART), "--out", str(out), "--quiet", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + HANG_S
    while not _catches_sigterm(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    return proc, out


def _catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def signal_and_check(proc: subprocess.Popen, out: Path, signum: int) -> str:
    """Send ``signum``; the command ends as promised. Returns its stderr."""
    proc.send_signal(signum)
    try:
        stdout, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {HANG_S} s after {signum.name}: {proc.communicate()}")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert len(err.splitlines()) <= 2, err
    complete = all((out / name).is_file() for name in RECORDS)
    if proc.returncode in (
        0,
        -signum,
    ):  # it had ended before the signal came, or was in Python's last instants
        assert complete and err == "", (proc.returncode, err)
        return err
    assert proc.returncode == STATUS[signum] and err.startswith(SAYS[signum]), (proc.returncode, err)
    if "the run had finished" in err:
        assert complete, err
    else:
        assert "no run directory was written" in err or "nothing was done" in err, err
        assert not out.exists(), sorted(out.iterdir())
    hidden = [
        p.name for p in out.parent.glob(f".{out.name}.*")
    ]  # a copy being written when the process ended
    assert all(f"-{proc.pid}" in name for name in hidden), hidden  # removed by the next write of the run
    return err


@pytest.mark.parametrize(("signum", "after_s"), [(signal.SIGINT, 0.05), (signal.SIGTERM, 0.3)])
def test_a_signal_while_fred_loads_its_libraries_ends_it_with_one_line(signum, after_s, tmp_path):
    # Ctrl-C while jax loaded was a traceback and status 1, or, raised inside jaxlib's native
    # initialisation, "terminate called after throwing an instance of 'nanobind::python_error'".
    proc, out = start(tmp_path)
    time.sleep(after_s)
    signal_and_check(proc, out, signum)


# The run's first compilation stands in for a long one: the main thread is held in native
# code (a key derivation of ten minutes, which lets go of the GIL as XLA does) where Python
# cannot run the signal's handler.
HELD_IN_NATIVE_CODE = """
import hashlib
import fred.runs.runner as runner
def build(scenario):
    print("compiling", flush=True)
    hashlib.pbkdf2_hmac("sha256", b"fred", b"salt", 2_000_000_000)
runner.build = build
"""


@pytest.mark.slow  # 5 s on 2 cores
def test_a_signal_while_native_code_holds_the_main_thread_ends_the_process_anyway(tmp_path):
    # SIGTERM during a long first compilation waited 40-120 s for it to end.
    proc, out = start(tmp_path, setup=HELD_IN_NATIVE_CODE)
    assert proc.stdout.readline() == "compiling\n"
    err = signal_and_check(proc, out, signal.SIGTERM)
    assert err == "fred: terminated; no run directory was written\n"


# The stop's KeyboardInterrupt raised inside a garbage-collection callback, as it was in JAX's
# (_xla_gc_callback), where Python prints "Exception ignored in" and drops it.
DROPPED_IN_A_CALLBACK = """
import gc, os, signal
import fred.scenario.loading as loading
real = loading.load_scenario
def load_scenario(*args, **kwargs):
    def interrupt(phase, info):
        gc.callbacks.remove(interrupt)
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100_000))  # the handler runs, and raises, here
    gc.callbacks.append(interrupt)
    gc.collect()
    return real(*args, **kwargs)
loading.load_scenario = load_scenario
"""


def test_a_stop_python_drops_in_a_collection_callback_still_ends_the_command(tmp_path):
    # The run went on to its end and exited 0, after "Exception ignored in: _xla_gc_callback".
    proc, out = start(tmp_path, setup=DROPPED_IN_A_CALLBACK)
    try:
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err == "fred: interrupted; no run directory was written\n", err
    assert not out.exists()


# a run of 2-4 s before its first checkpoint (test_resume has the stop's checkpoint resumed)
@pytest.mark.slow
def test_sigterm_mid_run_keeps_the_checkpoint_and_says_how_to_resume(tmp_path):
    proc, out = start(tmp_path, "--set", "stop.max_updates=100000", "--checkpoint-every-s", "0.2")
    checkpoint = out.parent / f"{out.name}.checkpoint" / "checkpoint.npz"
    deadline = time.monotonic() + HANG_S
    while not checkpoint.is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    err = signal_and_check(proc, out, signal.SIGTERM)
    assert err == (
        f"fred: terminated; no run directory was written; its checkpoint is kept: fred run --resume {out}\n"
    )


@pytest.mark.slow  # 3.5 s on 2 cores: a fresh process signalled
def test_a_signal_after_the_run_directory_is_written_says_so_and_never_prints_a_traceback(tmp_path):
    # A Ctrl-C as the command ended exited 0 with a traceback from an atexit callback.
    proc, out = start(tmp_path, "--set", "stop.max_updates=50")
    deadline = time.monotonic() + HANG_S
    while not (out / "summary.json").is_file() and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    err = signal_and_check(proc, out, signal.SIGINT)
    assert err in ("", f"fred: interrupted; the run had finished: its run directory {out} is written\n")


@pytest.mark.slow  # 3.5 s on 2 cores: a fresh process signalled
def test_a_signal_between_the_commands_end_and_its_last_handlers_is_a_stop_said_once(tmp_path):
    # SIGINT taken after main returned and before finished() had swapped the handlers raised
    # out of entry: a traceback, and Python's own death by SIGINT. Here the command signals
    # itself in that instant.
    setup = (
        "import os, signal; from fred.runs import interrupt; last = interrupt.finished; "
        "interrupt.finished = lambda: (os.kill(os.getpid(), signal.SIGINT), last())"
    )
    proc, out = start(tmp_path, "--set", "stop.max_updates=5", setup=setup)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, err
    assert err == f"fred: interrupted; the run had finished: its run directory {out} is written\n"
    assert all((out / name).is_file() for name in RECORDS)


# Slow: 24 runs of the quickstart (2-5 s each on 2 cores), each signalled once at a moment
# drawn between the command's start and its end; every other one compiles everything afresh
# (no compilation cache), so that more of the moments fall in a compilation.
@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24))
def test_a_signal_at_any_moment_ends_the_run_as_promised(seed, tmp_path):
    draw = random.Random(seed)
    signum = draw.choice([signal.SIGINT, signal.SIGTERM])
    proc, out = start(tmp_path, env={"FRED_JAX_CACHE": "off"} if seed % 2 else None)
    time.sleep(draw.uniform(0.0, 5.0))
    signal_and_check(proc, out, signum)


@pytest.mark.slow
def test_a_stop_during_a_long_catch_up_of_evaluations_is_taken_there(tmp_path):
    # A step of 100 simulated seconds followed by 100,000 evaluations 1 ms apart: the loop that
    # made them never looked for a stop, and the first SIGTERM waited for all of them. Validation
    # now refuses evaluations that cost this much (fred.runs.work): lifted here, to make the catch-up.
    long_step = [
        "--set",
        "cluster.compute.step_time_s=100",
        "--set",
        "eval.every_s=0.001",
        "--set",
        "stop.max_sim_time_s=100",
        "--set",
        "eval.every_updates=null",
    ]
    proc, out = start(
        tmp_path, *long_step, setup="import fred.runs.work; fred.runs.work.MAX_EVAL_WORK = float('inf')"
    )
    time.sleep(5.0)
    assert proc.poll() is None, proc.communicate()
    signal_and_check(proc, out, signal.SIGTERM)


@pytest.mark.slow
def test_a_second_signal_ends_the_command_at_once_even_in_native_code(tmp_path):
    proc, out = start(tmp_path, setup=HELD_IN_NATIVE_CODE)
    assert proc.stdout.readline() == "compiling\n"
    proc.send_signal(signal.SIGINT)
    err = signal_and_check(proc, out, signal.SIGINT)
    assert err == "fred: interrupted; no run directory was written\n"


@pytest.mark.slow
def test_a_signal_to_a_parallel_sweep_keeps_the_runs_that_finish_and_says_so(tmp_path):
    sweep = [
        sys.executable,
        "-m",
        "fred",
        "sweep",
        str(QUICKSTART),
        "--grid",
        "seed=0,1,2",
        "--jobs",
        "2",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "sweep.parquet"),
    ]
    proc = subprocess.Popen(sweep, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not _catches_sigterm(proc.pid):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    time.sleep(3.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_S)  # the started runs finish first: a hang guard
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 143 and err.splitlines()[-1] == (
        "fred: terminated; every run that finished is kept, and fred sweep again reuses them"
    ), err
    assert not (tmp_path / "sweep.parquet").exists()
    for run in (tmp_path / "runs").glob("*") if (tmp_path / "runs").exists() else []:
        assert all((run / name).is_file() for name in RECORDS), sorted(run.iterdir())
