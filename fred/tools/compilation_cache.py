"""Compiled programs kept on disk, so that a new ``fred`` process does not compile them again.

JAX compiles every jitted program the first time a process calls it, and most of a short
run's wall time is that: the quickstart took 5.0 s, 3.5 of them inside the run, on a 2-vCPU
EPYC; with the programs on disk, 3.0 s and 1.6. The commands therefore keep JAX's persistent
compilation cache in ``~/.cache/fred/jax/<CPU fingerprint>`` (``$XDG_CACHE_HOME`` if set).

A loaded program is the one a fresh compilation makes, so runs keep their bits (tested: a
run loading every program from the cache against one that compiled them; the test suite
runs with a cache of its own, which its fresh-process checks load from).
Programs are kept per CPU (:func:`fred.runs.host.cpu_fingerprint`): XLA compiles for the CPU it
runs on, and JAX's cache key names the platform (``cpu``), not the CPU, so a home directory
shared by an AVX-512 and an AVX2 machine would otherwise hand one the other's code.

``FRED_JAX_CACHE=off`` turns it off, ``FRED_JAX_CACHE=DIR`` moves it; a cache the user set up
for JAX itself (``JAX_COMPILATION_CACHE_DIR``) is used as it is. An entry JAX cannot read (the
disk filled up, or the process was killed, as it was written) makes it warn and compile that
program again, with the same bits, in every run, as JAX never replaces an entry: deleting the
folder (``rm -r ~/.cache/fred/jax``) starts the cache afresh. Empty entries are dropped here.
``fred.run`` from Python leaves JAX's settings alone: :func:`enable` turns the same cache on
for a notebook.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import jax

from fred.runs.host import cpu_fingerprint

ENV = "FRED_JAX_CACHE"
OFF = frozenset({"off", "0", "no", "false"})


def cache_dir(env: Mapping[str, str] = os.environ) -> Path | None:
    """Where compiled programs are kept for this CPU; None when ``FRED_JAX_CACHE`` turns it off."""
    value = env.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    if value:
        root = Path(value).expanduser()
    else:
        root = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fred" / "jax"
    return root / cpu_fingerprint()


def enable() -> Path | None:
    """Keep compiled programs in :func:`cache_dir`, for this process and those it starts
    (a sweep's); returns the folder, or None when it is off, JAX's own cache is set up, or the
    folder cannot be made (the cache only saves time: nothing else depends on it)."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return None
    try:
        path = cache_dir()
        if path is None:
            return None
        path.mkdir(parents=True, exist_ok=True)
        _drop_empty(path)
    except (OSError, RuntimeError):  # RuntimeError: no home directory to find (Path.home)
        return None
    # Every program, however quick to compile: a run's are many and small (JAX's default keeps
    # only those that took a second or more, which would keep none of them).
    settings = {"jax_compilation_cache_dir": str(path), "jax_persistent_cache_min_compile_time_secs": 0.0}
    for name, value in settings.items():
        jax.config.update(name, value)
        os.environ[name.upper()] = str(value)  # read by JAX in a sweep's worker processes
    return path


def _drop_empty(path: Path) -> None:
    """Delete empty entries: what a process killed between creating an entry and writing it
    leaves. JAX never replaces an entry, so it would warn about it, and compile, in every run."""
    for entry in os.scandir(path):
        if entry.name.endswith("-cache") and entry.is_file() and entry.stat().st_size == 0:
            Path(entry.path).unlink(missing_ok=True)
