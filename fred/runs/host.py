"""The facts about the computing machine that decide a run's last bits.

XLA compiles for the CPU it runs on: with AVX-512 it picks other vector widths,
and so other orders of float additions inside a matrix product, than with AVX2.
The same JAX version on two such CPUs therefore gives parameters that differ in
their last bits (seen: every shipped golden scenario's ``params_sha256`` differed
between an AVX-512 machine and an AVX2 AMD EPYC, with identical event traces).
``summary.json`` records :func:`cpu_isa` next to ``jax_version`` so that a
comparison of two runs can tell which of the two differs.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from pathlib import Path

# Highest first: the first one the CPU has names its level.
_X86_LEVELS = ("avx512f", "avx2", "avx")


def cpu_isa() -> str:
    """The CPU's architecture and, on x86-64, its widest vector extension: ``x86_64-avx512f``,
    ``x86_64-avx2``, ... or the bare architecture (``arm64``, ``aarch64``) elsewhere."""
    arch = platform.machine().lower() or "unknown"
    if arch not in ("x86_64", "amd64"):
        return arch
    flags = _x86_flags()
    level = next((name for name in _X86_LEVELS if name in flags), "sse" if flags else "unknown")
    return f"x86_64-{level}"


def cpu_fingerprint() -> str:
    """This CPU as one short name: :func:`cpu_isa` and a hash of its model and every feature
    flag (``x86_64-avx512f-3f2a9c01d4e7``). Two machines share it only if XLA would compile
    the same code for both."""
    facts = "\n".join([platform.machine(), cpu_model(), *sorted(_x86_flags())])
    return f"{cpu_isa()}-{hashlib.sha256(facts.encode()).hexdigest()[:12]}"


@functools.cache  # the CPU does not change under a process: /proc/cpuinfo was read at every call
def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform.processor`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@functools.cache
def _x86_flags() -> frozenset[str]:
    """The CPU's feature flags: Linux's /proc/cpuinfo (x86), else what numpy detected at import."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:  # macOS and Windows: numpy's own detection (a private name, hence the guard)
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:
        return frozenset()
    return frozenset(name.lower() for name, present in __cpu_features__.items() if present)
