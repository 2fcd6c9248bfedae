"""Where a command's outputs go, settled before it works: a file, a directory of files, or a run directory.

A path that cannot take the output is found out before a replay, a sweep or a comparison
has run (its work would otherwise be lost at the end), and never by a traceback.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

# A run directory's records (``fred.runs.records.FILES`` and the tape): never an output's name inside one.
RUN_FILES = (
    "scenario.yaml",
    "summary.json",
    "metrics.parquet",
    "updates.parquet",
    "events.parquet",
    "params.npz",
    "tape.npz",
)
# What else fred puts in a run directory (fred plot's and fred trace's defaults) and a desktop's
# folder view adds: describing the earlier run, they go with it when a run replaces it.
RUN_EXTRAS = ("plots", "trace.json", ".DS_Store")


def output_file(path: str | Path, default_name: str, inputs: tuple[str | Path, ...] = ()) -> Path:
    """``path`` as a file to write: ``path/default_name`` when it is a directory, or is named as
    one with a trailing slash (``-o results/``, made if missing); parents are made.

    ``inputs`` are what the command reads (a scenario file, a run directory): an output that
    would overwrite one of them, or one of a run directory's records, is refused.
    """
    named_as_dir = str(path).endswith(("/", os.sep))  # Path() drops the slash: look before
    path = Path(path)
    no_link(path)
    if path.is_dir() or named_as_dir:
        path = path / default_name
        no_link(path)
    for given in map(Path, inputs):
        if path.resolve() == given.resolve() or (
            given.is_dir() and path.resolve().parent == given.resolve() and path.name in RUN_FILES
        ):
            raise ValueError(
                f"{path} is what this command reads; writing its output there would replace it: give another "
                "path"
            )
    _make(path.parent)
    return path


def write_whole(path: Path, write: Callable[[Path], object]) -> Path:
    """``write`` to a hidden name beside ``path``, then rename it onto ``path`` in one step, so a
    Ctrl-C or an error while writing leaves the earlier file or none, never half of one (which a
    viewer such as Perfetto or an image browser would show as damaged). The hidden name keeps
    ``path``'s suffix, which matplotlib reads the format from."""
    partial = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    no_link(path)
    no_link(partial)
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)  # gone already once renamed
    return path


def output_dir(path: str | Path) -> Path:
    """``path`` as a directory of outputs, made when missing; a file there is refused, not replaced."""
    path = Path(path)
    no_link(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file; these outputs go in a directory: give another --out")
    _make(path)
    return path


def runs_folder(path: str | Path, option: str = "--runs") -> Path:
    """``path`` as the folder a command keeps its run directories in (made as runs are written):
    a file or a link there is refused before anything runs."""
    path = Path(path)
    no_link(path, option)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file; run directories go in a folder: give another {option}")
    return path


def no_link(path: Path, option: str = "path") -> None:
    """Refuse a symbolic link where fred would write or delete: writing through it changed the
    files where it points (a checkpoint folder's link had fred delete files it had not written)."""
    if path.is_symlink():
        raise ValueError(
            f"{path} is a link (to {os.readlink(path)}); fred never writes or deletes through a link: "
            f"give the path it points to, or another {option}"
        )


def check_out(out: str | Path, option: str = "--out") -> None:
    """Refuse a run directory's path where writing it would delete what is not a run, or where
    the finished run could not be put (:func:`check_replaceable`).

    A run directory replaces what is at ``out``: an earlier run of it (it has a summary.json,
    and nothing but records and what fred plot and fred trace wrote in it) or an empty
    directory, never a file or a directory of other things (``--out .`` would otherwise
    delete the working directory's files). ``option`` names ``out`` in the messages.
    """
    out = Path(out)
    check_replaceable(out, option)
    here = Path.cwd().resolve()
    if (
        out.resolve() == here or out.resolve() in here.parents
    ):  # '--out .': renaming it away fails, or deletes the shell's directory
        raise ValueError(
            f"{out} is the working directory or holds it; the run directory replaces what is at --out: "
            "give a directory inside it, e.g. --out runs/mine"
        )
    existing = next((p for p in out.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ValueError(f"cannot make the run directory {out}: {existing} is a file: choose another --out")
    if existing is not None:  # the run is written beside out and renamed into place: found out after the run
        _check_writable(existing, "--out")
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        kind = "a link" if out.is_symlink() else "a file"
        raise ValueError(
            f"{out} is {kind}, not a run directory; writing the run there would replace it: choose another "
            "--out"
        )
    if not (out / "summary.json").is_file() and any(out.iterdir()):
        raise ValueError(
            f"{out} is a directory of other files, not a fred run directory (it has no summary.json); "
            "writing the run there would delete them: choose another --out, or empty it first"
        )
    others = sorted(p.name for p in out.iterdir() if p.name not in RUN_FILES + RUN_EXTRAS)
    if others:  # notes, a notebook: an earlier run's directory is replaced whole
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise ValueError(
            f"{out} holds an earlier run and other files ({shown}); writing the run there would "
            "delete them: move them out, or choose another --out"
        )


def check_replaceable(out: Path, option: str = "--out") -> None:
    """Refuse, before the run, a run directory's place the finished run could not be put in.

    The run is written beside ``out`` and renamed onto it: a folder that is a mount point, or on a
    read-only file system, refuses the rename (EBUSY, EROFS) only once the whole run is done.
    A link or a file at ``out`` is left to :func:`check_out`, which says why not.
    """
    if not out.is_dir() or out.is_symlink():
        return
    if os.path.ismount(out):
        raise ValueError(
            f"{option} {out} is a mount point, and the run directory is renamed into place when "
            f"it is written, which a mount point refuses: give a folder inside it, "
            f"e.g. --out {out / 'run'}"
        )
    if not os.access(out, os.W_OK):  # read-only: its permissions, or a read-only file system even for root
        raise ValueError(
            f"{option} {out} is not writable, and the run directory replaces it when it is "
            "written: give another --out"
        )


def _make(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where one of its parents should be
        raise ValueError(f"cannot make the directory {directory}: a file is in the way") from None
    except PermissionError:
        parent = next((p for p in directory.parents if p.exists()), directory)
        raise ValueError(
            f"cannot make the directory {directory}: {parent} is not writable: give another path"
        ) from None
    _check_writable(directory, "path")


def _check_writable(directory: Path, option: str) -> None:
    """Refuse a directory this process cannot create files in, by trying: permission bits,
    read-only mounts and a root without its override capability all answer the same way."""
    try:
        tempfile.TemporaryDirectory(prefix=".fred-check-", dir=directory).cleanup()
    except OSError as err:
        raise ValueError(
            f"cannot write in {directory} ({err.strerror or err}): give another {option}"
        ) from None


FULL = {  # what fills up, by errno: the disk, the user's quota, the process's file-size limit
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "a file would exceed this process's file-size limit (ulimit -f)",
}


class NoSpace(OSError):
    """An output could not be written because its disk, quota or file-size limit is full; the
    message says which folder, about how much the output needs, and what to do."""


def full_disk(err: OSError) -> str | None:
    """What filled up, when ``err`` says a write found the disk, the quota or the file-size limit
    full; None for any other error. pyarrow's errors carry the errno only in their text
    (``Error writing bytes to file. Detail: [errno 28] No space left on device``)."""
    if err.errno in FULL:
        return FULL[err.errno]
    text = str(err).lower()
    return next(
        (
            said
            for code, said in FULL.items()
            if f"[errno {code}]" in text or os.strerror(code).lower() in text
        ),
        None,
    )


def no_space(err: OSError, folder: Path, what: str, needs_bytes: float) -> NoSpace:
    """The error for ``what`` (an output to go in ``folder``) not written for ``err``'s full disk."""
    said = full_disk(err) or "the disk is full"
    try:
        free = f", {_size(shutil.disk_usage(folder).free)} free there now"
    except OSError:
        free = ""
    fix = (
        "raise the limit (ulimit -f) or give"
        if err.errno == errno.EFBIG or "ulimit -f" in said
        else "free some space there or give"
    )
    return NoSpace(
        err.errno or errno.ENOSPC,
        f"{said}: {what} was not written to {folder} (it needs up to about {_size(needs_bytes)}{free}); "
        f"{fix} another --out",
    )


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} bytes"
