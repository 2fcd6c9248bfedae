"""How every command writes a number for people: bytes, seconds, counts of things, mean ± sd.

One place, so that ``fred run``'s summary, ``fred compare``'s table, ``fred sweep``'s and the
commands' closing lines say the same number the same way (the records keep raw numbers).
"""

from __future__ import annotations

import math
from typing import Callable

PLUS_MINUS = " ± "


def bytes_(count: float) -> str:
    """A byte count in decimal units, three significant digits: 2.85e11 as '285 GB', 419e6 as '419 MB'."""
    if not math.isfinite(count):
        return "-"
    unit, scale = byte_unit(count)
    return f"{count / scale:.3g} {unit}" if scale > 1 else f"{count:.0f} B"


def byte_unit(count: float) -> tuple[str, float]:
    """The decimal unit a byte count is written in, and its size."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(count) >= scale:
            return unit, scale
    return "B", 1.0


def seconds(value: float) -> str:
    """Seconds without an exponent: '0.6 s', '1,800 s', '3.2e-05 s' for what is shorter than a ms."""
    if not math.isfinite(value):
        return "-"
    if abs(value) >= 1e4:
        return f"{value:,.0f} s"
    return f"{value:.4g} s"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` things, the noun agreeing: '1 run', '6 runs', '0 transfers', '1,024 workers'."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def number(value: float | None, digits: int = 4) -> str:
    """A plain number to ``digits`` significant digits, '-' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}"


def percent(value: float | None) -> str:
    """A share as a percentage: 0.973 as '97.3%'."""
    return "-" if value is None or math.isnan(value) else f"{value:.1%}"


def plus_minus(
    mean: float, sd: float, alone: Callable[[float], str], scale: float = 1.0, unit: str = ""
) -> str:
    """``mean ± sd`` in ``unit`` (``scale`` to one of it), the mean to the decimal place of the
    sd's second significant digit (five significant digits at most); the mean alone, as
    ``alone`` writes it, where the sd is 0 (the same for every seed) or NaN (one seed)."""
    if not sd > 0:
        return alone(mean)
    m, s = mean / scale, sd / scale
    places = max(0, 1 - math.floor(math.log10(s)))
    most = max(0, 4 - math.floor(math.log10(abs(m)))) if m != 0 else places
    spread = f"{s:,.{places}f}" if places <= most else f"{s:.2g}"
    return f"{m:,.{min(places, most)}f}{PLUS_MINUS}{spread}{unit}"
