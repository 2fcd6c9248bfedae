"""``fred sweep``: a Cartesian grid over scenario fields, run content-addressed and resumable.

Every combination is a fully resolved scenario; its run directory is named by its seed and the
scenario's SHA-256 (``runs/<name>-s<seed>-<hash>``), so a sweep that was interrupted, or overlaps an earlier
one, never recomputes a finished run. The missing runs go to an executor: ``local`` (this
machine, ``jobs`` worker processes) or ``ray`` (Ray tasks, see :mod:`fred.tools.sweep_ray`); either
way the results gather into the same table.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import itertools
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from fred.runs import interrupt
from fred.runs.api import DAMAGED, default_run_dir, finished_run, load_run
from fred.runs.paths import runs_folder
from fred.runs.runner import RunResult
from fred.scenario.errors import Refusal
from fred.scenario.loading import (
    ScenarioError,
    apply_overrides,
    blaming_sets,
    get_path,
    include_profiles,
    read_yaml,
    set_path,
    validate,
    yaml_value,
)
from fred.scenario.schema import Scenario
from fred.tools.sweep_jobs import Done, Todo, run_one


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``["strategy.lr=0.01,0.1", "seed=0,1"]`` -> ``{"strategy.lr": [0.01, 0.1], "seed": [0, 1]}``."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        path, _, values = (part.strip() for part in item.partition("="))
        if "=" not in item or not path:
            raise ScenarioError([f"--grid {item!r}: write it as path.to.key=value1,value2"], "--grid")
        if path in grid:  # a second --grid of the same field would silently replace the first
            raise ScenarioError(
                [f"--grid {item!r}: {path} is already gridded; give all its values in one --grid"], "--grid"
            )
        grid[path] = _grid_values(item, values)
    return grid


def with_seeds(
    grid: dict[str, list[Any]], seeds: list[int], sets: Sequence[str] = ()
) -> dict[str, list[Any]]:
    """The grid with ``seed`` as its last field (``--seeds``): every combination once per seed."""
    if "seed" in grid:
        raise ScenarioError(
            ["--seeds and --grid seed=... both give the seeds; give them once, with either"], "--seeds"
        )
    seeded = [item for item in sets if item.partition("=")[0].strip() == "seed"]
    if seeded:
        raise ScenarioError(
            [f"--set {seeded[0]} and --seeds both choose the seed; give the seeds with --seeds alone"],
            "--seeds",
        )
    return {**grid, "seed": list(seeds)}


def _grid_values(item: str, values: str) -> list[Any]:
    """The parsed values of one ``--grid``, read as one YAML flow list (so a value may be a list,
    ``model.hidden=[64, 32],[128]``): none empty (write ``null`` for None), none twice."""
    texts = values.split(",")
    if any(not text.strip() for text in texts):
        raise ScenarioError([f"--grid {item!r}: a value is empty; write null for a missing one"], "--grid")
    try:
        parsed_all = yaml_value(f"[{values}]")
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or err
        raise ScenarioError(
            [f"--grid {item!r}: {values} is not a comma-separated list of YAML values ({problem})"], "--grid"
        ) from None
    if len(parsed_all) != len(texts):  # some values hold commas themselves: name them as parsed
        texts = [repr(value) for value in parsed_all]
    parsed: list[Any] = []
    for text, value in zip(texts, parsed_all):
        if value in parsed:  # the same run twice: a table with duplicate rows
            raise ScenarioError(
                [f"--grid {item!r}: {text.strip()} is given twice (as {value!r}); give each value once"],
                "--grid",
            )
        parsed.append(value)
    return parsed


def expand(
    base: dict[str, Any], grid: dict[str, list[Any]], source: str, base_dir: Path = Path(".")
) -> list[tuple[dict[str, Any], Scenario]]:
    """Every combination of the grid, as (its settings as validated, the validated scenario).

    A setting is the value the scenario got (``3e-2``, a string to YAML 1.1, becomes 0.03),
    so the table holds numbers; a profile set by the grid is included per combination.
    """
    combos = []
    keys = list(grid)
    seen: dict[str, dict[str, Any]] = {}
    for values in itertools.product(*(grid[k] for k in keys)):
        settings = dict(zip(keys, values))
        data = copy.deepcopy(base)
        for path, value in settings.items():
            set_path(data, path, value)
        where = f"{source} with {settings}"
        scenario = validate(include_profiles(data, base_dir, where), where)
        digest = scenario.digest()
        if digest in seen:
            raise ScenarioError(
                [
                    f"--grid: {_as_given(settings)} and {_as_given(seen[digest])} are the same run; give "
                    "each value once"
                ],
                "--grid",
            )
        seen[digest] = settings
        resolved = scenario.resolved()  # a gridded profile's path is gone from it: that value stays as given
        combos.append(({path: get_path(resolved, path, value) for path, value in settings.items()}, scenario))
    return combos


def _as_given(settings: dict[str, Any]) -> str:
    """A combination with its values as given, quoted: '32' and 32 read apart."""
    return ", ".join(f"{path}={value!r}" for path, value in settings.items())


def _reusable(scenario: Scenario, runs_root: Path) -> RunResult | None:
    """The finished run of ``scenario`` in the runs folder, or None; a damaged one is an error
    that says how to have it computed again (the messages spoke of --out, the sweep's table)."""
    out = default_run_dir(scenario, runs_root)
    fix = f"delete {out} and run fred sweep again to compute it afresh"
    try:
        done = finished_run(scenario, runs_root)
    except ScenarioError as err:
        raise ScenarioError([_with_fix(problem, fix) for problem in err.problems], str(out)) from None
    if done is None and out.is_dir() and not (out / "summary.json").exists() and any(out.iterdir()):
        raise ScenarioError(
            [f"{out} is in the sweep's runs folder but is not a finished run (no summary.json); {fix}"],
            str(out),
        )
    return done


def _with_fix(problem: str, fix: str) -> str:
    """``problem`` with the sweep's fix in place of load_run's (fred run --out: the sweep makes that run
    itself)."""
    head, damaged, _ = problem.partition(DAMAGED)
    return f"{head}{damaged}; {fix}"


def _local(todo: Todo, jobs: int, done: Done) -> None:
    if jobs > 1 and len(todo) > 1:
        # spawn, not fork: JAX's runtime does not survive a fork. A run that fails, or Ctrl-C,
        # stops the sweep: no queued run starts, and those already started finish and are kept;
        # a second Ctrl-C stops them too (a run is written whole or not at all).
        pool = cf.ProcessPoolExecutor(
            jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_setup,
            initargs=(os.getpid(),),
        )
        running: dict[cf.Future, int] = {}  # submitted and not yet told, with their place in todo
        try:
            _in_turn(pool, todo, jobs, done, running)
        except BaseException:
            try:
                _stop(pool, running)
            finally:  # the started runs that finished meanwhile are kept: say so, as for any other
                _tell_finished(running, done)
            raise
        pool.shutdown(wait=True)
    else:
        for resolved, out in todo:
            done(run_one(resolved, out))


def _worker_setup(sweep: int) -> None:
    """In a worker process: ignore Ctrl-C, and end when the sweep does.

    Ctrl-C goes to the whole process group, and only the sweep decides what it stops (a
    worker's own KeyboardInterrupt could land in cleanup code and be dropped). The worker
    started with SIGINT blocked (:func:`_submit`), so one that came while it imported fred and
    JAX, seconds on a loaded machine, is dropped here, not printed as a traceback from the
    middle of an import. A sweep killed outright (SIGKILL, or SIGTERM from ``timeout`` or a
    job scheduler) cannot stop its workers: they finished their run, then waited for work for
    ever, ~440 MB each.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # POSIX
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one pending is discarded: ignored
    # The sweep's pid comes from the sweep: asked here, after the imports, it was already 1
    # when the sweep died that soon.
    threading.Thread(target=_end_with, args=(sweep,), daemon=True, name="fred-end-with-sweep").start()


ORPHAN_CHECK_S = 0.5  # how often a worker looks whether its sweep is still there


def _end_with(sweep: int) -> None:
    while os.getppid() == sweep:  # an orphan is handed to another parent
        time.sleep(ORPHAN_CHECK_S)
    os._exit(1)  # the run in hand is lost: its directory was not renamed into place


def _in_turn(
    pool: cf.ProcessPoolExecutor, todo: Todo, jobs: int, done: Done, running: dict[cf.Future, int]
) -> None:
    """At most ``jobs`` runs submitted at once: a pool moves jobs + 1 submitted calls to its
    workers' queue, past cancelling, so with all submitted Ctrl-C still started more.
    ``running`` holds the submitted runs not yet told to ``done``, in ``todo``'s order."""
    queued = enumerate(todo)
    for place, item in itertools.islice(queued, jobs):
        _submit(pool, item, running, place)
    while running:
        finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
        for future in sorted(finished, key=running.__getitem__):  # runs that end together: in todo's order
            del running[future]
            done(future.result())
            following = next(queued, None)
            if following is not None:
                _submit(pool, following[1], running, following[0])


def _submit(
    pool: cf.ProcessPoolExecutor, item: tuple[dict[str, Any], str], running: dict[cf.Future, int], place: int
) -> None:
    """``pool.submit`` of one run, kept in ``running`` at ``place``, with Ctrl-C held meanwhile.

    The pool may start a worker process here: a KeyboardInterrupt between its start and the
    work it is sent left it reading a closed pipe, and it died with a traceback. A stop asked
    for meanwhile is raised once the run is in ``running`` (so it is told if it finishes). SIGINT
    is also blocked, so that a worker starts with it blocked (a signal mask passes through fork
    and exec) until :func:`_worker_setup` ignores it.
    """
    with interrupt.between_steps():
        blocked = (
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            if hasattr(signal, "pthread_sigmask")
            else None
        )
        try:
            running[pool.submit(run_one, *item)] = place
        finally:
            if blocked is not None:  # POSIX
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _tell_finished(running: dict[cf.Future, int], done: Done) -> None:
    """Tell ``done`` of the runs in ``running`` that finished (the pool has shut down)."""
    for future in sorted(running, key=running.__getitem__):
        if future.done() and not future.cancelled() and future.exception() is None:
            del running[future]
            done(future.result())


def _stop(pool: cf.ProcessPoolExecutor, running: dict[cf.Future, int]) -> None:
    """No queued run starts and the started ones finish; a second Ctrl-C ends them (a shutdown
    cut short by it left workers that never got their stop signal, and the sweep hung at exit).

    Either way the pool's own thread is waited for before the sweep goes on: its end releases
    the pool's named semaphores, and one it was releasing as the command ended stayed with the
    resource tracker, which warned of it. The wait for the runs is on their futures, not the
    pool's ``shutdown(wait=True)``: a join cut short by Ctrl-C marks the thread ended in Python
    3.11 (bpo-45274), and a second join returned while it still ran.
    """
    thread = pool._executor_manager_thread  # private: the pool's shutdown lets go of it
    processes = list((pool._processes or {}).values())  # the same: Python 3.14 has terminate_workers
    pool.shutdown(wait=False, cancel_futures=True)
    try:
        cf.wait(running)
    except KeyboardInterrupt:
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()
        raise
    finally:
        if thread is not None:
            thread.join()


def _ray(todo: Todo, jobs: int, done: Done) -> None:
    # imported only when chosen: Ray is an optional extra
    from fred.tools.sweep_ray import run_all

    run_all(todo, done)  # Ray's scheduler, not ``jobs``, decides how many run at once


EXECUTORS: dict[str, Callable[[Todo, int, Done], None]] = {"local": _local, "ray": _ray}


def sweep_table_name(scenario: str | Path) -> str:
    """The file name of a sweep's gathered table, by default in its runs folder: ``sweep-NAME.parquet``,
    NAME the scenario file's stem, so that sweeps of two scenarios sharing a runs folder keep both tables."""
    return f"sweep-{Path(scenario).stem}.parquet"


def grid_label(settings: dict[str, Any]) -> str:
    """A combination as one line, ``strategy.lr=0.1, seed=2``: how ``fred compare`` names its run."""
    return ", ".join(f"{path}={value}" for path, value in settings.items())


def sweep(
    scenario_path: str | Path,
    grid: dict[str, list[Any]],
    runs_root: Path,
    jobs: int = 1,
    executor: str = "local",
    sets: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, int]:
    """Run what is missing (with ``executor``) and return the table and how many runs were made.

    ``sets`` are ``path=value`` overrides of the scenario for every combination (as ``fred run
    --set``), not grid columns; ``progress`` is told one line per run as it finishes.
    """
    if executor not in EXECUTORS:
        raise Refusal(f"executor {executor!r}: choose one of {', '.join(EXECUTORS)}")
    if jobs < 1:
        raise Refusal(f"--jobs {jobs}: give 1 or more runs at once")
    runs_root = runs_folder(runs_root)  # a link or a file there: refused before anything runs
    base = apply_overrides(read_yaml(scenario_path), list(sets))
    with blaming_sets(list(sets)):
        combos = expand(base, grid, str(scenario_path), Path(scenario_path).parent)
    todo: Todo = []
    labels: dict[str, str] = {}
    reused: dict[str, RunResult] = {}  # read once here, not again for the table
    for settings, scenario in combos:
        out = default_run_dir(scenario, runs_root)
        done_before = _reusable(scenario, runs_root)
        if done_before is not None:
            reused[str(out)] = (
                done_before  # perhaps in the directory an earlier fred named (done_before.path)
            )
        elif str(out) not in labels:
            todo.append((scenario.resolved(), str(out)))
            labels[str(out)] = grid_label(settings)
    finished: list[str] = []

    def done(out: str) -> None:
        finished.append(out)
        if progress is not None:
            progress(f"[{len(finished)}/{len(todo)}] {labels[out] or 'the scenario'}: {out}")

    EXECUTORS[executor](todo, jobs, done)
    rows = []
    for settings, scenario in combos:
        out = default_run_dir(scenario, runs_root)
        result = reused.get(str(out)) or load_run(out)
        facts = {k: v for k, v in result.summary.items() if not isinstance(v, (list, dict))}
        rows.append({**settings, **facts, "grid": grid_label(settings), "run_dir": str(result.path or out)})
    return pd.DataFrame(rows), len(todo)
