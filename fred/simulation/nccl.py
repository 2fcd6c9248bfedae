"""NCCL's all-reduce: the algorithm and protocol it picks for a message, and the time it predicts.

NCCL (2.8's ``src/graph/tuning.cc``) predicts every (algorithm, protocol) pair's time for a
message of ``n`` bytes as ``latency + n / algorithm bandwidth`` and runs the fastest:

- **Algorithms**: ``ring`` (``2(p-1)`` steps; its algorithm bandwidth is the bus bandwidth
  times ``p / 2(p-1)``) and ``tree`` (a chain inside each node, a double binary tree across
  nodes; half the bus bandwidth, capped at 110 GB/s on up to two nodes and 80 GB/s beyond).
- **Protocols**: ``LL`` (8-byte stores with a flag: lowest latency, a quarter of the ring's
  bandwidth, 1/3.8 of the tree's), ``LL128`` (128-byte lines with a flag: 92 % of the
  bandwidth, 70 % with one rank a node) and ``Simple`` (full bandwidth, a chunk's latency
  per step).
- **Latency** (µs): a base per pair plus, per step, the hardware latency of the link it
  crosses (NVLink, PCI or the network), from NCCL's tables; a ring takes ``2(p-1)`` steps of
  which ``2(nodes-1)`` cross the network, a tree ``2((p/nodes - 1) + log2 nodes)``. LL's
  intra-node step costs 1.8x once there is more than one node; a ring's Simple latency across
  nodes is 1.9x for messages of at least ``p/16 x 64`` KiB (the ring's "plateau"), and the tree's
  bandwidth is scaled down for medium sizes by NCCL's correction table.

The bus bandwidth is the node's (``intra``) inside one node, and the least of the node's and
its NICs' (``inter``) across nodes: a ring or tree crossing nodes runs at the pace of its
slowest hop. NCCL computes it as channels x a channel's speed from its topology search; here it
is given directly, as nccl-tests' ``busbw`` states it. NCCL's LL128 cap per channel (16.7 GB/s)
is not applied: it needs the channel count, which a scenario does not state.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

NCCL_ALGORITHMS = ("ring", "tree")  # what NCCL picks among; fred's own all-reduces are collectives.ALGORITHMS
PROTOCOLS = ("LL", "LL128", "Simple")
LINKS = ("nvlink", "pci", "net")

# NCCL 2.8 tuning.cc, in microseconds: a pair's base latency, and a step's per link kind.
BASE_LATENCY_US = {
    ("tree", "LL"): 4.4,
    ("tree", "LL128"): 4.4,
    ("tree", "Simple"): 0.0,
    ("ring", "LL"): 3.6,
    ("ring", "LL128"): 10.0,
    ("ring", "Simple"): 8.4,
}
STEP_LATENCY_US = {
    "nvlink": {
        ("tree", "LL"): 0.52,
        ("tree", "LL128"): 1.2,
        ("tree", "Simple"): 28.0,
        ("ring", "LL"): 0.47,
        ("ring", "LL128"): 1.9,
        ("ring", "Simple"): 3.4,
    },
    "pci": {
        ("tree", "LL"): 1.0,
        ("tree", "LL128"): 1.9,
        ("tree", "Simple"): 28.0,
        ("ring", "LL"): 1.0,
        ("ring", "LL128"): 2.5,
        ("ring", "Simple"): 5.7,
    },
    "net": {
        ("tree", "LL"): 5.0,
        ("tree", "LL128"): 8.5,
        ("tree", "Simple"): 50.0,
        ("ring", "LL"): 2.7,
        ("ring", "LL128"): 4.0,
        ("ring", "Simple"): 9.6,
    },
}
# The tree's bandwidth for messages of 64 B x 2^k (k = 0..21), per protocol: it falls short of
# its model at medium sizes (NCCL's treeCorrectionFactor).
TREE_CORRECTION = {
    "LL": (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
    ),
    "LL128": (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.5,
        0.6,
        0.6,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        1.0,
    ),
    "Simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.6,
        0.7,
        0.8,
        0.9,
    ),
}
TREE_MAX_BPS = {True: 110e9, False: 80e9}  # on at most two nodes, and beyond


class Fabric(NamedTuple):
    """Who takes part and what joins them: ``ranks`` on ``nodes`` (as many a node), the node's
    all-reduce bus bandwidth, its NICs' together, and the kind of link inside a node."""

    ranks: int
    nodes: int
    intra_busbw_bps: float
    inter_busbw_bps: float
    intra_link: str = "nvlink"


class Estimate(NamedTuple):
    """NCCL's prediction for one algorithm and protocol: ``time_s = latency_s + nbytes / algbw_bps``."""

    algorithm: str
    protocol: str
    time_s: float
    latency_s: float
    algbw_bps: float


def _bus_bps(algorithm: str, protocol: str, fabric: Fabric) -> float:
    """The bus bandwidth an algorithm and protocol reach (NCCL's "model refinements")."""
    bus = fabric.intra_busbw_bps if fabric.nodes == 1 else min(fabric.intra_busbw_bps, fabric.inter_busbw_bps)
    if algorithm == "ring":
        if protocol == "LL":
            return bus / 4
        if protocol == "LL128":
            return bus * (0.7 if fabric.ranks / fabric.nodes < 2 else 0.92)
        return bus
    bus = min(bus * 0.9, TREE_MAX_BPS[fabric.nodes <= 2])
    if protocol == "LL":
        return bus / 3.8
    if protocol == "LL128":
        return bus * (7 / 9 if fabric.nodes == 1 else 0.915)
    return bus


def _latency_us(algorithm: str, protocol: str, fabric: Fabric) -> float:
    """A collective's latency before its size counts: base, plus each step's link latency."""
    key = (algorithm, protocol)
    intra = STEP_LATENCY_US[fabric.intra_link][key] * (1.8 if fabric.nodes > 1 and protocol == "LL" else 1.0)
    net = STEP_LATENCY_US["net"][key]
    if algorithm == "ring":
        steps, across = 2 * (fabric.ranks - 1), 2 * (fabric.nodes - 1)
        return BASE_LATENCY_US[key] + (steps - across) * intra + across * net
    per_node = fabric.ranks // fabric.nodes
    return BASE_LATENCY_US[key] + 2 * ((per_node - 1) * intra + int(math.log2(fabric.nodes)) * net)


def estimate(nbytes: float, algorithm: str, protocol: str, fabric: Fabric) -> Estimate:
    """NCCL's predicted time for an all-reduce of ``nbytes`` by ``algorithm`` and ``protocol``."""
    if algorithm not in NCCL_ALGORITHMS or protocol not in PROTOCOLS:
        raise ValueError(
            f"unknown NCCL algorithm/protocol {algorithm}/{protocol}; "
            f"algorithms: {', '.join(NCCL_ALGORITHMS)}; protocols: {', '.join(PROTOCOLS)}"
        )
    if fabric.ranks < 2:
        return Estimate(algorithm, protocol, 0.0, 0.0, math.inf)
    ratio = 0.5 if algorithm == "tree" else fabric.ranks / (2 * (fabric.ranks - 1))
    algbw = _bus_bps(algorithm, protocol, fabric) * ratio
    size_class = int(nbytes) >> 6
    log_size = size_class.bit_length() - 1 if size_class > 0 else 0
    if algorithm == "tree" and log_size < 22:
        algbw *= TREE_CORRECTION[protocol][log_size]
    latency_us = _latency_us(algorithm, protocol, fabric)
    plateau = fabric.nodes > 1 and nbytes >= fabric.ranks / 16 * 65536
    if algorithm == "ring" and protocol == "Simple" and plateau:
        latency_us *= 1.9
    latency_s = latency_us * 1e-6
    return Estimate(algorithm, protocol, latency_s + nbytes / algbw, latency_s, algbw)


def choose(
    nbytes: float,
    fabric: Fabric,
    algorithms: Sequence[str] = NCCL_ALGORITHMS,
    protocols: Sequence[str] = PROTOCOLS,
) -> Estimate:
    """The fastest allowed pair for ``nbytes``, as NCCL picks it (ties: the earlier in NCCL's order)."""
    if not algorithms or not protocols:
        raise ValueError("NCCL needs at least one algorithm and one protocol to choose from")
    best: Estimate | None = None
    for algorithm in NCCL_ALGORITHMS:
        for protocol in PROTOCOLS:
            if algorithm in algorithms and protocol in protocols:
                candidate = estimate(nbytes, algorithm, protocol, fabric)
                if best is None or candidate.time_s < best.time_s:
                    best = candidate
    assert best is not None
    return best
