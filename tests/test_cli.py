"""The command line, as a user meets it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fred.runs.records import FILES, is_complete
from fred.scenario.loading import validate
from fred.tools.cli import main
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, data: dict, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_fred_run_writes_a_complete_run_directory(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(write(tmp_path, tiny())), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "tape.npz"])
    summary = json.loads((out / "summary.json").read_text())
    for key in [
        "status",
        "strategy",
        "workers",
        "sim_time_s",
        "updates",
        "final_eval_loss",
        "final_eval_accuracy",
        "bytes_sent",
        "params_sha256",
        "wall_time_s",
        "fred_version",
        "strategy_distribution",
        "strategy_version",
    ]:
        assert key in summary
    assert yaml.safe_load((out / "scenario.yaml").read_text())["network"]["latency_s"] == 5e-5  # resolved
    printed = capsys.readouterr().out
    assert "params_sha256" in printed and str(out) in printed


def test_the_default_run_directory_is_named_by_the_resolved_scenario(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(write(tmp_path, tiny())), "--quiet"]) == 0
    [run_dir] = (tmp_path / "runs").iterdir()
    digest = json.loads((run_dir / "summary.json").read_text())["scenario_sha256"]
    assert run_dir.name == f"tiny-s7-{digest[:8]}"  # its seed in sight: the runs of --seeds 3 tell apart


def test_set_and_seed_override_the_file(tmp_path):
    out = tmp_path / "run"
    args = [
        "run",
        str(write(tmp_path, tiny())),
        "--out",
        str(out),
        "--quiet",
        "--set",
        "cluster.workers=2",
        "--seed",
        "11",
    ]
    assert main(args) == 0
    resolved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert resolved["cluster"]["workers"] == 2 and resolved["seed"] == 11


def test_a_bad_scenario_exits_2_with_one_line_per_problem_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    path = write(tmp_path, tiny(cluster={"wrokers": 3}, data={"batch_size": -1}))
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "2 problems" in err and "did you mean 'workers'" in err and "data.batch_size: got -1" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_a_missing_file_is_an_error_not_a_traceback(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_missing_mnist_files_are_reported_cleanly(tmp_path, capsys):
    path = write(tmp_path, tiny(data={"source": {"kind": "mnist", "path": "mnist"}}))
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"fred: {path}: 1 problem\n  - data.source.path: {tmp_path / 'mnist'} does not exist "
        f"('mnist' taken from {tmp_path}); give a folder of MNIST IDX files or one .npz file"
    )
    assert not (tmp_path / "o").exists()


def test_fred_list_prints_the_registry(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines]
    assert {"sgd", "ssgd", "asgd"} <= set(names)
    starts = {len(line) - len(line[len(name) :].lstrip()) for line, name in zip(lines, names)}
    assert len(starts) == 1  # one column of summaries, however long a name
    assert all(
        line.endswith(".") for line in lines
    )  # whole first paragraphs, not a wrapped sentence's first line


def test_a_failure_while_writing_leaves_no_directory_that_looks_complete(tmp_path, monkeypatch, capsys):
    import numpy as np

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device", "params.npz")

    monkeypatch.setattr(np, "savez", broken)
    out = tmp_path / "run"
    assert (
        main(["run", str(write(tmp_path, tiny())), "--out", str(out), "--quiet"]) == 1
    )  # the machine, not bad input
    err = capsys.readouterr().err
    assert err.startswith(
        f"fred: no space left on the device: the run directory run was not written to {tmp_path} (it needs"
    )
    assert len(err.splitlines()) == 1  # one line, no traceback
    assert not out.exists() and not is_complete(out)
    assert list(tmp_path.glob(".run*")) == []


def test_out_never_deletes_what_is_not_a_run(tmp_path, capsys):
    scenario = write(tmp_path, tiny())
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("keep me")
    (tmp_path / "profile.yaml").write_text("step_time_s: 0.01\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "notes"), "--quiet"]) == 2
    assert "has no summary.json); writing the run there would delete them" in capsys.readouterr().err
    assert main(["run", str(scenario), "--out", str(tmp_path / "profile.yaml"), "--quiet"]) == 2
    assert "is a file, not a run directory" in capsys.readouterr().err
    assert main(["run", str(scenario), "--out", str(tmp_path / "profile.yaml" / "run"), "--quiet"]) == 2
    assert "profile.yaml is a file: choose another --out" in capsys.readouterr().err
    assert (tmp_path / "notes" / "notes.txt").read_text() == "keep me"
    assert (tmp_path / "profile.yaml").read_text() == "step_time_s: 0.01\n"


def test_out_replaces_an_earlier_run_or_fills_an_empty_directory(tmp_path):
    scenario, out = write(tmp_path, tiny()), tmp_path / "run"
    out.mkdir()
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--seed", "3"]) == 0
    assert is_complete(out) and yaml.safe_load((out / "scenario.yaml").read_text())["seed"] == 3


def test_a_run_replaces_an_earlier_ones_plots_and_trace_but_not_other_files(tmp_path, capsys):
    # fred plot and fred trace write into the run directory; a note put there was deleted with them.
    scenario, out = write(tmp_path, tiny()), tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    assert main(["plot", str(out)]) == 0 and main(["trace", str(out)]) == 0
    (out / "notes.txt").write_text("keep me")
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--seed", "3"]) == 2
    assert "holds an earlier run and other files (notes.txt)" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me" and (out / "plots").is_dir()
    (out / "notes.txt").unlink()
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--seed", "3"]) == 0
    assert not (out / "plots").exists() and not (out / "trace.json").exists()  # they showed the run replaced


def test_the_working_directory_is_refused_as_a_run_directory_before_the_run(tmp_path, capsys, monkeypatch):
    # '--out .' ran to the end, then failed to rename '.' and left the run hidden in ./..partial-*
    scenario, here = write(tmp_path, tiny()), tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for out in [".", str(here), str(tmp_path)]:
        assert main(["run", str(scenario), "--out", out, "--quiet"]) == 2
        assert "is the working directory or holds it" in capsys.readouterr().err
    assert list(here.iterdir()) == [] and here.is_dir()


def test_an_output_given_as_a_directory_goes_in_it(tmp_path):
    scenario, run_dir, out = write(tmp_path, tiny()), tmp_path / "run", tmp_path / "out"
    out.mkdir()
    assert main(["run", str(scenario), "--out", str(run_dir), "--quiet"]) == 0
    assert main(["calibrate", "--repeats", "1", "-o", str(out)]) == 0
    assert main(["replay", str(run_dir), "--timings", str(out)]) == 0
    assert (
        main(
            ["sweep", str(scenario), "--grid", "seed=0", "--runs", str(tmp_path / "runs"), "--out", str(out)]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == ["profile.yaml", "sweep.parquet", "timings.csv"]
    assert (
        main(["calibrate", "--repeats", "1", "-o", str(tmp_path / "new" / "p.yaml")]) == 0
    )  # parents are made
    assert (tmp_path / "new" / "p.yaml").is_file()


def test_an_output_named_as_a_directory_with_a_slash_is_made_as_one(tmp_path):
    scenario, run_dir = write(tmp_path, tiny()), tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(run_dir), "--quiet"]) == 0
    assert main(["trace", str(run_dir), "-o", f"{tmp_path / 'results'}/"]) == 0
    assert (
        main(
            [
                "sweep",
                str(scenario),
                "--grid",
                "seed=0",
                "--runs",
                str(tmp_path / "runs"),
                "--out",
                f"{tmp_path / 'sw'}/",
            ]
        )
        == 0
    )
    assert (tmp_path / "results" / "trace.json").is_file() and (tmp_path / "sw" / "sweep.parquet").is_file()


def test_an_output_never_replaces_what_the_command_reads(tmp_path, capsys):
    scenario, run_dir = write(tmp_path, tiny()), tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(run_dir), "--quiet"]) == 0
    before = {f.name: f.read_bytes() for f in run_dir.iterdir()}
    commands = [
        ["calibrate", str(scenario), "-o", str(scenario)],
        one_seed_sweep(scenario, str(tmp_path / "runs"), str(scenario)),
        ["trace", str(run_dir), "-o", str(run_dir / "summary.json")],
        ["replay", str(run_dir), "--timings", str(run_dir / "events.parquet")],
    ]
    for command in commands:
        assert main(command) == 2, command
        assert "is what this command reads" in capsys.readouterr().err
    assert scenario.read_text() == yaml.safe_dump(tiny())
    assert {f.name: f.read_bytes() for f in run_dir.iterdir()} == before and not (tmp_path / "runs").exists()


def test_a_file_where_a_directory_of_outputs_goes_is_refused_before_any_run(tmp_path, capsys):
    scenario, taken = write(tmp_path, tiny()), tmp_path / "taken"
    taken.write_text("keep")
    assert main(["compare", str(scenario), "--out", str(taken), "--runs", str(tmp_path / "runs")]) == 2
    assert "taken is a file; these outputs go in a directory" in capsys.readouterr().err
    assert taken.read_text() == "keep" and not (tmp_path / "runs").exists()
    assert main(["calibrate", "-o", str(taken / "sub" / "p.yaml")]) == 2  # a file in the way of a parent
    assert "a file is in the way" in capsys.readouterr().err


def test_no_command_writes_through_a_link(tmp_path, capsys):
    # Each of these wrote into the folder or file the link points to (and a plot's default
    # folder, a run's plots/, may be a link the user made).
    scenario, run_dir = write(tmp_path, tiny()), tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(run_dir), "--quiet"]) == 0
    target = tmp_path / "target"
    target.mkdir()
    (target / "x").write_text("keep")
    for name, to in [("dir_link", target), ("file_link", target / "x"), ("runs_link", target)]:
        (tmp_path / name).symlink_to(to)
    (run_dir / "plots").symlink_to(target)
    commands = [
        ["plot", str(run_dir)],
        ["plot", str(run_dir), "--out", str(tmp_path / "dir_link")],
        ["trace", str(run_dir), "-o", str(tmp_path / "file_link")],
        ["trace", str(run_dir), "-o", str(tmp_path / "dir_link")],
        ["compare", str(scenario), "--out", str(tmp_path / "dir_link"), "--runs", str(tmp_path / "runs")],
        ["compare", str(scenario), "--out", str(tmp_path / "cmp"), "--runs", str(tmp_path / "runs_link")],
        one_seed_sweep(scenario, str(tmp_path / "runs_link"), str(tmp_path / "s.parquet")),
        one_seed_sweep(scenario, str(tmp_path / "runs"), str(tmp_path / "file_link")),
        ["replay", str(run_dir), "--timings", str(tmp_path / "file_link")],
        ["calibrate", "-o", str(tmp_path / "file_link")],
    ]
    for command in commands:
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert "is a link (to " in err and "fred never writes or deletes through a link" in err, command
    assert [p.name for p in target.iterdir()] == ["x"] and (target / "x").read_text() == "keep"
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cmp").exists()


def one_seed_sweep(scenario: Path, runs: str, out: str) -> list[str]:
    """``fred sweep SCENARIO --grid seed=1 --runs RUNS --out OUT``, as ``main`` takes it."""
    return ["sweep", str(scenario), "--grid", "seed=1", "--runs", runs, "--out", out]


def quickstart_command(out: Path, setting: str, *more: str) -> list[str]:
    """``fred run`` of the quickstart shipped with the repo into ``out``, with ``--set setting``, as
    a command for a process of its own."""
    quickstart = str(ROOT / "scenarios" / "quickstart.yaml")
    return [
        sys.executable,
        "-m",
        "fred.tools.cli",
        "run",
        quickstart,
        "--out",
        str(out),
        *more,
        "--set",
        setting,
    ]


def test_the_console_script_runs_the_quickstart_shipped_with_the_repo(tmp_path):
    done = subprocess.run(
        quickstart_command(tmp_path / "q", "stop.max_updates=60"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert "completed" in done.stdout
    assert done.stderr == ""  # no progress bar when not attached to a terminal


@pytest.mark.parametrize(
    "delay_s", [0.5] + [pytest.param(d, marks=pytest.mark.slow) for d in (2.0, 3.5, 5.0)]
)
def test_a_run_killed_at_any_moment_leaves_a_complete_directory_or_none(tmp_path, delay_s):
    import signal
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen(
        quickstart_command(out, "stop.max_updates=300", "--quiet"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(delay_s)  # a moment somewhere in start-up, simulation or writing
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert is_complete(out) or not out.exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name != "run"]
    assert all(p.name.startswith(".run.partial-") and not is_complete(p) for p in leftovers)


# The console script, whose first import of a heavy library waits for the test's Ctrl-C (as
# loading jax and pandas takes about a second), and says when it is waiting.
SLOW_FIRST_IMPORT = """
import sys, time
class Slow:
    def find_spec(self, name, path=None, target=None):
        if name in ("jax", "numpy", "pandas"):
            sys.meta_path.remove(self)
            print("importing", name, flush=True)
            time.sleep(300)  # a hang guard: the test's SIGINT ends it
        return None
sys.meta_path.insert(0, Slow())
sys.argv[0] = "fred"
from fred.tools.cli import entry
entry()
"""


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["list"], marks=pytest.mark.slow),
        pytest.param(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--quiet"], marks=pytest.mark.slow),
    ],
)
def test_ctrl_c_while_fred_loads_its_libraries_ends_quietly_with_130(command, tmp_path):
    # Ctrl-C in a command's first second, while `import fred` loaded jax and pandas, printed a traceback.
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_FIRST_IMPORT, *command],
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline().startswith("importing")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)  # a hang guard, not a speed check
    assert "Traceback" not in err, err
    assert proc.returncode == 130 and err.startswith("fred: interrupted") and len(err.splitlines()) == 1, err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_a_bare_import_of_fred_loads_no_heavy_library():
    # What lets the command take Ctrl-C early: `import fred` loads jax and the rest at their first use.
    script = "import sys, fred; print(sorted({'jax', 'numpy', 'pandas', 'pydantic'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    assert done.stdout == "[]\n"


def test_every_public_name_of_fred_is_its_modules_own():
    import fred
    from fred.runs import api, runner
    from fred.scenario import loading
    from fred.scenario import schema as scenario

    homes = {
        "run": api,
        "load_run": api,
        "ScenarioError": loading,
        "load_scenario": loading,
        "validate": loading,
        "RunResult": runner,
        "Scenario": scenario,
    }
    assert set(fred.__all__) == {*homes, "__version__"}
    assert all(getattr(fred, name) is getattr(home, name) for name, home in homes.items())
    assert fred.tools.compare.sweep_runs and not hasattr(
        fred, "no_such_name"
    )  # submodules too, as when loaded eagerly


def unprivileged() -> list[str]:
    """A prefix that runs a command unable to write where permissions forbid: as root, with the
    override capabilities dropped (setpriv); as anyone else, nothing."""
    import os
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: permissions cannot be made to bind")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def test_a_read_only_folder_is_refused_before_the_work_not_with_a_traceback_after(tmp_path):
    # fred run simulated for the whole run, then raised PermissionError with a traceback; a
    # sweep, a replay's --timings and a checkpoint the same.
    scenario = write(tmp_path, tiny(stop={"max_updates": 3}))
    done = tmp_path / "done"
    main(["run", str(scenario), "--out", str(done), "--quiet"])
    locked = tmp_path / "locked"
    locked.mkdir()
    commands = [
        ["run", str(scenario), "--out", str(locked / "run"), "--quiet"],
        ["run", str(scenario), "--out", str(locked / "run"), "--quiet", "--checkpoint-every-s", "60"],
        [
            "sweep",
            str(scenario),
            "--grid",
            "seed=0,1",
            "--runs",
            str(locked / "runs"),
            "--out",
            str(tmp_path / "t.parquet"),
        ],
        ["replay", str(done), "--timings", str(locked / "t.csv")],
    ]
    script = (
        "import json, sys\nfrom fred.tools.cli import main\n"
        "for argv in json.loads(sys.argv[1]):\n    print(main(argv), flush=True)\n"
    )
    locked.chmod(0o555)
    try:
        ran = subprocess.run(
            [*unprivileged(), sys.executable, "-c", script, json.dumps(commands)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
    finally:
        locked.chmod(0o755)
    assert ran.stdout.split() == ["2"] * len(commands), ran.stderr
    lines = ran.stderr.splitlines()
    assert "Traceback" not in ran.stderr and len(lines) == len(commands), ran.stderr
    assert all(f"cannot write in {locked}" in line or "is not writable" in line for line in lines), ran.stderr
    assert list(locked.iterdir()) == []


def test_the_progress_bar_says_it_is_compiling_until_the_first_update():
    # On a terminal the bar sat at "t=0.000s updates=0" for most of a short run.
    from fred.tools.progress_bars import _progress

    bar = _progress(validate(tiny()), True)
    update = bar.__enter__()
    try:
        update(0.0, 0, 2.3)
        assert "compiling" in bar.bar.tasks[0].fields["info"]
        update(0.01, 1, 2.2)
        assert "compiling" not in bar.bar.tasks[0].fields["info"]
    finally:
        bar.__exit__(None, None, None)


def test_output_piped_to_a_reader_that_stops_early_ends_quietly():
    # `fred compare ... | head` printed "fred: Broken pipe" and exited 2.
    command = [sys.executable, "-c", "import sys; from fred.tools.cli import main; sys.exit(main(['list']))"]
    listing = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listing.stdout.close()  # the reader is gone before fred writes a line
    _, err = listing.communicate(timeout=300)  # a hang guard, not a speed check
    assert listing.returncode == 141 and err == b""


def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_in_a_command_that_runs_nothing_says_what_it_left_not_that_runs_are_kept(
    tmp_path, monkeypatch, capsys
):
    # fred list, plot and trace said "runs that finished are kept": they run nothing.
    from fred.scenario import registry

    with monkeypatch.context() as patch:
        patch.setattr(registry, "all_strategies", ctrl_c)
        assert main(["list"]) == 130
    assert capsys.readouterr().err == "fred: interrupted; nothing was written\n"
    run_dir = tmp_path / "run"
    main(["run", str(write(tmp_path, tiny())), "--out", str(run_dir), "--quiet"])
    with monkeypatch.context() as patch:
        patch.setattr("fred.runs.api.load_run", ctrl_c)
        assert main(["trace", str(run_dir)]) == 130
    assert capsys.readouterr().err == "fred: interrupted; nothing was written\n"


def test_ctrl_c_while_plot_or_trace_writes_leaves_whole_files_and_says_so(tmp_path, monkeypatch, capsys):
    # A Ctrl-C inside savefig or write_text left a half-written PNG or trace.json under its own name.
    from matplotlib.figure import Figure

    run_dir = tmp_path / "run"
    main(["run", str(write(tmp_path, tiny())), "--out", str(run_dir), "--quiet"])
    capsys.readouterr()
    real, saved = Figure.savefig, []

    def cut_third(self, fname, *args, **kwargs):  # the third figure file is cut short half-way
        saved.append(fname)
        if len(saved) == 3:
            Path(fname).write_bytes(b"\x89PNG\r\n half")
            raise KeyboardInterrupt
        return real(self, fname, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Figure, "savefig", cut_third)
        assert main(["plot", str(run_dir)]) == 130
    plots = run_dir / "plots"
    assert (
        capsys.readouterr().err
        == f"fred: interrupted; {plots} may hold only some of the figures (each is written whole)\n"
    )
    # no half file, no temporary
    assert sorted(p.name for p in plots.iterdir()) == ["loss_vs_time.png", "loss_vs_updates.png"]

    trace = tmp_path / "t.json"
    trace.write_text("the earlier trace")

    def cut(self, text, *args, **kwargs):
        with open(self, "w") as half:
            half.write(text[: len(text) // 2])
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Path, "write_text", cut)
        assert main(["trace", str(run_dir), "-o", str(trace)]) == 130
    assert capsys.readouterr().err == f"fred: interrupted; {trace} is written whole or not at all\n"
    assert trace.read_text() == "the earlier trace" and [p.name for p in tmp_path.glob("*t.*json*")] == [
        "t.json"
    ]


def test_ctrl_c_while_compare_or_sweep_writes_its_table_leaves_the_earlier_table_whole(
    tmp_path, monkeypatch, capsys
):
    # comparison.csv and sweep.parquet were written in place: a Ctrl-C left half of one.
    import pandas as pd

    scenario, runs = str(write(tmp_path, tiny())), str(tmp_path / "runs")
    table, csv = tmp_path / "sweep.parquet", tmp_path / "cmp" / "comparison.csv"
    assert main(["sweep", scenario, "--grid", "seed=1,2", "--runs", runs, "--out", str(table)]) == 0
    assert main(["compare", str(table), "--runs", runs, "--out", str(csv.parent)]) == 0
    earlier = table.read_bytes(), csv.read_bytes()

    def half(self, path, *args, **kwargs):
        Path(path).write_bytes(b"half a table")
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(pd.DataFrame, "to_parquet", half)
        patch.setattr(pd.DataFrame, "to_csv", half)
        assert main(["sweep", scenario, "--grid", "seed=1,2", "--runs", runs, "--out", str(table)]) == 130
        assert main(["compare", str(table), "--runs", runs, "--out", str(csv.parent)]) == 130
    capsys.readouterr()
    assert (table.read_bytes(), csv.read_bytes()) == earlier
    assert not [
        p.name for p in [*tmp_path.iterdir(), *csv.parent.iterdir()] if p.name.startswith(".")
    ]  # no partial copy
