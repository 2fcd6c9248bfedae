"""What every figure of :mod:`fred.tools.plots` and :mod:`fred.tools.timeline_plot` shares: how it
is written (PNG, and SVG on request, each whole or not at all) and how a run is named in it."""

from __future__ import annotations

from pathlib import Path

from fred.runs.paths import output_dir, write_whole


def _save(fig, out: Path, stem: str) -> list[Path]:
    """The figure as PNG, whole or not at all. (Made without pyplot, the figure is in no
    registry that a notebook would have to close.)"""
    return [_written(fig, out / f"{stem}.png")]


def _saved(fig, out: Path, stem: str, svg: bool) -> list[Path]:
    """The figure as PNG (:func:`_save`), and as SVG too with ``svg``."""
    return _save(fig, out, stem) + ([_written(fig, out / f"{stem}.svg")] if svg else [])


def _written(fig, path: Path) -> Path:
    output_dir(path.parent)
    metadata = {"Date": None} if path.suffix == ".svg" else None
    return write_whole(path, lambda partial: fig.savefig(partial, bbox_inches="tight", metadata=metadata))


def _label(result) -> str:
    """A run's name in a legend or a title, with its strategy (and the settings that tell it from
    another run of that strategy, which fred compare sets) and its workers."""
    s, title = result.summary, result.title
    said = []  # not twice what a compare label already says
    if f"strategy.name={s['strategy']}" not in title:
        settings = getattr(result, "strategy_settings", "")
        said.append(f"{s['strategy']} {settings}" if settings else str(s["strategy"]))
    if "cluster.workers=" not in title:
        said.append(f"{s['workers']} workers")
    return f"{title} ({', '.join(said)})" if said else title
