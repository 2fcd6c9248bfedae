"""Looking at runs: staleness, comparison, plots and timeline traces."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import matplotlib.colors
import pandas as pd
import pytest

import fred
from fred.runs.staleness import staleness
from fred.tools.cli import main
from fred.tools.compare import compare, gather
from fred.tools.plots import loss_curves, staleness_histograms, timeline
from fred.tools.trace import trace_events
from tests.conftest import load_shipped, missing_data, shipped_scenarios, tiny

ROOT = Path(__file__).resolve().parents[1]


# Timing-only scenarios (the papers' clusters) have no losses to plot: one trained run per folder,
# of the scenarios whose data is here (not CIFAR-10's own files). The ResNet and transformer
# families' runs cost tens of seconds each: checked in the slow suite.
def _trained(path: Path) -> bool:
    return missing_data(path) is None and not load_shipped(path).workload.timing_only


def _last_trained(paths: list[Path]) -> Path | None:
    """The last of a folder's scenarios that trains (read from the last on: collection reads few)."""
    return next((p for p in reversed(paths) if _trained(p)), None)


_FOLDERS: dict[Path, list[Path]] = defaultdict(list)
for _path in shipped_scenarios():
    _FOLDERS[_path.parent].append(_path)
ONE_PER_FAMILY = sorted(p for p in map(_last_trained, _FOLDERS.values()) if p is not None)
HEAVY_MODELS = ("resnet", "transformer")
DEFAULT_FAMILIES = ("pipe_sgd",)  # Pipe-SGD (overlapping activities), 6 s; the others (6-11 s) are slow


def family_params() -> list:
    slow = lambda p: p.parent.name not in DEFAULT_FAMILIES or fred.load_scenario(p).model.kind in HEAVY_MODELS
    return [
        pytest.param(p, id=p.parent.name, marks=(pytest.mark.slow,) if slow(p) else ())
        for p in ONE_PER_FAMILY
    ]


def short(path: Path) -> fred.RunResult:
    return fred.run(path, stop={"max_updates": 24, "max_sim_time_s": 0.5})


@pytest.mark.parametrize("path", family_params())
def test_every_shipped_scenario_type_plots(path, tmp_path):
    result = short(path)
    paths = (
        loss_curves([result], tmp_path)
        + staleness_histograms([result], tmp_path)
        + timeline(result, tmp_path)
    )
    assert len(paths) == 8
    assert all(p.stat().st_size > 1000 for p in paths)


@pytest.mark.parametrize("path", family_params())
def test_the_trace_is_valid_trace_event_json_with_one_entry_per_event(path):
    result = short(path)
    entries = trace_events(result.events)
    timed = [e for e in entries if e["ph"] in ("X", "i") and e["pid"] == 1]
    assert len(timed) == len(result.events)
    links = [e for e in entries if e["ph"] in ("X", "i") and e["pid"] == 2]
    assert len(links) == (result.events["peer"] != "").sum()
    for e in entries:
        assert {"ph", "name", "pid", "tid"} <= set(e)
    last, ended = defaultdict(lambda: -1.0), defaultdict(lambda: -1.0)
    for e in timed + links:
        assert {"ts", "cat", "args"} <= set(e)
        track = (e["pid"], e["tid"])
        assert e["ts"] >= last[track]
        assert e["ts"] >= ended[track] - 1e-6, (
            "slices on a track never partly overlap (Perfetto draws only nested ones)"
        )
        last[track], ended[track] = e["ts"], max(ended[track], e["ts"] + e.get("dur", 0))
        assert e.get("dur", 0) >= 0
    json.dumps({"traceEvents": entries})


def test_compare_reuses_finished_runs(tmp_path):
    paths = []
    for name, strategy in [("a", "asgd"), ("b", "ssgd")]:
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps(tiny(name=name, strategy={"name": strategy})))
        paths.append(str(path))
    table, ran = compare(paths, tmp_path / "out", tmp_path / "runs", target_loss=2.0)
    assert ran == 2 and list(table["strategy"]) == ["asgd", "ssgd"]
    table, ran = compare(paths, tmp_path / "out", tmp_path / "runs", target_loss=2.0)
    assert ran == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        ["comparison.csv"]
        + [
            f"{s}.{e}"
            for s in ("loss_vs_time", "loss_vs_updates", "loss_vs_examples", "staleness")
            for e in ("png", "svg")
        ]
    )
    run_dirs = sorted((tmp_path / "runs").iterdir())
    table, ran = compare([str(d) for d in run_dirs], tmp_path / "out2", tmp_path / "runs")
    assert ran == 0 and len(table) == 2
    with pytest.raises(ValueError, match="target-loss nan"):  # every run would read as "never reached"
        compare(paths, tmp_path / "out3", tmp_path / "runs", target_loss=float("nan"))


def test_the_comparison_table_records_the_target_loss_its_times_to_target_are_for(tmp_path):
    # comparison.csv had time_to_target_s and updates_to_target but not the loss they were to.
    path = tmp_path / "a.yaml"
    path.write_text(json.dumps(tiny(name="a")))
    compare([str(path)], tmp_path / "out", tmp_path / "runs", target_loss=2.25)
    written = pd.read_csv(tmp_path / "out" / "comparison.csv")
    assert list(written.columns[8:11]) == ["target_loss", "time_to_target_s", "updates_to_target"]
    assert written["target_loss"].tolist() == [2.25] and written["time_to_target_s"].notna().all()
    compare([str(path)], tmp_path / "out", tmp_path / "runs")
    assert pd.read_csv(tmp_path / "out" / "comparison.csv")["target_loss"].isna().all()  # no target: empty


def test_compare_overrides_every_scenario_file_with_set_and_refuses_it_for_finished_runs(tmp_path, capsys):
    # fred run and fred sweep took --set; fred compare did not, so a quick shorter comparison
    # meant editing every scenario file.
    paths = []
    for name, strategy in [("a", "asgd"), ("b", "ssgd")]:
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps(tiny(name=name, strategy={"name": strategy}, stop={"max_updates": 6})))
        paths.append(str(path))
    runs, out = str(tmp_path / "runs"), str(tmp_path / "out")
    assert (
        main(
            [
                "compare",
                *paths,
                "--runs",
                runs,
                "--out",
                out,
                "--set",
                "stop.max_updates=3",
                "--set",
                "seed=5",
            ]
        )
        == 0
    )
    table = pd.read_csv(tmp_path / "out" / "comparison.csv")
    assert list(table["updates"]) == [3, 3]
    assert [fred.load_run(d).scenario.seed for d in sorted((tmp_path / "runs").iterdir())] == [5, 5]
    assert main(["compare", *paths, "--runs", runs, "--out", out, "--set", "stop.max_updatez=3"]) == 2
    assert "stop.max_updatez" in capsys.readouterr().err
    run_dir = next((tmp_path / "runs").iterdir())
    assert main(["compare", paths[0], str(run_dir), "--runs", runs, "--out", out, "--set", "seed=6"]) == 2
    assert capsys.readouterr().err == (
        f"fred: --set applies to scenario files, and {run_dir} is a finished run (or a sweep's "
        "runs): give its scenario.yaml instead, or compare without --set\n"
    )


@pytest.mark.slow  # 4 s on 2 cores: five runs
def test_compare_tells_apart_runs_of_the_same_name_by_what_differs(tmp_path):
    out = []
    for seed, workers in [(0, 4), (1, 4), (0, 2)]:
        out.append(str(tmp_path / f"r{seed}{workers}"))
        fred.run(tiny(name="same", seed=seed, cluster={"workers": workers}), out=out[-1])
    table, _ = compare(out, tmp_path / "cmp", tmp_path / "runs", per_seed=True)
    assert list(table["run"]) == [
        "same (seed=0, cluster.workers=4)",
        "same (seed=1, cluster.workers=4)",
        "same (seed=0, cluster.workers=2)",
    ]
    table, _ = compare(out, tmp_path / "cmp", tmp_path / "runs")  # runs that differ only by seed: one row
    assert list(table["run"]) == ["same (cluster.workers=4)", "same (cluster.workers=2)"]
    shutil.copytree(out[0], tmp_path / "again")
    table, _ = compare(
        [out[0], str(tmp_path / "again")], tmp_path / "cmp", tmp_path / "runs"
    )  # nothing differs
    assert list(table["run"]) == ["same (r04)", "same (again)"]


@pytest.mark.slow  # 2 s on 2 cores
def test_runs_told_apart_by_nothing_but_folders_of_one_name_are_labelled_by_their_paths(tmp_path):
    # a/x and b/x of one scenario were both labelled "same (x)"; and a third run differing in
    # its seed left the first two "same (seed=0)" twice.
    fred.run(tiny(name="same"), out=tmp_path / "a" / "x")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    fred.run(tiny(name="same", seed=1), out=tmp_path / "c")
    pair = [str(tmp_path / "a" / "x"), str(tmp_path / "b" / "x")]
    table, _ = compare(pair, tmp_path / "cmp", tmp_path / "runs")
    assert list(table["run"]) == ["same (a/x)", "same (b/x)"]
    table, _ = compare([*pair, str(tmp_path / "c")], tmp_path / "cmp", tmp_path / "runs", per_seed=True)
    assert list(table["run"]) == ["same (seed=7, a/x)", "same (seed=7, b/x)", "same (seed=1)"]


def test_a_run_given_twice_is_refused_by_name_before_anything_runs(tmp_path, capsys):
    # `fred compare RUN RUN` showed two identical rows, both labelled "s (s)".
    run_dir = tmp_path / "r"
    fred.run(tiny(name="s"), out=run_dir)
    with pytest.raises(ValueError, match=re.escape(f"{run_dir}/ is given twice (as {run_dir} too)")):
        compare([str(run_dir), f"{run_dir}/"], tmp_path / "cmp", tmp_path / "runs")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(tiny(name="s", seed=3)))
    assert (
        main(
            [
                "compare",
                str(scenario),
                str(scenario),
                "--out",
                str(tmp_path / "cmp"),
                "--runs",
                str(tmp_path / "runs"),
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"fred: {scenario} is given twice (as {scenario} too); give each run once\n"
    )
    assert not (tmp_path / "runs").exists()  # refused before running it
    compare([str(scenario)], tmp_path / "cmp", tmp_path / "runs")
    [made] = (tmp_path / "runs").iterdir()
    with pytest.raises(
        ValueError, match=re.escape(f"{scenario} and {made} are the same run, {made}; give it once")
    ):
        compare([str(scenario), str(made)], tmp_path / "cmp", tmp_path / "runs")


def test_a_summary_without_a_field_the_table_needs_is_named_not_a_traceback(tmp_path, capsys):
    # A summary.json from an older fred, or edited by hand, ended fred compare in a KeyError.
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(tiny(name="s")))
    compare([str(scenario)], tmp_path / "cmp", tmp_path / "runs")
    [made] = (tmp_path / "runs").iterdir()
    summary = json.loads((made / "summary.json").read_text())
    table = tmp_path / "sweep.parquet"
    pd.DataFrame({"run_dir": [str(made)]}).to_parquet(table)
    for key in ("bytes_sent", "name"):
        (made / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != key}))
        for item in (made, scenario, table):  # a run directory, a scenario whose run is reused, a sweep's run
            assert (
                main(["compare", str(item), "--out", str(tmp_path / "cmp"), "--runs", str(tmp_path / "runs")])
                == 2
            )
            assert capsys.readouterr().err == (
                f"fred: {made / 'summary.json'} has no {key!r}: it was written by an older fred or edited; "
                f"run its scenario again with this fred (fred run {made / 'scenario.yaml'}) and compare the "
                "new run\n"
            )


def test_runs_of_different_strategies_are_told_apart_by_the_strategy_not_by_fields_only_one_has(tmp_path):
    # "quickstart (strategy.name=asgd, strategy.lr=0.1, strategy.clock=simulated, ...)" beside
    # "... strategy.clock=None ...": ssgd has no clock.
    from fred.tools.plots import _label

    out = [str(tmp_path / name) for name in ("a", "s")]
    fred.run(tiny(name="same", strategy={"name": "asgd", "lr": 0.1}), out=out[0])
    fred.run(tiny(name="same", strategy={"name": "ssgd", "lr": 0.4}), out=out[1])
    table, _ = compare(out, tmp_path / "cmp", tmp_path / "runs")
    assert list(table["run"]) == [
        "same (strategy.name=asgd, strategy.lr=0.1)",
        "same (strategy.name=ssgd, strategy.lr=0.4)",
    ]
    results, _ = gather(out, tmp_path / "runs")
    assert _label(results[0]) == "same (strategy.name=asgd, strategy.lr=0.1) (4 workers)"


def test_compare_shows_which_runs_did_not_complete(tmp_path):
    diverged, timing = str(tmp_path / "diverged"), str(tmp_path / "timing")
    fred.run(tiny(name="diverged", strategy={"lr": 1e30}), out=diverged)
    fred.run(tiny(name="timing", workload={"timing_only": True}), out=timing)
    table, _ = compare([diverged, timing], tmp_path / "cmp", tmp_path / "runs")
    assert list(table["status"]) == ["diverged", "completed"]
    assert table["final_loss"].isna().all() and table["final_loss"].dtype == float  # NaN, not None


def test_compare_watches_each_run_it_makes(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text(json.dumps(tiny(name="a", stop={"max_updates": 12})))
    seen, updates = [], []

    @contextlib.contextmanager
    def watch(scenario):
        seen.append(scenario.name)
        yield lambda sim_time_s, done, eval_loss: updates.append(done)

    compare([str(path)], tmp_path / "out", tmp_path / "runs", watch=watch)
    assert seen == ["a"] and updates and updates[-1] == 12
    compare([str(path)], tmp_path / "out", tmp_path / "runs", watch=watch)
    assert seen == ["a"]  # a finished run is reused, not watched


def test_plot_and_trace_commands(tmp_path, capsys):
    out = tmp_path / "run"
    result = fred.run(tiny(), out=out)
    assert main(["plot", str(out)]) == 0
    assert (out / "plots" / "timeline.png").stat().st_size > 1000
    capsys.readouterr()
    assert main(["trace", str(out), "-o", str(tmp_path / "t.json")]) == 0
    slices = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] != "M"]
    rows, twice = len(result.events), int((result.events["peer"] != "").sum())
    assert (
        f"{rows} events, of which {twice} transfers are drawn twice" in capsys.readouterr().out
    )  # it said "N events" of N + twice slices
    assert len(slices) == rows + twice > rows


def test_plot_and_trace_outputs_are_a_directory_or_a_file_as_given(tmp_path, capsys):
    out = tmp_path / "run"
    fred.run(tiny(), out=out)
    (tmp_path / "dir").mkdir()
    assert main(["trace", str(out), "-o", str(tmp_path / "dir")]) == 0  # a directory: trace.json in it
    assert json.loads((tmp_path / "dir" / "trace.json").read_text())["traceEvents"]
    assert main(["trace", str(out), "-o", str(tmp_path / "new" / "t.json")]) == 0  # missing parents are made
    (tmp_path / "notes.txt").write_text("keep")
    assert main(["plot", str(out), "--out", str(tmp_path / "notes.txt")]) == 2
    assert "notes.txt is a file; these outputs go in a directory" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "keep"


def test_a_timing_only_run_is_plotted_without_empty_loss_figures(tmp_path, capsys):
    out = tmp_path / "run"
    fred.run(tiny(workload={"timing_only": True}), out=out)
    assert main(["plot", str(out)]) == 0
    assert "no loss curves" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "staleness.png",
        "timeline.png",
    ]  # SVG only with --svg


def test_staleness_views():
    result = fred.run(
        tiny(
            cluster={"workers": 4, "stragglers": [{"worker": 3, "slow_factor": 3}]}, stop={"max_updates": 80}
        )
    )
    overall = result.staleness()
    assert overall["count"].sum() == len(result.updates) and overall["share"].sum() == pytest.approx(1.0)
    per_worker = result.staleness("worker")
    assert per_worker.loc[3, "mean"] > per_worker.loc[0, "mean"]
    over_time = result.staleness("time", bins=4)
    assert len(over_time) == 4 and (over_time["end_s"] > over_time["start_s"]).all()
    with pytest.raises(ValueError, match="by must be"):
        result.staleness("node")


def test_staleness_over_time_keeps_every_update_and_every_window():
    # Times past ~1.6e4 s: a last edge nudged by 1e-12 is lost to rounding (that update fell in
    # no window, and the table could not be built); a window without updates is a row of NaN.
    times = [20000.0, 20001.0, 20009.0, 20010.0]
    updates = pd.DataFrame({"sim_time_s": times, "staleness": [1, 3, 5, 7], "worker": [0, 1, 0, 1]})
    over_time = staleness(updates, "time", bins=5)
    assert over_time["count"].tolist() == [2, 0, 0, 0, 2]
    assert over_time["mean"].iloc[[0, 4]].tolist() == [2.0, 6.0] and over_time["mean"].iloc[1:4].isna().all()
    assert over_time["start_s"].iloc[0] == 20000.0 and over_time["end_s"].iloc[-1] == 20010.0
    with pytest.raises(ValueError, match="bins must be at least 1"):
        staleness(updates, "time", bins=0)


def test_every_worker_has_a_staleness_row_even_one_whose_gradients_never_counted():
    result = fred.run(tiny(faults={"worker_crash": [{"worker": 2, "at_s": 0.0}]}))
    per_worker = result.staleness("worker")
    assert list(per_worker.index) == [0, 1, 2, 3] and per_worker.loc[2, "count"] == 0
    assert (
        per_worker.loc[[0, 1, 3], "count"].sum() == len(result.updates)
        and per_worker.loc[2, ["mean", "max"]].isna().all()
    )


def test_each_window_counts_the_updates_between_its_own_edges():
    # Updates at 0, 1, ..., 22 in 22 windows: the one at 15.0 was counted in [14, 15), the
    # window before its own (int(15 / 22 * 22) is 14), which then showed none.
    times = [float(t) for t in range(23)]
    updates = pd.DataFrame({"sim_time_s": times, "staleness": list(range(23)), "worker": [0] * 23})
    over_time = staleness(updates, "time", bins=22)
    for i, row in over_time.iterrows():
        last = i == len(over_time) - 1  # the last window is closed
        inside = [
            t for t in times if row["start_s"] <= t and (t < row["end_s"] or (last and t == row["end_s"]))
        ]
        assert row["count"] == len(inside), (row["start_s"], row["end_s"])
        assert row["mean"] == pytest.approx(sum(inside) / len(inside))  # staleness equals time here
    empty = staleness(updates.iloc[:0], "time", bins=3)
    assert empty.empty and empty.dtypes["count"] == "int64" and empty.dtypes["mean"] == "float64"


def test_the_timeline_legend_is_beside_the_bars_not_over_them(monkeypatch, tmp_path):

    shown = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: shown.append(fig) or [])
    timeline(fred.run(tiny(stop={"max_updates": 4})), tmp_path)
    fig = shown[0]
    fig.canvas.draw()
    ax = fig.axes[0]
    assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent())


def test_the_timeline_shows_activities_inside_a_fault_and_instant_events(monkeypatch, tmp_path):
    # A degraded link's span ("other") was painted last, over every compute and push inside it;
    # events without duration (a crash; every event on the logical clock) had no width to show.
    from fred.tools import plots

    shown = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: shown.append(fig) or [])
    degrade = {"entity": "worker2", "at_s": 0.0, "duration_s": 1.0, "bandwidth_factor": 0.5}
    timeline(fred.run(tiny(faults={"link_degrade": [degrade]})), tmp_path)
    ax = shown[0].axes[0]
    row2 = {
        matplotlib.colors.to_hex(c.get_facecolor()[0]): c.get_paths()[0].get_extents()
        for c in ax.collections
        if 1.6 - 1e-9 <= c.get_paths()[0].get_extents().y0 < 2.4
    }  # worker2's row, split in lanes: each kind its own
    other, compute = row2[plots.COLOURS["other"].lower()], row2[plots.COLOURS["compute"].lower()]
    assert other.y1 <= compute.y0 or compute.y1 <= other.y0
    timeline(fred.run(tiny(strategy={"clock": "logical"})), tmp_path)
    logical = shown[1].axes[0]
    assert not logical.collections and sum(len(line.get_xdata()) for line in logical.lines) > 0


def test_a_comparison_of_many_runs_keeps_them_apart_and_its_histograms_in_rows(monkeypatch, tmp_path):
    # Colours repeated from the eleventh run on, and the histograms stood in one row: 190 runs
    # made a PNG 66,000 px wide.
    from types import SimpleNamespace

    shown = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: shown.append(fig) or [])
    metrics = pd.DataFrame({"sim_time_s": [0.0, 1.0], "updates": [0, 5], "eval_loss": [2.0, 1.0]})
    updates = pd.DataFrame({"staleness": [0, 1, 1]})
    runs = [
        SimpleNamespace(
            title=f"run{i}", summary={"strategy": "asgd", "workers": 4}, metrics=metrics, updates=updates
        )
        for i in range(23)
    ]
    loss_curves(runs, tmp_path)
    styles = [(line.get_color(), line.get_linestyle()) for line in shown[0].axes[0].lines]
    assert len(styles) == 23 and len(set(styles)) == 23
    staleness_histograms(runs, tmp_path)
    visible = [ax for ax in shown[-1].axes if ax.get_visible()]
    width, height = shown[-1].get_size_inches()
    assert len(visible) == 23 and width == pytest.approx(3 * 5.0) and height == pytest.approx(8 * 3.6)


def test_one_runs_staleness_histogram_is_as_wide_as_its_timeline_and_its_text_readable(tmp_path, monkeypatch):
    # It was 340 x 290 px, with 8-point text, beside a timeline of 1,100 px.
    import struct

    result = fred.run(tiny(), out=tmp_path / "run")
    [staleness_png, _] = staleness_histograms([result], tmp_path)
    [timeline_png, _] = timeline(result, tmp_path)
    widths = [struct.unpack(">II", path.read_bytes()[16:24])[0] for path in (staleness_png, timeline_png)]
    assert widths[0] >= 0.85 * widths[1] and widths[0] >= 900, widths
    shown = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: shown.append(fig) or [])
    staleness_histograms([result], tmp_path)
    ax = shown[0].axes[0]
    sizes = [ax.title.get_fontsize(), ax.xaxis.label.get_fontsize(), *(t.get_fontsize() for t in ax.texts)]
    assert min(sizes) >= 10, sizes


def test_a_timeline_with_more_events_than_it_draws_aggregates_all_of_them_says_so_and_draws_no_edges(
    monkeypatch, tmp_path
):
    # It drew the first max_events events and cut the rest: a long run's chart ended early.

    shown = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: shown.append(fig) or [])
    result = fred.run(tiny(stop={"max_updates": 40}))
    timeline(result, tmp_path, max_events=10)
    ax = shown[0].axes[0]
    assert f"{len(result.events):,} events, too many to draw one by one, aggregated" in ax.get_title()
    drawn_to = max(path.get_extents().x1 for bars in ax.collections for path in bars.get_paths())
    assert drawn_to == pytest.approx(result.events["end_s"].max())  # the whole run, not its first 10 events
    assert all(bars.get_linewidth().max() == 0 for bars in ax.collections)


def test_a_summary_that_is_json_but_not_an_object_is_a_damaged_run_not_a_traceback(tmp_path, capsys):
    # summary.json holding [] or 3 ended compare, plot, trace and load_run in an AttributeError
    # or TypeError traceback (summary.get, summary["name"]).
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(tiny(name="s")))
    compare([str(scenario)], tmp_path / "cmp", tmp_path / "runs")
    [made] = (tmp_path / "runs").iterdir()
    runs = ["--runs", str(tmp_path / "runs")]
    for text, shown in [
        ("[]", "[] (a JSON array)"),
        ("3", "3 (a JSON number)"),
        ('"x"', '"x" (a JSON string)'),
    ]:
        (made / "summary.json").write_text(text + "\n")
        damaged = (
            f"{made / 'summary.json'} holds {shown}, not the JSON object of fields fred run writes; the run "
            f"directory is damaged: run its scenario again to replace it, fred run {made / 'scenario.yaml'} "
            f"--out {made}"
        )
        for command in (
            ["compare", str(made), *runs],
            ["compare", str(scenario), *runs],
            ["plot", str(made)],
            ["trace", str(made)],
        ):
            assert main([*command, "-o" if command[0] == "trace" else "--out", str(tmp_path / "o")]) == 2, (
                command
            )
            err = capsys.readouterr().err
            assert damaged in err and "Traceback" not in err, err
        with pytest.raises(fred.ScenarioError, match=re.escape(damaged)):
            fred.load_run(made)


def test_plot_names_a_summary_field_it_needs_and_lacks_as_compare_does(tmp_path, capsys):
    # fred plot ended in a KeyError traceback on a summary.json without workers, strategy or name.
    made = tmp_path / "run"
    fred.run(tiny(), out=made)
    summary = json.loads((made / "summary.json").read_text())
    for key in ("workers", "strategy", "name"):
        (made / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != key}))
        assert main(["plot", str(made)]) == 2
        assert capsys.readouterr().err == (
            f"fred: {made / 'summary.json'} has no {key!r}: it was written by an older fred or edited; "
            f"run its scenario again with this fred (fred run {made / 'scenario.yaml'}) "
            "and plot the new run\n"
        )
        assert not (made / "plots").exists()  # refused before any figure
        assert (
            main(["trace", str(made), "-o", str(tmp_path / "t.json")]) == 0
        )  # the trace reads no summary field


def test_loss_against_examples_puts_an_ssgd_round_and_asgd_gradients_on_one_axis(tmp_path, monkeypatch):
    # loss_vs_updates puts an SSGD round of 4 gradients and one ASGD gradient at the same x
    from fred.tools import examples_curves

    ssgd, asgd = (fred.run(tiny(strategy={"name": name})) for name in ("ssgd", "asgd"))
    batch, workers = 8, 4
    done = examples_curves.with_examples(ssgd)
    assert done["examples"].tolist() == [u * workers * batch for u in done["updates"]]
    done = examples_curves.with_examples(asgd)
    assert (done["examples"] >= done["updates"] * batch).all() and done["examples"].iloc[-1] < 2 * 12 * batch
    shown = []
    monkeypatch.setattr(
        "fred.tools.figure_common._save", lambda fig, out, stem: shown.append((stem, fig)) or []
    )
    examples_curves.loss_vs_examples([ssgd, asgd], tmp_path, target_loss=2.0)
    [(stem, fig)] = shown
    ax = fig.axes[0]
    assert (
        stem == "loss_vs_examples"
        and ax.get_xlabel() == "examples computed (gradient steps of all workers × batch size)"
    )
    assert (
        ax.lines[0].get_xdata().max() == 12 * workers * batch
    )  # SSGD's 12 rounds: 4 times ASGD's 12 updates' examples
