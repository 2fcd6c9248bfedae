"""Run records: what a simulation saw, as tables, and the run directory that holds them.

The recorder subscribes to the simulation's tracer and update hooks and keeps
plain Python lists (cheap to append); tables are built once at the end. A run
directory is written under a temporary name and then put in place in one step, so a
crash never leaves a directory that looks complete (an earlier run there is swapped with
it where the system can, so that the directory is never missing either).
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import math
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from fred.numerics.models import Params
from fred.numerics.tape import write as write_tape
from fred.runs.exchange import UNSUPPORTED, exchange
from fred.runs.paths import RUN_FILES, check_out, full_disk, no_space
from fred.simulation.engine import Contribution

EVENT_DTYPES = {
    "start_s": "float64",
    "end_s": "float64",
    "entity": "string",
    "kind": "string",
    "bytes": "float64",
    "peer": "string",
}
UPDATE_DTYPES = {"sim_time_s": "float64", "update": "int64", "worker": "int64", "version_read": "int64",
                 "version_applied": "int64", "staleness": "int64", "cached": "bool"}  # fmt: skip
METRIC_DTYPES = {"sim_time_s": "float64", "updates": "int64", "eval_loss": "float64",
                 "eval_accuracy": "float64", "train_loss": "float64"}  # fmt: skip
EVENT_COLUMNS = list(EVENT_DTYPES)
UPDATE_COLUMNS = list(UPDATE_DTYPES)
METRIC_COLUMNS = list(METRIC_DTYPES)
FILES = [
    name for name in RUN_FILES if name != "tape.npz"
]  # what a complete run directory has (the tape is optional)


@dataclass
class Recorder:
    """Collects events, updates and metrics while a simulation runs."""

    events: dict[str, list] = field(default_factory=lambda: {c: [] for c in EVENT_COLUMNS})
    updates: dict[str, list] = field(default_factory=lambda: {c: [] for c in UPDATE_COLUMNS})
    metrics: dict[str, list] = field(default_factory=lambda: {c: [] for c in METRIC_COLUMNS})
    update_count: int = 0

    def on_event(
        self, kind: str, entity: str, start_s: float, end_s: float, nbytes: float, peer: str
    ) -> None:
        ev = self.events
        ev["peer"].append(peer)
        ev["start_s"].append(start_s)
        ev["end_s"].append(end_s)
        ev["entity"].append(entity)
        ev["kind"].append(kind)
        ev["bytes"].append(nbytes)

    def on_update(self, now_s: float, contributions: list[Contribution], version_applied: int) -> None:
        self.update_count += 1
        up, n = self.updates, len(contributions)
        if n < 8:  # few rows (an asynchronous update's one): appended one by one, cheaper than lists
            for worker, version_read, cached in contributions:
                up["cached"].append(cached)
                up["sim_time_s"].append(now_s)
                up["update"].append(self.update_count)
                up["worker"].append(worker)
                up["version_read"].append(version_read)
                up["version_applied"].append(version_applied)
                up["staleness"].append(version_applied - version_read)
            return
        workers, reads, cached = zip(*contributions)
        up["cached"].extend(cached)
        up["sim_time_s"].extend([now_s] * n)
        up["update"].extend([self.update_count] * n)
        up["worker"].extend(workers)
        up["version_read"].extend(reads)
        up["version_applied"].extend([version_applied] * n)
        up["staleness"].extend([version_applied - read for read in reads])

    def on_metric(self, now_s: float, eval_loss: float, eval_accuracy: float, train_loss: float) -> None:
        for column, value in zip(
            METRIC_COLUMNS, [now_s, self.update_count, eval_loss, eval_accuracy, train_loss]
        ):
            self.metrics[column].append(value)

    def tables(self, end_s: float = math.inf) -> dict[str, pd.DataFrame]:
        """The three tables, with stable dtypes even when empty; no event starting after ``end_s``.

        Some activities are recorded when they are booked, ahead of their time (a lost ring
        chunk, the wait for a busy link): those the run ended before are not in its records.
        """
        events = _frame(self.events, EVENT_DTYPES)
        late = events["start_s"].to_numpy() > end_s
        if late.any():
            events = events[~late].reset_index(drop=True)
        return {
            "events": events,
            "updates": _frame(self.updates, UPDATE_DTYPES),
            "metrics": _frame(self.metrics, METRIC_DTYPES),
        }


def _frame(columns: dict[str, list], dtypes: dict[str, str]) -> pd.DataFrame:
    # Each column made with its dtype from the list at once: a frame of lists converted
    # with astype afterwards costs twice as long (most of a short run's table time).
    return pd.DataFrame({name: _column(columns[name], dtype) for name, dtype in dtypes.items()})


def _column(values: list, dtype: str) -> Any:
    return pd.array(values, dtype=dtype) if dtype == "string" else np.array(values, dtype=dtype)


def params_sha256(params: Params) -> str:
    """SHA-256 over the leaves in sorted-name order, each as little-endian C-order bytes."""
    digest = hashlib.sha256()
    for name in sorted(params):
        leaf = np.ascontiguousarray(np.asarray(params[name]))
        digest.update(name.encode() + b"\0" + str(leaf.dtype).encode() + repr(leaf.shape).encode())
        digest.update(leaf.astype(leaf.dtype.newbyteorder("<"), copy=False).tobytes())
    return digest.hexdigest()


def write_run_dir(
    out: Path,
    scenario: dict[str, Any],
    summary: dict[str, Any],
    tables: dict[str, pd.DataFrame],
    params: Params,
    tape: tuple[dict[str, Any], dict[str, np.ndarray]] | None = None,
) -> Path:
    """Write every record file under a temporary name, then put it at ``out`` in one step."""
    out = Path(out)
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _drop_leftovers(out)
    tmp = _hidden(out, "partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        _write_files(tmp, scenario, summary, tables, params, tape)
        _replace_dir(tmp, out)
    except OSError as err:
        if full_disk(err) is None:
            raise
        raise no_space(
            err, out.parent, f"the run directory {out.name}", _needs_bytes(tables, params, tape)
        ) from None
    # Ctrl-C or a failed rename included: leave nothing behind (once swapped, tmp holds the run replaced)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _needs_bytes(
    tables: dict[str, pd.DataFrame], params: Params, tape: tuple[dict[str, Any], dict[str, np.ndarray]] | None
) -> float:
    """About what a run directory takes on disk: its tables as held in memory (Parquet's
    compression makes them smaller), its parameters and its tape's arrays as stored."""
    held = sum(float(table.memory_usage(index=False, deep=True).sum()) for table in tables.values())
    held += sum(np.asarray(leaf).nbytes for leaf in params.values())
    if tape is not None:
        held += sum(np.asarray(array).nbytes for array in tape[1].values())
    return held + 64 * 1024  # scenario.yaml, summary.json and the files' headers


def _write_files(
    tmp: Path,
    scenario: dict[str, Any],
    summary: dict[str, Any],
    tables: dict[str, pd.DataFrame],
    params: Params,
    tape: tuple[dict[str, Any], dict[str, np.ndarray]] | None,
) -> None:
    (tmp / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    for name, table in tables.items():
        table.to_parquet(tmp / f"{name}.parquet", index=False)
    np.savez(tmp / "params.npz", **{k: np.asarray(v) for k, v in sorted(params.items())})
    if tape is not None:
        write_tape(tmp / "tape.npz", *tape)
    # summary.json is written last: its presence marks the files before it as complete.
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def _replace_dir(new: Path, out: Path) -> None:
    """Put ``new`` at ``out`` and delete what was there.

    An earlier run is swapped with ``new`` in one step, so that ``out`` is never missing: with
    two renames, a reader (fred plot, a sweep's "is this run done" check) racing this write would
    find nothing there, or a "damaged" run, and a process killed between them would leave no run
    at ``out``. Where the system cannot swap, and where nothing is at ``out`` (a new
    run, or another writer's run moved aside just now), ``new`` is renamed in.
    """
    try:
        exchange(new, out)
    except OSError as err:
        if err.errno != errno.ENOENT and err.errno not in UNSUPPORTED:
            raise
        _rename_into_place(new, out)
    else:
        shutil.rmtree(new, ignore_errors=True)  # the earlier run, now at new's name


SWAP_ATTEMPTS = 10


def _rename_into_place(new: Path, out: Path) -> None:
    """Rename ``new`` to ``out``, moving what is there aside first and deleting it after.

    Two processes can write one run directory at once (two sweeps sharing a runs folder make
    the same content-addressed run): the other's run may appear at ``out`` between our two
    renames, which failed with "Directory not empty", or be moved away before ours moves it,
    which failed with "No such file". Each attempt moves aside what is there; the last
    writer's run is the one left, and no hidden copy stays behind.
    """
    for attempt in range(SWAP_ATTEMPTS):
        old: Path | None = _hidden(out, "old", attempt)
        try:
            os.replace(out, old)  # type: ignore[arg-type]
        except FileNotFoundError:  # nothing there, or another writer moved it aside just now
            old = None
        try:
            os.replace(new, out)
            return
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    raise OSError(errno.EBUSY, f"another process kept writing {out}; this run was not put there", str(out))


def _hidden(out: Path, kind: str, *more: int) -> Path:
    """A hidden copy of ``out`` this process works on (``partial``: being written, or the earlier
    run just swapped out; ``old``: an earlier run moved aside), named with the host and pid that own it."""
    return out.parent / "-".join(
        [f".{out.name}.{kind}", socket.gethostname(), str(os.getpid()), *map(str, more)]
    )


def _drop_leftovers(out: Path) -> None:
    """Delete the hidden copies of ``out`` that a fred process killed on this machine left
    (SIGKILL, a second Ctrl-C in a sweep): nothing else ever removed them. A copy is kept
    while its process lives, and one from another host (a shared disk) is not touched."""
    if os.name != "posix":  # os.kill(pid, 0) asks whether a process lives only there
        return
    for kind in ("partial", "old"):
        prefix = f".{out.name}.{kind}-{socket.gethostname()}-"
        for leftover in out.parent.glob(glob.escape(prefix) + "*"):
            pid = leftover.name[len(prefix) :].split("-")[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def missing_files(run_dir: Path) -> list[str]:
    """The records a complete run directory has and ``run_dir`` lacks."""
    return [f for f in FILES if not (Path(run_dir) / f).is_file()]


def is_complete(run_dir: Path) -> bool:
    return not missing_files(run_dir)
