"""Draw docs/img/allreduce-vs-p.png: each all-reduce algorithm's time against the group size.

Run from the repository root: ``python docs/network_figure.py``. Lines are the closed forms
of :mod:`fred.simulation.collectives`; markers are fred's simulated times on idle links.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import simpy  # noqa: E402

from fred.scenario.schema import NetworkConfig  # noqa: E402
from fred.simulation.collectives import allreduce_time_s  # noqa: E402
from fred.simulation.engine import Simulation  # noqa: E402
from fred.simulation.network import Network  # noqa: E402
from fred.simulation.worker import Worker  # noqa: E402

NBYTES = 102e6  # ResNet-50's gradient in float32
LINK = dict(latency_s=50e-6, bandwidth_bps=1.25e9, reduce_s_per_byte=1e-10)  # 10 GbE, ~10 GB/s summation
STYLE = {
    "ring": ("tab:blue", "o"),
    "recursive_doubling": ("tab:red", "s"),
    "halving_doubling": ("tab:green", "^"),
    "binary_tree": ("tab:purple", "D"),
    "double_binary_tree": ("tab:brown", "v"),
}


def simulated_s(algorithm: str, p: int) -> float:
    crew = [Worker(i, lambda: np.arange(1)) for i in range(p)]
    sim = Simulation(
        simpy.Environment(), crew, Network(NetworkConfig(allreduce=algorithm, **LINK)), None, None, {}, 0, 0
    )
    for w in crew:
        sim.process(sim.allreduce(crew, w, NBYTES))
    sim.env.run()
    return sim.now


def main(out: Path = Path("docs/img/allreduce-vs-p.png")) -> None:
    sizes = np.arange(2, 65)
    marked = [2, 3, 4, 5, 8, 12, 16, 24, 32, 48, 64]
    fig, ax = plt.subplots(figsize=(7.2, 3.6), dpi=110)
    for algorithm, (colour, marker) in STYLE.items():
        cfg = NetworkConfig(allreduce=algorithm, **LINK)
        ax.plot(
            sizes,
            [allreduce_time_s(algorithm, int(p), NBYTES, cfg) for p in sizes],
            color=colour,
            lw=1.4,
            marker=marker,
            markevery=[int(p) - 2 for p in marked],
            mfc="none",
            ms=0,
            label=algorithm.replace("_", " "),
        )
        ax.plot(
            marked,
            [simulated_s(algorithm, p) for p in marked],
            ls="none",
            marker=marker,
            color=colour,
            ms=5,
            mfc="none",
        )
    ax.set_xlabel("members in the all-reduce (p)")
    ax.set_ylabel("all-reduce time (s)")
    ax.set_title(
        "All-reduce of 102 MB (ResNet-50) on idle 10 GbE links\nlines: closed form; markers: fred's "
        "simulation",
        fontsize=9,
    )
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, 66)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
