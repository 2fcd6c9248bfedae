"""The collectives of a run as objects, chosen once from its network section.

When the simulation is built, :func:`allreduce_for` reads ``network.allreduce``,
``hierarchical`` and ``hierarchy``, ``sharing`` and whether messages can be lost, and returns
the one :class:`Collective` that times every all-reduce of the run; :func:`allgather_for`
returns the one for its all-gathers. The engine joins the members and adds their values; it
asks the chosen object two things only: how long the collective among ``names`` takes
(:meth:`Collective.run`) and how many bytes each member sent (:meth:`Collective.sent_by`),
which the object counts from the same rounds it times.

The kinds:

- :class:`Scheduled`: a schedule of rounds from :mod:`fred.simulation.collectives` (recursive
  and halving doubling, the binary and double binary trees, the hierarchical all-reduce, the
  ring as two phases, the ring all-gather, the reduce-scatter, the broadcast), timed by
  :class:`Booked` (first come, first served) or :class:`AsFlows` (fairly shared links, timed
  in one piece while its links are idle);
- :class:`BookedRing`: the flat ring on first-come-first-served links, chunk by chunk, or in
  one pass over one shared timeline while its links are idle and no message can be lost;
- :class:`RingAsFlows`: the flat ring on fairly shared links as one flow per phase;
- :class:`Nccl`: NCCL's pick of algorithm and protocol and the time it predicts.

:func:`reduce_scatter_for` and :func:`broadcast_for` give the reduce-scatter (the ring
all-reduce's first half) and the binomial-tree broadcast on the same links.
"""

from __future__ import annotations

from typing import Any, Callable, Generator

import simpy

from fred.scenario.schema import NcclConfig, NetworkConfig
from fred.simulation import nccl
from fred.simulation.collectives import (
    ALGORITHMS,
    Round,
    binomial_broadcast,
    bytes_sent,
    hierarchical,
    ring_allgather,
    ring_phases,
    ring_reduce_scatter,
    run_rounds,
)
from fred.simulation.network import ring_by_chunk
from fred.simulation.rounds_as_flows import RoundsAsFlows, on_idle_links
from fred.simulation.transport import Transport

Process = Generator[simpy.Event, Any, Any]
SentBy = Callable[[int, float], float]  # (member's index, the nbytes it joined with) -> the bytes it sent
Schedule = Callable[[list[str]], list[Round]]  # the rounds among these members, in group order


class Collective:
    """One kind of collective on a run's links: how long it takes, and what each member sends."""

    def __init__(self, transport: Transport):
        self.transport, self.env, self.network = transport, transport.env, transport.network
        self.config: NetworkConfig = transport.network.config

    def run(self, names: list[str], nbytes: float) -> Process:
        """The collective among ``names`` (in group order) of ``nbytes`` a member: a process that
        ends once the last member has the result and the synchronisation cost ``S`` has passed."""
        raise NotImplementedError

    def sent_by(self, members: list[int], names: list[str], nbytes: float) -> SentBy:
        """What each of ``members`` (worker indices, named ``names``) sent in the collective of
        ``nbytes`` that :meth:`run` timed, asked once per collective."""
        raise NotImplementedError


class RingBytes:
    """A ring all-reduce's bytes: its rounds' 2(p-1) chunks of ``n/p``, counted in closed form, so
    each member sends 2(p-1)/p of the message it joined with."""

    def sent_by(self, members: list[int], names: list[str], nbytes: float) -> SentBy:
        p = len(members)
        return lambda member, own_bytes: 2 * (p - 1) * own_bytes / p


class RoundsTiming:
    """How rounds of transfers take time on the links (:mod:`fred.simulation.collectives`)."""

    def __init__(self, transport: Transport):
        self.transport, self.env, self.config = transport, transport.env, transport.network.config

    def run(self, names: list[str], rounds: list[Round], nbytes: float) -> Process:
        """``rounds`` among ``names``, then S. Only a step marked ``reduce`` costs gamma."""
        raise NotImplementedError


class Booked(RoundsTiming):
    """Rounds booked transfer by transfer, first come, first served, when the collective starts."""

    def run(self, names: list[str], rounds: list[Round], nbytes: float) -> Process:
        def book(src: int, dst: int, n: float, not_before_s: float) -> float:
            return self.transport.book(names[src], names[dst], n, not_before_s).arrive_s

        done_s = run_rounds(book, rounds, len(names), nbytes, self.config.reduce_s_per_byte, self.env.now)
        yield self.env.timeout(done_s - self.env.now + self.config.sync_s)


class AsFlows(RoundsTiming):
    """Rounds on fairly shared links: each step a flow, started when its ends are ready. With
    ``one_piece`` they are timed in one piece while nothing else is on their links
    (:func:`~fred.simulation.rounds_as_flows.on_idle_links`); without it (lost messages, rtt
    sharing, or sites, whose crossings a piece would not tell) always flow by flow."""

    def __init__(self, transport: Transport, one_piece: bool):
        super().__init__(transport)
        self.one_piece = one_piece

    def run(self, names: list[str], rounds: list[Round], nbytes: float) -> Process:
        done, transport, env = self.env.event(), self.transport, self.env

        def post(
            src: int, dst: int, n: float, hops: int, arrive: Callable[[], None], sent: Callable[[], None]
        ) -> None:
            transport.post(names[src], names[dst], n, hops, arrive, sent)

        def later(delay_s: float, then: Callable[[], None]) -> None:
            env.timeout(delay_s).callbacks.append(lambda _: then())

        run = RoundsAsFlows(
            rounds,
            len(names),
            nbytes,
            self.config.reduce_s_per_byte,
            post,
            later,
            lambda: done.succeed(),
            start=False,
        )
        flows, path = transport.flows, transport.network.path
        if not self.one_piece or not on_idle_links(run, flows, names, path):  # type: ignore[arg-type]
            run.start()
        yield done
        yield self.env.timeout(self.config.sync_s)


class Scheduled(Collective):
    """A collective run as ``schedule``'s rounds, timed by ``timing``; each member's bytes are
    added up from the same rounds (:func:`~fred.simulation.collectives.bytes_sent`)."""

    def __init__(self, timing: RoundsTiming, schedule: Schedule):
        super().__init__(timing.transport)
        self.timing, self.schedule = timing, schedule

    def run(self, names: list[str], nbytes: float) -> Process:
        yield from self.timing.run(names, self.schedule(names), nbytes)

    def sent_by(self, members: list[int], names: list[str], nbytes: float) -> SentBy:
        sent = bytes_sent(self.schedule(names), len(names), nbytes)  # once per collective: O(p log p) steps
        by_member = dict(zip(members, sent))
        return lambda member, own_bytes: by_member[member]


class ScheduledRing(RingBytes, Scheduled):
    """The flat ring as rounds (its two phases as flows, where messages can be lost), its bytes
    counted as the ring's."""


class RingAllGather(Scheduled):
    """The ring all-gather (:func:`~fred.simulation.collectives.ring_allgather`): each member
    contributes ``nbytes`` and sends (p-1) of them."""

    def sent_by(self, members: list[int], names: list[str], nbytes: float) -> SentBy:
        p = len(members)
        return lambda member, own_bytes: (p - 1) * own_bytes


class BookedRing(RingBytes, Collective):
    """The flat ring on first-come-first-served links, booked chunk by chunk in step order
    (:func:`~fred.simulation.network.ring_by_chunk`): each member sends 2(p-1) chunks and folds
    in p-1. With ``one_pass`` a ring whose links are idle and uniform is booked in one pass over
    one shared timeline (:meth:`Network.ring_on_idle_links
    <fred.simulation.network.Network.ring_on_idle_links>`): the same times and link state."""

    def __init__(self, transport: Transport, one_pass: bool):
        super().__init__(transport)
        self.one_pass = one_pass

    def run(self, names: list[str], nbytes: float) -> Process:
        now_s = self.env.now
        chunk = nbytes / len(names)
        reduce_s = chunk * self.config.reduce_s_per_byte
        done_s = self.network.ring_on_idle_links(names, chunk, reduce_s, now_s) if self.one_pass else None
        if done_s is None:  # contention, a degraded link or lost chunks: book chunk by chunk
            done_s = ring_by_chunk(self.transport.book, names, chunk, reduce_s, now_s)
        yield self.env.timeout(done_s - now_s + self.config.sync_s)


class RingAsFlows(RingBytes, Collective):
    """The flat ring on fairly shared links: each phase one flow across every member's link.

    A pipelined ring moves at its slowest link's pace (a chunk goes on only once the one before
    it arrived), so its phase is one rate on all its links: (p-1)/p of the message, p-1
    latencies, then the reduce-scatter's additions. Two flows per all-reduce, whatever p.
    """

    def run(self, names: list[str], nbytes: float) -> Process:
        p, cfg, network, transport = len(names), self.config, self.network, self.transport
        paths = [network.path(names[i], names[(i + 1) % p]) for i in range(p)]
        channels = tuple(channel for hop, _ in paths for channel in hop)
        latency_s = (p - 1) * max(hop_latency_s for _, hop_latency_s in paths)
        phase_bytes = (p - 1) / p * nbytes
        for reduce in (True, False):
            arrived = self.env.event()
            if network.wan:
                transport.across_sites(channels, phase_bytes)
            transport.flows.start(channels, phase_bytes, latency_s, arrived)  # type: ignore[union-attr]
            yield arrived
            if reduce and phase_bytes * cfg.reduce_s_per_byte > 0.0:
                yield self.env.timeout(phase_bytes * cfg.reduce_s_per_byte)
        yield self.env.timeout(cfg.sync_s)


class Nccl(RingBytes, Collective):
    """NCCL's all-reduce (:mod:`fred.simulation.nccl`): the time NCCL predicts for its pick, then S.
    The first pick of each size and group shape is told in the summary's ``nccl`` list (``report``).
    Each member's bytes are its ring's, whichever algorithm it picked."""

    def __init__(self, transport: Transport, report: dict[str, Any]):
        super().__init__(transport)
        self.report = report
        self.picks: dict[tuple[int, int, float], nccl.Estimate] = {}

    def run(self, names: list[str], nbytes: float) -> Process:
        yield self.env.timeout(self.pick(names, nbytes).time_s + self.config.sync_s)

    def pick(self, names: list[str], nbytes: float) -> nccl.Estimate:
        """NCCL's pick for ``nbytes`` among ``names`` and its time, worked out once per size and shape."""
        cfg = self.config
        nodes = len({self.network.node[name]: None for name in names})
        key = (len(names), nodes, nbytes)
        known = self.picks.get(key)
        if known is None:
            allowed = cfg.nccl or NcclConfig()
            fabric = nccl.Fabric(
                len(names),
                nodes,
                cfg.intra_node.rate_bps(),
                cfg.bandwidth_bps * cfg.efficiency,
                allowed.intra_link,
            )
            known = self.picks[key] = nccl.choose(nbytes, fabric, allowed.algorithms, allowed.protocols)
            self.report.setdefault("nccl", []).append(
                f"{nbytes:.6g} bytes over {len(names)} ranks on {nodes} nodes: "
                f"{known.algorithm}/{known.protocol}, {known.time_s * 1e3:.4g} ms"
            )
        return known


def _by_size(schedule: Callable[[int], list[Round]]) -> Schedule:
    return lambda names: schedule(len(names))


def _hierarchical(transport: Transport, across: str) -> Schedule:
    """The hierarchical all-reduce among ``names``: reduce inside each node (or site), ``across``
    among the first member of each, broadcast inside; ring phases across on fairly shared links."""
    network = transport.network
    as_phases = transport.flows is not None

    def schedule(names: list[str]) -> list[Round]:
        by_node: dict[Any, list[int]] = {}  # in group order: a node's (or site's) first member is its leader
        within = network.site if network.config.hierarchy == "site" else network.node
        for position, name in enumerate(names):
            by_node.setdefault(within[name], []).append(position)
        return hierarchical(tuple(tuple(members) for members in by_node.values()), across, as_phases)

    return schedule


def rounds_timing(transport: Transport) -> RoundsTiming:
    """How the run's rounds take time: as flows where links are fairly shared, else booked."""
    if transport.flows is None:
        return Booked(transport)
    one_piece = not (transport.lossy or transport.flows.rtt or transport.network.wan)
    return AsFlows(transport, one_piece)


def allreduce_for(transport: Transport, report: dict[str, Any]) -> Collective:
    """The run's all-reduce, as the network section (``transport.network.config``) asks for it."""
    cfg = transport.network.config
    if cfg.allreduce == "nccl":
        return Nccl(transport, report)
    if cfg.hierarchical:
        return Scheduled(rounds_timing(transport), _hierarchical(transport, cfg.allreduce))
    if cfg.allreduce != "ring":
        return Scheduled(rounds_timing(transport), _by_size(ALGORITHMS[cfg.allreduce]))
    if transport.flows is None:
        return BookedRing(transport, one_pass=not transport.lossy)
    if transport.lossy:  # each member's phase a flow of its own, so that each can be lost
        return ScheduledRing(rounds_timing(transport), _by_size(ring_phases))
    return RingAsFlows(transport)


def allgather_for(transport: Transport) -> Collective:
    """The run's all-gather: a flat ring whatever ``network.allreduce`` (NCCL's all-gather is a ring too)."""
    return RingAllGather(rounds_timing(transport), _by_size(ring_allgather))


def reduce_scatter_for(transport: Transport) -> Collective:
    """A ring reduce-scatter: each member ends with the sum of one ``1/p`` shard of the message,
    the ring all-reduce's first half; each member sends ``(p-1)/p`` of the message."""
    return Scheduled(rounds_timing(transport), _by_size(ring_reduce_scatter))


def broadcast_for(transport: Transport) -> Collective:
    """A broadcast of the whole message from the group's first member down a binomial tree."""
    return Scheduled(rounds_timing(transport), _by_size(binomial_broadcast))
