"""The ``network`` section: links, node-local links, sites and the all-reduce algorithm."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from fred.scenario.schema.base import NonNegFloat, PositiveFloat, Section

INTRA_NODE_DEFAULT = {
    "latency_s": 5e-6,
    "bandwidth_bps": 12e9,
}  # PCIe 3.0 x16, as in a V100 node without NVLink


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
        min_length=2,
        description="nodes in each site, in order: site 0 holds the first nodes (a node is "
        "devices_per_node x workers_per_device workers, one worker when both are 1)",
    )
    latency_s: NonNegFloat = Field(
        default=0.03,
        description="what a route between two sites adds, one way: "
        "each site's wide-area link takes this long",
    )
    bandwidth_bps: PositiveFloat = Field(
        default=1.25e8,
        description="each site's wide-area link, bytes per second "
        "each way (1 Gbit/s), shared by every flow leaving or entering the site",
    )
    server_site: Annotated[int, Field(ge=0)] = Field(
        default=0, description="the site a parameter server sits in"
    )
    tcp_window_bytes: PositiveFloat | None = Field(
        default=None,
        description="a flow between sites goes at most this window over its round trip (twice its "
        "one-way latency), SimGrid's TCP_gamma (4 MiB there, 4194304); none: no window bound",
    )

    @model_validator(mode="after")
    def _every_site_has_nodes(self) -> "SitesConfig":
        empty = [i for i, n in enumerate(self.nodes) if n == 0]
        if empty:
            raise ValueError(
                f"nodes: site {empty[0]} has no nodes ({self.nodes}); give every site at least one node, "
                "or drop the empty site"
            )
        if self.server_site >= len(self.nodes):
            raise ValueError(f"server_site {self.server_site}: sites are 0..{len(self.nodes) - 1}")
        return self


class NcclConfig(Section):
    """What ``allreduce: nccl`` may choose from, as NCCL_ALGO and NCCL_PROTO restrict it."""

    algorithms: list[Literal["ring", "tree"]] = Field(
        default_factory=lambda: ["ring", "tree"],
        min_length=1,
        description="NCCL_ALGO: the algorithms NCCL may pick",
    )
    protocols: list[Literal["LL", "LL128", "Simple"]] = Field(
        default_factory=lambda: ["LL", "LL128", "Simple"],
        min_length=1,
        description="NCCL_PROTO: the protocols NCCL may pick (LL128 is on by default only on Volta and "
        "later GPUs with NVLink)",
    )
    intra_link: Literal["nvlink", "pci"] = Field(
        default="nvlink", description="the devices' links inside a node, for NCCL's latency per step"
    )


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
    allreduce: Literal[
        "ring", "recursive_doubling", "halving_doubling", "binary_tree", "double_binary_tree", "nccl"
    ] = Field(
        default="ring",
        description="all-reduce algorithm: nccl (NCCL's choice of ring or tree and protocol per message, "
        "timed "
        "by its tuning model, docs/network.md), ring (NCCL's for large messages), recursive_doubling "
        "(log2 p swaps of the whole message), halving_doubling (Rabenseifner's: MPI's for large messages), "
        "binary_tree (reduce the whole message up a binary tree, broadcast it down: log2 p levels for any "
        "p), "
        "double_binary_tree (NCCL's tree: two complementary binary trees, each reducing and broadcasting "
        "half)",
    )
    hierarchical: bool = Field(
        default=False,
        description="reduce inside each node first, run the allreduce algorithm across nodes among one "
        "worker "
        "per node, then broadcast inside the node (Horovod's hierarchical all-reduce)",
    )
    hierarchy: Literal["node", "site"] = Field(
        default="node",
        description="with hierarchical: what to reduce inside first: each node, or each site "
        "(network.sites), whose leaders then all-reduce across the wide-area links",
    )
    sites: SitesConfig | None = Field(
        default=None,
        description="split the cluster into sites joined by wide-area links (docs/network.md); "
        "needs sharing: fair or rtt",
    )
    nccl: NcclConfig | None = Field(
        default=None,
        description="with allreduce: nccl, the algorithms and protocols it may pick (default: all)",
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
            workers = {
                key: data.get(key, cls.model_fields[key].default) for key in ("latency_s", "bandwidth_bps")
            }
            data = {**data, "server": {**workers, **data["server"]}}
        if isinstance(data, dict) and isinstance(
            data.get("intra_node"), dict
        ):  # a key left out keeps the PCIe default
            data = {**data, "intra_node": {**INTRA_NODE_DEFAULT, **data["intra_node"]}}
        return data

    @model_validator(mode="after")
    def _nccl_settings_fit(self) -> "NetworkConfig":
        if self.nccl is not None and self.allreduce != "nccl":
            raise ValueError(
                f"nccl: its algorithms and protocols apply only with allreduce: nccl (allreduce is "
                f"{self.allreduce!r}); set allreduce: nccl or drop the nccl section"
            )
        if self.allreduce == "nccl" and self.hierarchical:
            raise ValueError(
                "hierarchical: true with allreduce: nccl; NCCL's ring and tree already cross nodes "
                "through their NICs and chain inside them: drop hierarchical"
            )
        if self.server is not None and self.server.busbw_bps is not None:
            raise ValueError(
                "server.busbw_bps: a bus bandwidth belongs to a node's devices (intra_node.busbw_bps); "
                "give the server link's bandwidth_bps"
            )
        return self

    @model_validator(mode="after")
    def _oversubscription_needs_flows(self) -> "NetworkConfig":
        if self.oversubscription != 1 and self.sharing == "fcfs":
            raise ValueError(
                f"oversubscription {self.oversubscription:g} needs sharing: fair (transfers booked first "
                "come, "
                "first served cannot share a switch's core); set sharing: fair or oversubscription: 1"
            )
        if self.sites is not None and self.sharing == "fcfs":
            raise ValueError(
                "sites need sharing: fair or rtt (a route across sites crosses four links, which "
                "transfers booked first come, first served do not model); set sharing: fair or rtt"
            )
        if self.hierarchy == "site" and (self.sites is None or not self.hierarchical):
            raise ValueError(
                "hierarchy: site reduces inside each site first: it needs network.sites and "
                "hierarchical: true; add them or drop hierarchy"
            )
        return self
