"""Push-sum SGD, the loop ``sgp``, ``osgp`` and ``dpsgd`` run (Assran et al., after Nedic and Olshevsky):

    every node i, iteration k = 0, 1, ...:
        z_i <- x_i / w_i                                     (debiased; x_i itself when not)
        g   <- gradient on the next batch at z_i
        step_then_average:  x_i <- x_i - lr * g
        send (p_ji x_i, p_ji w_i) to each out-neighbour j;  keep (p_ii x_i, p_ii w_i)
        receive the in-neighbours' shares of iteration k - overlap (and any earlier ones that came)
        x_i <- own share + received x shares;  w_i <- own share + received w shares
        average_then_step:  x_i <- x_i - lr * g

The mixing matrix P(k) is column-stochastic, so push-sum keeps sum_i x_i and
sum_i w_i = n. Named topologies (:func:`mixing`): ``directed_exponential`` (node i sends to
i + 2^(k mod e), e = floor(log2(n - 1)) + 1 hops: log2 n for a power of two;
1 or 2 peers per iteration, weights split evenly), ``ring`` (i -> i + 1), ``complete``
(uniform 1/n: AR-SGD's average), or an explicit list of matrices used in turn.

Faults: the graph routes around a crashed node once it is given up on
(``faults.sync_timeout_s``): senders keep the share they would have sent it, and
receivers stop waiting for its shares. Until then its neighbours wait, and what was
sent to it is lost with it (push-sum's weights absorb the lost mass). The global
model is the average over the nodes still running.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np

from fred.numerics import rng
from fred.numerics.gradients import tree_sum
from fred.numerics.models import Params
from fred.numerics.optim import OptState, make_sum_step, optimizer_for
from fred.numerics.tape import op
from fred.scenario.schema import StrategyConfig
from fred.simulation.engine import Simulation, Worker

Matrix = list[list[float]]
Order = Literal["step_then_average", "average_then_step"]
Shares = Callable[[int, int], list[tuple[int, float]]]  # (iteration k, node i) -> [(node j, weight p_ji)]


# ----------------------------------------------------------------------------- topology
def mixing(config: StrategyConfig, n: int) -> Shares:
    """``shares(k, i)``: the (node, weight) pairs node i sends its iteration-k state to, itself included,
    for ``config.topology`` (a name, or column-stochastic matrices used in turn) and ``config.peers``."""
    topology = config.topology
    if not isinstance(topology, str):
        matrices = [np.asarray(m, dtype=float) for m in topology]
        return lambda k, i: [(j, float(p)) for j, p in enumerate(matrices[k % len(matrices)][:, i]) if p > 0]
    if topology == "complete":
        return lambda k, i: [(j, 1.0 / n) for j in range(n)]
    if topology == "ring":
        return lambda k, i: [(i, 0.5), ((i + 1) % n, 0.5)] if n > 1 else [(i, 1.0)]
    # The paper's list of hops: 2^0, 2^1, ..., 2^floor(log2(n - 1)), i.e. log2 n of them for a power
    # of two (and for 6 nodes: 1, 2 and 4).
    exponents = (n - 1).bit_length()

    def exponential(k: int, i: int) -> list[tuple[int, float]]:
        if n == 1:
            return [(i, 1.0)]
        peers = sorted({(i + 2 ** ((config.peers * k + m) % exponents)) % n for m in range(config.peers)})
        return [(i, 1.0 / (len(peers) + 1))] + [(j, 1.0 / (len(peers) + 1)) for j in peers]

    return exponential


def in_neighbours(shares: Shares, n: int) -> Callable[[int, int], list[int]]:
    """``senders(k, i)``: the other nodes whose iteration-k shares node i must receive."""

    # Nodes drift a few iterations apart, so keep the tables of several: with one, two
    # nodes an iteration apart rebuild it (O(n)) in turn, O(n^2) per iteration in all.
    @functools.lru_cache(maxsize=64)
    def table(k: int) -> list[list[int]]:
        rows: list[list[int]] = [[] for _ in range(n)]
        for j in range(n):
            for dst, _ in shares(k, j):
                if dst != j:
                    rows[dst].append(j)
        return rows

    return lambda k, i: table(k)[i]


# ----------------------------------------------------------------------------- numerics
@op("strategies._push_sum:scale")
@jax.jit
def scale(tree: Params, factor: jax.Array) -> Params:
    return jax.tree.map(lambda x: x * factor, tree)


@op("strategies._push_sum:debias")
@jax.jit
def debias(tree: Params, weight: jax.Array) -> Params:
    return jax.tree.map(lambda x: x / weight, tree)


# ----------------------------------------------------------------------------- processes
@dataclass
class Node:
    """One node's push-sum state, the shares not yet consumed, and who has been heard from."""

    x: Params | None  # None in a timing-only run
    opt: OptState | None = None  # the node's optimizer state: its steps on x, never mixed
    w: float = 1.0
    iteration: int = 0
    inbox: list[tuple[int, int, Params, float]] = field(default_factory=list)  # (iteration, sender, x, w)
    heard: dict[int, set[int]] = field(default_factory=dict)  # iteration -> senders delivered
    complete_below: int = 0  # every share of earlier iterations has arrived


@dataclass
class PushSum:
    """The running nodes; ``average()`` is the mean of the de-biased parameters z_i."""

    nodes: list[Node]
    debiased: bool
    down: set[int] = field(default_factory=set)  # crashed nodes, left out of the average

    def z(self, node: Node) -> Params | None:
        return debias(node.x, jnp.float32(node.w)) if self.debiased and node.x is not None else node.x

    def average(self) -> Params:
        running = [node for i, node in enumerate(self.nodes) if i not in self.down] or self.nodes
        return scale(tree_sum([self.z(node) for node in running]), jnp.float32(1.0 / len(running)))


def start_nodes(sim: Simulation, spread: float) -> list[Node]:
    if sim.timing_only:  # no parameters to push: shares carry only their weights
        return [Node(None) for _ in sim.workers]
    nodes = []
    for w in sim.workers:
        x = sim.init_params
        if spread > 0:
            noise = rng.stream(sim.seed, "push-sum-init", w.index)
            x = {k: v + jnp.asarray(noise.normal(0, spread, v.shape), v.dtype) for k, v in x.items()}
        nodes.append(Node(x))
    return nodes


def run_push_sum(
    sim: Simulation,
    config: StrategyConfig,
    overlap: int = 0,
    debiased: bool = True,
    shares: Shares | None = None,
    passive: Callable[[int], bool] | None = None,
    order: Order = "step_then_average",
) -> PushSum:
    """Start push-sum SGD on every worker; a node waits only for shares ``overlap`` iterations old.

    ``config`` gives the optimizer (``lr``, ``optimizer``, ``lr_schedule``), the start's spread
    (``init_spread``, 0 without one) and, unless ``shares`` is given, the topology (:func:`mixing`).

    Sends are non-blocking unless ``passive`` is given: then they block, as a blocking
    send-then-receive exchange does, and node ``i`` sends first and then receives when
    ``passive(i)`` is false, and receives first and then sends when it is true.

    ``order``: ``step_then_average`` (SGP's) sends shares of x_i - lr g, so the gradients are
    mixed too; ``average_then_step`` (D-PSGD's, Lian et al. 2017: x_{k+1} = W x_k - lr g(x_k))
    sends shares of x_i and steps the mixed x_i with the gradient taken before the mix. The
    schedule (compute, then exchange) and the messages are the same; only the numbers differ.
    """
    n = len(sim.workers)
    step_after_mix = order == "average_then_step"
    planned = shares or mixing(config, n)
    all_senders = in_neighbours(planned, n)
    opt = optimizer_for(config)
    step = make_sum_step(opt)
    state = PushSum(start_nodes(sim, getattr(config, "init_spread", 0.0)), debiased, sim.faults.down)
    for node in state.nodes:
        node.opt = opt.init(sim.init_params)

    def shares(k: int, i: int) -> list[tuple[int, float]]:
        """The planned shares, with a given-up node's share kept by the sender."""
        out = planned(k, i)
        kept = sum(p for j, p in out if j != i and sim.faults.excluded(j))
        if not kept:
            return out
        own = next((p for j, p in out if j == i), 0.0) + kept
        return [(i, own)] + [(j, p) for j, p in out if j != i and not sim.faults.excluded(j)]

    def senders(k: int, i: int) -> list[int]:
        return sim.faults.live(all_senders(k, i))

    def send_share(w: Worker, j: int, k: int, x: Params, weight: float):
        yield from sim.send(w.name, sim.workers[j].name, sim.param_bytes, payload=(k, w.index, x, weight))

    def file(node: Node, message: tuple[int, int, Params, float]) -> None:
        node.inbox.append(message)
        node.heard.setdefault(message[0], set()).add(message[1])

    def missing(w: Worker, node: Node, due: int) -> list[int]:
        """Senders still owed for iterations <= ``due`` (iterations found complete are remembered)."""
        while node.complete_below <= due:
            owed = [
                j
                for j in senders(node.complete_below, w.index)
                if j not in node.heard.get(node.complete_below, set())
            ]
            if owed:
                return owed
            node.heard.pop(node.complete_below, None)
            node.complete_below += 1
        return []

    def collect(w: Worker, node: Node, k: int):
        """File what has arrived; block until every share of iterations <= k - overlap is in."""
        box = sim.mailbox(w.name)
        while box.items:
            file(node, box.items.pop(0)[1])
        while owed := missing(w, node, k - overlap):
            sim.faults.blocked(owed, "push-sum mixing")
            get, wake = box.get(), sim.faults.wakeup()  # a crash may end the wait
            yield from sim.wait_for(w.name, get if wake is None else get | wake)
            if get.triggered:
                file(node, get.value[1])
            else:
                get.cancel()

    def exchange(w: Worker, node: Node, k: int, outgoing: list):
        if passive is None:
            for send in outgoing:
                sim.process(send)
            yield from collect(w, node, k)
        elif passive(w.index):
            yield from collect(w, node, k)
            for send in outgoing:
                yield from send
        else:
            for send in outgoing:
                yield from send
            yield from collect(w, node, k)

    def node_process(w: Worker, node: Node):
        while True:
            k = node.iteration
            g = yield from sim.compute(w, state.z(node))
            # g is None in a timing-only run: the same messages and weights, with no parameters in them.
            x_half = node.x
            if (
                g is not None and not step_after_mix
            ):  # the optimizer steps the numerator x_i with the gradient at z_i (the paper's)
                x_half, node.opt = step(node.x, node.opt, g.grad, g.count)
            own: list[tuple[Params | None, float]] = []  # none when p_ii = 0: it gives all of x_i away
            outgoing = []
            for j, p in shares(k, w.index):
                x_share = None if x_half is None else scale(x_half, jnp.float32(p))
                if j == w.index:
                    own = [(x_share, p * node.w)]
                else:
                    outgoing.append(send_share(w, j, k, x_share, p * node.w))
            yield from exchange(w, node, k, outgoing)
            arrived = sorted(
                (m for m in node.inbox if m[0] <= k), key=lambda m: m[:2]
            )  # none from the future
            node.inbox = [m for m in node.inbox if m[0] > k]
            parts = [x for x, _ in own] + [x for _, _, x, _ in arrived]
            if not parts:  # p_ii = 0 and its in-neighbours crashed: no mass, w = 0, z = x / w undefined
                sim.fail(
                    f"push-sum node {w.index} received no share in iteration {k}: its matrix column gives it "
                    "no "
                    "self weight and its in-neighbours crashed; give the node a self weight (p_ii > 0)"
                )
                return
            node.x = None if x_half is None else tree_sum(parts) if len(parts) > 1 else parts[0]
            if g is not None and step_after_mix:
                node.x, node.opt = step(node.x, node.opt, g.grad, g.count)
            node.w = sum(weight for _, weight in own) + sum(weight for _, _, _, weight in arrived)
            node.iteration += 1
            sim.applied([(w.index, k)], k)  # the node's model has taken its step and its mix

    for w, node in zip(sim.workers, state.nodes):
        sim.process(node_process(w, node))
    return state
