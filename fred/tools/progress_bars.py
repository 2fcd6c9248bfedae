"""Progress bars for the commands that run: one of simulated time or updates for a run, one of
``(done, total)`` for a replay; rich draws them on a terminal, and nothing is drawn otherwise."""

from __future__ import annotations

from typing import Callable


class _progress:
    """A rich progress bar on a terminal; nothing at all otherwise."""

    def __init__(self, scenario, show: bool):
        self.scenario, self.show = scenario, show

    def __enter__(self) -> Callable[[float, int, float], None] | None:
        if not self.show:
            return None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        stop = self.scenario.stop
        self.total = stop.max_updates if stop.max_updates is not None else stop.max_sim_time_s
        self.by_updates = stop.max_updates is not None
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            transient=True,
        )
        self.task = self.bar.add_task(
            self.scenario.name, total=self.total, info="loading data, building the model"
        )
        self.bar.start()
        return self.update

    def update(self, sim_time_s: float, updates: int, eval_loss: float) -> None:
        done = updates if self.by_updates else sim_time_s
        info = f"t={sim_time_s:.3f}s  updates={updates}  eval_loss={eval_loss:.4f}"
        if updates == 0:  # JAX compiles each function at its first call: seconds, before the first update
            info += "  (compiling the first steps)"
        self.bar.update(self.task, completed=min(done, self.total), info=info)

    def __exit__(self, *exc) -> None:
        if self.show:
            self.bar.stop()


class _count_bar:
    """A rich bar of ``(done, total)`` on a terminal; nothing at all otherwise."""

    def __init__(self, description: str, show: bool):
        self.description, self.show = description, show

    def __enter__(self) -> Callable[[int, int], None] | None:
        if not self.show:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=True,
        )
        self.task = self.bar.add_task(self.description, total=None)
        self.bar.start()
        return lambda done, total: self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.show:
            self.bar.stop()
