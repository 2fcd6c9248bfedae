"""Compute profiles: the files ``fred calibrate`` writes and scenarios name in ``cluster.compute.profile``."""

from __future__ import annotations

import math
from pathlib import Path

import yaml


def read_profile(path: Path) -> float:
    """The ``step_time_s`` of a profile file, with errors that name the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"cluster.compute.profile: no such file {path}") from None
    except IsADirectoryError:
        raise ValueError(f"cluster.compute.profile: {path} is a directory; give the profile file fred calibrate wrote") from None
    except UnicodeDecodeError:
        raise ValueError(f"cluster.compute.profile: {path} is not UTF-8 text; give the profile file fred calibrate wrote") from None
    except yaml.YAMLError as err:
        raise ValueError(f"cluster.compute.profile: {path} is not valid YAML ({err})") from None
    value = data.get("step_time_s") if isinstance(data, dict) else None
    # bool is an int to Python, and NaN passes "<= 0": neither is a time
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"cluster.compute.profile: {path} has no positive, finite step_time_s; make it with fred calibrate")
    return float(value)
