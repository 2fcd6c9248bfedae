"""Per-entity random streams derived from the scenario seed.

Every random choice in a run draws from a stream named by a path such as
``("compute", 3)``. The stream depends only on the seed and the path, so adding
a worker or a new kind of draw never shifts any other entity's numbers.
"""

from __future__ import annotations

import hashlib

import jax
import numpy as np


def _path_words(path: tuple[str | int, ...]) -> list[int]:
    # Stable across processes, unlike hash(): SHA-256 of the path's text form.
    digest = hashlib.sha256(repr(tuple(path)).encode()).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def stream(seed: int, *path: str | int) -> np.random.Generator:
    """A numpy Generator private to ``path`` under ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *_path_words(path)])))


def jax_key(seed: int, *path: str | int) -> jax.Array:
    """A JAX PRNG key private to ``path`` under ``seed``."""
    word = int(stream(seed, "jax", *path).integers(0, 2**31 - 1))
    return jax.random.PRNGKey(word)
