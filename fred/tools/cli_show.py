"""``fred list``, ``fred plot`` and ``fred trace``: the commands that show what is there (the
registered strategies, a finished run) and run nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fred.runs.paths import output_file  # os and pathlib only


def plot_command(args: argparse.Namespace) -> int:
    from fred.runs.analysis import SUMMARY_FIELDS_PLOTTED, with_summary_fields
    from fred.runs.api import load_run
    from fred.tools.plots import (
        loss_curves,
        staleness_histograms,
        timeline,
        timeline_entities,
        timeline_window,
    )
    from fred.tools.timeline_rows import check_workers, parse_workers

    result = with_summary_fields(
        load_run(args.run_dir), SUMMARY_FIELDS_PLOTTED, "plot"
    )  # before any figure is written
    window = timeline_window(
        result.events, args.start_s, args.end_s, ("--from", "--to")
    )  # so is a bad window
    workers = parse_workers(args.workers) if args.workers is not None else None
    if workers is not None:  # and workers the run has not got
        check_workers(timeline_entities(result.events), workers)
    out = Path(args.out) if args.out else Path(args.run_dir) / "plots"
    args.writing = (
        f"{out} may hold only some of the figures (each is written whole)"  # for the message after a Ctrl-C
    )
    losses = loss_curves([result], out, svg=args.svg)
    if not losses:
        print("note: no loss curves: the run has no evaluation losses (a timing-only run)", file=sys.stderr)
    paths = losses + staleness_histograms([result], out, args.svg)
    paths += timeline(result, out, *window, workers=workers, svg=args.svg)
    print("\n".join(str(p) for p in paths))
    return 0


def trace_command(args: argparse.Namespace) -> int:
    from fred.runs.api import load_run
    from fred.tools.formats import count
    from fred.tools.trace import write_trace

    result = load_run(args.run_dir)
    output = (
        output_file(args.output, "trace.json", (args.run_dir,))
        if args.output
        else Path(args.run_dir) / "trace.json"
    )
    args.writing = f"{output} is written whole or not at all"  # for the message after a Ctrl-C
    path = write_trace(result.events, output)
    linked = int((result.events["peer"].fillna("") != "").sum())
    twice = (
        (
            f", of which {count(linked, 'transfer')} {'is' if linked == 1 else 'are'} drawn twice (on the "
            "sender's track "
            "and the link's)"
        )
        if linked
        else ", no transfers among them"
    )
    print(
        f"{path}: {count(len(result.events), 'event')}{twice}; open it in https://ui.perfetto.dev or "
        "chrome://tracing"
    )
    return 0


def list_command(args: argparse.Namespace) -> int:
    from fred.scenario import registry

    strategies = registry.all_strategies()
    width = max(len(s.name) for s in strategies)  # one column, however long a name
    for strategy in strategies:
        plugin = (
            f"  [{strategy.source}]" if strategy.source.split(".")[0] not in registry.PLUGIN_PACKAGES else ""
        )
        print(f"{strategy.name:<{width}}  {strategy.summary}{plugin}")
    for problem in registry.problems():  # plug-ins left out; the others work
        print(f"fred list: {problem}", file=sys.stderr)
    return 0
