"""What the figures show: timeline windows, rows and aggregation; staleness bins; the compare
plots' target line and the compare table as people read it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import fred
from fred.tools import figure_common, plots, timeline_plot
from fred.tools.cli import main
from fred.tools.compare import readable_table
from fred.tools.formats import bytes_ as readable_bytes
from tests.conftest import tiny


@pytest.fixture
def figures(monkeypatch):
    """The figures the plotting functions make, kept open instead of written."""
    shown = []
    monkeypatch.setattr("fred.tools.figure_common._save", lambda fig, out, stem: shown.append(fig) or [])
    return shown


def _bars(ax):
    return [path.get_extents() for bars in ax.collections for path in bars.get_paths()]


def test_the_covered_seconds_of_each_column_add_up_spans_cut_at_the_edges():
    covered = timeline_plot._covered(
        np.array([0.0, 1.5]), np.array([1.0, 2.5]), np.array([0.0, 1.0, 2.0, 3.0])
    )
    assert covered.tolist() == [1.0, 0.5, 0.5]
    overlapping = timeline_plot._covered(np.array([0.0, 0.5]), np.array([1.0, 1.0]), np.array([0.0, 1.0]))
    assert overlapping.tolist() == [
        1.5
    ]  # counted twice: the row's shares are scaled to fit where they overlap


def test_the_timeline_window_shows_only_its_events_each_at_least_a_pixel_wide(figures, tmp_path):
    result = fred.run(tiny(stop={"max_updates": 40}))
    plots.timeline(result, tmp_path, start_s=0.03, end_s=0.06)
    ax = figures[0].axes[0]
    assert ax.get_xlim() == (0.03, 0.06)
    pixel = 0.03 / timeline_plot._pixel_columns(figures[0], ax)
    bars = _bars(ax)
    assert bars and all(0.03 <= b.x0 and b.x1 <= 0.06 + pixel * 1.001 for b in bars)
    assert min(b.width for b in bars) >= pixel * 0.999  # a push of microseconds is not narrower than a pixel
    inside = ((result.events["end_s"] >= 0.03) & (result.events["start_s"] <= 0.06)).sum()
    assert f"0.03 to 0.06 s of {result.events['end_s'].max():.4g} s: {inside:,} events" in ax.get_title()


def test_the_timeline_has_a_row_per_entity_and_marks_the_straggler(figures, tmp_path):
    result = fred.run(
        tiny(
            cluster={"workers": 4, "stragglers": [{"worker": 3, "slow_factor": 4}]}, stop={"max_updates": 40}
        )
    )
    plots.timeline(result, tmp_path)
    ax = figures[0].axes[0]
    labels = {label.get_text(): label for label in ax.get_yticklabels()}
    assert list(labels) == ["worker0", "worker1", "worker2", "worker3", "server"]
    assert [labels[w].get_fontweight() for w in ("worker0", "worker3")] == ["normal", "bold"]
    notes = [text.get_text() for text in ax.texts]
    assert "the median" in notes[3] and not any("the median" in note for note in notes[:3])
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["compute", "communication", "waiting"]  # no faults here: no "other" entry


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--from", "-1"], "--from -1: a window edge is a time in simulated seconds, finite and 0 or more"),
        (["--to", "nan"], "--to nan: a window edge is a time in simulated seconds, finite and 0 or more"),
        (["--from", "0.02", "--to", "0.01"], "--from 0.02 --to 0.01: the window must start before it ends"),
        (["--from", "50"], "--from 50: the run's last event ends at"),
    ],
)
def test_a_bad_timeline_window_is_refused_and_nothing_is_written(tmp_path, capsys, flags, said):
    out = tmp_path / "run"
    fred.run(tiny(), out=out)
    assert main(["plot", str(out), *flags]) == 2
    assert said in capsys.readouterr().err
    assert not (out / "plots").exists()


def test_plot_draws_the_timeline_window_it_is_given(tmp_path, capsys):
    out = tmp_path / "run"
    fred.run(tiny(), out=out)
    assert main(["plot", str(out), "--from", "0.01", "--to", "0.02", "--svg"]) == 0
    assert (out / "plots" / "timeline.svg").read_text().count("0.01 to 0.02 s of") == 1


def test_staleness_bars_are_centred_on_whole_numbers(figures, tmp_path):
    # Bins from 0 to max + 1 put the bar of staleness 0 between 0 and 1: SSGD's all-zero
    # staleness looked like staleness up to 1.
    from types import SimpleNamespace

    runs = [
        SimpleNamespace(
            title=f"r{i}",
            summary={"strategy": "asgd", "workers": 4},
            updates=pd.DataFrame({"staleness": staleness}),
        )
        for i, staleness in enumerate([[0, 1, 1, 3], [0, 0]])
    ]
    plots.staleness_histograms(runs, tmp_path)
    spread, zeros = figures[0].axes[:2]
    centres = [p.get_x() + p.get_width() / 2 for p in spread.patches]
    assert centres == pytest.approx([0, 1, 2, 3]) and [p.get_height() for p in spread.patches] == [1, 2, 0, 1]
    assert [p.get_height() for p in zeros.patches] == [2] and zeros.patches[0].get_x() + zeros.patches[
        0
    ].get_width() / 2 == 0
    assert all(float(t).is_integer() for t in spread.get_xticks())
    assert (spread.get_xlabel(), spread.get_ylabel()) == (
        "staleness (model versions behind)",
        "gradients applied",
    )


def test_loss_plots_draw_the_target_loss_and_count_updates_from_zero_on_a_linear_axis(figures, tmp_path):
    from types import SimpleNamespace

    metrics = pd.DataFrame(
        {"sim_time_s": [0.0, 1.0, 2.0], "updates": [0, 50, 100], "eval_loss": [2.0, 1.0, 0.5]}
    )
    run = SimpleNamespace(title="r", summary={"strategy": "asgd", "workers": 4}, metrics=metrics)
    plots.loss_curves([run], tmp_path, target_loss=0.8)
    for fig in figures:
        ax = fig.axes[0]
        [target] = [line for line in ax.lines if line.get_label() == "target loss 0.8"]
        assert set(target.get_ydata()) == {0.8}
        assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    plots.loss_curves([run], tmp_path)
    assert not any(line.get_label().startswith("target") for line in figures[-1].axes[0].lines)


def test_byte_counts_read_in_decimal_units():
    assert [readable_bytes(x) for x in (0, 950, 1000, 43_370_000, 1.4e9, 1.42541e11)] == [
        "0 B",
        "950 B",
        "1 kB",
        "43.4 MB",
        "1.4 GB",
        "143 GB",
    ]


def _row(run, final_loss, time_to, updates_to, status="completed"):
    return {
        "run": run,
        "strategy": "asgd",
        "workers": 8,
        "status": status,
        "final_loss": final_loss,
        "final_accuracy": math.nan if math.isnan(final_loss) else 0.97,
        "sim_time_s": 2.0,
        "updates": 1568,
        "target_loss": 0.3,
        "time_to_target_s": time_to,
        "updates_to_target": updates_to,
        "bytes_sent": 1.42541e11,
        "staleness_mean": 6.98,
        "staleness_p50": 7.0,
        "staleness_p99": 10.0,
    }


def test_the_printed_table_says_never_uses_units_aligns_its_headers_and_fits_80_columns():
    table = pd.DataFrame(
        [
            _row("asgd", 0.12, 0.6, 464.0),
            _row("a-longer-run-name", 0.41, math.nan, math.nan),
            _row("timing-only", math.nan, math.nan, math.nan),
        ]
    )
    text = readable_table(table, width=80)
    assert "nan" not in text.lower() and "e+" not in text
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    [row] = [line for line in lines if line.startswith("a-longer-run-name") and "never" in line]
    assert row.split()[1:3] == ["never", "never"]
    assert "143 GB" in text and "1,568" in text and "97.0%" in text
    timing = [line for line in lines if line.startswith("timing-only")]
    assert "never" not in " ".join(timing)  # no losses: nothing to reach, said "-"
    block = lines[: lines.index("")]  # the first block: headers over cells
    for word in ("workers", "loss"):  # right-aligned numbers end under their headers' ends
        end = next(line for line in block if word in line).index(word) + len(word)
        assert all(line[end - 1] != " " for line in block[2:])
    wide = readable_table(table, width=200)
    assert "" not in wide.split("\n\nupdates:")[0].splitlines()  # one block where it fits (the notes follow)


def _row_colours(png, fig, rows: int) -> list[dict[str, int]]:
    """How many pixels of each activity's colour each row of the timeline's PNG holds, read back
    from the file: the rows' bands found where ``bbox_inches="tight"`` put them."""
    import matplotlib.colors
    import matplotlib.image
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    ax = fig.axes[0]
    top_px = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer()).padded(0.1).y1 * fig.dpi
    pixels = matplotlib.image.imread(png)[..., :3]
    counts = []
    for row in range(rows):
        (_, low), (_, high) = ax.transData.transform([(0, row - 0.45), (0, row + 0.45)])
        band = pixels[round(top_px - high) : round(top_px - low)].reshape(-1, 3)
        counts.append(
            {
                group: int(np.all(np.abs(band - matplotlib.colors.to_rgb(colour)) < 1.5 / 255, axis=1).sum())
                for group, colour in plots.COLOURS.items()
            }
        )
    return counts


@pytest.mark.parametrize(
    "scenario, window, workers",
    [
        ("pipe_sgd/pipe_k1.yaml", (1.0, 2.0), 4),  # computes while its all-reduce runs, and waits for it
        ("sgp/sgp_16.yaml", (1.0, 1.6), 16),  # waits while it sends
    ],
)
def test_every_activity_of_a_row_shows_in_the_png_where_activities_overlap(
    monkeypatch, tmp_path, scenario, window, workers
):
    # One bar per row showed only the kind drawn last: Pipe-SGD's compute lay under its
    # all-reduce, under its wait, and its rows said "36% compute" with no compute drawn.
    from pathlib import Path

    made, save = [], figure_common._save
    monkeypatch.setattr(
        "fred.tools.figure_common._save", lambda fig, out, stem: made.append(fig) or save(fig, out, stem)
    )
    path = Path(__file__).resolve().parents[1] / "scenarios" / scenario
    result = fred.run(path, workload={"timing_only": True}, stop={"max_sim_time_s": window[1] + 0.5})
    png, _ = plots.timeline(result, tmp_path, *window)
    for counts in _row_colours(png, made[0], workers):
        assert all(counts[group] > 100 for group in ("compute", "communicate", "wait")), counts
    ax = made[0].axes[0]
    assert f"{workers} rows whose activities overlap in time: a thin bar per activity" in ax.get_title()
    assert any("each counted where they overlap (sums may pass 100%)" in text.get_text() for text in ax.texts)
    shares = [text.get_text() for text in ax.texts][0]
    assert sum(int(part.split("%")[0]) for part in shares.split(" | ")[0].split(" · ")) > 100


def test_a_share_counts_the_time_in_which_a_row_does_that_at_all():
    shown = pd.DataFrame(
        {
            "row": [0, 0, 0],
            "group": ["communicate", "communicate", "compute"],
            "start": [0.0, 0.5, 1.0],
            "end": [1.0, 1.5, 2.0],
        }
    )
    assert (
        timeline_plot._busy_s(shown[shown["group"] == "communicate"]) == 1.5
    )  # two concurrent pushes count once
    assert timeline_plot.split_rows(shown, 2.0) == {0: ["compute", "communicate"]}
    assert timeline_plot.split_rows(shown.iloc[[0, 2]], 2.0) == {}  # end to end is no overlap
