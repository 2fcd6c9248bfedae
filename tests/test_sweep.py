"""Sweeps: every combination once, resumable, the same table in one process or several."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import multiprocessing
import multiprocessing.util as mp_util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fred.runs.records import is_complete
from fred.runs.runner import WALL_CLOCK_KEYS
from fred.scenario.loading import ScenarioError
from fred.tools.cli import main
from fred.tools.sweep import _stop, parse_grid, sweep
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(stop={"max_updates": 6})))
    return path


def test_the_grid_parses_values_as_yaml():
    assert parse_grid(["strategy.lr=0.01,0.1", "seed=0,1,2"]) == {
        "strategy.lr": [0.01, 0.1],
        "seed": [0, 1, 2],
    }
    with pytest.raises(ScenarioError, match="path.to.key=value1,value2"):
        parse_grid(["strategy.lr"])


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["=1,2"], "write it as path.to.key=value1,value2"),
        (["seed=0", "seed=1"], "seed is already gridded; give all its values in one --grid"),
        (["seed=0,,1"], "a value is empty; write null for a missing one"),
        (["cluster.workers="], "a value is empty"),
        (["seed=0,1,0"], "0 is given twice"),
        (["strategy.lr=0.1,0.10"], "0.10 is given twice (as 0.1)"),
    ],
)
def test_a_grid_that_would_lose_or_repeat_runs_is_refused(items, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_grid(items)


def test_grid_values_are_the_validated_ones_lists_and_profiles_included(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(stop={"max_updates": 4}, cluster={"compute": {"step_time_s": None}})))
    (tmp_path / "fast.yaml").write_text("step_time_s: 0.005\n")
    (tmp_path / "slow.yaml").write_text("step_time_s: 0.02\n")
    # 3e-2 is a string to YAML 1.1: the table held text; a list value was split at its comma
    # (a traceback); a gridded profile was refused as an unknown key
    grid = parse_grid(
        ["strategy.lr=0.1,3e-2", "model.hidden=[8, 4],[16]", "cluster.compute.profile=fast.yaml,slow.yaml"]
    )
    table, ran = sweep(path, grid, tmp_path / "runs")
    assert ran == 8 and table["strategy.lr"].tolist() == [0.1] * 4 + [0.03] * 4
    assert [list(h) for h in table["model.hidden"][:4]] == [[8, 4], [8, 4], [16], [16]]
    by_profile = table.groupby("cluster.compute.profile")["sim_time_s"].max()
    assert (
        by_profile["fast.yaml"] * 3 < by_profile["slow.yaml"]
    )  # each combination got its own profile's step time
    with pytest.raises(ScenarioError, match="is not a comma-separated list of YAML values"):
        parse_grid(["strategy.lr=0.1,{a"])
    with pytest.raises(
        ScenarioError, match=r"1e-1 is given twice \(as 0.1\)"
    ):  # 1e-1 is a number now, as 0.1 is
        parse_grid(["strategy.lr=0.1,1e-1"])
    with pytest.raises(
        ScenarioError, match="strategy.lr='0.1' and strategy.lr=0.1 are the same run"
    ):  # a quoted number
        sweep(
            path,
            parse_grid(["strategy.lr=0.1,'0.1'"]),
            tmp_path / "runs",
            sets=["cluster.compute.step_time_s=0.01"],
        )


def test_jobs_must_be_at_least_one(scenario, tmp_path, capsys):
    assert (
        main(["sweep", str(scenario), "--grid", "seed=0", "--jobs", "0", "--runs", str(tmp_path / "r")]) == 2
    )
    assert "--jobs 0: give 1 or more" in capsys.readouterr().err


def test_a_sweep_runs_every_combination_once_and_resumes(scenario, tmp_path):
    grid = {"strategy.lr": [0.05, 0.1], "seed": [0, 1]}
    table, ran = sweep(scenario, grid, tmp_path / "runs")
    assert ran == 4 and len(table) == 4 and table["params_sha256"].nunique() == 4
    assert sorted(zip(table["strategy.lr"], table["seed"])) == [(0.05, 0), (0.05, 1), (0.1, 0), (0.1, 1)]
    bigger = {"strategy.lr": [0.05, 0.1, 0.2], "seed": [0, 1]}
    table2, ran2 = sweep(scenario, bigger, tmp_path / "runs")
    assert ran2 == 2 and len(table2) == 6  # only the new learning rate's runs
    pd.testing.assert_frame_equal(
        table.drop(columns=list(WALL_CLOCK_KEYS)),
        table2[table2["strategy.lr"] != 0.2].drop(columns=list(WALL_CLOCK_KEYS)).reset_index(drop=True),
    )


def test_parallel_processes_give_the_same_table(scenario, tmp_path):
    grid = {"seed": [3, 4]}
    serial, _ = sweep(scenario, grid, tmp_path / "a")
    parallel, ran = sweep(scenario, grid, tmp_path / "b", jobs=2)
    assert ran == 2
    assert list(serial["params_sha256"]) == list(parallel["params_sha256"])


@pytest.mark.slow  # 4 s on 2 cores: worker processes started and stopped
def test_ctrl_c_stops_a_parallel_sweep_and_keeps_what_finished(scenario, tmp_path):
    told: list[str] = []

    def interrupt(line):  # Ctrl-C as the first run finishes
        told.append(line.rsplit(": ", 1)[1])
        if len(told) == 1:
            raise KeyboardInterrupt

    grid = {"seed": list(range(8))}
    with pytest.raises(KeyboardInterrupt):
        sweep(scenario, grid, tmp_path / "runs", jobs=2, progress=interrupt)
    kept = [d for d in (tmp_path / "runs").iterdir() if is_complete(d)]
    assert 1 <= len(kept) < 8  # the queued runs never started (the pool used to run them all first)
    assert sorted(told) == sorted(str(d) for d in kept)  # a run that finished after Ctrl-C is told too
    assert all(is_complete(d) for d in (tmp_path / "runs").iterdir() if not d.name.startswith("."))
    _, ran = sweep(scenario, grid, tmp_path / "runs")
    assert ran == 8 - len(kept)


def sweep_command(tmp_path: Path, max_updates: int, every_updates: int, seeds: str) -> list[str]:
    """``fred sweep`` of a tiny scenario of ``max_updates`` over ``seeds``, two runs at once, as a
    command for a process of its own."""
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(tiny(stop={"max_updates": max_updates}, eval={"every_updates": every_updates}))
    )
    runs, table = str(tmp_path / "runs"), str(tmp_path / "t.parquet")
    sweep = [sys.executable, "-m", "fred.tools.cli", "sweep", str(path)]
    return sweep + ["--grid", f"seed={seeds}", "--jobs", "2", "--runs", runs, "--out", table]


@pytest.mark.slow  # 7 s on 2 cores: worker processes started and stopped
def test_ctrl_c_twice_at_a_terminal_ends_a_parallel_sweep_at_once(tmp_path):
    # A terminal's Ctrl-C reaches the whole process group. The second one cut the pool's shutdown
    # short and the sweep hung at exit, its workers never told to stop.
    command = sweep_command(tmp_path, 3000, 1000, "0,1,2,3,4,5")
    sweep_process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert sweep_process.stderr.readline().startswith("[1/6]")  # one run finished, two more started
    for _ in range(2):
        os.killpg(sweep_process.pid, signal.SIGINT)
        time.sleep(0.3)
    try:
        assert sweep_process.wait(600) == 130  # a hang guard, not a speed check: it ends in seconds
    finally:
        if sweep_process.poll() is None:
            os.killpg(sweep_process.pid, signal.SIGKILL)
    kept = [d for d in (tmp_path / "runs").iterdir() if is_complete(d)]
    assert 1 <= len(kept) < 6 and not (tmp_path / "t.parquet").exists()
    # it ends cleanly: its line, and no warning from multiprocessing's resource tracker (read once
    # the tracker, which shares stderr, has ended too) or a worker's traceback
    err = sweep_process.stderr.read()
    assert (
        err.splitlines()[-1]
        == "fred: interrupted; every run that finished is kept, and fred sweep again reuses them"
    )
    assert "leaked semaphore" not in err and "Traceback" not in err and "Exception ignored" not in err, err


@pytest.mark.slow  # 3 s on 2 cores: a worker process started
@pytest.mark.usefixtures("python_signals")  # it signals its own process
def test_a_sweep_stopped_twice_waits_for_its_pools_thread_before_it_goes_on():
    # The pool's own thread releases the pool's named semaphores as it ends. A second Ctrl-C
    # cut the sweep's wait for it short (and Python 3.11 then took the thread for ended), so it
    # was still releasing one as the command ended: the resource tracker warned of it as leaked.
    pool = cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    running = {pool.submit(time.sleep, 60): 0}
    names = [f._args for f in list(mp_util._finalizer_registry.values()) if f._args]  # the pool's semaphores
    threading.Timer(
        1.0, os.kill, (os.getpid(), signal.SIGINT)
    ).start()  # the second Ctrl-C, while the started run goes on
    with pytest.raises(KeyboardInterrupt):
        _stop(pool, running)
    del pool, running
    gc.collect()
    assert names and not [f._args for f in list(mp_util._finalizer_registry.values()) if f._args in names]


@pytest.mark.parametrize("released", [True, False])
def test_a_stopped_command_removes_its_named_semaphores_before_it_ends(released):
    # A stopped command ends without Python's shutdown, which removes the named semaphores a
    # process pool makes; the resource tracker then warned of them as leaked. (Without the
    # release, the warning: the check can fail.)
    code = (
        "import os, multiprocessing; from fred.runs import interrupt; "
        "lock = multiprocessing.get_context('spawn').Lock(); "
        f"{'interrupt.release_semaphores(); ' if released else ''}os._exit(130)"
    )
    ended = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert ended.returncode == 130
    assert ("leaked semaphore" in ended.stderr) is not released, ended.stderr


def test_fred_sweep_writes_the_table(scenario, tmp_path, capsys):
    out = tmp_path / "sweep.parquet"
    args = ["sweep", str(scenario), "--grid", "seed=5,6", "--runs", str(tmp_path / "runs"), "--out", str(out)]
    assert main(args) == 0
    assert len(pd.read_parquet(out)) == 2 and "2 combinations: 2 made, 0 reused" in capsys.readouterr().out


def test_fred_sweep_writes_its_table_beside_its_runs_not_in_the_working_directory(
    scenario, tmp_path, monkeypatch, capsys
):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["sweep", str(scenario), "--grid", "seed=5", "--runs", str(tmp_path / "runs")]) == 0
    table = tmp_path / "runs" / "sweep-s.parquet"  # named by the scenario file: s.yaml
    assert list(here.iterdir()) == [] and len(pd.read_parquet(table)) == 1
    assert capsys.readouterr().out.rstrip().endswith(f"table in {table} (fred compare {table} plots it)")


def test_fred_sweep_prints_the_table_fred_compare_prints_of_it(scenario, tmp_path, capsys):
    # The averaged table came only from fred compare sweep.parquet; the sweep printed a count.
    out = tmp_path / "sweep.parquet"
    args = [
        "sweep",
        str(scenario),
        "--grid",
        "strategy.lr=0.03,0.1",
        "--seeds",
        "2",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "tiny (strategy.lr=0.03)" in printed and "tiny (strategy.lr=0.1)" in printed and " ± " in printed
    assert "seeds: runs that differ only by their seed, as one row" in " ".join(printed.split())
    assert printed.rstrip().endswith(
        f"4 combinations: 4 made, 0 reused; table in {out} (fred compare {out} plots it)"
    )
    assert main(["compare", str(out), "--out", str(tmp_path / "cmp")]) == 0
    compared = capsys.readouterr().out
    assert compared.split("\n\n")[:2] == printed.split("\n\n")[:2]  # the same rows, the same numbers
    assert main([*args, "--per-seed"]) == 0
    per_seed = capsys.readouterr().out
    assert "tiny (strategy.lr=0.1, seed=1)" in per_seed and "4 combinations: 0 made, 4 reused" in per_seed


def test_set_fixes_a_field_in_every_run_and_each_finished_run_is_told(scenario, tmp_path, capsys):
    out = tmp_path / "sweep.parquet"
    args = [
        "sweep",
        str(scenario),
        "--grid",
        "seed=5,6",
        "--set",
        "stop.max_updates=3",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(out),
    ]
    assert main(args) == 0
    table = pd.read_parquet(out)
    assert list(table["updates"]) == [3, 3] and "stop.max_updates" not in table.columns  # not a grid column
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" ")[0] for line in err] == ["[1/2]", "[2/2]"] and "seed=5" in err[0]
    assert main(args) == 0  # resumed: nothing left to run, nothing told
    assert capsys.readouterr().err == ""


def test_a_bad_set_is_named(scenario, tmp_path, capsys):
    assert (
        main(
            [
                "sweep",
                str(scenario),
                "--grid",
                "seed=1",
                "--set",
                "cluster.workers=0",
                "--runs",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "cluster.workers" in capsys.readouterr().err


def test_a_bad_grid_value_is_named(scenario, tmp_path, capsys):
    assert (
        main(["sweep", str(scenario), "--grid", "cluster.workers=2,-1", "--runs", str(tmp_path / "r")]) == 2
    )
    assert "cluster.workers: got -1" in capsys.readouterr().err


def _comparable(table: pd.DataFrame) -> pd.DataFrame:
    """The table less what honestly differs between two sweeps: wall time, and where the runs live."""
    return table.drop(columns=list(WALL_CLOCK_KEYS)).assign(
        run_dir=table["run_dir"].map(lambda p: Path(p).name)
    )


@pytest.fixture
def ray_here():  # a Ray started by the caller, small and quiet, as a notebook or a test would
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error")
    yield ray
    ray.shutdown()


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # see fred/tools/sweep_ray.py
def test_ray_tasks_give_the_local_table_and_resume(ray_here, scenario, tmp_path):
    grid = {"strategy.lr": [0.05, 0.1], "seed": [0, 1]}
    local, _ = sweep(scenario, grid, tmp_path / "local")
    remote, ran = sweep(scenario, grid, tmp_path / "ray", executor="ray")
    assert ran == 4
    pd.testing.assert_frame_equal(_comparable(local), _comparable(remote))
    again, ran_again = sweep(
        scenario, {"strategy.lr": [0.05, 0.1, 0.2], "seed": [0, 1]}, tmp_path / "ray", executor="ray"
    )
    assert ran_again == 2 and len(again) == 6  # the four finished runs are reused, not remade
    assert ray_here.is_initialized()  # a Ray the caller started is left running


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # see fred/tools/sweep_ray.py
def test_ctrl_c_stops_a_ray_sweep_in_a_ray_that_stays_up(ray_here, scenario, tmp_path):
    def interrupt(line):  # Ctrl-C in a notebook as the first run finishes
        raise KeyboardInterrupt

    grid = {"seed": list(range(8))}
    with pytest.raises(KeyboardInterrupt):
        sweep(scenario, grid, tmp_path / "runs", executor="ray", progress=interrupt)
    time.sleep(5)  # long enough for any run left going to finish (each takes well under a second)
    kept = [d for d in (tmp_path / "runs").iterdir() if is_complete(d)]
    assert 1 <= len(kept) < 8
    assert all(is_complete(d) for d in (tmp_path / "runs").iterdir() if not d.name.startswith("."))


def test_fred_sweep_starts_ray_here_and_stops_it(scenario, tmp_path, capsys, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.delenv(
        "RAY_ADDRESS", raising=False
    )  # a cluster named in the environment would be joined instead
    out = tmp_path / "sweep.parquet"
    args = [
        "sweep",
        str(scenario),
        "--grid",
        "seed=5,6",
        "--executor",
        "ray",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert len(pd.read_parquet(out)) == 2 and "2 combinations: 2 made, 0 reused" in capsys.readouterr().out
    assert not ray.is_initialized()


class FakeRay:
    """The calls of Ray that fred.tools.sweep_ray makes, each task run at once in this process but with
    the environment of a worker Ray started earlier: the driver's FRED_MEMORY_LIMIT_GB is not in it."""

    def __init__(self):
        self.started, self.seen = False, []

    def is_initialized(self):
        return self.started

    def init(self):
        self.started = True

    def shutdown(self):
        self.started = False

    def remote(self, function):
        def task(*args):
            driver = os.environ.pop("FRED_MEMORY_LIMIT_GB", None)
            try:
                return function(*args)
            finally:
                self.seen.append(os.environ.get("FRED_MEMORY_LIMIT_GB"))
                if driver is not None:
                    os.environ["FRED_MEMORY_LIMIT_GB"] = driver

        return types.SimpleNamespace(remote=task)  # the "reference" is the run directory itself

    def wait(self, refs, num_returns):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return ref

    def cancel(self, ref):
        pass


def test_ray_tasks_run_under_the_drivers_memory_limit(scenario, tmp_path, capsys, monkeypatch):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("FRED_MEMORY_LIMIT_GB", raising=False)
    base = ["sweep", str(scenario), "--grid", "seed=5", "--executor", "ray", "--runs", str(tmp_path / "runs")]
    assert main([*base, "--memory-limit-gb", "1e-6", "--out", str(tmp_path / "a.parquet")]) == 2
    assert "out of memory: this run would hold about" in capsys.readouterr().err
    assert fake.seen == [None]  # the task's limit was the task's alone: the worker's environment is as it was
    assert main([*base, "--out", str(tmp_path / "b.parquet")]) == 0  # no limit given: the worker's own
    assert len(pd.read_parquet(tmp_path / "b.parquet")) == 1 and not fake.started


def test_an_unknown_executor_is_named_with_the_choices(scenario, tmp_path):
    with pytest.raises(ValueError, match="'dask': choose one of local, ray"):
        sweep(scenario, {"seed": [0]}, tmp_path / "runs", executor="dask")


def test_without_ray_the_executor_says_how_to_install_it(scenario, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail as if it were not installed
    assert (
        main(["sweep", str(scenario), "--grid", "seed=5", "--executor", "ray", "--runs", str(tmp_path / "r")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install -e ".[ray]"' in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # nothing was run


def test_fred_compare_reads_a_sweep_table(scenario, tmp_path, monkeypatch, capsys):
    from fred.tools.compare import compare

    monkeypatch.chdir(tmp_path)  # as a user would: relative runs/ and table
    assert (
        main(
            [
                "sweep",
                str(scenario),
                "--grid",
                "strategy.lr=0.05,0.1",
                "--grid",
                "seed=0,1",
                "--out",
                "s.parquet",
            ]
        )
        == 0
    )
    swept = pd.read_parquet("s.parquet")
    assert list(swept["grid"]) == [f"strategy.lr={lr}, seed={s}" for lr in (0.05, 0.1) for s in (0, 1)]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # run directories are found next to the table too
    table, ran = compare(["../s.parquet"], Path("cmp"), Path("runs"), per_seed=True)
    assert ran == 0 and list(table["run"]) == [f"{swept['name'][0]} ({g})" for g in swept["grid"]]
    assert list(table["final_loss"]) == list(swept["final_eval_loss"])
    assert (Path("cmp") / "loss_vs_time.png").is_file()
    table, _ = compare(
        ["../s.parquet"], Path("cmp"), Path("runs")
    )  # each learning rate's two seeds, as one row
    assert list(table["run"]) == [f"{swept['name'][0]} (strategy.lr={lr})" for lr in (0.05, 0.1)]
    assert list(table["n_seeds"]) == [2, 2] and list(table["seeds"]) == ["0 1", "0 1"]
    assert table["final_loss"].tolist() == pytest.approx(
        swept.groupby("strategy.lr")["final_eval_loss"].mean().tolist()
    )
    capsys.readouterr()

    pd.DataFrame({"x": [1]}).to_parquet("plain.parquet")
    assert main(["compare", "plain.parquet"]) == 2
    assert "has no run_dir column" in capsys.readouterr().err
    pd.DataFrame({"run_dir": ["runs/gone"], "grid": ["seed=0"]}).to_parquet("gone.parquet")
    assert main(["compare", "gone.parquet"]) == 2
    assert "lists runs/gone, which is not here" in capsys.readouterr().err


def test_a_damaged_run_in_the_runs_folder_is_named_with_how_to_recompute_it(scenario, tmp_path, capsys):
    # The messages spoke of --out (in a sweep, its table) or only said "damaged".
    runs = tmp_path / "r"
    argv = [
        "sweep",
        str(scenario),
        "--grid",
        "seed=0,1",
        "--runs",
        str(runs),
        "--out",
        str(tmp_path / "t.parquet"),
    ]
    assert main(argv) == 0
    # in grid order, as the sweep checks them (their folders' names are hashes, in no such order)
    first, second = sorted(
        runs.iterdir(), key=lambda run: yaml.safe_load((run / "scenario.yaml").read_text())["seed"]
    )
    (first / "params.npz").write_bytes(b"PK")
    (second / "summary.json").unlink()
    capsys.readouterr()
    assert main(argv) == 2
    assert f"the run directory is damaged; delete {first} and run fred sweep again" in capsys.readouterr().err
    shutil.rmtree(first)
    assert main(argv) == 2
    assert (
        f"{second} is in the sweep's runs folder but is not a finished run (no summary.json); delete {second}"
        in capsys.readouterr().err
    )
    shutil.rmtree(second)
    assert main(argv) == 0
    assert "2 combinations: 2 made, 0 reused" in capsys.readouterr().out


def test_a_summary_that_is_json_but_not_an_object_is_a_damaged_run_the_sweep_names(
    scenario, tmp_path, capsys
):
    # finished_run called summary.get on a summary.json holding []: an AttributeError traceback.
    runs = tmp_path / "r"
    argv = [
        "sweep",
        str(scenario),
        "--grid",
        "seed=0",
        "--runs",
        str(runs),
        "--out",
        str(tmp_path / "t.parquet"),
    ]
    assert main(argv) == 0
    [made] = runs.iterdir()
    (made / "summary.json").write_text("[]\n")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"{made / 'summary.json'} holds [] (a JSON array), not the JSON object of fields fred run writes; "
        f"the run directory is damaged; delete {made} and run fred sweep again"
    ) in err
    assert "--out" not in err and "Traceback" not in err  # the sweep's own way to compute it afresh, only
    shutil.rmtree(made)
    assert main(argv) == 0 and is_complete(made)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow  # 4 s on 2 cores: a sweep process and its workers started and killed
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux's /proc")
def test_a_sweep_killed_outright_takes_its_workers_with_it(tmp_path):
    # SIGKILL (or a scheduler's SIGTERM) left the workers waiting for work for ever, ~440 MB each.
    command = sweep_command(tmp_path, 20000, 5000, "0,1,2,3")
    sweep_process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    deadline = time.monotonic() + 300  # a hang guard, not a speed check
    while len(workers) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        workers = [
            p for p in _children(sweep_process.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
        ]
    assert len(workers) == 2
    sweep_process.kill()
    sweep_process.wait()
    deadline = time.monotonic() + 120  # a hang guard, not a speed check: a worker looks every 0.5 s
    while any(
        Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]
        for p in workers
    ):
        assert time.monotonic() < deadline, "a worker outlived its sweep"
        time.sleep(0.2)
