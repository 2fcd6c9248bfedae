"""``fred compare``: run what is not yet run, then one table and side-by-side plots."""

from __future__ import annotations

import contextlib
import math
import os
import re
import textwrap
from pathlib import Path
from typing import Callable, ContextManager, Sequence

import numpy as np
import pandas as pd

from fred.runs.analysis import SUMMARY_FIELDS_COMPARED, summary_row, with_summary_fields
from fred.runs.api import default_run_dir, finished_run, load_run, run
from fred.runs.paths import output_dir, runs_folder, write_whole
from fred.runs.runner import RunResult
from fred.scenario.errors import Refusal
from fred.scenario.loading import load_scenario
from fred.scenario.schema import Scenario
from fred.tools.examples_curves import loss_vs_examples
from fred.tools.formats import byte_unit, bytes_, plus_minus, seconds
from fred.tools.plots import loss_curves, staleness_histograms
from fred.tools.seeds import SeedGroup, aggregated, by_seed, mean_sd, seed_table
from fred.tools.seeds import flat as scenario_fields

Watch = Callable[[Scenario], ContextManager[Callable[[float, int, float], None] | None]]


def gather(
    items: list[str],
    runs_root: Path,
    watch: Watch | None = None,
    sets: list[str] | None = None,
    seeds: list[int] | None = None,
) -> tuple[list[RunResult], int]:
    """Load run directories and the runs of sweep tables (``.parquet``, from ``fred sweep``); run
    scenario files, with the overrides ``sets`` (``PATH=VALUE``), once with each of ``seeds``
    if given, unless a finished run of the same resolved scenario exists.

    ``watch(scenario)`` gives each run made a progress callback (``fred run``'s), for the
    length of the run. Returns the results in order and how many had to be run.
    """
    _refuse_repeated_items(items)  # before running any: a.yaml given twice would run it first
    _refuse_sets_on_runs(items, sets, seeds)
    results, origins, ran = [], [], 0
    for item in items:
        path = Path(item)
        if _is_finished(path):
            loaded = [load_run(path)] if path.is_dir() else sweep_runs(path)
        else:
            loaded = []
            for seed in seeds or [None]:
                scenario = load_scenario(path, sets, seed)
                done = finished_run(scenario, runs_root)
                if done is None:
                    with watch(scenario) if watch is not None else contextlib.nullcontext() as progress:
                        done = run(scenario, out=default_run_dir(scenario, runs_root), progress=progress)
                    ran += 1
                loaded.append(done)
        results += [_comparable(result) for result in loaded]
        origins += [item] * len(loaded)
    _refuse_repeated_runs(results, origins)
    _tell_apart(results)
    return results, ran


def _is_finished(path: Path) -> bool:
    """Whether an item is runs already made (a run directory, a sweep's table), read and never run."""
    return path.is_dir() or path.suffix == ".parquet"


def scenario_files(items: Sequence[str]) -> list[str]:
    """The items :func:`gather` runs (unless a finished run of them exists): the scenario files."""
    return [item for item in items if not _is_finished(Path(item))]


def _refuse_sets_on_runs(items: list[str], sets: list[str] | None, seeds: list[int] | None = None) -> None:
    """A finished run's scenario is the one it ran: overrides cannot apply to it, and comparing it
    unchanged beside overridden scenarios would compare what was not asked for."""
    finished = [item for item in items if _is_finished(Path(item))]
    for flag, given in (("--set", sets), ("--seeds", seeds)):
        if given and finished:
            raise Refusal(
                f"{flag} applies to scenario files, and {finished[0]} is a finished run (or a sweep's runs): "
                f"give its scenario.yaml instead, or compare without {flag}"
            )
    seeded = [item for item in sets or [] if item.partition("=")[0].strip() == "seed"]
    if seeds and seeded:
        raise Refusal(
            f"--set {seeded[0]} and --seeds both choose the seed: give the seeds with --seeds alone"
        )


def _comparable(result: RunResult) -> RunResult:
    """The run, if its summary has what the table and the figures read."""
    return with_summary_fields(result, SUMMARY_FIELDS_COMPARED, "compare")


def _refuse_repeated_items(items: list[str]) -> None:
    """Two rows of one run would be told apart by nothing (``s (s)`` twice): refuse it, named."""
    first: dict[Path, str] = {}
    for item in items:
        where = Path(item).resolve()
        if where in first:
            raise Refusal(f"{item} is given twice (as {first[where]} too); give each run once")
        first[where] = item


def _refuse_repeated_runs(results: list[RunResult], origins: list[str]) -> None:
    """The same run reached from two items: a scenario and its run directory, a sweep and one of its runs."""
    first: dict[Path, str] = {}
    for result, origin in zip(results, origins):
        where = result.path.resolve() if result.path is not None else None
        if where in first:
            raise Refusal(f"{first[where]} and {origin} are the same run, {result.path}; give it once")
        if where is not None:
            first[where] = origin


def _tell_apart(results: list[RunResult]) -> None:
    """Runs that would share a name in the table and the legends are named by what differs
    between their scenarios (``quickstart (seed=1)``), or by their directories if nothing does."""
    _name_apart(results, [scenario_fields(r.scenario.resolved()) for r in results])


def _name_apart(items: Sequence[RunResult | SeedGroup], all_flats: list[dict[str, object]]) -> None:
    """``_tell_apart`` for runs or groups of runs, ``all_flats`` their scenarios as ``{"a.b": value}``."""
    by_title: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_title.setdefault(item.title, []).append(i)
    for title, places in by_title.items():
        if len(places) < 2:
            continue
        same = [items[i] for i in places]
        flats = [all_flats[i] for i in places]
        # Fields every run has (one strategy's own hyper-parameters, absent from another's, are
        # told apart by strategy.name), in the scenarios' order with the strategy's name first.
        fields = [
            k for k in dict.fromkeys(k for flat in flats for k in flat) if all(k in flat for flat in flats)
        ]
        fields.sort(key=lambda k: k != "strategy.name")
        differ = [k for k in fields if len({repr(flat[k]) for flat in flats}) > 1]
        shown = [
            ", ".join(f"{k}={flat.get(k)}" for k in differ[:3]) + (", ..." if len(differ) > 3 else "")
            for flat in flats
        ]
        for result, said, where in zip(same, shown, _where_needed(same, shown)):
            result.label = f"{title} ({', '.join(part for part in (said, where) if part)})"


def _where_needed(same: Sequence[RunResult | SeedGroup], shown: list[str]) -> list[str]:
    """For each run whose scenario says what another's says too, the end of its directory's path
    that tells them apart (``a/x`` and ``b/x``, where the names alone were ``x`` twice); else ''."""
    where = [""] * len(same)
    for said in set(shown):
        tied = [i for i, other in enumerate(shown) if other == said]
        if len(tied) > 1:
            for i, tail in zip(tied, _distinct_tails([same[i].path for i in tied])):
                where[i] = tail
    return where


def _distinct_tails(paths: list[Path | None]) -> list[str]:
    """The fewest trailing parts of each path (the same number for all) that tell them apart."""
    parts = [Path(os.path.abspath(p)).parts if p is not None else ("?",) for p in paths]
    for count in range(1, max(map(len, parts)) + 1):
        tails = [str(Path(*p[-count:])) for p in parts]
        if len(set(tails)) == len(tails):
            return tails
    return tails  # only paths that are the same (refused before), or unknown


def sweep_runs(table_path: str | Path) -> list[RunResult]:
    """The runs a ``fred sweep`` table lists, each named by its scenario and grid combination."""
    table_path = Path(table_path)
    try:
        table = pd.read_parquet(table_path)
    except FileNotFoundError:
        raise Refusal(f"{table_path}: no such sweep table") from None
    except Exception as err:  # pyarrow's errors for a file that is not parquet
        raise Refusal(
            f"{table_path} is not a parquet table ({type(err).__name__}); give a table written by fred sweep"
        ) from None
    if "run_dir" not in table.columns:
        raise Refusal(f"{table_path} has no run_dir column, so it is not a fred sweep table")
    runs = []
    for row in table.itertuples(index=False):
        run_dir = _run_dir(Path(row.run_dir), table_path)
        result = _comparable(load_run(run_dir))
        grid = getattr(row, "grid", None)
        result.label = f"{result.summary['name']} ({grid})" if grid else run_dir.name
        runs.append(result)
    return runs


def _run_dir(recorded: Path, table_path: Path) -> Path:
    """A table's run directory as written (relative to where the sweep ran), else next to the table."""
    for candidate in (recorded, table_path.parent / recorded):
        if candidate.is_dir():
            return candidate
    raise Refusal(
        f"{table_path} lists {recorded}, which is not here: run the sweep again, or compare from where it ran"
    )


def compare(
    items: list[str],
    out: Path,
    runs_root: Path,
    target_loss: float | None = None,
    watch: Watch | None = None,
    sets: list[str] | None = None,
    seeds: list[int] | None = None,
    per_seed: bool = False,
) -> tuple[pd.DataFrame, int]:
    """Write ``comparison.csv`` and the plots under ``out``; returns the table and the runs made
    (``sets``: overrides of every scenario file's fields, as ``fred run --set``; ``seeds``:
    run each scenario file with each of these seeds).

    Runs that differ only by their seed are one row, their numbers the mean and standard
    deviation over the seeds (see :mod:`fred.tools.seeds`), and one curve in a band; with
    ``per_seed``, or when no two runs differ only by their seed, a row and a curve per run.
    """
    if target_loss is not None and math.isnan(target_loss):  # every run would be "never reached"
        raise Refusal("--target-loss nan: give the eval loss to reach, a number such as 0.3")
    runs_root = runs_folder(runs_root)
    out = output_dir(out)  # before running anything: a refused path would lose the runs' summary
    results, ran = gather(items, runs_root, watch, sets, seeds)
    table, shown = comparison_table(results, target_loss, per_seed)
    write_whole(
        out / "comparison.csv", lambda partial: table.to_csv(partial, index=False)
    )  # an earlier table or this one, whole
    loss_curves(shown, out, target_loss)  # with SVGs: line plots of a few kB, unlike a timeline's
    loss_vs_examples(
        shown, out, target_loss
    )  # one x axis for updates that are not alike (an SSGD round, an ASGD gradient)
    staleness_histograms(shown, out)
    return table, ran


def comparison_table(
    results: list[RunResult],
    target_loss: float | None = None,
    per_seed: bool = False,
) -> tuple[pd.DataFrame, Sequence[RunResult | SeedGroup]]:
    """The table of ``results`` (a row per run, or per group of runs that differ only by their
    seed unless ``per_seed``), and what its rows are, for the plots."""
    groups = [] if per_seed else by_seed(results)
    if aggregated(groups):
        _name_apart(groups, [group.flat for group in groups])
        table, shown = seed_table(groups, target_loss), groups
    else:
        table, shown = pd.DataFrame([summary_row(r, target_loss) for r in results]), results
    return _with_utilisation(_with_sites(_with_settings(table, shown), shown), shown), shown


SETTINGS = "strategy_settings"  # the column of what tells apart runs of one strategy (arsgd: top-k, PowerSGD)
BETWEEN_SITES = "bytes_between_sites"  # the summary's bytes on wide-area links, in runs with network.sites


def _with_settings(table: pd.DataFrame, shown: Sequence[RunResult | SeedGroup]) -> pd.DataFrame:
    """``table`` with :data:`SETTINGS` where rows share a strategy's name but not its settings,
    each row's told in short (``topk ratio=0.01``); each run or group keeps them as
    ``strategy_settings`` too, for the plots' labels."""
    settings = strategy_settings(shown)
    for item, said in zip(shown, settings):
        item.strategy_settings = said
    if not any(settings):
        return table
    return table.assign(**{SETTINGS: settings})[[*table.columns[:2], SETTINGS, *table.columns[2:]]]


def strategy_settings(items: Sequence[RunResult | SeedGroup]) -> list[str]:
    """For each run (or group of seeds) whose strategy another shares by name, the strategy's
    fields in which they differ, as ``topk ratio=0.01`` (a ``kind`` by its value alone); '' for
    the rest, and where the run's title says those fields already (``lr1 (strategy.lr=0.1)``)."""
    flats = [_strategy_fields(item) for item in items]
    settings = [""] * len(items)
    by_name: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_name.setdefault(str(item.summary["strategy"]), []).append(i)
    for places in by_name.values():
        keys = list(dict.fromkeys(k for i in places for k in flats[i]))
        differ = [k for k in keys if len({repr(flats[i].get(k)) for i in places}) > 1]
        for i in places:
            mine = [k for k in differ if k in flats[i]]
            if not all(f"{k}=" in items[i].title for k in mine):
                settings[i] = " ".join(_setting(k, flats[i][k]) for k in mine)
    return settings


def _strategy_fields(item: RunResult | SeedGroup) -> dict[str, object]:
    """The strategy's resolved fields but its name, ``{"strategy.lr": 0.1, ...}``; unset (None) ones out."""
    fields = item.flat if isinstance(item, SeedGroup) else scenario_fields(item.scenario.resolved())
    return {
        k: v
        for k, v in fields.items()
        if k.startswith("strategy.") and k != "strategy.name" and v is not None
    }


def _setting(key: str, value: object) -> str:
    leaf = key.rsplit(".", 1)[-1]
    return f"{value}" if leaf == "kind" else f"{leaf}={value}"


def _with_sites(table: pd.DataFrame, shown: Sequence[RunResult | SeedGroup]) -> pd.DataFrame:
    """``table`` with :data:`BETWEEN_SITES` (mean, ``_sd`` and ``_n`` over a group's seeds) where
    any run has sites; NaN for a run without."""
    per_item = [
        [float(run.summary.get(BETWEEN_SITES, math.nan)) for run in getattr(item, "runs", [item])]
        for item in shown
    ]
    if all(math.isnan(v) for values in per_item for v in values):
        return table
    if "n_seeds" not in table.columns:
        return table.assign(**{BETWEEN_SITES: [values[0] for values in per_item]})
    stats = [mean_sd(np.array(values)) for values in per_item]
    means, sds, counts = (list(column) for column in zip(*stats))
    return table.assign(**{BETWEEN_SITES: means, f"{BETWEEN_SITES}_sd": sds, f"{BETWEEN_SITES}_n": counts})


UTILISATION = "compute_utilisation"  # the summary's mean share of the run's time its workers computed


def _with_utilisation(table: pd.DataFrame, shown: Sequence[RunResult | SeedGroup]) -> pd.DataFrame:
    """The ``compute_utilisation`` column: each run's, or the mean over a group's seeds (NaN for a
    run recorded without it)."""
    values = [[run.summary.get(UTILISATION) for run in getattr(item, "runs", [item])] for item in shown]
    return table.assign(**{UTILISATION: [mean_sd(np.array(v, dtype=float))[0] for v in values]})


def _utilisation_column(table: pd.DataFrame) -> list[Column]:
    if UTILISATION not in table:  # a comparison.csv of an older fred
        return []
    return [("compute\nutil", [_or_dash(x, lambda v: f"{v:.1%}") for x in table[UTILISATION]], True)]


def readable_table(table: pd.DataFrame, width: int = 80) -> str:
    """``compare``'s table for people: readable units, "never" for a target loss not reached,
    "-" for what a run has not got (losses, in a timing-only run), headers aligned with their
    columns, and as many blocks of columns as it takes to fit ``width`` characters (each block
    starts with the run's name). comparison.csv keeps the raw numbers."""
    columns = _readable_columns(table)
    blocks, block = [], [columns[0]]
    for column in columns[1:]:
        if _width(block + [column]) > width and len(block) > 1:
            blocks.append(block)
            block = [columns[0]]
        block.append(column)
    blocks.append(block)
    lines = "\n\n".join("\n".join(_rows(block)) for block in blocks)
    return (
        lines
        + "\n\n"
        + "\n".join(textwrap.fill(note, width, subsequent_indent="  ") for note in _notes(columns))
    )


Column = tuple[str, list[str], bool]  # header (a line break where it is two words deep), cells, right-aligned


def _readable_columns(table: pd.DataFrame) -> list[Column]:
    if "n_seeds" in table.columns:
        return _seed_columns(table)
    target = table["target_loss"].iloc[0] if len(table) else math.nan
    columns = [
        ("run", table["run"].astype(str).tolist(), False),
        ("strategy", _strategies(table), False),
        ("workers", [f"{w}" for w in table["workers"]], True),
        ("status", table["status"].astype(str).tolist(), False),
        ("final\nloss", [_or_dash(x, lambda v: f"{v:.4g}") for x in table["final_loss"]], True),
        ("accuracy", [_or_dash(x, lambda v: f"{v:.1%}") for x in table["final_accuracy"]], True),
        ("sim\ntime", [seconds(x) for x in table["sim_time_s"]], True),
        ("updates", [f"{int(x):,}" for x in table["updates"]], True),
    ]
    if pd.notna(target):
        # only a timing-only run completes without a final loss; it had nothing to reach
        losses = (table["final_loss"].notna() | (table["status"] != "completed")).tolist()
        columns += [
            (f"time to\nloss {target:g}", _reached(table["time_to_target_s"], losses, seconds), True),
            (
                f"updates to\nloss {target:g}",
                _reached(table["updates_to_target"], losses, lambda v: f"{int(v):,}"),
                True,
            ),
        ]
    staleness = zip(table["staleness_mean"], table["staleness_p50"], table["staleness_p99"])
    between = []
    if BETWEEN_SITES in table:
        between = [("between\nsites", [_or_dash(x, bytes_) for x in table[BETWEEN_SITES]], True)]
    return columns + [
        ("sent", [bytes_(x) for x in table["bytes_sent"]], True),
        *between,
        *_utilisation_column(table),
        (
            "staleness\nmean/p50/p99",
            ["-" if pd.isna(m) else f"{m:.3g} / {p:g} / {q:g}" for m, p, q in staleness],
            True,
        ),
    ]


def _strategies(table: pd.DataFrame) -> list[str]:
    """The strategy column as printed: the name, and the settings that tell runs of it apart."""
    settings = table[SETTINGS] if SETTINGS in table else [""] * len(table)
    return [f"{name} ({said})" if said else str(name) for name, said in zip(table["strategy"], settings)]


def _seed_columns(table: pd.DataFrame) -> list[Column]:
    """The columns of a table of runs that differ only by seed, one row a group: each number as
    mean ± sd over the group's seeds, as the run's own number is shown in a table of runs."""
    target = table["target_loss"].iloc[0] if len(table) else math.nan
    losses = ((table["final_loss_n"] > 0) | (table["status"] != "completed")).tolist()
    percent = lambda v: f"{v:.1%}"  # noqa: E731
    count = lambda v: f"{int(v):,}"  # noqa: E731
    columns = [
        ("run", table["run"].astype(str).tolist(), False),
        ("strategy", _strategies(table), False),
        ("workers", [f"{w}" for w in table["workers"]], True),
        ("seeds", [f"{n}" for n in table["n_seeds"]], True),
        ("status", table["status"].astype(str).tolist(), False),
        ("final\nloss", _spread(table, "final_loss", lambda v: f"{v:.4g}"), True),
        ("accuracy", _spread(table, "final_accuracy", percent, scale=0.01, unit="%"), True),
        ("sim\ntime", _spread(table, "sim_time_s", seconds, unit=" s"), True),
        ("updates", _spread(table, "updates", count), True),
    ]
    if pd.notna(target):
        columns += [
            (
                f"time to\nloss {target:g}",
                _spread(table, "time_to_target_s", seconds, unit=" s", missing=losses),
                True,
            ),
            (
                f"updates to\nloss {target:g}",
                _spread(table, "updates_to_target", count, missing=losses),
                True,
            ),
        ]
    sent = _bytes_spread(table, "bytes_sent")
    staleness = [
        "-"
        if pd.isna(row["staleness_mean"])
        else " / ".join(
            plus_minus(row[c], row[f"{c}_sd"], shown)
            for c, shown in (
                ("staleness_mean", lambda v: f"{v:.3g}"),
                ("staleness_p50", lambda v: f"{v:g}"),
                ("staleness_p99", lambda v: f"{v:g}"),
            )
        )
        for _, row in table.iterrows()
    ]
    between = []
    if BETWEEN_SITES in table:
        between = [("between\nsites", _bytes_spread(table, BETWEEN_SITES), True)]
    return columns + [
        ("sent", sent, True),
        *between,
        *_utilisation_column(table),
        ("staleness\nmean/p50/p99", staleness, True),
    ]


def _bytes_spread(table: pd.DataFrame, column: str) -> list[str]:
    """Each group's bytes as mean ± sd in one unit (``1.2 ± 0.1 GB``), "-" where none."""
    return [
        plus_minus(m, sd, bytes_, byte_unit(m)[1], f" {byte_unit(m)[0]}") if pd.notna(m) else "-"
        for m, sd in zip(table[column], table[f"{column}_sd"])
    ]


def _spread(
    table: pd.DataFrame,
    column: str,
    alone: Callable[[float], str],
    scale: float = 1.0,
    unit: str = "",
    missing: list[bool] | None = None,
) -> list[str]:
    """Each group's ``column`` as mean ± sd, with ``(k of n)`` where only k of its n seeds have
    it; where none has it, "-", or "never" where ``missing`` says the seeds had losses."""
    cells = []
    for i, (mean, sd, have, seeds) in enumerate(
        zip(table[column], table[f"{column}_sd"], table[f"{column}_n"], table["n_seeds"])
    ):
        if have == 0:
            cells.append("never" if missing is not None and missing[i] else "-")
            continue
        text = plus_minus(mean, sd, alone, scale, unit)
        cells.append(text if have == seeds else f"{text} ({have} of {seeds})")
    return cells


def _or_dash(value: float, shown: Callable[[float], str]) -> str:
    return "-" if pd.isna(value) else shown(value)


def _reached(values: pd.Series, had_losses: list[bool], shown: Callable[[float], str]) -> list[str]:
    """A time or count to the target loss; "never" for a run whose losses did not reach it."""
    return [shown(x) if pd.notna(x) else ("never" if had else "-") for x, had in zip(values, had_losses)]


def _column_width(header: str, cells: list[str]) -> int:
    return max([*map(len, header.split("\n")), *map(len, cells)])


def _width(block: list[Column]) -> int:
    return sum(_column_width(header, cells) for header, cells, _ in block) + 2 * (len(block) - 1)


def _rows(block: list[Column]) -> list[str]:
    """The header, on two lines where it is two words deep (a narrower column), then one line per
    run; each column as wide as its widest cell, numbers and their headers right-aligned."""
    widths = [_column_width(header, cells) for header, cells, _ in block]

    def line(texts: Sequence[str]) -> str:
        return "  ".join(
            t.rjust(w) if right else t.ljust(w) for t, w, (_, _, right) in zip(texts, widths, block)
        ).rstrip()

    headers = [header.split("\n") for header, _, _ in block]
    deep = max(map(len, headers))
    header_lines = [line([([""] * (deep - len(h)) + h)[i] for h in headers]) for i in range(deep)]
    return header_lines + [line(row) for row in zip(*(cells for _, cells, _ in block))]


def _notes(columns: list[Column]) -> list[str]:
    """What the table's words and units mean, said once under it, where it uses them."""
    cells = {cell for _, column, _ in columns for cell in column}
    notes = [
        "updates: model updates as each strategy makes them (an SSGD round of n workers' gradients is one, "
        "and so "
        "is one ASGD gradient); the plot loss_vs_examples compares runs by the examples they computed "
        "instead",
        "sent: bytes on the network, in decimal units (1 MB = 10^6 bytes, 1 GB = 10^9)",
    ]
    if any(header == "compute\nutil" for header, _, _ in columns):
        notes.append("compute util: the share of the run's simulated time its workers spent computing (mean)")
    if any(header == "between\nsites" for header, _, _ in columns):
        notes.append(
            "between sites: the part of sent that crossed the wide-area links between sites (network.sites)"
        )
    if any(header == "seeds" for header, _, _ in columns):
        notes.append(
            "seeds: runs that differ only by their seed, as one row; a ± b: the mean over the seeds ± their "
            "standard deviation (sample, n - 1); a number alone is the same for every seed"
        )
    if any(re.search(r"\(\d+ of \d+\)$", cell) for cell in cells):
        notes.append(
            "(k of n): over the k seeds that have the number; the others have none (diverged, or "
            "timing-only) "
            "or never reached the target loss"
        )
    if "never" in cells:
        notes.append("never: the run's eval loss did not reach the target loss")
    if "-" in cells:
        notes.append("-: none (a timing-only run has no losses, a diverged one no final loss)")
    return notes
