"""Seeds as an axis: runs that differ only by their seed compared as one (mean ± sd, bands)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import fred
from fred.tools.cli import main
from fred.tools.compare import compare, readable_table
from fred.tools.formats import plus_minus
from fred.tools.seeds import AVERAGED, band, by_seed, mean_sd, parse_seeds
from tests.conftest import tiny

SEEDS = [0, 1, 2]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Two tiny scenarios (ASGD and SSGD) run with three seeds each, in one runs folder."""
    root = tmp_path_factory.mktemp("seeds")
    paths = []
    for strategy in ("asgd", "ssgd"):
        path = root / f"{strategy}.yaml"
        path.write_text(
            json.dumps(tiny(name=strategy, strategy={"name": strategy}, stop={"max_updates": 16}))
        )
        paths.append(str(path))
    compare(paths, root / "cmp", root / "runs", seeds=SEEDS)
    return root, paths


def test_a_group_is_the_mean_and_sample_sd_of_its_seeds(made, tmp_path):
    root, paths = made
    each, ran = compare(paths, tmp_path / "each", root / "runs", target_loss=2.2, seeds=SEEDS, per_seed=True)
    grouped, _ = compare(paths, tmp_path / "grouped", root / "runs", target_loss=2.2, seeds=SEEDS)
    assert ran == 0 and len(each) == 6
    assert list(grouped["run"]) == ["asgd", "ssgd"] and list(grouped["n_seeds"]) == [3, 3]
    assert list(grouped["seeds"]) == ["0 1 2", "0 1 2"]
    for row, strategy in zip(grouped.itertuples(), ("asgd", "ssgd")):
        runs = each[each["strategy"] == strategy]
        for column in AVERAGED:
            values = runs[column].to_numpy(dtype=float)
            have = values[~np.isnan(values)]
            assert getattr(row, f"{column}_n") == len(have)
            if len(have):
                assert getattr(row, column) == pytest.approx(np.mean(have), rel=1e-12)
            if len(have) > 1:
                assert getattr(row, f"{column}_sd") == pytest.approx(
                    np.std(have, ddof=1), rel=1e-12, abs=1e-15
                )
    assert grouped["final_loss_sd"].gt(0).all()  # the seeds do differ: the test can tell a mean from a copy
    assert pd.read_csv(tmp_path / "grouped" / "comparison.csv")["final_loss"].tolist() == pytest.approx(
        grouped["final_loss"]
    )


@pytest.mark.slow  # 2 s on 2 cores
def test_with_one_seed_per_scenario_the_comparison_is_what_it_was(made, tmp_path):
    root, paths = made
    grouped, _ = compare(paths, tmp_path / "a", root / "runs", target_loss=2.2)
    each, _ = compare(paths, tmp_path / "b", root / "runs", target_loss=2.2, per_seed=True)
    pd.testing.assert_frame_equal(grouped, each)
    assert "n_seeds" not in grouped.columns and readable_table(grouped) == readable_table(each)
    assert (tmp_path / "a" / "comparison.csv").read_bytes() == (
        tmp_path / "b" / "comparison.csv"
    ).read_bytes()


def test_the_table_shows_mean_plus_minus_sd_and_how_many_seeds(made, tmp_path):
    root, paths = made
    table, _ = compare(paths, tmp_path / "cmp", root / "runs", seeds=SEEDS)
    text = readable_table(table, 200)
    header, first = text.splitlines()[1], text.splitlines()[2]
    assert "seeds" in header and first.split()[:5] == ["asgd", "asgd", "4", "3", "completed"]
    mean, sd = table["final_loss"][0], table["final_loss_sd"][0]
    assert plus_minus(mean, sd, str) in first and " ± " in first
    assert "mean over the seeds ± their standard deviation (sample, n - 1)" in " ".join(text.split())


@pytest.mark.parametrize("mean, sd, shown", [
    (0.316045, 0.0476, "0.316 ± 0.048"),   # the mean to the sd's second significant digit
    (12.2617, 0.0970, "12.262 ± 0.097"),
    (1234.5, 45.2, "1,234 ± 45"),
    (0.5, 1e-9, "0.50000 ± 1e-09"),        # at most five significant digits of the mean
    (0.25, 0.0, "same"),                   # every seed the same: the number alone
    (0.25, float("nan"), "same"),          # one seed
])  # fmt: skip
def test_a_mean_is_shown_to_the_precision_of_its_sd(mean, sd, shown):
    assert plus_minus(mean, sd, lambda v: "same") == shown


def test_a_number_only_some_seeds_have_is_averaged_over_those_and_says_how_many():
    assert mean_sd(np.array([1.0, np.nan, 3.0])) == (2.0, pytest.approx(np.std([1.0, 3.0], ddof=1)), 2)
    assert mean_sd(np.array([np.nan, np.nan])) == (
        pytest.approx(np.nan, nan_ok=True),
        pytest.approx(np.nan, nan_ok=True),
        0,
    )
    table = pd.DataFrame(
        {
            "run": ["a"],
            "strategy": ["asgd"],
            "workers": [4],
            "n_seeds": [3],
            "seeds": ["0 1 2"],
            "status": ["completed"],
            "target_loss": [0.5],
            **{c: [1.0] for c in AVERAGED},
            **{f"{c}_sd": [0.5] for c in AVERAGED},
            **{f"{c}_n": [3] for c in AVERAGED},
        }
    )
    table[["time_to_target_s", "time_to_target_s_n", "updates_to_target", "updates_to_target_n"]] = [
        0.25,
        2,
        np.nan,
        0,
    ]
    text = readable_table(table, 300)
    assert "0.25 ± 0.50 s (2 of 3)" in text and " never " in text
    assert "(k of n): over the k seeds that have the number" in " ".join(text.split())


def test_names_that_differ_only_by_their_seed_are_one_group(tmp_path):
    results = [fred.run(tiny(name=f"lr1-s{seed}", seed=seed, stop={"max_updates": 4})) for seed in (0, 1)]
    other = fred.run(tiny(name="lr1-s0", seed=0, stop={"max_updates": 4}, strategy={"lr": 0.05}))
    groups = by_seed([*results, other])
    assert [(g.name, g.seeds) for g in groups] == [("lr1-s*", [0, 1]), ("lr1-s0", [0])]


def test_copies_of_one_seeds_run_beside_other_seeds_are_refused_by_name(made, tmp_path, capsys):
    root, _ = made
    runs = sorted((root / "runs").iterdir())
    asgd = [d for d in runs if d.name.startswith("asgd")]
    shutil.copytree(asgd[0], tmp_path / "copy")
    items = [str(asgd[0]), str(tmp_path / "copy"), str(asgd[1])]
    assert main(["compare", *items, "--out", str(tmp_path / "cmp"), "--runs", str(root / "runs")]) == 2
    err = capsys.readouterr().err
    assert (
        f"{asgd[0]} and {tmp_path / 'copy'} are runs of one scenario with one seed" in err
        and "--per-seed" in err
    )
    assert (
        main(["compare", *items, "--per-seed", "--out", str(tmp_path / "cmp"), "--runs", str(root / "runs")])
        == 0
    )


@pytest.mark.parametrize(
    "text, seeds", [("3", [0, 1, 2]), ("1", [0]), ("0,4,7", [0, 4, 7]), (" 2, 5", [2, 5])]
)
def test_seeds_are_a_count_or_a_list(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds 0: that is no seeds at all; give how many seeds (--seeds 3 runs seeds 0, 1, "
                       "2)"),
    (["--seeds", "-1"], "--seeds -1: seeds are whole numbers, 0 or more"),
    (["--seeds", "1,x"], "--seeds 1,x: seeds are whole numbers"),
    (["--seeds", "1,2,1"], "--seeds 1,2,1: seed 1 is given twice; give each seed once"),
    (["--seeds", "2", "--set", "seed=4"], "--set seed=4 and --seeds both choose the seed"),
])  # fmt: skip
def test_bad_seeds_are_named_with_the_fix_before_anything_runs(argv, message, tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(tiny()))
    for command in (["compare", str(scenario)], ["sweep", str(scenario)]):
        assert main([*command, *argv, "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_seeds_are_refused_for_finished_runs_and_beside_a_seed_grid(made, tmp_path, capsys):
    root, paths = made
    run_dir = next((root / "runs").iterdir())
    assert (
        main(
            [
                "compare",
                str(run_dir),
                "--seeds",
                "2",
                "--runs",
                str(root / "runs"),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "--seeds applies to scenario files" in capsys.readouterr().err
    assert main(["sweep", paths[0], "--seeds", "2", "--grid", "seed=0,1", "--runs", str(tmp_path / "r")]) == 2
    assert "--seeds and --grid seed=... both give the seeds" in capsys.readouterr().err


@pytest.mark.slow  # 3 s on 2 cores: a sweep of 4 runs
def test_a_sweep_over_seeds_is_compared_as_one_row_per_combination(made, tmp_path, capsys):
    root, paths = made
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(yaml.safe_load(Path(paths[0]).read_text())))
    runs, table = str(root / "runs"), tmp_path / "t.parquet"  # seeds 0-2 of lr 0.1 are made already
    assert (
        main(
            [
                "sweep",
                str(scenario),
                "--grid",
                "strategy.lr=0.1,0.05",
                "--seeds",
                "3",
                "--runs",
                runs,
                "--out",
                str(table),
            ]
        )
        == 0
    )
    swept = pd.read_parquet(table)
    assert list(swept["grid"]) == [f"strategy.lr={lr}, seed={s}" for lr in (0.1, 0.05) for s in SEEDS]
    assert "6 combinations: 3 made, 3 reused" in capsys.readouterr().out
    assert main(["compare", str(table), "--runs", runs, "--out", str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    assert "asgd (strategy.lr=0.1)" in printed and "0 runs made, 6 reused" in printed
    written = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    expected = swept.groupby("strategy.lr", sort=False)["final_eval_loss"].agg(["mean", "std"])
    assert written["final_loss"].tolist() == pytest.approx(expected["mean"].tolist())
    assert written["final_loss_sd"].tolist() == pytest.approx(expected["std"].tolist())


def test_a_band_is_the_mean_and_range_of_the_seeds_curves_where_all_have_one():
    class Run:
        def __init__(self, xs, losses):
            self.metrics = pd.DataFrame({"updates": xs, "eval_loss": losses})

    runs = [
        Run([0, 10, 20], [3.0, 2.0, 1.0]),
        Run([0, 5, 15], [2.0, 1.0, np.nan]),
    ]  # the second ends at 5 (then NaN)
    grid, mean, low, high = band(runs, "updates")
    assert grid.tolist() == [0, 5]
    curves = np.array([np.interp(grid, [0, 10, 20], [3.0, 2.0, 1.0]), np.interp(grid, [0, 5], [2.0, 1.0])])
    assert (
        mean.tolist() == pytest.approx(curves.mean(axis=0))
        and low.tolist() == [2.0, 1.0]
        and high.tolist() == [3.0, 2.5]
    )


def test_the_plots_draw_a_group_as_its_mean_in_a_band_and_say_so(made, tmp_path, monkeypatch):
    root, paths = made
    shown = []
    monkeypatch.setattr(
        "fred.tools.figure_common._save", lambda fig, out, stem: shown.append((stem, fig)) or []
    )
    compare(paths, tmp_path / "cmp", root / "runs", target_loss=2.2, seeds=SEEDS)
    figures = dict(shown)
    for stem in ("loss_vs_time", "loss_vs_updates", "loss_vs_examples"):
        ax = figures[stem].axes[0]
        legend = [text.get_text() for text in ax.get_legend().get_texts()]
        assert legend == [
            "asgd (asgd, 4 workers): mean of 3 seeds",
            "ssgd (ssgd, 4 workers): mean of 3 seeds",
            "band: least to greatest of the seeds",
            "target loss 2.2",
        ]
        assert len(ax.collections) == 3  # a band per group, and the legend's grey one
        assert ax.get_xlabel() and ax.get_ylabel() == "eval loss"
    panels = [ax for ax in figures["staleness"].axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [
        "asgd (asgd, 4 workers), 3 seeds",
        "ssgd (ssgd, 4 workers), 3 seeds",
    ]
    assert panels[0].get_ylabel() == "gradients applied, mean per seed"
