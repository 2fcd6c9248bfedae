"""Gradient codecs: what a worker puts on the wire, and the numbers that come back, in the optax style.

A codec is a :class:`~typing.NamedTuple` of pure functions on pytrees of float32 arrays, built by a
factory that closes over its hyper-parameters (``topk(ratio)``, ``powersgd(rank)``): ``init`` gives
its state (a :class:`NamedTuple` of arrays: an error memory, PowerSGD's Q) and ``update`` takes a
gradient and that state and returns what is sent and the new state. A jitted step is a recorded
op of the numerics tape whose factory key is the hyper-parameter, so ``fred replay`` rebuilds it.
Strategies call the codecs; the engine moves the bytes (``strategies/_compressed_allreduce.py``
composes them with ``sim.allgather`` and ``sim.allreduce``, ``strategies/pipe_sgd.py`` with its ring).

The codecs, by the ``kind`` a scenario names them with (``compression: {kind: ...}``):

* ``fp16``, ``int8``, ``e3m0`` (:mod:`.quantize`): stateless; every value is rounded on the wire.
* ``topk`` (:mod:`.sparsify`): the largest entries of each tensor, with error feedback.
* ``powersgd`` (:mod:`.low_rank`): each matrix's rank-r approximation, with error feedback.

Units: fred's gradients travel as *sums* over a worker's batch (:class:`~fred.numerics.gradients.GradSum`),
and so do the codecs' inputs and error memories. Top-k and PowerSGD commute with a positive scale
(top-k keeps the same entries; PowerSGD orthonormalises P), so they are the papers' algorithms on
mean gradients, times the batch size.
"""

from fred.numerics.codecs.base import FLOAT32_BYTES, INDEX_BYTES, EmptyState, ErrorMemory
from fred.numerics.codecs.low_rank import (
    PowerSGD,
    PowerSGDBytes,
    PowerSGDState,
    largest_rank,
    powersgd,
    powersgd_bytes,
)
from fred.numerics.codecs.quantize import QUANTIZERS, Quantizer, e3m0, fp16, int8
from fred.numerics.codecs.sparsify import Sparse, TopK, topk

__all__ = [
    "FLOAT32_BYTES",
    "INDEX_BYTES",
    "EmptyState",
    "ErrorMemory",
    "PowerSGD",
    "PowerSGDBytes",
    "PowerSGDState",
    "QUANTIZERS",
    "Quantizer",
    "Sparse",
    "TopK",
    "e3m0",
    "fp16",
    "int8",
    "largest_rank",
    "powersgd",
    "powersgd_bytes",
    "topk",
]
