"""Rounds of transfers on fairly shared links: as flows, or timed in one piece while their links are idle.

:class:`RoundsAsFlows` runs a schedule of :mod:`fred.simulation.collectives` as its data allow,
a flow per step, each started when both its ends are ready (the rendezvous of
:func:`~fred.simulation.collectives.run_rounds`). :func:`on_idle_links` times the same run
without a flow or an event per step while nothing else is on its links; :class:`HeldLinks`
hands such a run back to flows, where it stands, the moment anything else touches them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import simpy

from fred.simulation.collectives import Round, Step, lanes, lanes_of
from fred.simulation.flows import Channel, FairShare, Flow

Post = Callable[
    [int, int, float, int, Callable[[], None], Callable[[], None]], None
]  # (src, dst, nbytes, hops, arrived, sent)
Later = Callable[[float, Callable[[], None]], None]  # (delay_s, then)


class RoundsAsFlows:
    """Runs ``rounds`` as their data allow, for a network whose transfers end when they end.

    A member finishes round ``k`` once what round ``k`` sends it has arrived and been folded
    in (at once if nothing comes). A step of round ``k`` starts when both its ends have
    finished every round before ``k`` (the rendezvous of :func:`run_rounds`) and its sender's
    previous message has left: a member sends one message after another, as a blocking send
    does and as a first-come-first-served link makes it. A sender does not wait for its own
    message to arrive. ``done`` is called when every member has finished.

    With lanes, all of this holds per member and lane (a *seat*, ``member * lanes + lane``):
    a step of lane ``l`` concerns its ends' seats in lane ``l``, a step of no lane all their seats.
    """

    def __init__(
        self,
        rounds: list[Round],
        p: int,
        nbytes: float,
        reduce_s_per_byte: float,
        post: Post,
        later: Later,
        done: Callable[[], None],
        start: bool = True,
    ):
        self.rounds, self.nbytes, self.gamma = rounds, nbytes, reduce_s_per_byte
        self.post, self.later, self.done = post, later, done
        self.lanes = lanes(rounds)
        self.seats = p * self.lanes
        if start:
            self.start()

    def start(
        self,
        level: list[int] | None = None,
        next_send: list[int] | None = None,
        sending: list[bool] | None = None,
    ) -> None:
        """Run from the start, or from where :func:`on_idle_links` hands it back: the rounds each
        seat has finished, the messages it has sent and whether one is on its way out."""
        seats = self.seats
        self.level = level or [0] * seats  # rounds each seat has finished
        self.outgoing, self.incoming = _index(self.rounds, self.lanes)
        self.sends: list[list[int]] = [[] for _ in range(seats)]  # the rounds each seat sends in, in order
        for k, out in enumerate(self.outgoing):
            for seat in out:
                self.sends[seat].append(k)
        self.next_send = next_send or [0] * seats  # the position in sends[s] of seat s's next message
        self.sending = sending or [False] * seats
        self.left = seats
        for seat in range(seats):
            self._advance(seat)

    def _seats(self, member: int, step: Step) -> range:
        count = self.lanes
        if step.lane is None:
            return range(member * count, (member + 1) * count)
        return range(member * count + step.lane, member * count + step.lane + 1)

    def _advance(self, seat: int) -> None:
        while True:
            k = self.level[seat]
            if k == len(self.rounds):
                self.left -= 1
                if self.left == 0:
                    self.done()
                return
            out, into = self.outgoing[k].get(seat), self.incoming[k].get(seat)
            if out is not None:
                self._try(k, out)
            if into is not None:
                self._try(k, into)
                return  # until it arrives
            self.level[seat] = k + 1

    def _try(self, k: int, step: Step) -> None:
        sources = self._seats(step.src, step)
        for src in sources:
            queue = self.sends[src]
            if self.sending[src] or self.next_send[src] == len(queue) or queue[self.next_send[src]] != k:
                return  # its earlier messages go first
            if self.level[src] < k:
                return
        for dst in self._seats(step.dst, step):
            if self.level[dst] < k:
                return
        for src in sources:
            self.sending[src] = True
        self.post(
            step.src,
            step.dst,
            step.fraction * self.nbytes,
            step.hops,
            lambda: self._arrived(k, step),
            lambda: self._sent(sources),
        )

    def _sent(self, sources: range) -> None:
        for src in sources:
            self.sending[src] = False
            self.next_send[src] += 1
        for src in sources:
            if self.next_send[src] < len(self.sends[src]):
                k = self.sends[src][self.next_send[src]]
                self._try(k, self.outgoing[k][src])

    def _arrived(self, k: int, step: Step) -> None:
        reduce_s = step.fraction * self.nbytes * self.gamma if step.reduce else 0.0
        if reduce_s > 0.0:
            self.later(reduce_s, lambda: self._finish(k, step))
        else:
            self._finish(k, step)

    def _finish(self, k: int, step: Step) -> None:
        for seat in self._seats(step.dst, step):
            self.level[seat] = k + 1
            self._advance(seat)


def _index(rounds: list[Round], count: int) -> tuple[list[dict[int, Step]], list[dict[int, Step]]]:
    """Each round's step sent by, and sent to, each seat (at most one of each)."""
    if count == 1:
        return [{s.src: s for s in steps} for steps in rounds], [
            {s.dst: s for s in steps} for steps in rounds
        ]
    outgoing: list[dict[int, Step]] = [{} for _ in rounds]
    incoming: list[dict[int, Step]] = [{} for _ in rounds]
    for k, steps in enumerate(rounds):
        for s in steps:
            own = lanes_of(s, count)
            outgoing[k].update((s.src * count + lane, s) for lane in own)
            incoming[k].update((s.dst * count + lane, s) for lane in own)
    return outgoing, incoming


Path = Callable[[str, str], tuple[tuple[Channel, ...], float]]  # (src, dst) -> (channels crossed, latency)


class HeldLinks(FairShare):
    """Fairly shared flows, some of whose channels an all-reduce timed in one piece may hold
    (:func:`on_idle_links`). A flow that starts on a held channel, or a capacity change on one,
    first has the holder hand its transfers back to flows where they stand, so they meet as
    they would have met all along."""

    def __init__(self, env: simpy.Environment, *args: Any, **kwargs: Any):
        super().__init__(env, *args, **kwargs)
        self.holders: dict[Channel, _Held] = {}
        self.layouts: dict[
            tuple[int, tuple[str, ...]], _Layout
        ] = {}  # by schedule and group: routes never change

    def start(
        self,
        channels: tuple[Channel, ...],
        nbytes: float,
        latency_s: float,
        arrive: Callable[[], None],
        sent: Callable[[], None] | None = None,
    ) -> Flow:
        if self.holders:
            self._hand_back(channels)
        return super().start(channels, nbytes, latency_s, arrive, sent)

    def changed(self, channels: tuple[Channel, ...]) -> None:
        if self.holders:
            self._hand_back(channels)
        super().changed(channels)

    def _hand_back(self, channels: tuple[Channel, ...]) -> None:
        for channel in channels:
            holder = self.holders.get(channel)
            if holder is not None:
                holder.hand_back()


class _Layout:
    """What timing ``rounds`` among ``names`` in one piece needs of the network, worked out once:
    the channels they cross, and per round, each step's seats and channels (indices into them)
    and latency. ``None`` where that is not to be had: a round that crosses a channel twice (two
    workers of one node sharing its NIC), or a step of no lane among lanes."""

    def __init__(self, rounds: list[Round], names: list[str], count: int, path: Path):
        self.rounds = rounds
        index: dict[Channel, int] = {}
        self.by_round: list[
            tuple[np.ndarray, ...] | None
        ] = []  # src and dst seats, channels (padded), latency,
        # fraction, reduce, which channels are not padding
        self.paths: list[list[tuple[tuple[Channel, ...], float]]] = []
        for steps in rounds:
            routes = [path(names[s.src], names[s.dst]) for s in steps]
            width = max((len(channels) for channels, _ in routes), default=1)
            crossed = [[index.setdefault(c, len(index)) for c in channels] for channels, _ in routes]
            flat = [i for ids in crossed for i in ids]
            if len(set(flat)) < len(flat) or (count > 1 and any(s.lane is None for s in steps)):
                self.by_round.append(None)
            else:
                lane = [0 if s.lane is None else s.lane for s in steps]
                self.by_round.append(
                    (
                        np.array([s.src * count + lane[i] for i, s in enumerate(steps)], dtype=np.intp),
                        np.array([s.dst * count + lane[i] for i, s in enumerate(steps)], dtype=np.intp),
                        np.array(
                            [ids + ids[:1] * (width - len(ids)) for ids in crossed], dtype=np.intp
                        ).reshape(len(steps), width),
                        np.array([latency_s * s.hops for (_, latency_s), s in zip(routes, steps)]),
                        np.array([s.fraction for s in steps]),
                        np.array([s.reduce for s in steps], dtype=bool),
                        np.array(
                            [[i < len(ids) for i in range(width)] for ids in crossed], dtype=bool
                        ).reshape(len(steps), width),
                    )
                )
            self.paths.append(routes)
        self.channels = list(index)


def on_idle_links(run: RoundsAsFlows, links: HeldLinks, names: list[str], path: Path) -> bool:
    """Time ``run`` in one piece if every channel its steps cross is idle now and no two of its
    steps would be on one channel at once; False (nothing done) otherwise.

    Each step then runs alone at its path's least capacity, so when it starts, its last byte
    leaves, it arrives and it is folded in are known now, by the rules of
    :class:`RoundsAsFlows`, without a flow or an event per step: one event at the end. The
    channels are held until then; the first flow or capacity change on one of them hands
    ``run`` back to flows at that instant (:meth:`_Held.hand_back`). A synchronous run's
    all-reduce on links nothing else uses is timed whole, a round at a time.
    """
    if not any(run.rounds):
        return False  # nothing to send: RoundsAsFlows is done at once
    key = (id(run.rounds), tuple(names))  # several groups of one size share a schedule
    layout = links.layouts.get(key)
    if layout is None or layout.rounds is not run.rounds:
        layout = links.layouts[key] = _Layout(run.rounds, names, run.lanes, path)
    if any(r is None for r in layout.by_round):
        return False
    holders = links.holders
    if any(c.flows or c in holders for c in layout.channels):
        return False  # something else is on it, or may be
    now = float(links.env.now)  # a float array: SimPy's clock starts at the integer 0
    capacity = np.array([c.capacity() for c in layout.channels], dtype=float)
    busy = np.full(len(layout.channels), -np.inf)  # when this all-reduce's last transfer on each leaves it
    ready = np.full(run.seats, now)  # when each seat has finished the rounds so far
    free = np.full(run.seats, now)  # when each seat's last message has left
    timed: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for src, dst, crossed, latency_s, fraction, reduce, _ in layout.by_round:  # type: ignore[misc]
        start_s = np.maximum(np.maximum(ready[src], ready[dst]), free[src])
        if run.lanes == 1 and (busy[crossed] > start_s[:, None]).any():
            return False  # two of its own transfers would share a channel (a seat's go in round order)
        step_bytes = fraction * run.nbytes
        rate_bps = capacity[crossed].min(axis=1)
        sent_s = start_s + step_bytes / rate_bps
        arrive_s = sent_s + latency_s
        reduce_s = np.where(reduce, step_bytes * run.gamma, 0.0)
        folded_s = np.where(reduce_s > 0.0, arrive_s + reduce_s, arrive_s)
        busy[crossed] = sent_s[:, None]
        free[src] = sent_s
        ready = ready.copy()
        ready[dst] = folded_s
        timed.append((start_s, sent_s, arrive_s, folded_s, rate_bps))
    if run.lanes > 1 and _overlap(layout, timed):
        return False
    held = _Held(run, links, layout, timed)
    end_s = float(ready.max()) if len(ready) else now
    links.env.timeout(end_s - now).callbacks.append(lambda _: held.end())
    return True


def _overlap(layout: _Layout, timed: list[tuple[np.ndarray, ...]]) -> bool:
    """Whether two transfers would be on one channel at once (lanes do not keep to round order)."""
    rounds = layout.by_round
    crossed = np.concatenate([r[2][r[6]] for r in rounds])  # type: ignore[index]
    start_s = np.concatenate(
        [np.broadcast_to(t[0][:, None], r[6].shape)[r[6]] for t, r in zip(timed, rounds)]
    )  # type: ignore[index]
    sent_s = np.concatenate([np.broadcast_to(t[1][:, None], r[6].shape)[r[6]] for t, r in zip(timed, rounds)])  # type: ignore[index]
    order = np.lexsort((start_s, crossed))
    crossed, start_s, sent_s = crossed[order], start_s[order], sent_s[order]
    same = crossed[1:] == crossed[:-1]
    return bool((same & (start_s[1:] < sent_s[:-1])).any())


class _Held:
    """An all-reduce timed in one piece: when each of its steps starts, leaves, arrives and is
    folded in, and the channels it holds meanwhile."""

    def __init__(
        self,
        run: RoundsAsFlows,
        links: HeldLinks,
        layout: _Layout,
        timed: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    ):
        self.run, self.links, self.layout, self.timed = run, links, layout, timed
        self.held = True
        for channel in layout.channels:
            links.holders[channel] = self

    def _release(self) -> None:
        self.held = False
        holders = self.links.holders
        for channel in self.layout.channels:
            if holders.get(channel) is self:
                del holders[channel]

    def end(self) -> None:
        if self.held:
            self._release()
            self.run.done()

    def hand_back(self) -> None:
        """Go on as flows from now: steps that have arrived are folded in when planned, steps
        whose last byte has left arrive when planned, steps on the wire go on as flows with the
        bytes they have left, and :class:`RoundsAsFlows` starts the rest when their ends are ready."""
        if not self.held:
            return
        self._release()
        run, env, now = self.run, self.links.env, self.links.env.now
        level, next_send, sending = [len(run.rounds)] * run.seats, [0] * run.seats, [False] * run.seats
        for k, (steps, routes, times) in enumerate(zip(run.rounds, self.layout.paths, self.timed)):
            for step, (channels, latency_s), start_s, sent_s, arrive_s, folded_s, rate_bps in zip(
                steps, routes, *times
            ):
                if folded_s > now:
                    for d in run._seats(step.dst, step):
                        level[d] = min(level[d], k)
                if start_s > now:
                    continue  # not started: RoundsAsFlows starts it when its ends are ready
                sources = run._seats(step.src, step)
                if sent_s <= now:
                    for s in sources:
                        next_send[s] += 1
                else:  # on the wire: a flow with what it has left, from now
                    for s in sources:
                        sending[s] = True
                    left = max(float(step.fraction * run.nbytes - rate_bps * (now - start_s)), 0.0)
                    self.links.start(
                        channels,
                        left,
                        latency_s * step.hops,
                        functools.partial(run._arrived, k, step),
                        functools.partial(run._sent, sources),
                    )
                if sent_s <= now < arrive_s:
                    env.timeout(float(arrive_s) - now).callbacks.append(
                        lambda _, k=k, step=step: run._arrived(k, step)
                    )
                elif arrive_s <= now < folded_s:
                    env.timeout(float(folded_s) - now).callbacks.append(
                        lambda _, k=k, step=step: run._finish(k, step)
                    )
        run.start(level, next_send, sending)
