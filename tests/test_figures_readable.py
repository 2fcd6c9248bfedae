"""Figures a reader can read: a few rows of a timeline of many workers, its legend's words, the
staleness numbers beside the bars, log axes with labels, and the compare table's sites and settings."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import fred
from fred.scenario.errors import Refusal
from fred.tools import examples_curves, plots
from fred.tools.cli import main
from fred.tools.compare import compare, readable_table
from fred.tools.timeline_rows import parse_workers
from tests.conftest import tiny


@pytest.fixture
def figures(monkeypatch):
    """The figures the plotting functions make, kept open instead of written."""
    shown = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: shown.append(fig) or [])
    return shown


def steps(workers: int, slow: dict[int, float], kinds: dict[str, int] | None = None) -> SimpleNamespace:
    """A run of ``workers`` workers, each 4 compute steps of 10 ms (``slow``: worker -> slower
    factor) and a push after each, and ``kinds``: events of other kinds on the server."""
    rows = []
    for w in range(workers):
        step_s, t = 0.01 * slow.get(w, 1.0), 0.0
        for _ in range(4):
            rows += [
                (t, t + step_s, f"worker{w}", "compute"),
                (t + step_s, t + step_s + 0.001, f"worker{w}", "push"),
            ]
            t += step_s + 0.001
    for kind, count in (kinds or {}).items():
        rows += [(0.01 * i, 0.01 * i, "server", kind) for i in range(count)]
    events = pd.DataFrame(rows, columns=["start_s", "end_s", "entity", "kind"])
    return SimpleNamespace(title="many", summary={"strategy": "asgd", "workers": workers}, events=events)


def labels(fig) -> list[str]:
    return [label.get_text() for label in fig.axes[0].get_yticklabels()]


def test_a_timeline_of_many_workers_draws_the_first_the_last_and_the_slowest(figures, tmp_path):
    plots.timeline(steps(64, {40: 3.0}), tmp_path)
    drawn = labels(figures[0])
    assert drawn == [f"worker{w}" for w in [*range(8), 40, *range(60, 64)]]
    title = figures[0].axes[0].get_title()
    assert (
        f"{13 * 8:,} events in the rows drawn" in title
    )  # 4 steps and 4 pushes a worker: the rows drawn only
    assert (
        "13 of 64 workers (the first 8, the last 4 and the 1 slowest; --workers picks others): 0-7, 40, 60-63"
        in title
    )
    bold = {
        label.get_text() for label in figures[0].axes[0].get_yticklabels() if label.get_fontweight() == "bold"
    }
    assert bold == {"worker40"}  # marked against every worker's median, not the drawn ones'
    plots.timeline(steps(64, {}), tmp_path, workers=[3, 10, 11])
    assert labels(figures[1]) == ["worker3", "worker10", "worker11"]
    plots.timeline(steps(32, {}), tmp_path)
    assert len(labels(figures[2])) == 32 and "workers (" not in figures[2].axes[0].get_title()


def test_workers_are_picked_by_numbers_and_ranges_and_a_bad_pick_is_refused_before_any_figure(
    tmp_path, capsys
):
    assert parse_workers("0-3,100, 2") == [0, 1, 2, 3, 100]
    for bad in ("0-", "x", "3-1", ""):
        with pytest.raises(Refusal, match="--workers"):
            parse_workers(bad)
    out = tmp_path / "run"
    fred.run(tiny(), out=out)
    assert main(["plot", str(out), "--workers", "0-1,9"]) == 2
    assert capsys.readouterr().err == "fred: --workers: the run has no worker 9; it has workers 0 to 3\n"
    assert not (out / "plots").exists()
    assert main(["plot", str(out), "--workers", "0-1"]) == 0
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "loss_vs_time.png",
        "loss_vs_updates.png",
        "staleness.png",
        "timeline.png",
    ]  # no SVG unasked


def test_an_svg_only_when_asked(tmp_path):
    assert [p.name for p in plots.timeline(steps(2, {}), tmp_path, svg=False)] == ["timeline.png"]
    assert [p.name for p in plots.timeline(steps(2, {}), tmp_path)] == [
        "timeline.png",
        "timeline.svg",
    ]  # the API's default


def test_wide_area_transfers_have_their_own_legend_entry_and_other_names_its_kinds(figures, tmp_path):
    plots.timeline(steps(2, {}, {"wide_area": 3}), tmp_path)
    plots.timeline(steps(2, {}, {"wide_area": 3, "crash": 1, "push_dropped": 2}), tmp_path)
    legends = [[text.get_text() for text in fig.axes[0].get_legend().get_texts()] for fig in figures]
    assert legends[0] == ["compute", "communication", "wide-area transfer (between sites)", "waiting"]
    assert legends[1][-1] == "other (push_dropped, crash)"


def test_a_row_of_one_step_says_step(figures, tmp_path):
    plots.timeline(steps(3, {2: 50.0}), tmp_path, end_s=0.45)
    rows = [text.get_text() for text in figures[0].axes[0].texts]
    assert rows[2].endswith("| 1 step of 500 ms, 50.0× the median")
    assert rows[0].endswith("| 4 steps of 10 ms")


def test_the_staleness_mean_and_max_are_in_a_legend_that_covers_no_bar(figures, tmp_path):
    run = SimpleNamespace(
        title="r",
        summary={"strategy": "asgd", "workers": 4},
        updates=pd.DataFrame({"staleness": [0, 1, 1, 3, 3, 3, 4, 4, 4, 4]}),
    )
    plots.staleness_histograms([run], tmp_path)
    ax = figures[0].axes[0]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["mean 2.70, max 4"] and len(
        ax.texts
    ) == 0
    figures[0].canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert not any(legend.overlaps(bar.get_window_extent()) for bar in ax.patches if bar.get_height() > 0)


def loss_run(losses: list[float], floor: float | None = None) -> SimpleNamespace:
    metrics = pd.DataFrame(
        {
            "sim_time_s": np.arange(len(losses), dtype=float),
            "updates": np.arange(len(losses)) * 10,
            "eval_loss": losses,
        }
    )
    events = pd.DataFrame({"start_s": [0.0], "end_s": [0.5], "entity": ["worker0"], "kind": ["compute"]})
    summary = {"strategy": "asgd", "workers": 4} | ({"data_loss_floor": floor} if floor is not None else {})
    return SimpleNamespace(
        title="r",
        summary=summary,
        metrics=metrics,
        events=events,
        scenario=SimpleNamespace(data=SimpleNamespace(batch_size=8)),
    )


@pytest.mark.parametrize("losses", [[2.32, 2.25, 2.19, 2.15], [4.2, 3.0, 1.1], [0.9, 0.05, 0.002]])
def test_log_loss_axes_say_so_and_have_three_labels_or_more(figures, tmp_path, losses):
    plots.loss_curves([loss_run(losses)], tmp_path)
    examples_curves.loss_vs_examples([loss_run(losses)], tmp_path)
    for fig in figures:
        ax = fig.axes[0]
        fig.canvas.draw()
        low, high = sorted(ax.get_ylim())
        shown = [
            t.get_text() for t in ax.get_yticklabels() if t.get_text() and low <= t.get_position()[1] <= high
        ]
        assert ax.get_title().startswith("eval loss (log scale) vs ") and len(shown) >= 3, shown


def test_loss_vs_examples_draws_the_loss_floor(figures, tmp_path):
    examples_curves.loss_vs_examples([loss_run([4.0, 2.0, 1.5], floor=1.067)], tmp_path)
    [floor] = [line for line in figures[0].axes[0].lines if line.get_label().startswith("loss floor")]
    assert set(floor.get_ydata()) == {1.067}


def test_compare_shows_bytes_between_sites_and_tells_apart_settings_of_one_strategy(tmp_path, monkeypatch):
    import yaml

    shown = []
    monkeypatch.setattr(plots, "_saved", lambda fig, out, stem, svg: shown.append((stem, fig)) or [])
    network = {
        "latency_s": 5e-5,
        "bandwidth_bps": 1.25e9,
        "sites": {"nodes": [1, 1], "latency_s": 0.03, "bandwidth_bps": 1.25e8},
    }
    paths = []
    for name, compression in [("plain", None), ("topk", {"kind": "topk", "ratio": 0.01})]:
        strategy = {"name": "arsgd", "lr": 0.1} | ({"compression": compression} if compression else {})
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            yaml.safe_dump(
                tiny(
                    name=name,
                    strategy=strategy,
                    network=network,
                    cluster={"workers": 4, "devices_per_node": 2},
                    stop={"max_updates": 4},
                )
            )
        )
        paths.append(str(path))
    table, _ = compare(paths, tmp_path / "out", tmp_path / "runs")
    assert list(table.columns[:3]) == ["run", "strategy", "strategy_settings"]
    assert (
        list(table["strategy_settings"]) == ["", "topk ratio=0.01"]
        and (table["bytes_between_sites"] > 0).all()
    )
    printed = readable_table(table, 200)
    assert (
        "arsgd (topk ratio=0.01)" in printed and "between\n" not in printed.split("\n\n")[0].split("\n")[-1]
    )
    assert "between" in printed.split("\n")[0] and "sites" in printed.split("\n")[1]
    [time_fig] = [fig for stem, fig in shown if stem == "loss_vs_time"]
    legend = [text.get_text() for text in time_fig.axes[0].get_legend().get_texts()]
    assert legend == ["plain (arsgd, 4 workers)", "topk (arsgd topk ratio=0.01, 4 workers)"]
    alone, _ = compare(paths[:1], tmp_path / "out", tmp_path / "runs")
    assert "strategy_settings" not in alone.columns  # one run of a strategy: nothing to tell apart
