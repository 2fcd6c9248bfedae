"""Scenario: the validated description of one run.

A scenario is plain data. YAML files, ``--set`` overrides and Python code all go
through :func:`validate`, so the same rules and the same error messages apply
everywhere. Every section rejects unknown keys.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import types
import typing
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fred.scenario import model_workloads, registry, workloads


class Section(BaseModel):
    """Base of every scenario section: frozen, unknown keys rejected, every number finite
    (an infinite time or size passed the bounds and then hung or crashed the run)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        # pydantic takes true as 1: "workers: yes" ran one worker. (A model validator: a field
        # validator for every field is not allowed on the fields unions are told apart by.)
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if isinstance(value, bool) and field is not None and not _takes_bool(field.annotation):
                    wanted = "a number" if _numeric(field.annotation) else "a number or a name"
                    raise ValueError(f"{key}: got {str(value).lower()}; {wanted} is needed here, not true or false")
        return data


def _numeric(annotation: Any) -> bool:
    """Whether a field takes numbers only (``int``, ``float``, bounded or optional)."""
    if typing.get_origin(annotation) is Annotated:
        return _numeric(typing.get_args(annotation)[0])
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args and typing.get_origin(annotation) in (Union, types.UnionType):
        return all(_numeric(a) for a in args)
    return annotation in (int, float)


def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a boolean (``bool``, ``Any``, a Literal of one, or a union with one)."""
    if annotation is bool or annotation is Any:
        return True
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(v, bool) for v in typing.get_args(annotation))
    return any(_takes_bool(arg) for arg in typing.get_args(annotation))


PositiveFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


# ----------------------------------------------------------------------------- model
class LogisticModel(Section):
    kind: Literal["logistic"] = "logistic"


MAX_LAYERS = 100  # compile time and memory grow with depth: 2,000 layers compiled for 20 minutes, to 24 GB


def _few_layers(layers: list[int]) -> list[int]:
    if len(layers) > MAX_LAYERS:
        raise ValueError(f"got {len(layers):,} layers; at most {MAX_LAYERS}: JAX compiles every layer of every "
                         "gradient program, and its time and memory grow with depth (2,000 layers: 20 minutes, 24 GB)")
    return layers


class MLPModel(Section):
    kind: Literal["mlp"] = "mlp"
    hidden: list[Annotated[int, Field(gt=0)]] = Field(default_factory=lambda: [64], description="hidden layer widths; at most 100 layers")
    activation: Literal["relu", "tanh", "sigmoid", "gelu"] = "relu"

    _layers = field_validator("hidden")(_few_layers)


class CNNModel(Section):
    kind: Literal["cnn"] = "cnn"
    channels: list[Annotated[int, Field(gt=0)]] = Field(default_factory=lambda: [8, 16], description="convolution layers' channels; at most 100 layers")
    kernel_size: Annotated[int, Field(gt=0)] = 3
    hidden: Annotated[int, Field(gt=0)] = 64

    _layers = field_validator("channels")(_few_layers)


def absolute_path(value: str, base_dir: str | os.PathLike[str] | None = None) -> str:
    """``value`` (``~`` expanded) as an absolute path: a relative one is taken from ``base_dir``, the
    scenario file's folder, or without one (a scenario built in Python) from the working directory.
    The resolved scenario holds it so, and a run directory's copy finds the same file from anywhere."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"got {value!r}; give a path")
    path = os.path.expanduser(value)
    return os.path.abspath(os.path.join(base_dir, path) if base_dir is not None else path)


def _absolute(value: str | None) -> str | None:
    return None if value is None else absolute_path(value)


RESNET_DEPTHS = tuple(range(8, 111, 6))  # 6n + 2: three stages of n basic blocks of two convolutions, a first one, a head


class ResNetModel(Section):
    """He et al.'s CIFAR ResNet: three stages of (depth - 2) / 6 basic blocks (docs/scenarios.md)."""

    kind: Literal["resnet"] = "resnet"
    depth: int = Field(default=20, description="20, 32, 44, 56 (or any 6n + 2 from 8 to 110): convolution layers + the head")
    width: Annotated[int, Field(ge=1, le=1024)] = Field(default=16, description="the first stage's channels (then 2x, 4x)")
    norm: Literal["group", "none"] = Field(default="group", description="group: GroupNorm, gcd(8, channels) groups, "
                                                                         "after every convolution; none: no normalisation")

    @field_validator("depth")
    @classmethod
    def _six_n_plus_two(cls, value: int) -> int:
        if value not in RESNET_DEPTHS:
            raise ValueError(f"got {value}; a CIFAR ResNet has 6n + 2 layers (three stages of n blocks of two "
                             "convolutions, a first convolution and the head): give 20, 32, 44 or 56 (any 6n + 2 "
                             "from 8 to 110)")
        return value


class TransformerModel(Section):
    """A small GPT-style decoder for next-token prediction (docs/scenarios.md)."""

    kind: Literal["transformer"] = "transformer"
    layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)] = Field(default=2, description="decoder blocks")
    d_model: Annotated[int, Field(ge=1, le=65536)] = Field(default=64, description="the width; the MLP's is 4 x d_model")
    heads: Annotated[int, Field(ge=1)] = Field(default=4, description="attention heads; they divide d_model")
    context: Annotated[int, Field(ge=1, le=65536)] | None = Field(
        default=None, description="positions it embeds (default: the data's sequence length, which it must not be below)")
    vocab: Annotated[int, Field(ge=2, le=10_000_000)] | None = Field(
        default=None, description="tokens it embeds and predicts (default: the data's vocabulary)")

    @model_validator(mode="after")
    def _heads_divide_the_width(self) -> "TransformerModel":
        if self.d_model % self.heads:
            fits = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            raise ValueError(f"heads {self.heads} do not divide d_model {self.d_model}: each head takes d_model / heads "
                             f"of the width; give heads one of {', '.join(map(str, fits))}, or another d_model")
        return self


IMPORT_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
LOSSES = ("cross_entropy", "mse")


class PythonModel(Section):
    """A model from the user's own code: ``factory`` is imported and called with ``args`` (running it)."""

    kind: Literal["python"] = "python"
    factory: str = Field(description="'package.module:function' returning a Flax (linen or NNX) module, "
                                      "an Equinox module, or a pair (init, apply) of functions")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the factory")
    loss: str | None = Field(default=None, description="cross_entropy, mse, or 'package.module:function' "
                                                        "(default: cross_entropy for class labels, mse for regression)")
    code_dir: str = Field(default_factory=os.getcwd, description="the folder searched last (after installed packages "
                          "and PYTHONPATH) for the modules of factory and loss; default: the scenario file's folder "
                          "(the working directory for a scenario built in Python); a relative one is taken from there")

    _code_dir_absolute = field_validator("code_dir")(_absolute)

    @field_validator("factory")
    @classmethod
    def _import_path(cls, value: str) -> str:
        if not _is_import_path(value):
            raise ValueError(f"got {value[:200]!r}; give 'package.module:function', e.g. 'mymodels:make_cnn'")
        return value

    @field_validator("loss")
    @classmethod
    def _loss_name(cls, value: str | None) -> str | None:
        if value is not None and value not in LOSSES and not _is_import_path(value):
            raise ValueError(f"got {value[:200]!r}; allowed: {', '.join(LOSSES)}, or 'package.module:function'")
        return value


def _is_import_path(value: str) -> bool:
    return re.fullmatch(IMPORT_PATH, value) is not None


ModelConfig = Annotated[Union[LogisticModel, MLPModel, CNNModel, ResNetModel, TransformerModel, PythonModel],
                        Field(discriminator="kind")]


# ----------------------------------------------------------------------------- data
class DigitsData(Section):
    kind: Literal["digits"] = "digits"


class SyntheticData(Section):
    kind: Literal["synthetic"] = "synthetic"
    task: Literal["classification", "regression"] = "classification"
    examples: Annotated[int, Field(ge=2)] = 2000
    features: Annotated[int, Field(ge=1)] = 20
    classes: Annotated[int, Field(ge=2)] = 4
    noise: NonNegFloat = 0.5


class MNISTData(Section):
    kind: Literal["mnist"] = "mnist"
    path: str = Field(description="a directory of IDX files (optionally .gz) or one .npz file; a relative path is "
                      "taken from the scenario file's folder")

    _path_absolute = field_validator("path")(_absolute)


class SyntheticImagesData(Section):
    """CIFAR-shaped images (32 x 32 x 3) that a model can learn: a fixed random template per class,
    shifted at random and noised per example."""

    kind: Literal["synthetic_images"] = "synthetic_images"
    examples: Annotated[int, Field(ge=2, le=10_000_000)] = 2000
    classes: Annotated[int, Field(ge=2, le=1000)] = 10
    noise: Annotated[float, Field(ge=0, le=10)] = Field(default=0.3, description="per-pixel Gaussian noise's standard deviation")
    shift: Annotated[int, Field(ge=0, le=16)] = Field(default=4, description="the most pixels a template is moved each way")


class SyntheticTokensData(Section):
    """Token sequences from a random sparse Markov chain: each token is followed by one of
    ``branching`` tokens of its own, so a model can bring the loss far below log(vocab)."""

    kind: Literal["synthetic_tokens"] = "synthetic_tokens"
    examples: Annotated[int, Field(ge=2, le=10_000_000)] = Field(default=2000, description="sequences")
    vocab: Annotated[int, Field(ge=2, le=1_000_000)] = 64
    context: Annotated[int, Field(ge=1, le=65536)] = Field(default=32, description="tokens a sequence")
    branching: Annotated[int, Field(ge=1)] = Field(default=4, description="successors each token may have")

    @model_validator(mode="after")
    def _branching_within_vocab(self) -> "SyntheticTokensData":
        if self.branching > self.vocab:
            raise ValueError(f"branching {self.branching} exceeds vocab {self.vocab}: a token has at most vocab "
                             "successors; give branching at most vocab")
        return self


class CIFAR10Data(Section):
    kind: Literal["cifar10"] = "cifar10"
    path: str = Field(description="the cifar-10-batches-py folder (data_batch_1..5, test_batch) or the folder holding it")

    _path_absolute = field_validator("path")(_absolute)


class CIFAR100Data(Section):
    kind: Literal["cifar100"] = "cifar100"
    path: str = Field(description="the cifar-100-python folder (train, test) or the folder holding it")
    labels: Literal["fine", "coarse"] = Field(default="fine", description="fine: 100 classes; coarse: 20 superclasses")

    _path_absolute = field_validator("path")(_absolute)


class TextData(Section):
    """A text file as tokens, cut into windows of ``context`` tokens, each labelled with the next ones."""

    kind: Literal["text"] = "text"
    path: str = Field(description="a text file (a relative path is taken from the scenario file's folder)")
    level: Literal["byte", "char"] = Field(default="byte", description="byte: 256 tokens, the file's bytes; "
                                                                       "char: one token per character it uses (UTF-8)")
    context: Annotated[int, Field(ge=1, le=65536)] = Field(default=64, description="tokens a window")

    _path_absolute = field_validator("path")(_absolute)


class ArraysData(Section):
    """Examples from the user's files: an ``.npz``, a folder of ``.npy`` files, a Parquet file, or a
    Hugging Face ``datasets`` folder written by ``save_to_disk``."""

    kind: Literal["arrays"] = "arrays"
    path: str = Field(description="an .npz file, a folder of .npy files, a .parquet file, or a datasets save_to_disk folder")
    x: str | Annotated[list[str], Field(min_length=1)] = Field(
        default="x", description="the features' key, file stem or column; several columns for tabular data")
    y: str = Field(default="y", description="the labels' (or targets') key, file stem or column")
    eval_path: str | None = Field(default=None, description="the held-out split, in the same format and names "
                                                            "(default: hold out data.eval_fraction of path)")
    task: Literal["classification", "regression"] = "classification"
    classes: Annotated[int, Field(ge=2)] | None = Field(
        default=None, description="number of classes (default: the largest label + 1)")

    _paths_absolute = field_validator("path", "eval_path")(_absolute)

    @model_validator(mode="after")
    def _classes_with_classification(self) -> "ArraysData":
        if self.task == "regression" and self.classes is not None:
            raise ValueError(f"classes {self.classes} is given with task 'regression', which has no classes; leave it out")
        return self


DataSource = Annotated[
    Union[DigitsData, SyntheticData, SyntheticImagesData, SyntheticTokensData, MNISTData, CIFAR10Data, CIFAR100Data,
          TextData, ArraysData],
    Field(discriminator="kind"),
]
SEQUENCE_SOURCES = ("text", "synthetic_tokens")  # labels are sequences: the next token at every position


class DataConfig(Section):
    source: DataSource = Field(default_factory=DigitsData)
    eval_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    batch_size: Annotated[int, Field(ge=1)] = 32
    sharding: Literal["iid", "by_label", "dirichlet"] = "iid"
    dirichlet_alpha: PositiveFloat = 0.5
    eval_examples: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="evaluate on at most this many held-out examples"
    )


# ----------------------------------------------------------------------------- cluster
class Jitter(Section):
    kind: Literal["none", "lognormal"] = "none"
    # exp(sigma * N(0, 1)) scales a step: past ~10 the factor overflows a float on a rare draw
    sigma: Annotated[float, Field(ge=0, le=10)] = 0.0

    @model_validator(mode="after")
    def _sigma_with_its_kind(self) -> "Jitter":
        # Either half alone was accepted and gave steps of exactly step_time_s: no jitter, silently.
        if self.kind == "none" and self.sigma != 0:
            raise ValueError(f"sigma {self.sigma} is given with kind 'none', which ignores it; add kind: lognormal")
        if self.kind == "lognormal" and "sigma" not in self.model_fields_set:
            raise ValueError("kind: lognormal needs its sigma, e.g. {kind: lognormal, sigma: 0.1}")
        return self


class Straggler(Section):
    worker: Annotated[int, Field(ge=0)]
    slow_factor: Annotated[float, Field(ge=1)] = 1.0
    delay_s: NonNegFloat = 0.0


class RandomStraggle(Section):
    probability: Annotated[float, Field(ge=0, le=1)] = 0.0
    delay_s: NonNegFloat = 0.0


class SpeedChange(Section):
    """From ``at_s`` on (simulated seconds), ``worker`` runs at ``speed`` (a drifting machine)."""

    worker: Annotated[int, Field(ge=0)]
    at_s: NonNegFloat
    speed: PositiveFloat


class ComputeConfig(Section):
    step_time_s: PositiveFloat | None = Field(default=None, description="seconds per batch at speed 1 (0.01 when cluster.compute is left out)")
    flops_per_example: PositiveFloat | None = None
    device_flops: PositiveFloat | None = None
    host_overhead_s: NonNegFloat = Field(
        default=0.0, description="host time added to every step (framework, copies, data loading), whatever the speed"
    )
    collective_share: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0,
        description="the share of a device's compute that a collective of its own in flight takes (NCCL's kernels "
        "on its SMs and memory bandwidth): compute runs at 1 - share of its speed meanwhile; 0: no interference",
    )
    bucket_overhead_s: NonNegFloat = Field(
        default=0.0,
        description="compute time per gradient bucket per step in an all-reduced backward pass (DDP copying a "
        "bucket's gradients into its flat buffer and launching its all-reduce): the bucket is ready after it",
    )

    @model_validator(mode="after")
    def _one_compute_model(self) -> "ComputeConfig":
        if self.step_time_s is not None and self.flops_per_example is not None:
            raise ValueError("give either step_time_s, or flops_per_example with device_flops, not both")
        if self.flops_per_example is not None and self.device_flops is None:
            raise ValueError("flops_per_example needs device_flops to turn FLOPs into seconds")
        return self


class ClusterConfig(Section):
    workers: Annotated[int, Field(ge=1, le=4096)] = 1
    compute: ComputeConfig = Field(default_factory=lambda: ComputeConfig(step_time_s=0.01))
    speed: dict[int, PositiveFloat] = Field(
        default_factory=dict, description="per-worker speed factor (default 1); 2 means twice as fast"
    )
    jitter: Jitter = Field(default_factory=Jitter)
    stragglers: list[Straggler] = Field(default_factory=list)
    random_straggle: RandomStraggle = Field(default_factory=RandomStraggle)
    speed_changes: list[SpeedChange] = Field(default_factory=list)
    workers_per_device: Annotated[int, Field(ge=1)] = Field(
        default=1, description="worker processes sharing one device: they take turns computing (first come, first served)"
    )
    devices_per_node: Annotated[int, Field(ge=1)] = Field(
        default=1, description="devices in one node: they share its NIC and talk to each other over network.intra_node"
    )

    @field_validator("speed")
    @classmethod
    def _in_worker_order(cls, speed: dict[int, float]) -> dict[int, float]:
        # the resolved scenario.yaml is then the same text whatever order the input gave
        return dict(sorted(speed.items()))

    @model_validator(mode="after")
    def _workers_exist(self) -> "ClusterConfig":
        named = [(f"speed.{w}", w) for w in self.speed]
        named += [(f"stragglers.{i}.worker", s.worker) for i, s in enumerate(self.stragglers)]
        named += [(f"speed_changes.{i}.worker", c.worker) for i, c in enumerate(self.speed_changes)]
        bad = [(path, w) for path, w in named if not 0 <= w < self.workers]
        if bad:
            path, w = bad[0]
            raise ValueError(
                f"{path}: worker index {w} does not exist; workers are 0..{self.workers - 1} "
                f"(cluster.workers is {self.workers}): drop the entry or give more workers"
            )
        return self

    @model_validator(mode="after")
    def _nodes_are_full(self) -> "ClusterConfig":
        per_node = self.workers_per_device * self.devices_per_node
        if self.workers % per_node:
            raise ValueError(
                f"workers: {self.workers} workers do not fill whole nodes of devices_per_node {self.devices_per_node} x "
                f"workers_per_device {self.workers_per_device} = {per_node} workers; give a multiple of {per_node} workers "
                f"or change devices_per_node / workers_per_device"
            )
        return self


# ----------------------------------------------------------------------------- network
INTRA_NODE_DEFAULT = {"latency_s": 5e-6, "bandwidth_bps": 12e9}  # PCIe 3.0 x16, as in a V100 node without NVLink


class LinkConfig(Section):
    latency_s: NonNegFloat = 50e-6
    bandwidth_bps: PositiveFloat = 1.25e9  # bytes per second: 10 Gbit/s
    busbw_bps: PositiveFloat | None = Field(
        default=None,
        description="intra_node only: the node's all-reduce bus bandwidth as nccl-tests reports it (busbw, "
        "bytes per second) for a ring over its devices; each device's link then runs at it, whatever the "
        "per-link figures (an NVLink mesh's rings use several links a device)",
    )

    def rate_bps(self) -> float:
        """The link's bytes per second: its bus bandwidth when given, else ``bandwidth_bps``."""
        return self.busbw_bps if self.busbw_bps is not None else self.bandwidth_bps


class SitesConfig(Section):
    """Sites (regions, datacenters) joined by wide-area links: whole nodes, in index order."""

    nodes: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=2, description="nodes in each site, in order: site 0 holds the first nodes (a node is "
        "devices_per_node x workers_per_device workers, one worker when both are 1)")
    latency_s: NonNegFloat = Field(default=0.03, description="what a route between two sites adds, one way: "
                                   "each site's wide-area link takes this long")
    bandwidth_bps: PositiveFloat = Field(default=1.25e8, description="each site's wide-area link, bytes per second "
                                         "each way (1 Gbit/s), shared by every flow leaving or entering the site")
    server_site: Annotated[int, Field(ge=0)] = Field(default=0, description="the site a parameter server sits in")

    @model_validator(mode="after")
    def _every_site_has_nodes(self) -> "SitesConfig":
        empty = [i for i, n in enumerate(self.nodes) if n == 0]
        if empty:
            raise ValueError(f"nodes: site {empty[0]} has no nodes ({self.nodes}); give every site at least one node, "
                             "or drop the empty site")
        if self.server_site >= len(self.nodes):
            raise ValueError(f"server_site {self.server_site}: sites are 0..{len(self.nodes) - 1}")
        return self


class NcclConfig(Section):
    """What ``allreduce: nccl`` may choose from, as NCCL_ALGO and NCCL_PROTO restrict it."""

    algorithms: list[Literal["ring", "tree"]] = Field(
        default_factory=lambda: ["ring", "tree"], min_length=1, description="NCCL_ALGO: the algorithms NCCL may pick")
    protocols: list[Literal["LL", "LL128", "Simple"]] = Field(
        default_factory=lambda: ["LL", "LL128", "Simple"], min_length=1,
        description="NCCL_PROTO: the protocols NCCL may pick (LL128 is on by default only on Volta and "
        "later GPUs with NVLink)")
    intra_link: Literal["nvlink", "pci"] = Field(
        default="nvlink", description="the devices' links inside a node, for NCCL's latency per step")


class NetworkConfig(Section):
    latency_s: NonNegFloat = 50e-6
    bandwidth_bps: PositiveFloat = Field(default=1.25e9, description="bytes per second (1/beta)")
    reduce_s_per_byte: NonNegFloat = Field(default=0.0, description="gamma: reduction cost per byte")
    sync_s: NonNegFloat = Field(default=0.0, description="S: fixed synchronisation cost per all-reduce")
    efficiency: Annotated[float, Field(gt=0, le=1)] = Field(
        default=1.0,
        description="the share of bandwidth_bps the transport reaches between nodes (and to a server): "
        "1 for line rate; TCP over 10 GbE reaches less",
    )
    intra_node: LinkConfig = Field(
        default_factory=lambda: LinkConfig(**INTRA_NODE_DEFAULT),
        description="each device's link inside its node (default PCIe 3.0 x16: 12 GB/s, 5 us); "
        "used only with cluster.devices_per_node or workers_per_device above 1",
    )
    allreduce: Literal["ring", "recursive_doubling", "halving_doubling", "binary_tree", "double_binary_tree",
                       "nccl"] = Field(
        default="ring",
        description="all-reduce algorithm: nccl (NCCL's choice of ring or tree and protocol per message, timed "
        "by its tuning model, docs/network.md), ring (NCCL's for large messages), recursive_doubling "
        "(log2 p swaps of the whole message), halving_doubling (Rabenseifner's: MPI's for large messages), "
        "binary_tree (reduce the whole message up a binary tree, broadcast it down: log2 p levels for any p), "
        "double_binary_tree (NCCL's tree: two complementary binary trees, each reducing and broadcasting half)",
    )
    hierarchical: bool = Field(
        default=False,
        description="reduce inside each node first, run the allreduce algorithm across nodes among one worker "
        "per node, then broadcast inside the node (Horovod's hierarchical all-reduce)",
    )
    hierarchy: Literal["node", "site"] = Field(
        default="node", description="with hierarchical: what to reduce inside first: each node, or each site "
        "(network.sites), whose leaders then all-reduce across the wide-area links")
    sites: SitesConfig | None = Field(
        default=None, description="split the cluster into sites joined by wide-area links (docs/network.md); "
        "needs sharing: fair or rtt")
    nccl: NcclConfig | None = Field(
        default=None, description="with allreduce: nccl, the algorithms and protocols it may pick (default: all)"
    )
    server: LinkConfig | None = Field(
        default=None, description="parameter-server link; a key left out is as the workers' link"
    )
    sharing: Literal["fair", "rtt", "fcfs"] = Field(
        default="fair",
        description="how concurrent transfers share a link: fair (max-min fair flows, as TCP and RDMA "
        "share), rtt (TCP-like: shares in proportion to 1 / a flow's route latency, bytes after the "
        "latency, as SimGrid's CM02; for wide-area links) or fcfs (each transfer waits until its links "
        "are free, as collectives serialised on one NCCL stream do)",
    )
    oversubscription: Annotated[float, Field(ge=1)] = Field(
        default=1.0,
        description="the switch's oversubscription: its core carries the sum of the NICs' bandwidth "
        "divided by this (1: non-blocking); needs sharing: fair",
    )

    @model_validator(mode="before")
    @classmethod
    def _server_as_workers(cls, data: Any) -> Any:
        # A partial server link took LinkConfig's own defaults, not the workers' values the docs promise.
        if isinstance(data, dict) and isinstance(data.get("server"), dict):
            workers = {key: data.get(key, cls.model_fields[key].default) for key in ("latency_s", "bandwidth_bps")}
            data = {**data, "server": {**workers, **data["server"]}}
        if isinstance(data, dict) and isinstance(data.get("intra_node"), dict):  # a key left out keeps the PCIe default
            data = {**data, "intra_node": {**INTRA_NODE_DEFAULT, **data["intra_node"]}}
        return data

    @model_validator(mode="after")
    def _nccl_settings_fit(self) -> "NetworkConfig":
        if self.nccl is not None and self.allreduce != "nccl":
            raise ValueError(f"nccl: its algorithms and protocols apply only with allreduce: nccl (allreduce is "
                             f"{self.allreduce!r}); set allreduce: nccl or drop the nccl section")
        if self.allreduce == "nccl" and self.hierarchical:
            raise ValueError("hierarchical: true with allreduce: nccl; NCCL's ring and tree already cross nodes "
                             "through their NICs and chain inside them: drop hierarchical")
        if self.server is not None and self.server.busbw_bps is not None:
            raise ValueError("server.busbw_bps: a bus bandwidth belongs to a node's devices (intra_node.busbw_bps); "
                             "give the server link's bandwidth_bps")
        return self

    @model_validator(mode="after")
    def _oversubscription_needs_flows(self) -> "NetworkConfig":
        if self.oversubscription != 1 and self.sharing == "fcfs":
            raise ValueError(
                f"oversubscription {self.oversubscription:g} needs sharing: fair (transfers booked first come, "
                "first served cannot share a switch's core); set sharing: fair or oversubscription: 1"
            )
        if self.sites is not None and self.sharing == "fcfs":
            raise ValueError("sites need sharing: fair or rtt (a route across sites crosses four links, which "
                             "transfers booked first come, first served do not model); set sharing: fair or rtt")
        if self.hierarchy == "site" and (self.sites is None or not self.hierarchical):
            raise ValueError("hierarchy: site reduces inside each site first: it needs network.sites and "
                             "hierarchical: true; add them or drop hierarchy")
        return self


# ----------------------------------------------------------------------------- workload
# The workload library's names (fred/scenario/workloads.json), so that a misspelt one is refused listing them all.
ProfileName = Literal[tuple(workloads.names())]  # type: ignore[valid-type]


class WorkloadConfig(Section):
    profile: ProfileName | None = Field(  # type: ignore[valid-type]
        default=None, description="a model of the workload library (docs/workloads.md): its parameter bytes per "
        "message, and its training FLOPs per example when cluster.compute.device_flops is given"
    )
    param_bytes: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="bytes of one gradient or parameter message on the wire"
    )
    flops_per_example: PositiveFloat | None = Field(
        default=None, description="time compute as if one example cost this many FLOPs"
    )
    timing_only: bool = Field(
        default=False,
        description="simulate the timing without computing gradients: no losses, no parameters "
        "(scale studies; only strategies registered with timing_only)",
    )
    bucket_bytes: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="all-reduce gradients in buckets of about this many bytes, each as soon as the backward "
        "pass has made it (PyTorch DDP's bucket_cap_mb: 25 MiB = 26214400); cut from the profile's layers, or "
        "the scenario's own model's (a built-in kind)",
    )

    def resolved_param_bytes(self) -> int | None:
        if self.param_bytes is not None:
            return self.param_bytes
        return workloads.load(self.profile).timed_param_bytes if self.profile else None

    def resolved_flops_per_example(self) -> float | None:
        """FLOPs per example to time compute with (a profile's apply only with device_flops)."""
        if self.flops_per_example is not None:
            return self.flops_per_example
        return workloads.load(self.profile).timed_flops_per_example if self.profile else None


# ----------------------------------------------------------------------------- faults
class WorkerCrash(Section):
    """``worker`` stops at ``at_s``; with ``rejoin_at_s`` it comes back then."""

    worker: Annotated[int, Field(ge=0)]
    at_s: NonNegFloat
    rejoin_at_s: PositiveFloat | None = Field(default=None, description="when the worker comes back (simulated s)")
    rejoin_from: Literal["global", "own"] = Field(
        default="global", description="global: fetch the current model; own: resume from its stale copy"
    )

    @model_validator(mode="after")
    def _rejoin_after_crash(self) -> "WorkerCrash":
        if self.rejoin_at_s is not None and self.rejoin_at_s <= self.at_s:
            raise ValueError(f"rejoin_at_s ({self.rejoin_at_s}) must be after at_s ({self.at_s})")
        return self


class LinkDegrade(Section):
    """From ``at_s`` for ``duration_s``, ``entity``'s link runs at a fraction of its bandwidth."""

    entity: str = Field(description="whose link: 'worker3', or 'server'")
    at_s: NonNegFloat
    duration_s: PositiveFloat | None = Field(default=None, description="how long; default: to the end")
    bandwidth_factor: Annotated[float, Field(gt=0, le=1)] = 1.0
    extra_latency_s: NonNegFloat = 0.0


class MessageLoss(Section):
    """Each transfer touching ``entities`` (default: every link) is lost with ``probability``."""

    probability: Annotated[float, Field(ge=0, lt=1)] = Field(description="at most 0.99: a transfer is sent 1 / (1 - p) times on average")
    retransmit_timeout_s: PositiveFloat = Field(description="the sender resends this long after a lost send began")
    entities: list[str] = Field(default_factory=list, description="links affected; empty means all")

    @field_validator("probability")
    @classmethod
    def _sends_end(cls, p: float) -> float:
        # 0.999999999 sent each message a billion times on average: the run never ended.
        if p > MAX_LOSS_PROBABILITY:
            raise ValueError(f"got {p}; at most {MAX_LOSS_PROBABILITY}: a lost transfer is sent again until it gets "
                             f"through, 1 / (1 - p) = {1 / (1 - p):.3g} times on average here (100 at 0.99)")
        return p


MAX_LOSS_PROBABILITY = 0.99


class ServerCrashAt(Section):
    at_s: NonNegFloat
    restart_s: PositiveFloat = Field(description="seconds until the server is back, from its last checkpoint")


class ServerCrash(Section):
    """Parameter-server crashes: each restarts from the last checkpoint, losing the updates since."""

    checkpoint_every_s: PositiveFloat = Field(description="simulated seconds between server checkpoints")
    crashes: list[ServerCrashAt] = Field(min_length=1)


class FaultsConfig(Section):
    """Injected failures, all timed in simulated seconds and seeded."""

    worker_crash: list[WorkerCrash] = Field(default_factory=list)
    sync_timeout_s: PositiveFloat | None = Field(
        default=None,
        description="how long anyone waiting for a crashed worker waits before going on without it; "
        "null: a strategy that must wait for it fails the run",
    )
    link_degrade: list[LinkDegrade] = Field(default_factory=list)
    message_loss: MessageLoss | None = None
    server_crash: ServerCrash | None = None

    def any(self) -> bool:
        return bool(self.worker_crash or self.link_degrade or self.message_loss or self.server_crash)


# ----------------------------------------------------------------------------- stop / eval
class StopConfig(Section):
    max_sim_time_s: PositiveFloat | None = None
    max_updates: Annotated[int, Field(ge=1)] | None = None
    target_eval_loss: float | None = None

    @model_validator(mode="after")
    def _bounded(self) -> "StopConfig":
        if self.max_sim_time_s is None and self.max_updates is None:
            raise ValueError("set max_sim_time_s or max_updates (or both) so the run ends")
        return self


class EvalConfig(Section):
    """When to evaluate on the held-out set: every N updates or every T simulated seconds."""

    every_updates: Annotated[int, Field(ge=1)] | None = Field(default=None, description="20 when every_s is not given either")
    every_s: PositiveFloat | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_cadence(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("every_updates") is None and data.get("every_s") is None:
            return {**data, "every_updates": 20}
        return data

    @model_validator(mode="after")
    def _one_cadence(self) -> "EvalConfig":
        if self.every_updates is not None and self.every_s is not None:
            raise ValueError("give every_updates or every_s, not both")
        return self


# ----------------------------------------------------------------------------- optimizer
Fraction = Annotated[float, Field(ge=0, lt=1)]  # a moving-average weight: 1 would never forget


class SGDOptimizer(Section):
    """optax.sgd: ``-lr * g``, or with momentum ``m <- momentum m + g`` and ``-lr * m``."""

    kind: Literal["sgd"] = "sgd"
    momentum: Fraction = Field(default=0.0, description="heavy-ball momentum; 0: plain SGD")
    nesterov: bool = Field(default=False, description="Nesterov's momentum (needs momentum above 0)")
    weight_decay: NonNegFloat = Field(default=0.0, description="L2: adds weight_decay * params to the gradient")

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> "SGDOptimizer":
        # optax.sgd drops nesterov without momentum: the run would be plain SGD, silently.
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov: true needs momentum above 0 (e.g. momentum: 0.9); with momentum 0 it is plain SGD")
        return self


class AdamOptimizer(Section):
    """optax.adam (Kingma and Ba); ``weight_decay`` is L2 added to the gradient, as in torch.optim.Adam."""

    kind: Literal["adam"] = "adam"
    b1: Fraction = Field(default=0.9, description="first-moment decay")
    b2: Fraction = Field(default=0.999, description="second-moment decay")
    eps: PositiveFloat = Field(default=1e-8, description="added to the root of the second moment")
    nesterov: bool = Field(default=False, description="NAdam's Nesterov momentum")
    weight_decay: NonNegFloat = Field(default=0.0, description="L2: adds weight_decay * params to the gradient")


class AdamWOptimizer(AdamOptimizer):
    """optax.adamw (Loshchilov and Hutter): Adam with weight decay applied to the parameters, scaled by lr."""

    kind: Literal["adamw"] = "adamw"  # type: ignore[assignment]
    weight_decay: NonNegFloat = Field(default=1e-4, description="decoupled: -lr * weight_decay * params each step")


OptimizerConfig = Annotated[Union[SGDOptimizer, AdamOptimizer, AdamWOptimizer], Field(discriminator="kind")]

# A schedule's keys are optax's own argument names; the strategy's lr fills the one named here.
ScheduleSteps = Annotated[int, Field(ge=1)]
StepCount = Annotated[int, Field(ge=0)]


class ConstantSchedule(Section):
    """``lr`` at every step."""

    kind: Literal["constant"] = "constant"


class CosineDecaySchedule(Section):
    """optax.cosine_decay_schedule from ``lr`` to ``alpha * lr`` over ``decay_steps``, then flat."""

    kind: Literal["cosine_decay"] = "cosine_decay"
    decay_steps: ScheduleSteps
    alpha: Annotated[float, Field(ge=0, le=1)] = Field(default=0.0, description="the final value as a fraction of lr")
    exponent: PositiveFloat = 1.0


class ExponentialDecaySchedule(Section):
    """optax.exponential_decay: ``lr * decay_rate ** ((step - transition_begin) / transition_steps)``."""

    kind: Literal["exponential_decay"] = "exponential_decay"
    transition_steps: ScheduleSteps
    decay_rate: PositiveFloat
    transition_begin: StepCount = 0
    staircase: bool = Field(default=False, description="decay in whole transitions, not continuously")
    end_value: NonNegFloat | None = Field(default=None, description="a floor (decay_rate < 1) or ceiling (> 1)")


class WarmupCosineDecaySchedule(Section):
    """optax.warmup_cosine_decay_schedule: linear from ``init_value`` to ``lr`` over ``warmup_steps``,
    then cosine to ``end_value`` at ``decay_steps`` (counted from the start, warm-up included)."""

    kind: Literal["warmup_cosine_decay"] = "warmup_cosine_decay"
    warmup_steps: StepCount
    decay_steps: ScheduleSteps
    init_value: NonNegFloat = Field(default=0.0, description="the learning rate at step 0")
    end_value: NonNegFloat = 0.0
    exponent: PositiveFloat = 1.0

    @model_validator(mode="after")
    def _decays_after_warmup(self) -> "WarmupCosineDecaySchedule":
        if self.decay_steps <= self.warmup_steps:
            raise ValueError(f"decay_steps ({self.decay_steps}) counts the warm-up too; give more than "
                             f"warmup_steps ({self.warmup_steps})")
        return self


class LinearSchedule(Section):
    """optax.linear_schedule from ``lr`` to ``end_value`` over ``transition_steps``, then flat."""

    kind: Literal["linear"] = "linear"
    end_value: NonNegFloat
    transition_steps: ScheduleSteps
    transition_begin: StepCount = 0


class PiecewiseConstantSchedule(Section):
    """optax.piecewise_constant_schedule: from each boundary step on, the rate is multiplied by its scale."""

    kind: Literal["piecewise_constant"] = "piecewise_constant"
    boundaries_and_scales: dict[StepCount, NonNegFloat] = Field(
        min_length=1, description="step -> factor, e.g. {30000: 0.1, 60000: 0.1}"
    )

    @field_validator("boundaries_and_scales")
    @classmethod
    def _in_step_order(cls, value: dict[int, float]) -> dict[int, float]:
        return dict(sorted(value.items()))  # the resolved scenario reads the same whatever the input's order


ScheduleConfig = Annotated[
    Union[ConstantSchedule, CosineDecaySchedule, ExponentialDecaySchedule, WarmupCosineDecaySchedule, LinearSchedule,
          PiecewiseConstantSchedule],
    Field(discriminator="kind"),
]


def _optimizer_by_kind(value: Any) -> Any:
    """``optimizer: adam`` is ``{kind: adam}``; keys without a kind are sgd's, the default optimizer."""
    if isinstance(value, str):
        return {"kind": value}
    return {"kind": "sgd", **value} if isinstance(value, dict) and "kind" not in value else value


def _schedule_by_kind(value: Any) -> Any:
    """``lr_schedule: constant`` is ``{kind: constant}``; a schedule's keys depend on its kind, so it must be named."""
    if isinstance(value, str):
        return {"kind": value}
    if isinstance(value, dict) and "kind" not in value:
        kinds = typing.get_args(typing.get_args(ScheduleConfig)[0])
        raise ValueError("give the schedule's kind, one of: " + ", ".join(k.model_fields["kind"].default for k in kinds))
    return value


# ----------------------------------------------------------------------------- strategy
DEFAULT_TILE_ROWS = 8  # rows per tile of the exact reduction (docs/determinism.md): a scenario constant
MAX_TILE_ROWS = 256


class GradientSteps(NamedTuple):
    """What a number of updates costs a strategy in gradient steps: the bounds on a run's work
    count them (:func:`_check_work`), and a refusal says what to lower."""

    steps: float  # gradient steps of all workers together, the updates' own (steps in flight aside)
    fix: str = ""  # besides a smaller stop.max_updates, what makes an update take fewer ("a smaller strategy.sync_every")


class StrategyConfig(Section):
    """Base of every strategy's hyper-parameters; each strategy module subclasses it."""

    name: str
    reduction: Literal["exact", "fast"] = Field(
        default="exact",
        description="exact: fixed pairwise summation tree (bit-reproducible across layouts); "
        "fast: one batched gradient per worker",
    )
    exact_tile: Annotated[int, Field(ge=1, le=MAX_TILE_ROWS)] = Field(
        default=DEFAULT_TILE_ROWS,
        description="rows per leaf of the exact reduction's tree, each leaf one batched gradient; "
        "data.batch_size must be a multiple of it; 1: per-example leaves, for any batch",
    )
    optimizer: OptimizerConfig = Field(
        default_factory=SGDOptimizer, description="what turns a gradient into a step: sgd (default), adam or adamw"
    )
    lr_schedule: ScheduleConfig = Field(
        default_factory=ConstantSchedule, description="the learning rate by optimizer step, starting from (or peaking at) lr"
    )

    _optimizer_kind = field_validator("optimizer", mode="before")(_optimizer_by_kind)
    _schedule_kind = field_validator("lr_schedule", mode="before")(_schedule_by_kind)

    @model_validator(mode="after")
    def _optimizer_applies(self) -> "StrategyConfig":
        # A strategy that cannot apply the optimizer asked for says why; it is never ignored.
        refusal = self.optimizer_refusal()
        if refusal:
            raise ValueError(refusal)
        return self

    # Whether start() builds its update with fred.numerics.optim.optimizer_for(config). A strategy
    # that does not (a plug-in with its own update) refuses any optimizer but plain SGD at
    # constant lr, rather than run without it.
    applies_optimizer: ClassVar[bool] = False

    def optimizer_refusal(self) -> str | None:
        """Why this strategy cannot apply ``optimizer`` and ``lr_schedule``; None if it can."""
        if self.applies_optimizer or (self.optimizer == SGDOptimizer() and self.lr_schedule == ConstantSchedule()):
            return None
        return (f"strategy {self.name!r} applies its own update, not a configurable optimizer; drop optimizer "
                "and lr_schedule (strategies that apply them: docs/strategies.md)")

    def check(self, scenario: "Scenario") -> None:
        """Raise ``ValueError`` naming the fix if this strategy cannot run ``scenario``."""

    def fault_support(self) -> frozenset[str]:
        """Optional fault behaviours this strategy models: ``rejoin``, ``server_crash``."""
        return frozenset()

    def has_server(self) -> bool:
        """Whether the strategy runs a parameter server, whose ``server`` link faults may name."""
        return "server_crash" in self.fault_support()

    def buckets_gradients(self) -> bool:
        """Whether the strategy all-reduces each gradient as the backward pass makes it, so that
        ``workload.bucket_bytes`` applies (synchronous all-reduce SGD)."""
        return False

    def model_copies_per_worker(self) -> int:
        """Parameter-sized arrays the strategy holds per worker (the parameters it read and its
        gradient; a strategy keeping a replica per worker holds more): the memory estimate's."""
        return 2

    def gradient_steps(self, scenario: "Scenario", updates: int) -> GradientSteps:
        """The gradient steps all workers together take for the run to make ``updates`` updates,
        as ``stop.max_updates`` counts them (one per gradient for ASGD, ``n`` a round for SSGD,
        ``n * sync_every`` for Local SGD, a pipeline's fill besides), with what else to lower
        when they are too many. Every strategy answers it: validation bounds a run's work with it
        (``stop.max_updates: 5`` of Local SGD with ``sync_every: 1e9`` computed for ever), and
        the shortest time the updates can take (steps / workers x the fastest step)."""
        raise NotImplementedError(
            f"strategy {self.name!r} does not say how many gradient steps its updates take: its config needs a "
            "gradient_steps(scenario, updates) method (docs/strategy-contract.md)")


def _validate_strategy(value: Any) -> StrategyConfig:
    if isinstance(value, StrategyConfig):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError(f"strategy needs a 'name', one of: {', '.join(registry.names())}")
    config_cls = registry.config_class(value["name"])
    if not issubclass(config_cls, StrategyConfig):  # a plug-in's mistake, not the scenario's
        raise TypeError(f"strategy {value['name']!r} registered {config_cls.__name__}, which is not a StrategyConfig")
    return config_cls.model_validate(value)


def _buckets_by_default(config: type[BaseModel]) -> bool:
    try:
        return bool(config().buckets_gradients())  # type: ignore[attr-defined]
    except Exception:  # a plug-in's config that needs arguments, or is no StrategyConfig
        return False


def _check_tile(scenario: Scenario) -> None:
    """The exact reduction's leaves are tiles of ``exact_tile`` rows: every batch must be whole tiles."""
    tile, batch = scenario.strategy.exact_tile, scenario.data.batch_size
    if scenario.strategy.reduction != "exact" or batch % tile == 0:
        return
    lower = [t for t in (1, 2, 4, 8, 16, 32) if batch % t == 0 and t < tile][-1]
    below, above = batch - batch % tile, batch + tile - batch % tile
    multiples = ", ".join(str(b) for b in (below, above) if b > 0)
    raise ValueError(
        f"strategy.exact_tile is {tile} but data.batch_size {batch} is not a multiple of it: the exact reduction "
        f"sums tiles of {tile} rows. Set data.batch_size to a multiple of {tile} ({multiples}), strategy.exact_tile "
        f"to a divisor of {batch} ({lower}; 1 fits any batch) or strategy.reduction: fast"
    )


def _check_timing_only(scenario: Scenario) -> None:
    name = scenario.strategy.name
    if not registry.get(name).timing_only:
        supported = ", ".join(s.name for s in registry.all_strategies() if s.timing_only)
        raise ValueError(
            f"workload.timing_only: strategy {name!r} needs real gradients; timing-only runs support "
            f"{supported}. Pick one of those or set workload.timing_only: false"
        )
    if scenario.stop.target_eval_loss is not None:
        raise ValueError(
            "stop.target_eval_loss is never reached in a timing-only run (there are no losses); "
            "stop on max_updates or max_sim_time_s, or set workload.timing_only: false"
        )


# ----------------------------------------------------------------------------- scenario
MAX_NAME_BYTES = 100  # with "-s<seed>-<hash>", ".partial-<host>-<pid>" or ".checkpoint", a run directory's name stays under 255


class Scenario(Section):
    """One run: what to train, on which simulated cluster, with which strategy, until when."""

    name: str = "run"
    seed: Annotated[int, Field(ge=0)] = 0
    model: ModelConfig = Field(default_factory=MLPModel)
    data: DataConfig = Field(default_factory=DataConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    strategy: StrategyConfig
    stop: StopConfig
    eval: EvalConfig = Field(default_factory=EvalConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)

    @field_validator("strategy", mode="before")
    @classmethod
    def _dispatch_strategy(cls, value: Any) -> StrategyConfig:
        return _validate_strategy(value)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        _check_model_data(self)
        compute = self.cluster.compute
        if self.workload.flops_per_example is not None and compute.device_flops is None:
            raise ValueError("workload.flops_per_example needs cluster.compute.device_flops to turn FLOPs into seconds")
        if compute.step_time_s is None and compute.device_flops is None:
            raise ValueError("cluster.compute needs step_time_s, or device_flops with flops_per_example or a workload")
        if compute.step_time_s is None and compute.flops_per_example is None and self.workload.resolved_flops_per_example() is None \
                and model_workloads.scenario_workload(self) is None:
            raise ValueError("cluster.compute.device_flops needs flops_per_example (here or in workload): fred derives a "
                             "built-in model's own FLOPs only from data whose shape the scenario tells (not "
                             f"{self._shape_unknown()}); give cluster.compute.flops_per_example or workload.profile")
        self.strategy.check(self)
        _check_tile(self)
        per_node = self.cluster.devices_per_node * self.cluster.workers_per_device
        sites = self.network.sites
        if sites is not None and sum(sites.nodes) * per_node != self.cluster.workers:
            raise ValueError(f"network.sites.nodes {sites.nodes} hold {sum(sites.nodes)} nodes of {per_node} worker"
                             f"{'s' * (per_node != 1)}, and cluster.workers {self.cluster.workers} make "
                             f"{self.cluster.workers // per_node} nodes; give sites that add up to "
                             f"{self.cluster.workers // per_node} nodes, or {sum(sites.nodes) * per_node} workers")
        if self.network.hierarchical and per_node == 1 and self.network.hierarchy == "node":
            raise ValueError("network.hierarchical: true reduces inside each node first, and every node here holds one "
                             "worker (cluster.devices_per_node and workers_per_device are 1); give nodes several "
                             "workers (devices_per_node: 8) or drop hierarchical")
        if self.workload.bucket_bytes is not None and self.workload.profile is None and self.model.kind == "python":
            raise ValueError(f"workload.bucket_bytes {self.workload.bucket_bytes} needs workload.profile with a python "
                             "model: buckets are cut from a model's layers, in backward order, and fred knows the "
                             f"built-in models' only; name one of: {', '.join(workloads.names())}")
        if self.cluster.compute.bucket_overhead_s and not self.strategy.buckets_gradients():
            buckets = ", ".join(s.name for s in registry.all_strategies() if _buckets_by_default(s.config))
            raise ValueError(f"cluster.compute.bucket_overhead_s {self.cluster.compute.bucket_overhead_s:g}: strategy "
                             f"{self.strategy.name!r} does not all-reduce gradients as the backward pass makes them, so "
                             f"it has no buckets to pay for; drop bucket_overhead_s or use {buckets}")
        if self.workload.bucket_bytes is not None and not self.strategy.buckets_gradients():
            buckets = ", ".join(s.name for s in registry.all_strategies() if _buckets_by_default(s.config))
            raise ValueError(f"workload.bucket_bytes: strategy {self.strategy.name!r} does not all-reduce gradients as "
                             f"the backward pass makes them; drop bucket_bytes or use {buckets}")
        _check_faults(self)
        _check_durations(self)
        _check_cadences(self)
        if self.workload.timing_only:
            _check_timing_only(self)
        return self

    def _shape_unknown(self) -> str:
        """What keeps the scenario from telling its model's FLOPs (for the refusal's message)."""
        if self.model.kind == "python":
            return "a python model, whose layers fred does not know"
        source = self.data.source
        if source.kind == "text":
            return "a text file read by character: its vocabulary is the file's; give model.vocab"
        return f"data.source.kind {source.kind}, whose shape only its files tell"

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not value or any(c in value for c in "/\\\0") or value.startswith("."):
            raise ValueError(f"got {value[:100]!r}; use a plain, non-empty name without '/', '\\' or a leading '.'")
        if len(value.encode("utf-8")) > MAX_NAME_BYTES:  # found only when the run directory was made, after the run
            raise ValueError(f"got {value[:40]!r}... ({len(value):,} characters); use at most {MAX_NAME_BYTES} bytes "
                             "(as many plain ASCII characters): it begins the run directory's name, and a file name "
                             "has at most 255")
        return value

    def resolved(self) -> dict[str, Any]:
        """The fully resolved scenario as plain JSON-compatible data (defaults filled in)."""
        data = self.model_dump(mode="json")
        data["strategy"] = self.strategy.model_dump(mode="json")
        return data

    def digest(self) -> str:
        """SHA-256 of the resolved scenario in canonical JSON: equal scenarios, equal digest."""
        canonical = json.dumps(self.resolved(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


MAX_CADENCE_EVENTS = 100_000  # evaluations, or server checkpoints, in one run: past this, a typo, not a plan
MAX_STEPS = 100_000_000  # gradient steps of all workers in one run: days of computing, or a typo
CLOCK_RESOLUTION = 2.0**-40  # a step shorter than this fraction of the time it starts at barely moves the clock


def base_step_time_s(scenario: Scenario) -> float:
    """Seconds per batch at speed 1, before jitter and stragglers."""
    compute = scenario.cluster.compute
    flops = scenario.workload.resolved_flops_per_example() or compute.flops_per_example
    if flops is not None and compute.device_flops is not None:  # a profile's FLOPs need device_flops
        return flops * scenario.data.batch_size / compute.device_flops
    if compute.step_time_s is not None:
        return compute.step_time_s
    own = model_workloads.scenario_workload(scenario)  # device_flops alone: the model's own training FLOPs
    if own is not None and compute.device_flops is not None:
        return own.flops_per_example * scenario.data.batch_size / compute.device_flops
    raise ValueError("cluster.compute needs step_time_s, or flops_per_example with device_flops")


def speed_spans(scenario: Scenario, worker: int) -> list[tuple[float, float, str]]:
    """``worker``'s steps as the scenario times them, before jitter: ``(from_s, step_s, field)``
    for each span of one speed, ``field`` naming what set it."""
    cluster = scenario.cluster
    slow, delay_s = 1.0, 0.0
    for s in cluster.stragglers:
        if s.worker == worker:
            slow, delay_s = slow * s.slow_factor, delay_s + s.delay_s
    base_s = base_step_time_s(scenario) * slow
    field = f"cluster.speed.{worker}" if worker in cluster.speed else "cluster.compute"
    spans = [(0.0, base_s / cluster.speed.get(worker, 1.0) + delay_s, field)]
    changes = sorted((c.at_s, i, c.speed) for i, c in enumerate(cluster.speed_changes) if c.worker == worker)
    for at_s, i, speed in changes:
        spans.append((at_s, base_s / speed + delay_s, f"cluster.speed_changes.{i}.speed"))
    return spans


def worker_steps(scenario: Scenario, until_s: float) -> float:
    """Gradient steps all workers take in ``until_s`` simulated seconds computing without a
    pause, as the scenario times them: more than any run of it takes in that time."""
    total = 0.0
    for worker in range(scenario.cluster.workers):
        spans = speed_spans(scenario, worker)
        for (from_s, step_s, _), (to_s, _, _) in zip(spans, [*spans[1:], (until_s, 0.0, "")]):
            total += max(min(to_s, until_s) - from_s, 0.0) / step_s
    return total


def fastest_step(scenario: Scenario) -> tuple[float, str]:
    """The shortest step any worker takes (jitter's rare short draws allowed for), and what set it."""
    jitter = scenario.cluster.jitter
    shrink = math.exp(-4 * jitter.sigma) if jitter.kind == "lognormal" else 1.0  # 1 draw in 30,000 is shorter
    step_s, field = min((step_s, field) for w in range(scenario.cluster.workers) for _, step_s, field in speed_spans(scenario, w))
    return step_s * shrink, field


MAX_ACTIVITY_S = 1e9  # one step or one message, in simulated seconds (about 32 years): longer is a typo in a speed or a rate


def _check_durations(scenario: Scenario) -> None:
    """Refuse a speed, a rate or a time that makes one step or one message last more than
    MAX_ACTIVITY_S: ``speed: {0: 5e-324}`` made a step of inf s, and the run stalled waiting for it."""
    cluster, network = scenario.cluster, scenario.network
    compute = cluster.compute
    flops = scenario.workload.resolved_flops_per_example() or compute.flops_per_example
    timed_by_flops = flops is not None and compute.device_flops is not None
    base_s = base_step_time_s(scenario)
    if not base_s <= MAX_ACTIVITY_S:
        if timed_by_flops:
            least = flops * scenario.data.batch_size / MAX_ACTIVITY_S
            _too_long("cluster.compute.device_flops", compute.device_flops, f"a step at speed 1 would take {base_s:.3g} s "
                      f"({flops:.3g} FLOPs x {scenario.data.batch_size} examples / device_flops)", f"give at least {least:.3g}")
        _too_long("cluster.compute.step_time_s", base_s, "a step at speed 1 would take that long", f"give at most {MAX_ACTIVITY_S:g}")
    times = [("cluster.compute.host_overhead_s", compute.host_overhead_s), ("cluster.random_straggle.delay_s", cluster.random_straggle.delay_s),
             *((f"cluster.stragglers.{i}.delay_s", s.delay_s) for i, s in enumerate(cluster.stragglers))]
    for field, seconds in times:
        if not seconds <= MAX_ACTIVITY_S:
            _too_long(field, seconds, "every step it delays would take that long", f"give at most {MAX_ACTIVITY_S:g}")
    _check_steps(scenario, base_s)
    _check_messages(scenario)


def _check_steps(scenario: Scenario, base_s: float) -> None:
    """Each worker's steps at each of its speeds (stragglers' slow factors included) last at most MAX_ACTIVITY_S."""
    cluster = scenario.cluster
    named = sorted(set(cluster.speed) | {s.worker for s in cluster.stragglers} | {c.worker for c in cluster.speed_changes})
    for worker in named:
        slow_s, slowed_by = base_s, None
        for i, straggler in enumerate(cluster.stragglers):
            if straggler.worker == worker:
                slow_s, slowed_by = slow_s * straggler.slow_factor, i
        if not slow_s <= MAX_ACTIVITY_S:
            factor = cluster.stragglers[slowed_by].slow_factor  # type: ignore[index]
            _too_long(f"cluster.stragglers.{slowed_by}.slow_factor", factor, f"worker {worker}'s steps would take {slow_s:.3g} s "
                      f"({base_s:.3g} s x the slow factors)", f"give at most {MAX_ACTIVITY_S / (slow_s / factor):.3g}")
        speeds = [(f"cluster.speed.{worker}", cluster.speed[worker])] if worker in cluster.speed else []
        speeds += [(f"cluster.speed_changes.{i}.speed", c.speed) for i, c in enumerate(cluster.speed_changes) if c.worker == worker]
        for field, speed in speeds:
            step_s = slow_s / speed
            if not step_s <= MAX_ACTIVITY_S:
                _too_long(field, speed, f"worker {worker}'s steps would take {step_s:.3g} s ({slow_s:.3g} s / {speed:.3g})",
                          f"give a speed of at least {slow_s / MAX_ACTIVITY_S:.3g}")


def _check_messages(scenario: Scenario) -> None:
    """A message over each link (the model's bytes, or one byte where the model's size is not known
    before it is built) lasts at most MAX_ACTIVITY_S: latency, transfer and reduction each."""
    network = scenario.network
    known = scenario.workload.resolved_param_bytes()
    nbytes = known or 1
    message = f"a message of {nbytes:,} bytes" if known else "one byte"
    links = [("network", network, network.efficiency / network.oversubscription), ("network.intra_node", network.intra_node, 1.0)]
    if network.server is not None:
        links.append(("network.server", network.server, network.efficiency))
    for where, link, share in links:
        if not link.latency_s <= MAX_ACTIVITY_S:
            _too_long(f"{where}.latency_s", link.latency_s, "every message would wait that long", f"give at most {MAX_ACTIVITY_S:g}")
        transfer_s = nbytes / link.bandwidth_bps / share
        if not transfer_s <= MAX_ACTIVITY_S:
            rate = f"{link.bandwidth_bps:.3g} bytes/s" + (f" x {share:.3g} (efficiency / oversubscription)" if share != 1 else "")
            if nbytes / link.bandwidth_bps <= MAX_ACTIVITY_S:  # the line rate would do: the transport's share is what is off
                field, value = ("network.efficiency", network.efficiency) if nbytes / link.bandwidth_bps / network.efficiency \
                    > MAX_ACTIVITY_S else ("network.oversubscription", network.oversubscription)
                fix = (f"give at least {nbytes / link.bandwidth_bps * network.oversubscription / MAX_ACTIVITY_S:.3g}"
                       if field.endswith("efficiency") else f"give at most {MAX_ACTIVITY_S / (nbytes / link.bandwidth_bps / network.efficiency):.3g}")
            else:
                field, value, fix = f"{where}.bandwidth_bps", link.bandwidth_bps, f"give at least {nbytes / share / MAX_ACTIVITY_S:.3g}"
            _too_long(field, value, f"{message} would take {transfer_s:.3g} s at {rate}", fix)
    if not network.sync_s <= MAX_ACTIVITY_S:
        _too_long("network.sync_s", network.sync_s, "every all-reduce would wait that long", f"give at most {MAX_ACTIVITY_S:g}")
    if not nbytes * network.reduce_s_per_byte <= MAX_ACTIVITY_S:
        _too_long("network.reduce_s_per_byte", network.reduce_s_per_byte,
                  f"reducing {message} would take {nbytes * network.reduce_s_per_byte:.3g} s", f"give at most {MAX_ACTIVITY_S / nbytes:.3g}")


def _too_long(field: str, value: float, what: str, fix: str) -> None:
    raise ValueError(f"{field} is {value:.3g}: {what}, more than the {MAX_ACTIVITY_S:g} simulated seconds (about 32 "
                     f"years) one step or message may take (the run would wait for it for ever): {fix}")


class Work(NamedTuple):
    """How much a run computes, as validation bounds it: it ends at ``stop.max_sim_time_s`` or once
    its ``stop.max_updates`` are made, whichever comes first, so it computes the fewer steps."""

    by_time: float  # gradient steps the workers can take in max_sim_time_s (inf without it)
    by_updates: float  # gradient steps the strategy's max_updates take (inf without it)
    fix: str  # what else makes an update take fewer steps, as the strategy says
    at_least_s: float  # the simulated time the run lasts at least: max_sim_time_s, or its updates' steps side by side

    @property
    def steps(self) -> float:
        return min(self.by_time, self.by_updates)


def run_work(scenario: Scenario) -> Work:
    """The scenario's :class:`Work`, steps counted as the strategy counts them."""
    end_s, updates = scenario.stop.max_sim_time_s, scenario.stop.max_updates
    by_time = worker_steps(scenario, end_s) if end_s is not None else math.inf
    by_updates, fix = update_steps(scenario) if updates is not None else (math.inf, "")
    step_s, _ = fastest_step(scenario)
    at_least_s = min(end_s if end_s is not None else math.inf, by_updates / scenario.cluster.workers * step_s)
    return Work(by_time, by_updates, fix, at_least_s)


def update_steps(scenario: Scenario) -> GradientSteps:
    """The gradient steps ``stop.max_updates`` takes, as the strategy counts them."""
    assert scenario.stop.max_updates is not None
    try:
        return scenario.strategy.gradient_steps(scenario, scenario.stop.max_updates)
    except NotImplementedError as err:  # a plug-in written before strategies said it: named, not a traceback
        raise ValueError(str(err)) from None


def _check_cadences(scenario: Scenario) -> None:
    """Refuse what would take a run for ever: 1e-20 s evaluations or server checkpoints, steps of
    1e-22 s (a speed of 1e20), and steps too short to move the clock."""
    end_s, updates = scenario.stop.max_sim_time_s, scenario.stop.max_updates
    n = scenario.cluster.workers
    for worker in range(n):
        for from_s, step_s, field in speed_spans(scenario, worker):
            if step_s < from_s * CLOCK_RESOLUTION:
                raise ValueError(f"{field}: worker {worker}'s steps from {from_s} s take {step_s:.3g} s, too short to move "
                                 f"a clock at {from_s} s (its resolution there is {from_s * 2.0**-52:.3g} s): give a smaller speed")
    by_time, by_updates, fix, at_least_s = run_work(scenario)
    step_s, field = fastest_step(scenario)
    if min(by_time, by_updates) > MAX_STEPS:
        if by_time <= by_updates:
            workers = f"{n} worker{'s' * (n > 1)} take{'s' * (n == 1)}"
            raise ValueError(f"stop.max_sim_time_s is {end_s} s: {workers} {by_time:.3g} steps in it (the fastest {step_s:.3g} s, "
                             f"from {field}); at most {MAX_STEPS:,}: give a shorter max_sim_time_s, slower steps, or "
                             + ("a smaller stop.max_updates" if updates is not None else "stop.max_updates"))
        fixes = ["a smaller stop.max_updates", *([fix] if fix else []),
                 "a shorter stop.max_sim_time_s" if end_s is not None else "stop.max_sim_time_s"]
        raise ValueError(f"stop.max_updates is {updates}: strategy {scenario.strategy.name} takes {by_updates:.3g} gradient steps "
                         f"of {n} worker{'s' * (n > 1)} for them; at most {MAX_STEPS:,}: give {', '.join(fixes[:-1])} or {fixes[-1]}")
    server = scenario.faults.server_crash
    for field, every_s in [("eval.every_s", scenario.eval.every_s),
                           ("faults.server_crash.checkpoint_every_s", server.checkpoint_every_s if server else None)]:
        if every_s is None or at_least_s / every_s <= MAX_CADENCE_EVENTS:
            continue
        if at_least_s == end_s:
            raise ValueError(f"{field} is {every_s} s: {end_s / every_s:.3g} times in stop.max_sim_time_s {end_s} s; "
                             f"give at most {MAX_CADENCE_EVENTS:,} (every_s >= {end_s / MAX_CADENCE_EVENTS:.3g})")
        raise ValueError(f"{field} is {every_s} s: at least {at_least_s / every_s:.3g} times in the run, whose "
                         f"stop.max_updates {updates} take {at_least_s:.3g} s or more ({n} workers, steps of {step_s:.3g} s "
                         f"at the fastest); give at most {MAX_CADENCE_EVENTS:,} (every_s >= {at_least_s / MAX_CADENCE_EVENTS:.3g})"
                         + (", or eval.every_updates" if field == "eval.every_s" else ""))


IMAGE_KINDS = ("cnn", "resnet")


def _check_model_data(scenario: Scenario) -> None:
    """Refuse a model that cannot take the data, as far as the scenario tells: sequence labels
    go with the transformer alone (and iid sharding), images with the convolutional models."""
    model, data = scenario.model, scenario.data
    source = data.source
    sequences = source.kind in SEQUENCE_SOURCES
    if sequences and model.kind != "transformer":
        raise ValueError(f"model.kind {model.kind} cannot learn data.source.kind {source.kind}: its labels are the next "
                         "token at every position of a sequence; use model: {kind: transformer}")
    if model.kind == "transformer" and not sequences:
        raise ValueError(f"model.kind transformer predicts the next token of token sequences; data.source.kind "
                         f"{source.kind} has none: use data.source.kind text or synthetic_tokens")
    if sequences and data.sharding != "iid":
        raise ValueError(f"data.sharding {data.sharding} deals examples out by their class, and a sequence's label is "
                         "a token at every position, not one class; use data.sharding: iid")
    if model.kind in IMAGE_KINDS and source.kind == "synthetic":
        raise ValueError(f"model.kind {model.kind} needs images (H, W, C); data.source.kind synthetic gives flat feature "
                         "vectors: use synthetic_images, cifar10, cifar100, digits or mnist")
    if model.kind == "transformer" and model.context is not None and model.context < source.context:
        raise ValueError(f"model.context {model.context} is shorter than the data's sequences (data.source.context "
                         f"{source.context}): the model embeds positions up to its context; give model.context at "
                         f"least {source.context}, or leave it out")
    if model.kind == "transformer" and model.vocab is not None:
        declared = model_workloads.declared_shape(source, None)
        if declared is not None and model.vocab < declared[1]:
            raise ValueError(f"model.vocab {model.vocab} is smaller than the data's {declared[1]} tokens: every token "
                             f"must have an embedding; give model.vocab at least {declared[1]}, or leave it out")


def _check_crash_order(faults: FaultsConfig) -> None:
    """Refuse a crash of a worker or server that is already down: it was silently dropped, and
    with it the rejoin or restart time the user gave."""
    by_worker: dict[int, list[tuple[float, int]]] = {}
    for i, crash in enumerate(faults.worker_crash):
        by_worker.setdefault(crash.worker, []).append((crash.at_s, i))
    for worker in sorted(by_worker):
        entries = sorted(by_worker[worker])
        for (_, before), (at_s, i) in zip(entries, entries[1:]):
            back_s = faults.worker_crash[before].rejoin_at_s
            if back_s is None or at_s <= back_s:
                back = f"back at {back_s} s" if back_s is not None else "never back (no rejoin_at_s)"
                raise ValueError(
                    f"faults.worker_crash.{i} crashes worker {worker} at {at_s} s while it is down "
                    f"(faults.worker_crash.{before}: down from {faults.worker_crash[before].at_s} s, {back}); "
                    "a worker can crash again only after it has rejoined"
                )
    crashes = faults.server_crash.crashes if faults.server_crash is not None else []
    order = sorted(range(len(crashes)), key=lambda i: crashes[i].at_s)
    for before, i in zip(order, order[1:]):
        back_s = crashes[before].at_s + crashes[before].restart_s
        if crashes[i].at_s <= back_s:
            raise ValueError(
                f"faults.server_crash.crashes.{i} is at {crashes[i].at_s} s while the server is down "
                f"(crashes.{before}: from {crashes[before].at_s} s, back at {back_s} s); "
                "a server can crash again only after it has restarted"
            )


def _check_faults(scenario: Scenario) -> None:
    """Faults must name workers and links that exist, and behaviours the strategy models."""
    faults, n = scenario.faults, scenario.cluster.workers
    strategy, support = scenario.strategy.name, scenario.strategy.fault_support()
    server = scenario.strategy.has_server()
    entities = [f"worker{i}" for i in range(n)] + (["server"] if server else [])
    sites = scenario.network.sites
    site_links = [f"site{i}" for i in range(len(sites.nodes))] if sites is not None else []
    for i, crash in enumerate(faults.worker_crash):
        if crash.worker >= n:
            raise ValueError(f"faults.worker_crash.{i}.worker is {crash.worker}; workers are 0..{n - 1}")
        if crash.rejoin_at_s is not None and "rejoin" not in support:
            raise ValueError(
                f"faults.worker_crash.{i}.rejoin_at_s: strategy {strategy!r} does not model a worker rejoining; "
                "remove rejoin_at_s (see docs/failures.md for the strategies that do)"
            )
    _check_crash_order(faults)
    if faults.any() and getattr(scenario.strategy, "clock", "simulated") == "logical":
        raise ValueError("faults are timed in simulated seconds, which clock: logical does not have; use clock: simulated")
    for i, degrade in enumerate(faults.link_degrade):
        if degrade.entity.startswith("site") and degrade.entity not in site_links:
            raise ValueError(f"faults.link_degrade.{i}.entity is {degrade.entity!r}; the wide-area links are "
                             f"{', '.join(site_links) or 'none (network.sites is not given)'}")
    named = [(f"faults.link_degrade.{i}.entity", d.entity) for i, d in enumerate(faults.link_degrade)
             if d.entity not in site_links]
    if faults.message_loss is not None:
        named += [(f"faults.message_loss.entities.{i}", e) for i, e in enumerate(faults.message_loss.entities)]
    workers = "worker0" if n == 1 else f"worker0..worker{n - 1}"
    for where, entity in named:
        if entity not in entities:
            if server:
                raise ValueError(f"{where} is {entity!r}; links belong to {workers} or server")
            raise ValueError(f"{where} is {entity!r}; links belong to {workers} "
                             f"(strategy {strategy!r} has no parameter server, so no server link)")
    if faults.server_crash is not None and "server_crash" not in support:
        if server:
            raise ValueError(
                f"faults.server_crash: strategy {strategy!r} does not model its parameter server crashing "
                "(what a checkpoint keeps, what a restart loses); see docs/failures.md for the strategies that do"
            )
        raise ValueError(
            f"faults.server_crash: strategy {strategy!r} has no parameter server to crash; "
            "use asgd, sasgd, fasgd, bfasgd or ssgd with aggregation: ps"
        )
