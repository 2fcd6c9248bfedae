"""A run directory replaced in one step: never missing to a reader, nor after a kill."""

from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path

import pytest

import fred
from fred.runs import records
from fred.runs.exchange import UNSUPPORTED, exchange
from fred.runs.records import is_complete, write_run_dir
from tests.conftest import tiny

REPLACEMENTS = 150  # the two renames left the run missing to a polling reader ~1-2 times a replacement here
HANG_GUARD_S = 300  # not a speed check: only how long to wait for a reader that never ends


def needs_exchange(where: Path) -> None:
    """Skip where this filesystem or system cannot swap two directories (the fallback runs there)."""
    a, b = where / "exchange-a", where / "exchange-b"
    a.mkdir(), b.mkdir()
    try:
        exchange(a, b)
    except OSError as err:
        if err.errno in UNSUPPORTED:
            pytest.skip(f"renameat2(RENAME_EXCHANGE) is not supported here: {err}")
        raise
    finally:
        shutil.rmtree(a, ignore_errors=True), shutil.rmtree(b, ignore_errors=True)


@pytest.fixture(scope="module")
def written() -> tuple:
    """What write_run_dir takes for a small run, made once."""
    result = fred.run(tiny(stop={"max_updates": 2}))
    tables = {"metrics": result.metrics, "updates": result.updates, "events": result.events}
    return result.scenario.resolved(), result.summary, tables, result.params


def refuse_exchange(code: int, calls: list[int] | None = None):
    def refuse(a, b):
        if calls is not None:
            calls.append(code)
        raise OSError(code, os.strerror(code), str(a))

    return refuse


def test_a_reader_polling_a_run_being_replaced_always_finds_it_complete(tmp_path, written):
    # Between the two renames the run was missing: a sweep's "is it done" check, fred plot or
    # load_run racing a writer of the same run saw no run, or a damaged one.
    needs_exchange(tmp_path)
    out = tmp_path / "run"
    write_run_dir(out, *written)
    started, stop, checks, misses = threading.Event(), threading.Event(), [0], [0]

    def poll() -> None:
        started.set()
        while not stop.is_set():
            checks[0] += 1
            misses[0] += not is_complete(out)

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    started.wait(HANG_GUARD_S)
    try:
        for _ in range(REPLACEMENTS):
            write_run_dir(out, *written)
    finally:
        stop.set()
        reader.join(HANG_GUARD_S)
    assert not reader.is_alive() and checks[0] > 0
    assert misses[0] == 0, f"the run was missing or incomplete in {misses[0]} of {checks[0]} checks"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_kill_at_any_step_of_replacing_a_run_leaves_a_complete_run(tmp_path, written, monkeypatch):
    # A process killed between the two renames left no run at out, only two hidden copies.
    # What a kill leaves is what is on disk after each step that moves a directory.
    needs_exchange(tmp_path)
    out = tmp_path / "run"
    write_run_dir(out, *written)
    after_each_move: list[bool] = []

    def observed(move):
        def step(*args):
            try:
                return move(*args)
            finally:
                after_each_move.append(is_complete(out))

        return step

    monkeypatch.setattr(records, "exchange", observed(records.exchange))
    monkeypatch.setattr(records.os, "replace", observed(os.replace))
    write_run_dir(out, *written)
    assert after_each_move and all(after_each_move)


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS])
def test_where_directories_cannot_be_swapped_a_run_is_replaced_by_renames(
    tmp_path, written, monkeypatch, code
):
    # EINVAL: a filesystem without RENAME_EXCHANGE (NFS); ENOSYS: an old kernel or libc.
    out = tmp_path / "run"
    tried: list[int] = []
    monkeypatch.setattr(records, "exchange", refuse_exchange(code, tried))
    write_run_dir(out, *written)
    (out / "trace.json").write_text("{}")  # the earlier run's: it goes with it
    write_run_dir(out, *written)
    assert tried == [code, code] and is_complete(out) and not (out / "trace.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_an_error_the_swap_cannot_fall_back_from_is_raised_and_the_earlier_run_kept(
    tmp_path, written, monkeypatch
):
    out = tmp_path / "run"
    write_run_dir(out, *written)
    (out / "trace.json").write_text("{}")
    monkeypatch.setattr(records, "exchange", refuse_exchange(errno.EIO))
    with pytest.raises(OSError, match="Input/output error"):
        write_run_dir(out, *written)
    assert is_complete(out) and (out / "trace.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_another_writer_swapping_its_run_in_just_before_ours_leaves_ours_whole(
    tmp_path, written, monkeypatch
):
    # Two sweeps sharing a runs folder write the same run: the last one swapped in stays.
    needs_exchange(tmp_path)
    out = tmp_path / "run"
    write_run_dir(out, *written)
    theirs = tmp_path / ".run.partial-another-host-1"
    shutil.copytree(out, theirs)
    (theirs / "trace.json").write_text("theirs")
    raced: list[Path] = []

    def swap(new, dst):
        if not raced:
            raced.append(theirs)
            exchange(theirs, dst)
            shutil.rmtree(theirs)
        return exchange(new, dst)

    monkeypatch.setattr(records, "exchange", swap)
    write_run_dir(out, *written)
    assert raced and is_complete(out) and not (out / "trace.json").exists()  # ours, not theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_run_another_writer_moved_aside_just_before_our_swap_is_replaced_by_a_rename(
    tmp_path, written, monkeypatch
):
    # A writer that cannot swap (on another host, say) renamed the run aside: nothing is at
    # out for an instant, and the swap finds nothing to swap with.
    out = tmp_path / "run"
    write_run_dir(out, *written)
    aside = tmp_path / ".run.old-another-host-1-0"
    real_exchange = records.exchange
    seen: list[int] = []

    def swap(new, dst):
        if not aside.exists():
            os.replace(dst, aside)
        try:
            return real_exchange(new, dst)
        except OSError as err:
            seen.append(err.errno)
            raise

    monkeypatch.setattr(records, "exchange", swap)
    write_run_dir(out, *written)
    assert seen and seen[0] in {errno.ENOENT, *UNSUPPORTED} and is_complete(out)
    shutil.rmtree(aside)  # the other writer's to delete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_the_system_call_swaps_where_libc_has_no_wrapper(tmp_path):
    # glibc before 2.28 (still in some clusters' images) has no renameat2 function.
    import ctypes
    import platform
    import sys

    from fred.runs.exchange import AT_FDCWD, RENAME_EXCHANGE, _syscall

    if not sys.platform.startswith("linux") or _syscall(ctypes.CDLL(None, use_errno=True)) is None:
        pytest.skip(f"renameat2's system call number is not known for {sys.platform} {platform.machine()}")
    needs_exchange(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "summary.json").write_text("a")
    call = _syscall(ctypes.CDLL(None, use_errno=True))
    assert call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0
    assert (b / "summary.json").read_text() == "a" and not any(a.iterdir())


def test_a_full_disk_names_the_folder_and_what_the_run_needs_exits_1_and_leaves_nothing(
    tmp_path, capsys, monkeypatch
):
    # It was exit 2 (bad input) and pyarrow's words alone: "fred: Error writing bytes to file.
    # Detail: [errno 28] No space left on device". pyarrow's error carries the errno only in its text.
    import pandas as pd
    import yaml

    from fred.tools.cli import main

    def full(self, path, **kwargs):
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(tiny()))
    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    assert main(["run", str(scenario), "--out", str(tmp_path / "runs" / "r"), "--quiet"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert (
        line.startswith(
            f"fred: no space left on the device: the run directory r was not written to {tmp_path / 'runs'} "
            "(it needs up to about "
        )
        and " free there now); free some space there or give another --out" in line
    )
    needs_kb = float(line.split("up to about ")[1].split(" kB")[0])
    assert 20 < needs_kb < 1000  # a tiny run's records: tens of kB
    assert list((tmp_path / "runs").iterdir()) == []  # no run directory, no hidden partial copy


def test_a_file_size_limit_reached_while_writing_the_run_is_said_and_exits_1(tmp_path):
    import subprocess
    import sys

    import yaml

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(tiny()))
    # The limit is set in the child, not by a preexec_fn: forking this process (JAX's threads) can deadlock.
    limited = (
        "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (3000, "
        "resource.RLIM_INFINITY)); "
        "sys.argv[0] = 'fred'; runpy.run_module('fred', run_name='__main__')"
    )  # 3 kB: a table is larger
    env = {
        **os.environ,
        "FRED_JAX_CACHE": "off",
        "PYTHONDONTWRITEBYTECODE": "1",
    }  # no other file written under the limit
    done = subprocess.run(
        [sys.executable, "-c", limited, "run", str(scenario), "--out", str(tmp_path / "r"), "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert (
        done.stderr.startswith(
            f"fred: a file would exceed this process's file-size limit (ulimit -f): the run directory r "
            f"was not written to {tmp_path}"
        )
        and "raise the limit (ulimit -f) or give another --out" in done.stderr
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
