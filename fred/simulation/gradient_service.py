"""The gradient service: a run's gradient requests, evaluated lazily and in batches.

A worker's step asks for its gradient when it starts (:meth:`GradientService.request`) and takes
it when its simulated compute time has passed (:meth:`GradientService.result`); by then the
other workers that started at that instant have asked too, and one vectorised call serves them
all. Batching never changes a bit of a result (docs/determinism.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fred.numerics.data import Dataset
from fred.numerics.gradients import GradSum, Numerics, parts_of
from fred.numerics.models import Params
from fred.numerics.tape import active_tape, op


class _GradientRequest:
    __slots__ = ("params", "rows", "worker", "result", "duration_s", "seq")

    def __init__(self, params: Params, rows: np.ndarray, worker: int, seq: int):
        self.params, self.rows, self.worker, self.result, self.duration_s = params, rows, worker, None, 0.0
        self.seq = seq  # the order requests were made in: ties of one worker keep it


def _by_worker(req: _GradientRequest) -> tuple[int, int]:
    return req.worker, req.seq


class GradientService:
    """Evaluates gradient requests lazily, batching those made on the same parameters.

    A request's value is needed only when its simulated compute time has passed;
    by then every worker that started on the same parameters at the same instant
    has asked too, so vectorised calls serve them all (fast: one call; exact: calls
    of up to :meth:`Numerics.workers_per_call` workers). With the exact reduction every
    leaf of the summation tree (an example's gradient, or a tile's) is the same bits in
    whichever call computed it, so batched and unbatched results are the same bits
    (docs/determinism.md). With tiles (:attr:`Numerics.batches_parameters`) a call also
    serves the requests made on other parameters (ASGD's, Local SGD's or a gossip's workers
    computing at once on versions of their own), each tile at its own request's parameters:
    fewer, larger calls, the same bits.
    """

    def __init__(self, numerics: Numerics, dataset: Dataset):
        self.numerics, self.dataset = numerics, dataset
        # Requests waiting, grouped by what a batched call needs in common: the same
        # parameters (by identity; each request holds them) and batch size. Served in worker order.
        self._pending: dict[tuple[int, int], list[_GradientRequest]] = {}
        # On the numerics tape as "gradients": replay rebuilds it from the run's scenario.
        self._gradients = op("gradients")(
            lambda params, rows, shards, starts=None: numerics.gradients(
                params, dataset, rows, shards, starts
            )
        )
        self._made = 0  # requests made: their order breaks ties

    def request(self, params: Params, rows: np.ndarray, worker: int = 0) -> _GradientRequest:
        req = _GradientRequest(params, rows, worker, self._made)
        self._made += 1
        self._pending.setdefault((id(params), len(rows)), []).append(req)
        return req

    def cancel(self, req: _GradientRequest) -> None:
        """Forget a request whose worker crashed before it was needed."""
        key = (id(req.params), len(req.rows))
        rest = [r for r in self._pending.get(key, []) if r is not req]
        if rest:
            self._pending[key] = rest
        else:
            self._pending.pop(key, None)

    def result(self, req: _GradientRequest) -> GradSum:
        if req.result is None:
            self._flush_like(req)
        return req.result

    def _take(self, first: _GradientRequest) -> list[_GradientRequest]:
        """The requests one flush serves: those on ``first``'s parameters, and with tiles every
        request of its batch size."""
        batch = len(first.rows)
        keys = [(id(first.params), batch)]
        if self.numerics.batches_parameters:
            keys = [key for key in self._pending if key[1] == batch]  # any order: sorted by worker after
        return [req for key in keys for req in self._pending.pop(key)]

    def _call(self, group: list[_GradientRequest], rows: np.ndarray, starts: np.ndarray | None) -> Any:
        """One recorded gradient call for ``group``: at their one set of parameters, or at each
        request's own (a tuple, one set a request: the program depends on the call's shape only)."""
        first = group[0].params
        if all(req.params is first for req in group):
            return self._gradients(first, rows, len(group), starts)
        return self._gradients(tuple(req.params for req in group), rows, len(group), starts)

    def _flush_like(self, first: _GradientRequest) -> None:
        # In worker order (a stable sort: ties keep request order), as all-reduces sum: one of
        # whole calls then adds the stacked rows where they are (numerics.sum_grads). Which
        # call serves a worker never changes its bits.
        same = sorted(self._take(first), key=_by_worker)
        for group in _calls(same, self.numerics.workers_per_call(len(first.rows), len(same))):
            rows = np.concatenate([r.rows for r in group])
            starts = self.numerics.starts([r.worker for r in group], len(first.rows))  # None: not needed
            result = self._call(group, rows, starts)
            for req, part in zip(
                group, parts_of(result, len(group), len(first.rows), starts, self.numerics.tile)
            ):
                req.result = part
            tape = active_tape()
            if tape is not None:  # replay reports real step times next to these simulated ones
                tape.note_compute([r.duration_s for r in group])


def _calls(requests: list[_GradientRequest], most: int) -> list[list[_GradientRequest]]:
    """``requests`` cut into calls of at most ``most``, in order. A call at several parameter
    versions holds a power of two of them: each call's size is a compiled program of its own, and
    mixes of every size would compile one for each (an 8-worker ASGD run's calls: 4 sizes, not 8)."""
    calls, start = [], 0
    while start < len(requests):
        call = requests[start : start + most]
        if any(req.params is not call[0].params for req in call):
            call = call[: 1 << (len(call).bit_length() - 1)]
        calls.append(call)
        start += len(call)
    return calls
