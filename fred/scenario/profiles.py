"""Compute profiles: the files ``fred calibrate`` writes and scenarios name in ``cluster.compute.profile``."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from fred.scenario.yaml_reading import NumbersLoader, read_text, yaml_problem


def read_profile(path: Path) -> float:
    """The ``step_time_s`` of a profile file, with errors that name the file."""
    try:
        data = yaml.load(read_text(path), Loader=NumbersLoader)  # a FIFO, a 1 GB file, an alias bomb: refused
    except ValueError as err:  # missing, a directory, not a regular file, too large, not UTF-8
        raise ValueError(
            f"cluster.compute.profile: {err}; give the profile file fred calibrate wrote"
        ) from None
    except yaml.YAMLError as err:
        raise ValueError(f"cluster.compute.profile: {path} is not valid YAML ({yaml_problem(err)})") from None
    value = data.get("step_time_s") if isinstance(data, dict) else None
    # bool is an int to Python, and NaN passes "<= 0": neither is a time
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(
            f"cluster.compute.profile: {path} has no positive, finite step_time_s; make it with fred "
            "calibrate"
        )
    return float(value)
