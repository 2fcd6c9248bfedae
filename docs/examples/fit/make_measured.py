"""Write ``measured.csv``, the "measurements" that docs/fit.md fits: synthetic, made by fred itself.

No real cluster was measured. Each row is fred's own seconds per iteration for its scenario
file with the network constants set to TRUE (the files say 1e9 bytes/s and 1e-5 s, where the
fit starts), timed as ``fred fit`` times a prediction (20 iterations after 5 of warm-up),
then multiplied by ``1 + u``, ``u`` drawn uniformly from [-2 %, +2 %] (numpy's
``default_rng(SEED)``), as the spread of a real measurement would move it, and rounded to the
microsecond. A fit that starts from the files' constants should come back near TRUE, and
predict the held-out row within about that spread.

Run it from anywhere: ``python docs/examples/fit/make_measured.py`` rewrites the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fred.tools.fit import Predictor, Row

HERE = Path(__file__).resolve().parent
SCENARIOS = ("arsgd2.yaml", "arsgd4.yaml", "arsgd8.yaml", "asgd4.yaml", "sgp8.yaml")
TRUE = {"network.bandwidth_bps": 3e9, "network.latency_s": 2e-4}
SPREAD = 0.02  # the largest relative error a row is given
SEED = 2024


def measured() -> list[tuple[str, float]]:
    """Each scenario with its synthetic measurement, in seconds per iteration."""
    rows = [Row(i + 1, name, HERE / name, 1.0, False) for i, name in enumerate(SCENARIOS)]
    predictor = Predictor(rows, list(TRUE), iterations=20, warmup=5)
    noise = np.random.default_rng(SEED).uniform(-SPREAD, SPREAD, len(rows))
    return [
        (row.label, round(predictor.seconds(row, tuple(TRUE.values())) * (1 + u), 6))
        for row, u in zip(rows, noise)
    ]


def main() -> None:
    lines = ["scenario,measured_s", *(f"{name},{seconds:.6f}" for name, seconds in measured())]
    (HERE / "measured.csv").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
