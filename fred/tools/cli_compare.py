"""``fred compare`` and ``fred sweep``: the commands that make (or reuse) several runs and gather
them in one table."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from fred.runs.paths import output_file, write_whole  # os and pathlib only
from fred.tools.cli_run import refuse_user_code
from fred.tools.progress_bars import _progress


def compare_command(args: argparse.Namespace) -> int:
    from fred.tools.compare import compare, readable_table
    from fred.tools.formats import count
    from fred.tools.seeds import parse_seeds

    show = sys.stderr.isatty()  # a bar for each scenario that has to be run
    seeds = parse_seeds(args.seeds) if args.seeds is not None else None
    if args.no_user_code:  # every scenario file, as each of its runs would be, before any runs
        from fred.scenario.loading import load_scenario
        from fred.tools.compare import scenario_files

        for item in scenario_files(args.items):
            refuse_user_code([load_scenario(item, args.sets, seed) for seed in seeds or [None]], item)
    table, ran = compare(
        args.items,
        Path(args.out),
        Path(args.runs),
        args.target_loss,
        lambda s: _progress(s, show),
        args.sets,
        seeds,
        args.per_seed,
    )
    print(readable_table(table, shutil.get_terminal_size().columns))
    runs = int(table["n_seeds"].sum()) if "n_seeds" in table.columns else len(table)
    print(f"\n{count(ran, 'run')} made, {runs - ran:,} reused; table and plots in {args.out}/")
    return 0


def sweep_command(args: argparse.Namespace) -> int:
    from fred.tools.compare import comparison_table, readable_table, sweep_runs
    from fred.tools.formats import count
    from fred.tools.seeds import parse_seeds
    from fred.tools.sweep import parse_grid, sweep, sweep_table_name, with_seeds

    grid = parse_grid(args.grid)
    if args.seeds is not None:
        grid = with_seeds(grid, parse_seeds(args.seeds), args.sets)
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # a line per finished run
    if args.no_user_code:
        from fred.scenario.loading import apply_overrides, read_yaml
        from fred.tools.sweep import expand

        base = apply_overrides(read_yaml(args.scenario), list(args.sets))
        combos = expand(base, grid, args.scenario, Path(args.scenario).parent)
        refuse_user_code([scenario for _, scenario in combos], args.scenario)
    out = (
        output_file(args.out, "sweep.parquet", (args.scenario,)) if args.out else None
    )  # a bad --out: at once
    table, ran = sweep(args.scenario, grid, Path(args.runs), args.jobs, args.executor, args.sets, progress)
    if (
        out is None
    ):  # beside its runs, not in the working directory; the runs folder is checked and made by now
        out = output_file(
            Path(args.runs) / sweep_table_name(args.scenario), "sweep.parquet", (args.scenario,)
        )
    write_whole(
        out, lambda partial: table.to_parquet(partial, index=False)
    )  # a Ctrl-C now leaves the earlier table whole
    args.done = True  # the runs and the table are written: a Ctrl-C now only cuts the printing short
    readable, _ = comparison_table(
        sweep_runs(out), per_seed=args.per_seed
    )  # fred compare's table: seeds averaged
    print(readable_table(readable, shutil.get_terminal_size().columns))
    print(
        f"\n{count(len(table), 'combination')}: {ran:,} made, {len(table) - ran:,} reused; table in {out} "
        f"(fred compare {out} plots it)"
    )
    return 0
