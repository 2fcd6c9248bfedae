"""NCCL all-reduce time against size, predicted by fred's ``network.allreduce: nccl``, against nccl-tests.

    python scenarios/collectives/validation.py     # prints the section of docs/validation.md (seconds)

Each ``*.csv`` here is one published ``all_reduce_perf`` table (out-of-place columns), its source
and stated hardware in its header lines. fred's prediction for a table is the clock of fred's own
:class:`~fred.simulation.algorithms.Nccl` collective, run once per message size on a SimPy clock,
with a ``network`` section built from the table's stated hardware only: the GPU's link line rate
(NVLink or PCIe, vendor figures) and the node's NICs. Two constants are fitted, on the table
``FITTED_ON`` only, and every other table is predicted with them (a further table: its CSV here and
its line in ``HARDWARE``):

- ``share``: the achieved share of line rate (``network.efficiency``, and ``intra_node.busbw_bps``
  as that share of the GPU link's line rate), what protocol overhead and NCCL's channels leave;
- ``launch_s``: the launch latency (``network.sync_s``), a fixed cost per collective beside NCCL's
  own latency model: the kernel launch and nccl-tests' per-iteration synchronisation.

The error of a size is ``fred / measured - 1``; a table's (or a regime's) geometric-mean error is
``exp(mean |log(fred / measured)|) - 1``. Regimes: latency-bound below 64 KiB, bandwidth-bound above
64 MiB, the middle between.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple, Sequence

import simpy
from scipy.optimize import minimize

from fred.scenario.schema import NetworkConfig
from fred.simulation.algorithms import Nccl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIGURE = ROOT / "docs" / "img" / "nccl-allreduce-curves.png"
FITTED_ON = "a100_nvswitch_8"
LATENCY_BOUND_BYTES = 64 * 1024  # below: latency-bound
BANDWIDTH_BOUND_BYTES = 64 * 1024 * 1024  # above: bandwidth-bound
MAX_BYTES = 1 << 30  # the sweep judged: 8 B to 1 GiB


class Hardware(NamedTuple):
    """A table's stated hardware: ranks on nodes, a GPU's link line rate each way, the node's NICs."""

    ranks: int
    nodes: int
    gpu_link_bps: float
    node_nics_bps: float | None
    intra_link: str  # "nvlink" or "pci": NCCL's per-step latency inside a node
    protocols: tuple[str, ...]
    reading: str  # where the line rates come from


ALL_PROTOCOLS = ("LL", "LL128", "Simple")
HARDWARE = {
    "a100_nvswitch_8": Hardware(
        8,
        1,
        300e9,
        None,
        "nvlink",
        ALL_PROTOCOLS,
        "A100 SXM4: 12 NVLink 3 links x 25 GB/s = 300 GB/s each way",
    ),
    "a100_roce_2x8": Hardware(
        16,
        2,
        300e9,
        200e9,
        "nvlink",
        ALL_PROTOCOLS,
        "A100 SXM4 300 GB/s; 16 x 100 Gbit/s RoCE a node = 200 GB/s",
    ),
    "h100_tcpxo_2x8": Hardware(
        16,
        2,
        450e9,
        200e9,
        "nvlink",
        ALL_PROTOCOLS,
        "H100 SXM: 18 NVLink 4 links x 25 GB/s = 450 GB/s; 8 x 200 Gbit/s a node = 200 GB/s",
    ),
    "rtx4090_pcie_8": Hardware(
        8,
        1,
        32e9,
        None,
        "pci",
        ("LL", "Simple"),
        "RTX 4090: PCIe 4.0 x16 = 32 GB/s each way; LL128 is off without NVLink",
    ),
    "rtx4090_pcie_p2p_8": Hardware(
        8, 1, 32e9, None, "pci", ("LL", "Simple"), "as `rtx4090_pcie_8`, P2P enabled"
    ),
}


class Row(NamedTuple):
    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float


class Table(NamedTuple):
    name: str
    header: list[str]  # the CSV's comment lines: source and hardware
    rows: list[Row]


def read_table(name: str) -> Table:
    """``<name>.csv``: its comment lines and its rows (size, out-of-place time in µs, algbw, busbw)."""
    lines = (HERE / f"{name}.csv").read_text().splitlines()
    header = [line[2:] for line in lines if line.startswith("#")]
    body = [line for line in lines if not line.startswith("#")][1:]
    rows = [
        Row(int(size), float(t), float(alg), float(bus))
        for size, t, alg, bus in (line.split(",") for line in body)
    ]
    return Table(name, header, rows)


def tables() -> dict[str, Table]:
    return {name: read_table(name) for name in HARDWARE}


def network(hardware: Hardware, share: float, launch_s: float) -> NetworkConfig:
    """The ``network`` section a scenario of this hardware states, with the two constants."""
    return NetworkConfig(
        allreduce="nccl",
        bandwidth_bps=hardware.node_nics_bps or 1.25e9,
        efficiency=share,
        sync_s=launch_s,
        intra_node={"busbw_bps": share * hardware.gpu_link_bps},
        nccl={"protocols": list(hardware.protocols), "intra_link": hardware.intra_link},
    )


def fred_times_s(hardware: Hardware, sizes: Sequence[float], share: float, launch_s: float) -> list[float]:
    """fred's clock for one all-reduce of each size: :class:`Nccl` run on a SimPy environment."""
    cfg = network(hardware, share, launch_s)
    names = [f"w{i}" for i in range(hardware.ranks)]
    per_node = hardware.ranks // hardware.nodes
    times = []
    for nbytes in sizes:
        env = simpy.Environment()
        transport = SimpleNamespace(
            env=env,
            network=SimpleNamespace(config=cfg, node={name: i // per_node for i, name in enumerate(names)}),
        )
        env.process(Nccl(transport, {}).run(names, float(nbytes)))
        env.run()
        times.append(env.now)
    return times


def judged(table: Table) -> list[Row]:
    return [row for row in table.rows if row.size_bytes <= MAX_BYTES]


def log_errors(table: Table, share: float, launch_s: float) -> list[float]:
    rows = judged(table)
    fred = fred_times_s(HARDWARE[table.name], [row.size_bytes for row in rows], share, launch_s)
    return [math.log(f / (row.time_us * 1e-6)) for f, row in zip(fred, rows)]


def geomean_error(logs: Sequence[float]) -> float:
    """``exp(mean |log(fred / measured)|) - 1``."""
    return math.exp(sum(abs(x) for x in logs) / len(logs)) - 1 if logs else float("nan")


def regime(size_bytes: int) -> str:
    if size_bytes < LATENCY_BOUND_BYTES:
        return "latency"
    return "bandwidth" if size_bytes > BANDWIDTH_BOUND_BYTES else "middle"


class Fit(NamedTuple):
    share: float
    launch_s: float
    geomean: float  # on the table fitted on


def fit(table: Table) -> Fit:
    """The share and launch latency that minimise the geometric-mean error on ``table``."""

    def loss(x: Sequence[float]) -> float:
        return sum(abs(v) for v in log_errors(table, x[0], x[1] * 1e-6))

    best = minimize(
        loss,
        [0.8, 10.0],
        method="Nelder-Mead",
        bounds=[(0.05, 1.0), (0.0, 200.0)],
        options={"xatol": 1e-4, "fatol": 1e-6},
    )
    share, launch_s = float(best.x[0]), float(best.x[1]) * 1e-6
    return Fit(share, launch_s, geomean_error(log_errors(table, share, launch_s)))


class Errors(NamedTuple):
    overall: float
    by_regime: dict[str, float]
    per_size: list[tuple[int, float]]  # (size, fred / measured - 1)


def errors(table: Table, fitted: Fit) -> Errors:
    logs = log_errors(table, fitted.share, fitted.launch_s)
    rows = judged(table)
    by_regime = {
        name: geomean_error([x for x, row in zip(logs, rows) if regime(row.size_bytes) == name])
        for name in ("latency", "middle", "bandwidth")
    }
    per_size = [(row.size_bytes, math.exp(x) - 1) for x, row in zip(logs, rows)]
    return Errors(geomean_error(logs), by_regime, per_size)


def figure(all_tables: dict[str, Table], fitted: Fit) -> Path:
    """Time against size, log-log, one panel a table: measured points, fred's line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_of_panels = math.ceil(len(all_tables) / 3)
    fig, axes = plt.subplots(rows_of_panels, 3, figsize=(15, 4.2 * rows_of_panels), squeeze=False)
    for ax in list(axes.flat)[len(all_tables) :]:
        ax.set_visible(False)
    for ax, (name, table) in zip(axes.flat, all_tables.items()):
        rows = judged(table)
        sizes = [float(2**k) for k in range(31) if rows[0].size_bytes <= 2**k <= rows[-1].size_bytes]
        ax.loglog(
            [r.size_bytes for r in rows], [r.time_us for r in rows], "o", ms=4, label="nccl-tests (measured)"
        )
        line = fred_times_s(HARDWARE[name], sizes, fitted.share, fitted.launch_s)
        ax.loglog(sizes, [t * 1e6 for t in line], "-", label="fred, allreduce: nccl")
        err = errors(table, fitted).overall
        role = "fitted on" if name == FITTED_ON else "held out"
        ax.set_title(f"{name} ({role}, geomean error {err:.0%})", fontsize=9)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("all-reduce time (µs)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)
    return FIGURE


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"


def section(quick: bool = False) -> str:
    """The Markdown section of docs/validation.md (``quick`` writes no figure)."""
    all_tables = tables()
    fitted = fit(all_tables[FITTED_ON])
    if not quick:
        figure(all_tables, fitted)
    lines = [
        "## Collectives: NCCL's all-reduce from 8 B to 1 GB against nccl-tests",
        "",
        "Published `all_reduce_perf` tables (out-of-place time), each predicted by fred's",
        "`network.allreduce: nccl` (NCCL 2.8's tuning model, `docs/network.md`) from the table's stated",
        "hardware. The tables, their sources and hardware are in `scenarios/collectives/*.csv`;",
        "`python scenarios/collectives/validation.py` reproduces this section. Not fitted: each GPU's link",
        "line rate and the node's NICs (vendor figures, below), NCCL's latencies and protocol factors.",
        f"Fitted on `{FITTED_ON}` only, two constants:",
        "",
        "| constant | fitted | physical reading |",
        "|---|---|---|",
        f"| share of line rate (`network.efficiency`; `intra_node.busbw_bps` = share x the GPU link) | "
        f"{fitted.share:.3f} | what NCCL's protocol overhead and channels leave of the link's line rate |",
        f"| launch latency (`network.sync_s`) | {fitted.launch_s * 1e6:.1f} µs | a fixed cost per collective "
        "beside NCCL's latency model: kernel launch and nccl-tests' per-iteration synchronisation |",
        "",
        "Error of a size: `fred / measured - 1`; a set's geometric-mean error: "
        "`exp(mean |log(fred / measured)|) - 1`.",
        "Regimes: latency-bound below 64 KiB, bandwidth-bound above 64 MiB, the middle between.",
        "",
        "| table | GPUs a node x nodes | line rates | role | sizes | < 64 KiB | middle | > 64 MiB "
        "| all sizes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    held = {}
    for name, table in all_tables.items():
        hw, e = HARDWARE[name], errors(table, fitted)
        rows = judged(table)
        role = "fitted" if name == FITTED_ON else "held out"
        if name != FITTED_ON:
            held[name] = e
        lines.append(
            f"| `{name}` | {hw.ranks // hw.nodes} x {hw.nodes} | {hw.reading} | {role} | "
            f"{_size(rows[0].size_bytes)}-{_size(rows[-1].size_bytes)} | "
            f"{_pct(e.by_regime['latency'])} | {_pct(e.by_regime['middle'])} | "
            f"{_pct(e.by_regime['bandwidth'])} | {_pct(e.overall)} |"
        )
    met = [name for name, e in held.items() if e.overall <= 0.10]
    lines += [
        "",
        f"![all-reduce time against size](img/{FIGURE.name})",
        "",
        f"Target: held-out geometric-mean error within 10 %. Met on {len(met)} of {len(held)} held-out tables"
        + (f" ({', '.join(f'`{n}`' for n in met)})." if met else "."),
        "",
        "Where the bandwidth goes: the measured bus bandwidth at the largest size judged, and fred's (the",
        "same figure from fred's time, `busbw = 2 (p-1)/p x size / time`), and the latency at the smallest:",
        "",
        "| table | largest size | measured busbw | fred busbw | smallest size | measured µs | fred µs |",
        "|---|---|---|---|---|---|---|",
        *[_ends(table, fitted) for table in all_tables.values()],
        "",
        "Each size's error, `fred / measured - 1` (blank: the table has no such row):",
        "",
        "| size | " + " | ".join(f"`{name}`" for name in all_tables) + " |",
        "|---|" + "---|" * len(all_tables),
        *_per_size(all_tables, fitted),
        "",
        *WHY,
        "",
        "No reduce-scatter or all-gather table was collected; those collectives are not validated here.",
        "",
    ]
    return "\n".join(lines)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _signed(x: float) -> str:
    return "0%" if abs(x) < 0.005 else f"{x:+.0%}"


def _per_size(all_tables: dict[str, Table], fitted: Fit) -> list[str]:
    """One line a size: each table's signed error at it."""
    by_table = {name: dict(errors(table, fitted).per_size) for name, table in all_tables.items()}
    sizes = sorted({size for errs in by_table.values() for size in errs})
    return [
        f"| {_size(size)} | "
        + " | ".join(_signed(errs[size]) if size in errs else "" for errs in by_table.values())
        + " |"
        for size in sizes
    ]


def _ends(table: Table, fitted: Fit) -> str:
    """A table's row of the ends: busbw at its largest judged size, time at its smallest, both sides."""
    rows, hw = judged(table), HARDWARE[table.name]
    first, last = rows[0], rows[-1]
    ends = [first.size_bytes, last.size_bytes]
    fred_first, fred_last = fred_times_s(hw, ends, fitted.share, fitted.launch_s)
    factor = 2 * (hw.ranks - 1) / hw.ranks
    fred_busbw = factor * last.size_bytes / fred_last / 1e9
    return (
        f"| `{table.name}` | {_size(last.size_bytes)} | {last.busbw_gbps:.1f} GB/s | "
        f"{fred_busbw:.1f} GB/s | "
        f"{_size(first.size_bytes)} | {first.time_us:.1f} | {fred_first * 1e6:.1f} |"
    )


WHY = [
    "Why the other held-out tables miss (evidence in each table's header and source; nothing was tuned",
    "to them):",
    "",
    "- `rtx4090_pcie_8`: the latency-bound sizes hold; from 512 KiB up fred is too fast. The stock driver",
    "  disables P2P on the RTX 4090, so NCCL stages every step through host memory across two EPYC",
    "  sockets (the source's own `p2pBandwidthLatencyTest`: 18-20 GB/s one way between GPUs, against",
    "  PCIe 4.0's 32 GB/s); fred has no transport for that staging (NCCL's SHM transport). The same",
    "  machine with P2P enabled (`rtx4090_pcie_p2p_8`, the same source) is predicted within 10 % in",
    "  every regime: the share fitted on NVLink carries over to direct PCIe, not to host-memory staging.",
    "- `a100_roce_2x8`: the measured busbw is far below the NICs' line rate (about 70 GB/s against",
    "  16 x 100 Gbit/s = 200 GB/s a node), with dips at 16 MiB and 64-256 MiB; the same tutorial's later",
    "  run on the same shape with NCCL 2.26.5 (`content/hpc/benchmark/run-nccltests-ubuntu/index.md`)",
    "  measures 192 GB/s at 10 GiB. This run reached under half its NICs' rate, which the stated",
    "  hardware does not show; fred, given the stated NICs, is about twice too fast.",
    "- `h100_tcpxo_2x8`: two mechanisms outside NCCL 2.8's model. Latency: about 123 µs at 8 B against",
    "  fred's few tens of µs, since GPUDirect-TCPXO is a TCP-based network plugin, not InfiniBand, whose",
    "  per-step latencies NCCL's table holds. Bandwidth: the measured busbw at 1 GiB (about 298 GB/s,",
    "  339 at 8 GiB) exceeds what any ring through 200 GB/s of NICs a node can give; its algbw (about",
    "  180 GB/s at 8 GiB, 0.9 of the NICs) is what a tree across two nodes reaches when each node's NICs",
    "  carry the message once each way. NCCL 2.8's tree model halves the bus bandwidth and caps it at",
    "  110 GB/s, so fred picks the ring and is about twice too slow at 1 GiB. A newer NCCL's tuning",
    "  (per-channel tree bandwidth, NVLS on H100) would be the mechanism to add, with its own test.",
]


if __name__ == "__main__":
    sys.exit(print(section()))
