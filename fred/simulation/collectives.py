"""Collectives as rounds of point-to-point transfers, the registry of all-reduce algorithms, and
their closed forms.

A schedule is a list of rounds; a round is a list of :class:`Step`: member ``src`` sends
``fraction`` of the message to member ``dst``, which folds it in (``reduce``) or keeps it.
In a round every member sends at most one message and receives at most one. A step starts
when both its ends are ready (each has received and folded in what earlier rounds brought
it): a rendezvous, as large messages go in MPI (the receiver posts its buffer first) and
over TCP (flow control holds the sender to what the receiver reads). Nothing else waits for
a round to end: the time comes out of the data dependencies and the links.

A step may belong to a *lane*: an algorithm that moves parts of the message independently
(the double binary tree's two trees, each with half) gives each part a lane, and a member is
ready, and sends one message after another, per lane. A step of no lane (``lane=None``, the
default) waits for its ends in every lane and makes its receiver ready in every lane, so a
single-lane algorithm, or the steps around a laned one in a hierarchical all-reduce, join
the lanes.

Members are positions ``0 .. p-1`` in group order. For ``p`` not a power of two, recursive
and halving-doubling do as MPICH does: with ``q`` the largest power of two below ``p`` and
``r = p - q``, the ``r`` members past ``q`` first send their whole message to members
``0 .. r-1`` (which fold it in), the ``q`` members run the algorithm, and the ``r`` helpers
send the result back.

:data:`ALGORITHMS` is the one registry of the all-reduce algorithms that run as rounds, by
their ``network.allreduce`` names (``nccl`` is NCCL's own choice, :mod:`fred.simulation.nccl`).
Besides the all-reduces there are the ring all-gather, the ring reduce-scatter (the ring
all-reduce's first half) and the binomial-tree broadcast. :mod:`fred.simulation.algorithms`
times schedules on the links (:func:`run_rounds` books them first come, first served;
:mod:`fred.simulation.rounds_as_flows` runs them as flows) and counts each member's bytes
from them (:func:`bytes_sent`). What an all-reduce *sums* never depends on the algorithm:
the engine adds the values in group order by a fixed tree.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np

from fred.scenario.schema import NetworkConfig
from fred.simulation.network import ring_allreduce_time_s


class Step(NamedTuple):
    """One transfer of a round: ``fraction`` of the message from ``src`` to ``dst``."""

    src: int
    dst: int
    fraction: float
    reduce: bool  # dst folds it in (costs fraction * nbytes * gamma) rather than keeping it
    hops: int = 1  # link latencies it pays: a ring phase as one flow crosses p-1 hops
    lane: int | None = None  # the part of the message it moves; None: the member's whole state


def lanes(rounds: list[Round]) -> int:
    """How many lanes the schedule's members keep a readiness for (1 for a single-lane algorithm).
    A round's steps are all of one lane, so its first says (a look per round, not per step)."""
    return 1 + max((steps[0].lane for steps in rounds if steps and steps[0].lane is not None), default=0)


def lanes_of(step: Step, count: int) -> range:
    """The lanes ``step`` concerns among ``count``: its own, or every lane for a step of none."""
    return range(count) if step.lane is None else range(step.lane, step.lane + 1)


Round = list[Step]  # the schedules are cached and shared: never changed once built
Book = Callable[[int, int, float, float], float]  # (src, dst, nbytes, not_before_s) -> arrival time


def split(p: int) -> tuple[int, int]:
    """``(q, r)``: the largest power of two ``q <= p`` and the ``r = p - q`` members left over."""
    q = 1 << (p.bit_length() - 1)
    return q, p - q


def _fold_in(q: int, r: int) -> list[Round]:
    return [[Step(q + i, i, 1.0, True) for i in range(r)]] if r else []


def _hand_back(q: int, r: int) -> list[Round]:
    return [[Step(i, q + i, 1.0, False) for i in range(r)]] if r else []


@functools.lru_cache(maxsize=64)  # a run repeats one group's collective: build its p log p steps once
def recursive_doubling(p: int) -> list[Round]:
    """log2 q rounds; in round k member i swaps its whole message with member i XOR 2^k."""
    q, r = split(p)
    rounds = [[Step(i, i ^ d, 1.0, True) for i in range(q)] for d in _powers_below(q)]
    return _fold_in(q, r) + rounds + _hand_back(q, r)


@functools.lru_cache(maxsize=64)
def halving_doubling(p: int) -> list[Round]:
    """Rabenseifner's: a reduce-scatter by recursive halving (distance q/2 first, half of
    what is left each time), then an all-gather by recursive doubling (the reverse)."""
    q, r = split(p)
    distances = list(reversed(_powers_below(q)))  # q/2, q/4, ..., 1
    scatter = [[Step(i, i ^ d, d / q, True) for i in range(q)] for d in distances]
    gather = [[Step(i, i ^ d, d / q, False) for i in range(q)] for d in reversed(distances)]
    return _fold_in(q, r) + scatter + gather + _hand_back(q, r)


def _powers_below(q: int) -> list[int]:
    return [1 << k for k in range(q.bit_length() - 1)]


@functools.lru_cache(maxsize=64)
def binary_tree(p: int) -> list[Round]:
    """Reduce the whole message up a binary tree to member 0, then broadcast it back down.

    The tree is a heap's: member ``i``'s children are ``2i+1`` (left) and ``2i+2`` (right),
    so it is ``floor(log2 p)`` levels deep for any ``p``. A member takes in one message a
    round, so a parent of two hears its right child first (the smaller subtree: ready
    sooner) and its left child in the next round, the deepest level first; the broadcast
    runs from the root down, each parent sending to its right child, then its left.
    """
    depth = p.bit_length() - 1
    by_side = [
        [[c for c in range((1 << d) - 1, min((2 << d) - 1, p)) if c % 2 == side] for side in (0, 1)]
        for d in range(1, depth + 1)
    ]  # at depth d: right children (even positions), then left
    up = [[Step(c, (c - 1) // 2, 1.0, True) for c in side] for level in reversed(by_side) for side in level]
    down = [[Step((c - 1) // 2, c, 1.0, False) for c in side] for level in by_side for side in level]
    return [steps for steps in up + down if steps]


@functools.lru_cache(maxsize=64)
def ring(p: int) -> list[Round]:
    """The ring as rounds: 2(p-1) rounds of a 1/p chunk to the next member, the first p-1 added in.
    (A flat all-reduce books the ring in fred.simulation.network; this form serves inside others.)"""
    return (
        [[Step(i, (i + 1) % p, 1.0 / p, k < p - 1) for i in range(p)] for k in range(2 * (p - 1))]
        if p > 1
        else []
    )


@functools.lru_cache(maxsize=64)
def ring_allgather(p: int) -> list[Round]:
    """A ring all-gather as rounds: p-1 rounds in which member i passes its successor the payload
    it got last (its own first), kept, not added. A payload is the whole message (``fraction`` 1):
    each member contributes ``nbytes`` and ends with p of them, having sent (p-1) ``nbytes``."""
    return [[Step(i, (i + 1) % p, 1.0, False) for i in range(p)] for _ in range(p - 1)] if p > 1 else []


@functools.lru_cache(maxsize=64)
def ring_reduce_scatter(p: int) -> list[Round]:
    """A ring reduce-scatter as rounds: the ring all-reduce's first p-1 rounds, each a ``1/p`` chunk
    to the next member, added in. Member i ends with the sum of chunk i+1 (mod p); each member
    sends (p-1)/p of the message, half of what it sends in the all-reduce."""
    return ring(p)[: p - 1]


@functools.lru_cache(maxsize=64)
def binomial_broadcast(p: int) -> list[Round]:
    """A broadcast of the whole message from member 0 down a binomial tree: in round k each
    member below ``2^k`` sends it to the member ``2^k`` above it, ``ceil(log2 p)`` rounds."""
    return [
        [Step(i, i + (1 << k), 1.0, False) for i in range(min(1 << k, p - (1 << k)))]
        for k in range((p - 1).bit_length())
    ]


@functools.lru_cache(maxsize=64)
def ring_phases(p: int) -> list[Round]:
    """The ring as two flows per member, for the flow-level network: in each phase member i
    sends its successor (p-1) chunks of 1/p back to back, paying p-1 link latencies; the
    reduce-scatter's chunks are added in. On idle links this is the ring's closed form; under
    contention each member's phase is one flow, not p-1 (the simulation's work stays O(p))."""
    if p < 2:
        return []
    share = (p - 1) / p
    return [[Step(i, (i + 1) % p, share, reduce, p - 1) for i in range(p)] for reduce in (True, False)]


def _in_order_tree(p: int) -> list[tuple[int, int, list[int]]]:
    """NCCL's binary tree over ``0 .. p-1`` (``ncclGetBtree``): each member's ``(parent, height,
    children)``, the children larger subtree first. Member ``x > 0`` with lowest set bit ``2^j``
    is at height ``j``: its children are ``x - 2^(j-1)`` (a full subtree) and ``x + 2^i`` for the
    largest ``i < j`` that fits below ``p`` (a full or a cut one); its parent is ``x`` with that
    bit moved up one place (or cleared, where that is past ``p``). Member 0 is the root, of
    height ``ceil(log2 p)``, with one child: the largest power of two below ``p``. The leaves
    are the odd members."""
    top = (p - 1).bit_length()
    tree: list[tuple[int, int, list[int]]] = [(-1, top, [1 << (top - 1)] if p > 1 else [])]
    for x in range(1, p):
        bit = x & -x
        parent = (x ^ bit) | (bit << 1)
        parent = parent if parent < p else x ^ bit
        half = bit >> 1
        right = next((x + d for d in (half >> k for k in range(half.bit_length())) if x + d < p), None)
        children = [x - half] + ([right] if right is not None else []) if half else []
        tree.append((parent, bit.bit_length() - 1, children))
    return tree


@functools.lru_cache(maxsize=64)
def double_binary_tree(p: int) -> list[Round]:
    """NCCL's tree all-reduce: two binary trees, each reducing half the message up to its root
    and broadcasting it back down, in lanes 0 and 1.

    The first tree is :func:`_in_order_tree` (its leaves are the odd members); the second is the
    first shifted by one member (member ``x`` of the second is ``x - 1`` of the first), so its
    leaves are the even ones and every member is inside at most one tree (member 0 of an odd
    ``p`` is in both: the first's root has one child). A parent takes in its smaller subtree's
    half first (ready sooner) and broadcasts to its larger subtree first (further to go).
    Rounds go by height: reduce rounds from the leaves up, broadcast rounds from the root down.
    """
    if p < 2:
        return []
    tree = _in_order_tree(p)
    up: dict[
        tuple[int, int], list[tuple[int, int]]
    ] = {}  # (child's height, its turn at its parent) -> (child, parent)
    down: dict[
        tuple[int, int], list[tuple[int, int]]
    ] = {}  # (-parent's height, the child's turn) -> (parent, child)
    for parent, (_, height, children) in enumerate(tree):
        for turn, child in enumerate(children):
            up.setdefault((tree[child][1], len(children) - 1 - turn), []).append((child, parent))
            down.setdefault((-height, turn), []).append((parent, child))
    rounds: list[Round] = []
    for pairs, reduce in ((up, True), (down, False)):
        for key in sorted(pairs):
            for lane in (0, 1):
                rounds.append(
                    [Step((a + lane) % p, (b + lane) % p, 0.5, reduce, 1, lane) for a, b in pairs[key]]
                )
    return rounds


ALGORITHMS: dict[str, Callable[[int], list[Round]]] = {
    "ring": ring,
    "recursive_doubling": recursive_doubling,
    "halving_doubling": halving_doubling,
    "binary_tree": binary_tree,
    "double_binary_tree": double_binary_tree,
}


@functools.lru_cache(maxsize=64)
def hierarchical(
    nodes: tuple[tuple[int, ...], ...], across: str, ring_as_phases: bool = False
) -> list[Round]:
    """Reduce inside each node to its first member, all-reduce those across nodes by
    ``across``, broadcast inside each node. ``nodes`` are the members' positions by node.

    Inside a node both trees are binomial: in reduce round ``k`` the member of local rank
    ``i`` with ``i mod 2^(k+1) = 2^k`` sends its whole message to rank ``i - 2^k``; the
    broadcast runs the same tree from the root down. All nodes move in the same rounds.
    """
    depth = (max(len(members) for members in nodes) - 1).bit_length()  # ceil(log2 g) rounds
    up = [
        [
            Step(m[i], m[i - (1 << k)], 1.0, True)
            for m in nodes
            for i in range(len(m))
            if i % (2 << k) == 1 << k
        ]
        for k in range(depth)
    ]
    down = [[Step(s.dst, s.src, 1.0, False) for s in steps] for steps in reversed(up)]
    leaders = [m[0] for m in nodes]
    schedule = ring_phases if (ring_as_phases and across == "ring") else ALGORITHMS[across]
    across_rounds = [
        [Step(leaders[s.src], leaders[s.dst], s.fraction, s.reduce, s.hops, s.lane) for s in steps]
        for steps in schedule(len(leaders))
    ]
    return [r for r in up + across_rounds + down if r]


def run_rounds(
    book: Book, rounds: list[Round], p: int, nbytes: float, reduce_s_per_byte: float, now_s: float
) -> float:
    """Book every step in order; return when the last member has the result (before S)."""
    count = lanes(rounds)
    ready = [now_s] * (p * count)  # [member * count + lane]: when it has folded in all sent to it so far
    for steps in rounds:
        after = list(ready)
        for step in steps:
            own = lanes_of(step, count)
            src, dst = step.src * count, step.dst * count
            start_s = max(
                max(ready[src + lane], ready[dst + lane]) for lane in own
            )  # rendezvous: both ends reached this round
            arrive_s = book(step.src, step.dst, step.fraction * nbytes, start_s)
            reduce_s = step.fraction * nbytes * reduce_s_per_byte if step.reduce else 0.0
            for lane in own:
                after[dst + lane] = max(after[dst + lane], arrive_s) + reduce_s
        ready = after
    return max(ready)


def bytes_sent(rounds: list[Round], p: int, nbytes: float) -> list[float]:
    """What each member sends in the whole all-reduce (added up in step order, as one by one)."""
    senders, fractions = _senders(rounds)
    sent = np.zeros(p)
    np.add.at(sent, senders, fractions * nbytes)  # unbuffered: each member's sum in step order
    return sent.tolist()


_SENDERS: dict[int, tuple[list[Round], np.ndarray, np.ndarray]] = {}


def _senders(rounds: list[Round]) -> tuple[np.ndarray, np.ndarray]:
    """Each step's sender and fraction, in step order (kept per schedule: a run repeats one)."""
    kept = _SENDERS.get(id(rounds))
    if kept is None or kept[0] is not rounds:
        if len(_SENDERS) >= 64:
            _SENDERS.clear()
        steps = [s for r in rounds for s in r]
        kept = _SENDERS[id(rounds)] = (
            rounds,
            np.array([s.src for s in steps], dtype=np.intp),
            np.array([s.fraction for s in steps]),
        )
    return kept[1], kept[2]


def allreduce_time_s(algorithm: str, p: int, nbytes: float, cfg: NetworkConfig) -> float:
    """Closed form of an all-reduce of ``nbytes`` over ``p`` members on idle, uniform links.

    With ``L = log2 q`` and ``f = (q-1)/q``:

    - ring: ``2(p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma``
    - recursive_doubling: ``L (alpha + n beta + n gamma)``
    - halving_doubling: ``2 L alpha + 2 f n beta + f n gamma``

    plus, when ``p != q``, ``2 alpha + 2 n beta + n gamma`` for folding the ``r`` extra
    members in and handing them the result; plus ``S`` for every algorithm. The binary
    trees' are :func:`binary_tree_time_s` and :func:`double_binary_tree_time_s`.
    """
    alpha, beta, gamma = cfg.latency_s, 1.0 / (cfg.bandwidth_bps * cfg.efficiency), cfg.reduce_s_per_byte
    if p < 2:
        return cfg.sync_s
    if algorithm == "ring":
        return ring_allreduce_time_s(p, nbytes, cfg)
    if algorithm == "binary_tree":
        return binary_tree_time_s(p, nbytes, cfg)
    if algorithm == "double_binary_tree":
        return double_binary_tree_time_s(p, nbytes, cfg)
    q, r = split(p)
    levels = q.bit_length() - 1
    if algorithm == "recursive_doubling":
        core = levels * (alpha + nbytes * beta + nbytes * gamma)
    elif algorithm == "halving_doubling":
        frac = (q - 1) / q
        core = 2 * levels * alpha + 2 * frac * nbytes * beta + frac * nbytes * gamma
    else:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; one of: {', '.join(ALGORITHMS)}")
    extra = 2 * alpha + 2 * nbytes * beta + nbytes * gamma if r else 0.0
    return core + extra + cfg.sync_s


def allgather_time_s(p: int, nbytes: float, cfg: NetworkConfig) -> float:
    """Closed form of a ring all-gather (:func:`ring_allgather`) of ``nbytes`` from each of ``p``
    members on idle, uniform links: ``(p-1)(alpha + n beta) + S``. Nothing is added (no gamma)."""
    beta = 1.0 / (cfg.bandwidth_bps * cfg.efficiency)
    return (p - 1) * (cfg.latency_s + nbytes * beta) + cfg.sync_s


def reduce_scatter_time_s(p: int, nbytes: float, cfg: NetworkConfig) -> float:
    """Closed form of :func:`ring_reduce_scatter` of an ``nbytes`` message on idle, uniform links:
    ``(p-1)(alpha + n/p beta + n/p gamma) + S``. With the all-gather of its ``n/p`` shards
    (:func:`allgather_time_s`) it makes the ring all-reduce, less one ``S``."""
    alpha, beta, gamma = cfg.latency_s, 1.0 / (cfg.bandwidth_bps * cfg.efficiency), cfg.reduce_s_per_byte
    chunk = nbytes / p
    return (p - 1) * (alpha + chunk * beta + chunk * gamma) + cfg.sync_s


def broadcast_time_s(p: int, nbytes: float, cfg: NetworkConfig) -> float:
    """Closed form of :func:`binomial_broadcast` on idle, uniform links:
    ``max over 0 < x < p of popcount(x) alpha + bitlength(x) n beta``, plus S. Member ``x`` is
    reached in ``popcount(x)`` hops; a member sends one message after another, so the message
    to ``x`` leaves its sender's link after ``bitlength(x)`` whole messages have."""
    alpha, beta = cfg.latency_s, 1.0 / (cfg.bandwidth_bps * cfg.efficiency)
    return (
        max((x.bit_count() * alpha + x.bit_length() * nbytes * beta for x in range(1, p)), default=0.0)
        + cfg.sync_s
    )


def hierarchical_time_s(across: str, nodes: int, per_node: int, nbytes: float, cfg: NetworkConfig) -> float:
    """Closed form of :func:`hierarchical` on idle links: ``nodes`` full nodes of ``per_node`` members.

    With ``m = ceil(log2 g)`` for ``g = per_node``, α_i and β_i the intra-node link's:
    ``m (α_i + n β_i + n γ)`` to reduce inside the node, the ``across`` closed form among the
    nodes (without its S), and a broadcast whose last member is reached after
    ``max over 0 < x < g of popcount(x) α_i + (m - lowbit(x)) n β_i`` (member ``x`` is reached
    in ``popcount(x)`` hops, and its tree's senders send one message after another), plus S.
    """
    alpha_i, beta_i, gamma = cfg.intra_node.latency_s, 1.0 / cfg.intra_node.rate_bps(), cfg.reduce_s_per_byte
    m = (per_node - 1).bit_length()
    reduce_s = m * (alpha_i + nbytes * beta_i + nbytes * gamma)
    broadcast_s = max(
        (
            bin(x).count("1") * alpha_i + (m - ((x & -x).bit_length() - 1)) * nbytes * beta_i
            for x in range(1, per_node)
        ),
        default=0.0,
    )
    across_s = allreduce_time_s(across, nodes, nbytes, cfg) - cfg.sync_s if nodes > 1 else 0.0
    return reduce_s + across_s + broadcast_s + cfg.sync_s


def binary_tree_time_s(p: int, nbytes: float, cfg: NetworkConfig) -> float:
    """Closed form of :func:`binary_tree` on idle, uniform links.

    With ``D = floor(log2 p)`` and ``H = max over 1 <= x <= p of (floor(log2 x) + popcount(x) - 1)``:
    ``H (alpha + n beta + n gamma) + D alpha + (2D - [p is a power of two]) n beta + S``.

    The reduce: in 1-based heap numbering member ``x`` is ``floor(log2 x)`` hops below the
    root, and a hop from a right child (odd ``x``, one bit of ``popcount(x) - 1``) costs
    two transfers-and-folds, since its parent folds it in before it takes the left child;
    a hop from a left child costs one. The broadcast: the last member reached is the
    leftmost of the deepest level, ``2^D``, each of whose hops waits for its parent's send
    to its right sibling (two ``n beta``), except the last when ``2^D`` has no sibling
    (``p = 2^D``). Every other member is reached sooner, however a link shares its
    bandwidth between a parent's two sends: the time is the same when they go one after
    another or side by side.
    """
    alpha, beta, gamma = cfg.latency_s, 1.0 / (cfg.bandwidth_bps * cfg.efficiency), cfg.reduce_s_per_byte
    depth = p.bit_length() - 1
    hops = max(x.bit_length() + x.bit_count() - 2 for x in range(1, p + 1))
    reduce_s = hops * (alpha + nbytes * beta + nbytes * gamma)
    broadcast_s = depth * alpha + (2 * depth - (p & (p - 1) == 0)) * nbytes * beta
    return reduce_s + broadcast_s + cfg.sync_s


def double_binary_tree_time_s(p: int, nbytes: float, cfg: NetworkConfig) -> float:
    """Closed form of :func:`double_binary_tree` on idle, uniform links.

    With ``D = floor(log2 p)`` and each tree moving ``m = n/2``:

    - ``p = 2^D``: ``(2D - 1)(alpha + m beta + m gamma) + D alpha + (2D - 1) m beta + S``
    - otherwise: ``2D (alpha + m beta + m gamma) + (D + 1) alpha + 2D m beta + S``

    Both trees have one shape and take the same time, and on idle links their transfers never
    share a link at one moment (a member sends in the tree it is a leaf of before it has
    anything to send in the other, and receives the two broadcasts one after the other), so
    each tree takes what it would alone. The reduce: a full subtree of height ``h`` is folded
    in after ``2h`` transfers-and-folds (its root takes its two children one after the
    other), a cut one after ``2h - 1``; the root's child heads a subtree of height
    ``ceil(log2 p) - 1``, full when ``p = 2^D``. The broadcast: a parent sends its larger
    subtree first and its smaller ``m beta`` later, so a full subtree of height ``h`` is
    reached in ``h (alpha + 2 m beta)``, a cut one ``m beta`` sooner; plus the root's hop.
    """
    alpha, beta, gamma = cfg.latency_s, 1.0 / (cfg.bandwidth_bps * cfg.efficiency), cfg.reduce_s_per_byte
    if p < 2:
        return cfg.sync_s
    depth, half = p.bit_length() - 1, nbytes / 2
    hop_s = alpha + half * beta + half * gamma
    if p & (p - 1) == 0:
        return (2 * depth - 1) * hop_s + depth * alpha + (2 * depth - 1) * half * beta + cfg.sync_s
    return 2 * depth * hop_s + (depth + 1) * alpha + 2 * depth * half * beta + cfg.sync_s
