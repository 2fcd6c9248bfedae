"""A simulated worker: the entity strategies' processes act for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Worker:
    """A simulated worker: its index, entity name and where its batches come from."""

    index: int
    next_batch: Callable[[], np.ndarray]
    name: str = field(init=False)  # "worker3": made once, read at every primitive

    def __post_init__(self) -> None:
        self.name = f"worker{self.index}"
