"""D-PSGD (Lian et al. 2017; the SGP paper's baseline): decentralised SGD with symmetric mixing.

    every node i, iteration k:
        g <- gradient at x_i
        send x_i to its neighbours of iteration k; receive theirs
        x_i <- the average of x_i and what it received      (symmetric, doubly stochastic)
        x_i <- x_i - lr * g

That is Lian et al.'s x_{k+1} = W x_k - lr g(x_k) (``order: average_then_step``, the
default): the models are averaged and each node then steps with its own gradient, taken
at its model before the average. ``order: step_then_average`` steps first and sends
x_i - lr g, as SGP does, so the neighbours' gradients are averaged in too: W (x_k - lr g).
Both keep the mean over nodes moving by -lr times the mean gradient (W is doubly
stochastic); they differ in each node's own x_i. The schedule is the same.

``topology: ring`` (default): both ring neighbours every iteration, weights 1/3.
``topology: bipartite_exponential``: the SGP authors' one-peer graph (their
``DynamicBipartiteExponentialGraph``). Odd nodes are active, even ones passive; an
active node r's peers, in turn, are r+1, r-1, r+3, r-3, r+5, r-5, ..., r±(1+2^i) up to
i = floor(log2(n-1)), and a passive node's are the mirror images, so every iteration
pairs each node with exactly one other, and the pair averages, weights 1/2.

``exchange: blocking`` times the exchange as their ``PushPull`` gossiper does: an
active node sends (blocking until delivered) and then receives, a passive node receives
and then sends, so a pair's two copies cross one after the other. ``nonblocking``
(default) sends without waiting, as SGP does.

Synchronous, and with symmetric weights the push-sum weights stay 1, so no de-biasing.
It is the push-sum loop (:mod:`strategies._push_sum`) with this mixing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation
from strategies._push_sum import Order, run_push_sum


class DPSGD(StrategyConfig):
    name: Literal["dpsgd"] = "dpsgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, ge=0)
    topology: Literal["ring", "bipartite_exponential"] = Field(
        default="ring",
        description="ring: both neighbours, weights 1/3; bipartite_exponential: one peer per "
        "iteration from the SGP authors' bipartite exponential graph, weights 1/2 (needs an even node count)",
    )
    exchange: Literal["nonblocking", "blocking"] = Field(
        default="nonblocking",
        description="blocking: an odd node sends then receives, an even node receives "
        "then sends, each send blocking until delivered (the SGP authors' PushPull gossiper)",
    )
    order: Order = Field(
        default="average_then_step",
        description="average_then_step: Lian et al.'s x <- W x - lr g(x); "
        "step_then_average: W (x - lr g), as SGP (the neighbours' gradients are mixed in)",
    )

    def check(self, scenario: Scenario) -> None:
        n = scenario.cluster.workers
        if self.topology == "bipartite_exponential" and n % 2:
            raise ValueError(
                f"strategy.topology: bipartite_exponential pairs odd with even nodes, and {n} workers is "
                "odd; "
                "give an even cluster.workers or use topology: ring"
            )

    def model_copies_per_worker(self) -> int:
        return 4  # a replica per worker, its gradient, and the copies it sends and receives

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates)  # a node's step (its gradient and its average) is an update


def ring_mixing(n: int):
    """Each node keeps a third and gives a third to each neighbour (a half each when n = 2)."""
    if n == 1:
        return lambda k, i: [(0, 1.0)]
    if n == 2:
        return lambda k, i: [(i, 0.5), (1 - i, 0.5)]
    return lambda k, i: [(i, 1 / 3), ((i - 1) % n, 1 / 3), ((i + 1) % n, 1 / 3)]


def passive(rank: int) -> bool:
    """Even nodes are the passive side of the authors' bipartite graph: they receive first."""
    return rank % 2 == 0


def bipartite_phone_book(n: int) -> list[list[int]]:
    """Each node's peers in the order it cycles through them (the authors' graph manager)."""
    book: list[list[int]] = [[] for _ in range(n)]
    for r in range(n):
        for i in range((n - 1).bit_length()):  # i = 0 .. floor(log2(n - 1))
            hop = 1 if i == 0 else 1 + 2**i
            forward, backward = (r + hop) % n, (r - hop) % n
            if not passive(r) and passive(forward) and passive(backward):
                order = [forward, backward]
            elif passive(r) and not passive(forward) and not passive(backward):
                order = [backward, forward]
            else:
                order = []
            for peer in order:
                if peer not in book[r]:
                    book[r].append(peer)
    return book


def bipartite_mixing(n: int):
    """Iteration k pairs node r with the k-th peer of its phone book (cycling); each keeps a half."""
    book = bipartite_phone_book(n)
    return lambda k, i: [(i, 0.5), (book[i][k % len(book[i])], 0.5)]


@register(DPSGD, timing_only=True)
def start(sim: Simulation, config: DPSGD):
    n = len(sim.workers)
    shares = bipartite_mixing(n) if config.topology == "bipartite_exponential" else ring_mixing(n)
    receives_first = passive if config.exchange == "blocking" else None
    return run_push_sum(
        sim, config, debiased=False, shares=shares, passive=receives_first, order=config.order
    ).average
