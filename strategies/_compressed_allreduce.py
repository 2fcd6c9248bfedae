"""Synchronous all-reduce SGD, optionally compressed with error feedback: ``ssgd`` (``aggregation:
allreduce``) and ``arsgd`` are both :class:`CompressedAllReduce` and run :func:`run_allreduce_sgd`.

    every worker i, each round t:
        plain:     g <- ring all-reduce of g_i (bucketed as the backward pass makes them)
        topk:      payload_i, e_i <- topk.update(g_i, e_i)
                   g <- topk.decode(all-gather of the p payloads)   (sparse sums cannot be ring-reduced)
        powersgd:  M_i, P_i, v_i <- compress_p(g_i, e_i, Q);  P <- all-reduce P_i;  v <- all-reduce v_i
                   P_hat <- orthogonalize(P);  Q_i <- compress_q(M_i, P_hat);  Q_sum <- all-reduce Q_i
                   e_i <- feedback(M_i, P_hat, Q_sum, n);  g, Q <- decompress(P_hat, Q_sum, v, n)
        theta_{t+1} <- theta_t - lr * g          (the same update on every replica, computed once)

The codecs are :mod:`fred.numerics.codecs`; this module composes them with the engine's
collectives and charges their compute (``codec_s_per_byte``).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

import jax
from pydantic import Field, field_validator

from fred.numerics import codecs
from fred.numerics.gradients import GradSum
from fred.numerics.rng import jax_key
from fred.scenario.schema import Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker
from strategies._compression import PowerSGD, TopK, compression_by_kind

ALLREDUCE_FAULTS = frozenset({"rejoin"})
Compression = Annotated[Union[TopK, PowerSGD], Field(discriminator="kind")]


class CompressedAllReduce(StrategyConfig):
    """The settings of an all-reduce that may be compressed: ``compression`` and the codec's cost."""

    compression: Compression | None = Field(
        default=None,
        description="compress the all-reduce, with error feedback: {kind: topk, ratio: 0.01} "
        "(ratio in (0, 1]) or {kind: powersgd, rank: 4} (rank >= 1); none: plain "
        "(docs/strategies.md#compressed-all-reduce-with-error-feedback)",
    )
    codec_s_per_byte: float = Field(
        default=0.0,
        ge=0,
        description="compression's compute per raw gradient byte, per pass of the codec "
        "(top-k: 2 a round, PowerSGD: 3 over its matrices), as pipe_sgd's",
    )

    _compression_kind = field_validator("compression", mode="before")(compression_by_kind)

    def check(self, scenario: Scenario) -> None:
        check_compression(self.compression, scenario)

    def fault_support(self) -> frozenset[str]:
        return allreduce_faults(self.compression)

    def buckets_gradients(self) -> bool:
        return self.compression is None

    def model_copies_per_worker(self) -> int:
        return 2 if self.compression is None else 3  # and the error memory


def check_compression(compression: TopK | PowerSGD | None, scenario: Scenario) -> None:
    """Compression works on each whole gradient after its backward pass: no gradient buckets."""
    if compression is None:
        return
    for field, value in (
        ("workload.bucket_bytes", scenario.workload.bucket_bytes),
        ("cluster.compute.bucket_overhead_s", scenario.cluster.compute.bucket_overhead_s),
    ):
        if value:
            raise ValueError(
                f"{field} {value:g}: strategy.compression ({compression.kind}) compresses each whole "
                "gradient "
                f"after its backward pass, not in buckets; drop {field} or strategy.compression"
            )


def allreduce_faults(compression: TopK | PowerSGD | None) -> frozenset[str]:
    """A compressed round is several collectives and an error memory the crash lost: no rejoin modelled."""
    return ALLREDUCE_FAULTS if compression is None else frozenset()


def run_allreduce_sgd(
    sim: Simulation,
    opt,
    step,
    compression: TopK | PowerSGD | None = None,
    codec_s_per_byte: float = 0.0,
    sharding: str = "none",
):
    """Replicas that all-reduce every gradient and apply the same update.

    ``sharding`` (ZeRO, :func:`sharded_backprop`) changes the collectives' time and bytes, not
    the numbers: every replica still applies the whole summed gradient.

    Faults: the all-reduce goes on without a crashed worker once it is given up on
    (``faults.sync_timeout_s``), averaging over the gradients that took part. A rejoining
    worker takes the current replica: in lock-step training there is no other to resume
    (without compression: a compressed round's error memory would be lost with it).
    """
    rounds = {0: (sim.init_params, opt.init(sim.init_params))}  # version -> replica state, shared
    exchange = None
    if isinstance(compression, TopK):
        exchange = topk_exchange(sim, compression.ratio, codec_s_per_byte)
    elif isinstance(compression, PowerSGD):
        exchange = powersgd_exchange(sim, compression.rank, codec_s_per_byte)
    waiting: list = []  # rejoined workers' events: the replica they start from is being all-reduced
    backprop, gathers_params = sharded_backprop(sim, sharding)

    def next_round(version: int, total) -> None:
        # Every replica applies the identical update; compute it once, share the result.
        if version + 1 not in rounds:
            params, opt_state = rounds.pop(version)
            if total is not None:  # None in a timing-only run: no numbers, the same schedule
                params, opt_state = step(params, opt_state, total.grad, total.count)
            rounds[version + 1] = (params, opt_state)
            sim.applied([(i, version) for i in sim.participants(sim.workers)], version)
            for event in waiting:
                event.succeed()
            waiting.clear()

    def worker(w: Worker, version: int = 0):
        while True:
            if exchange is None:
                total = yield from backprop(w, rounds[version][0], sim.workers)
            else:
                g = yield from sim.compute(w, rounds[version][0])
                total = yield from exchange(w, g, version)
            next_round(version, total)
            if gathers_params:  # each worker updated its shard: the others gather it
                yield from sim.allgather(sim.workers, w, sim.param_bytes / len(sim.workers))
            version += 1

    def rejoin(w: Worker):
        # It joins the first all-reduce not yet started; while the one before is in flight,
        # the replica that all-reduce makes is the one to start from (the current one was
        # dropped as the others moved on).
        version = sim.next_collective(sim.workers, w)
        while version not in rounds:
            waiting.append(sim.env.event())
            yield from sim.wait_for(w.name, waiting[-1])
        yield from worker(w, version)

    sim.faults.on_rejoin(lambda w, _: sim.process(rejoin(w), w))
    for w in sim.workers:
        sim.process(worker(w))
    return lambda: rounds[max(rounds)][0]


def sharded_backprop(sim: Simulation, sharding: str):
    """The gradient step of a ``sharding`` and whether each round ends with an all-gather of the
    updated parameters' shards.

    - ``none``: the step all-reduced (in buckets as the backward pass makes them);
    - ``zero1``, ``zero2``: the buckets reduce-scattered, each worker updates its shard of
      the parameters, and an all-gather of the shards (``n/p`` from each) ends the round:
      together the bytes and, on a ring, the time of the all-reduce;
    - ``zero3``: each layer's parameters all-gathered before its forward and its backward
      passes, one layer ahead of the compute, the buckets reduce-scattered
      (:mod:`fred.simulation.sharding`); no gather after the update.
    """
    if sharding == "zero3":
        return sim.backprop_sharded, False
    if sharding in ("zero1", "zero2"):
        return sim.backprop_reduce_scatter, True
    return sim.backprop_allreduce, False


def _message_scale(sim: Simulation) -> float:
    """Wire bytes per byte of the model's own: 1, unless the scenario gives the message a size of
    its own (``workload.param_bytes`` or a profile), to which the model's proportions are scaled."""
    return sim.param_bytes / (codecs.FLOAT32_BYTES * sum(x.size for x in jax.tree.leaves(sim.init_params)))


def _once_a_round():
    """``once(version, what, make)``: what every worker of round ``version`` computes alike, made by
    the first to ask; a round's values are dropped once a later round asks."""
    shared: dict[tuple[int, str], Any] = {}

    def once(version: int, what: str, make):
        if (version, what) not in shared:
            for old in [k for k in shared if k[0] < version]:
                del shared[old]
            shared[(version, what)] = make()
        return shared[(version, what)]

    return once


def topk_exchange(sim: Simulation, ratio: float, codec_s_per_byte: float):
    """A round of top-k with error memory for one worker: compress, all-gather, add up."""
    codec = codecs.topk(ratio)
    wire = codec.payload_bytes(sim.init_params) * _message_scale(sim)
    codec_s = codec_s_per_byte * sim.param_bytes  # a pass over the raw gradient each way
    memory: dict[int, codecs.ErrorMemory] = {}  # worker -> e_i
    zero: list[codecs.ErrorMemory] = []  # every e_i starts as this e = 0, made at the first gradient
    once = _once_a_round()

    def exchange(w: Worker, g: GradSum | None, version: int):
        payload = None
        if g is not None:  # None in a timing-only run: the same bytes and times, no numbers
            if not zero:
                zero.append(codec.init(sim.init_params))
            sent, memory[w.index] = codec.update(g.grad, memory.get(w.index, zero[0]))
            payload = (sent, g.loss, g.count)
        if codec_s:
            yield from sim.work(w.name, codec_s, "compress")
        gathered = yield from sim.allgather(sim.workers, w, wire, payload)
        if codec_s:
            yield from sim.work(w.name, codec_s, "decompress")
        if gathered is None:
            return None

        def total() -> GradSum:
            grad, loss = codec.decode(
                [s for s, _, _ in gathered], [loss for _, loss, _ in gathered], sim.init_params
            )
            return GradSum(grad, loss, sum(count for _, _, count in gathered))

        return once(version, "total", total)

    return exchange


def _check_rank(rank: int, sim: Simulation) -> None:
    """A rank above every matrix's is refused, naming the largest (the model is known only now)."""
    from fred.scenario.loading import ScenarioError

    largest, shape = codecs.largest_rank(sim.init_params)
    if rank > largest:
        fix = (
            f"its largest matrix, of shape {shape}, has rank at most {largest}: give a rank of 1 to {largest}"
            if shape
            else "it has no matrices (tensors of two axes or more): drop strategy.compression"
        )
        raise ScenarioError(
            [f"strategy.compression.rank: got {rank}, above the rank of every matrix of the model; {fix}"],
            "scenario",
        )


def powersgd_exchange(sim: Simulation, rank: int, codec_s_per_byte: float):
    """A round of PowerSGD for one worker: P's all-reduce, the vectors', Q's, and the error memory."""
    _check_rank(rank, sim)
    codec = codecs.powersgd(rank)
    scale = _message_scale(sim)
    sizes = codec.message_bytes(sim.init_params)
    p_bytes, q_bytes, vector_bytes = sizes.p * scale, sizes.q * scale, sizes.vectors * scale
    codec_s = (
        codec_s_per_byte * sizes.matrices * scale
    )  # a pass over the matrices: M Q, M^T P, P Q^T and M - P Q^T
    start, empty = None, None  # Q's first draw and e = 0; a timing-only run has no numbers
    if not sim.timing_only:
        start, empty = codec.init(sim.init_params, jax_key(sim.seed, "powersgd", "q"))
    states = {0: start}  # version -> the Q it starts from, the same on every worker
    memory: dict[int, codecs.ErrorMemory] = {}  # worker -> e_i
    once = _once_a_round()

    def exchange(w: Worker, g: GradSum | None, version: int):
        m = p = vectors = None
        if g is not None:
            m, p, vectors = codec.compress_p(g.grad, memory.get(w.index, empty), states[version])
        if codec_s:
            yield from sim.work(w.name, codec_s, "compress")  # P = M Q
        p_sum = yield from sim.allreduce(
            sim.workers, w, p_bytes, None if g is None else GradSum(p, g.loss, g.count)
        )
        vectors_sum = ()
        if vector_bytes:
            vectors_sum = yield from sim.allreduce(sim.workers, w, vector_bytes, vectors)
        if codec_s:
            yield from sim.work(w.name, codec_s, "compress")  # orthonormalise P, Q = M^T P
        q = None
        if p_sum is not None:
            p_hat = once(version, "p_hat", lambda: codec.orthogonalize(p_sum.grad))
            q = codec.compress_q(m, p_hat)
        q_sum = yield from sim.allreduce(sim.workers, w, q_bytes, q)
        if codec_s:
            yield from sim.work(w.name, codec_s, "decompress")  # P Q^T, and e = M - P Q^T
        if q_sum is None:
            return None
        n = len(sim.participants(sim.workers))
        memory[w.index] = codec.feedback(m, p_hat, q_sum, n)
        grad, states[version + 1] = once(
            version, "total", lambda: codec.decompress(p_hat, q_sum, vectors_sum, n, sim.init_params)
        )
        states.pop(version, None)
        return GradSum(grad, p_sum.loss, p_sum.count)

    return exchange
