"""``fred fit``: constants recovered from measurements fred itself made with known constants.

The "measurements" are fred's own seconds per iteration with a bandwidth of 3e9 bytes/s and a
latency of 2e-4 s, on scenarios of several worker counts and message sizes whose files say
1e9 and 1e-5; the fit must find the true constants again and predict the held-out rows.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import fred
from fred.tools.cli import main
from fred.tools.fit import (
    Predictor,
    Row,
    fit,
    implausible,
    least_squares,
    per_iteration_s,
    timed,
    undetermined,
)
from tests.conftest import tiny

TRUE = {"bandwidth_bps": 3e9, "latency_s": 2e-4}
WRONG = {"bandwidth_bps": 1e9, "latency_s": 1e-5}  # what the scenario files say: the fit starts there
WARMUP, ITERATIONS = 2, 3  # few, to be quick: the measurements are made with the same
ROWS = [  # (strategy, workers, param_bytes): ring all-reduces of several sizes, and a parameter server
    ("arsgd", 2, 1_000_000),
    ("arsgd", 4, 4_000_000),
    ("arsgd", 8, 16_000_000),
    ("asgd", 4, 2_000_000),
]
FIT = "network.bandwidth_bps,network.latency_s"


def scenario(strategy: str, workers: int, param_bytes: int) -> dict:
    return tiny(
        name=f"{strategy}{workers}",
        strategy={"name": strategy},
        cluster={"workers": workers},
        network=WRONG,
        workload={"param_bytes": param_bytes},
        stop={"max_updates": 1000},
    )


def measured_s(data: dict, network: dict) -> float:
    """Seconds per iteration with ``network``: ITERATIONS steps of each worker after WARMUP,
    timing-only (an update is a round of AR-SGD, one worker's gradient of ASGD)."""
    runs = []
    for iterations in (WARMUP + ITERATIONS, WARMUP):
        updates = iterations * (1 if data["strategy"]["name"] == "arsgd" else data["cluster"]["workers"])
        result = fred.run(
            data, network=network, workload={"timing_only": True}, stop={"max_updates": updates}
        )
        assert timed(result).steps == iterations * data["cluster"]["workers"]
        runs.append(timed(result))
    return per_iteration_s(*runs)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """The scenario files, and a CSV of what they measure with the true constants."""
    folder = tmp_path_factory.mktemp("fit")
    lines = ["scenario,measured_s"]
    for row in ROWS:
        data = scenario(*row)
        (folder / f"{data['name']}.yaml").write_text(yaml.safe_dump(data))
        lines.append(f"{data['name']}.yaml,{measured_s(data, TRUE)!r}")
    (folder / "measured.csv").write_text("\n".join(lines) + "\n")
    return folder / "measured.csv"


def test_the_true_constants_are_recovered_from_a_wrong_start_and_predict_the_held_out_row(table):
    result = fit(table, FIT, holdout="asgd4.yaml", iterations=ITERATIONS, warmup=WARMUP)
    assert result.start == {"network.bandwidth_bps": 1e9, "network.latency_s": 1e-5}
    assert result.values["network.bandwidth_bps"] == pytest.approx(3e9, rel=0.01)
    assert result.values["network.latency_s"] == pytest.approx(2e-4, rel=0.01)
    assert result.converged and not result.warnings
    assert [r.held_out for r in result.rows] == [False, False, False, True]
    assert result.mean_abs_error_pct(held_out=True) < 1e-6
    assert result.mean_abs_error_pct(held_out=False) < 1e-6


def test_fred_fit_writes_a_profile_that_reproduces_its_predictions(table, tmp_path, capsys):
    out = tmp_path / "fits" / "net.yaml"
    assert (
        main(
            [
                "fit",
                str(table),
                "--fit",
                FIT,
                "--holdout",
                "4",
                "--iterations",
                str(ITERATIONS),
                "--warmup",
                str(WARMUP),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr()
    assert "held-out rows: mean absolute error" in printed.out and "iteration 1:" in printed.err
    text = out.read_text()
    assert (
        "#   row 1: arsgd2.yaml" in text
        and "# held out (predicted, not fitted on):\n#   row 4: asgd4.yaml" in text
    )
    fitted = yaml.safe_load(text)
    assert set(fitted) == {"network"} and fitted["network"]["latency_s"] == pytest.approx(2e-4, rel=0.01)
    for row in ROWS:  # the profile, merged into each scenario, gives the time the fit predicted
        data = scenario(*row)
        predicted = float(
            next(line for line in text.splitlines() if f": {data['name']}.yaml," in line)
            .split("predicted ")[1]
            .split(" s")[0]
        )
        assert measured_s(data, fitted["network"]) == pytest.approx(predicted, rel=1e-5)
    sets = next(line for line in text.splitlines() if "fred run S.yaml" in line).split()[
        4:
    ]  # the header's --set flags
    loaded = fred.load_scenario(table.parent / "arsgd4.yaml", [s for s in sets if s != "--set"])
    assert (loaded.network.bandwidth_bps, loaded.network.latency_s) == (
        fitted["network"]["bandwidth_bps"],
        fitted["network"]["latency_s"],
    )


def test_a_noisy_measurement_moves_the_fit_a_little_and_shows_in_the_errors(table):
    noisy = table.parent / "noisy.csv"
    lines = table.read_text().splitlines()
    name, value = lines[2].split(",")
    lines[2] = f"{table.parent / name},{float(value) * 1.03!r}"  # row 2 measured 3 % slow; an absolute path
    noisy.write_text("\n".join(lines) + "\n")
    result = fit(noisy, FIT, holdout="4", iterations=ITERATIONS, warmup=WARMUP)
    # Three rows for two constants: 3 % on one row moves the latency, a small share of each
    # row's time, by about half and the bandwidth by about 15 %; the predictions stay within the noise.
    assert result.values["network.bandwidth_bps"] == pytest.approx(3e9, rel=0.3)
    assert result.values["network.latency_s"] == pytest.approx(2e-4, rel=0.8)
    assert result.values["network.bandwidth_bps"] != pytest.approx(3e9, rel=0.02)  # the noise did move it
    errors = [result.error_pct(r, p) for r, p in zip(result.rows, result.predicted_s)]
    assert 0.1 < abs(errors[1]) < 3  # the fit takes up part of the 3 %, not all of it
    # The held-out ASGD row is mostly transfer time (its pushes share the server's downlink), so
    # it moves with the bandwidth: by a few per cent, not by the fit's 15 %.
    assert result.mean_abs_error_pct(held_out=True) < 5


def write_case(tmp_path: Path, csv_text: str, scenario_name: str = "a.yaml") -> Path:
    (tmp_path / scenario_name).write_text(yaml.safe_dump(scenario("arsgd", 2, 1_000_000)))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(scenario("arsgd", 4, 4_000_000)))
    csv_path = tmp_path / "m.csv"
    csv_path.write_text(csv_text)
    return csv_path


GOOD = "scenario,measured_s\na.yaml,0.012\nb.yaml,0.015\n"
BAD_INPUT = [  # (CSV text, --fit, --holdout, what the message must say)
    (None, FIT, "", "no such file"),
    ("scenario,seconds\na.yaml,0.01\n", FIT, "", "no measured_s column"),
    ("scenario,measured_s\nmissing.yaml,0.01\nb.yaml,0.01\n", FIT, "", "relative to the CSV's folder"),
    ("scenario,measured_s\na.yaml,0\nb.yaml,0.01\n", FIT, "", "a positive number"),
    ("scenario,measured_s\na.yaml,-1\nb.yaml,0.01\n", FIT, "", "a positive number"),
    ("scenario,measured_s\na.yaml,fast\nb.yaml,0.01\n", FIT, "", "a positive number"),
    ("scenario,measured_s\na.yaml,nan\nb.yaml,0.01\n", FIT, "", "a positive number"),
    ("scenario,measured_s\n", FIT, "", "no rows under the header"),
    (GOOD, "network.bandwith_bps", "", "did you mean network.bandwidth_bps?"),
    (GOOD, "network.allreduce", "", "not a number to fit"),
    (GOOD, "cluster.workers", "", "an integer (a count"),
    (GOOD, "cluster.compute.host_overhead_s", "", "--fit cluster.compute.host_overhead_s=1e-3"),
    (GOOD, "network.latency_s=-1", "", "not a positive number"),
    (GOOD, "network.efficiency=2", "", "network.efficiency"),  # the scenario refuses the start
    (GOOD, "network.latency_s,network.latency_s", "", "named twice"),
    (GOOD, FIT, "2", "at least as many rows as constants"),
    (GOOD, "network.latency_s", "1,2", "holds out every row"),
    (GOOD, "network.latency_s", "c.yaml", "no such row"),
]


@pytest.mark.parametrize("csv_text, paths, holdout, needle", BAD_INPUT)
def test_bad_input_exits_2_with_the_fix_and_writes_nothing(
    tmp_path, capsys, csv_text, paths, holdout, needle
):
    csv_path = write_case(tmp_path, csv_text) if csv_text is not None else tmp_path / "none.csv"
    out = tmp_path / "out" / "fit.yaml"
    assert main(["fit", str(csv_path), "--fit", paths, "--holdout", holdout, "-o", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_implausible_values_are_named_with_their_physical_reading():
    warnings = implausible(
        {
            "network.latency_s": 5e-3,
            "network.bandwidth_bps": 3e9,
            "network.server.bandwidth_bps": 1e6,
            "network.intra_node.bandwidth_bps": 300e9,
            "cluster.compute.host_overhead_s": 2.0,
            "strategy.lr": 50.0,
        }
    )
    assert [w.split(" = ")[0] for w in warnings] == [
        "network.latency_s",
        "network.server.bandwidth_bps",
        "cluster.compute.host_overhead_s",
    ]
    assert "wide-area link" in warnings[0] and "10 Mbit/s to 400 Gbit/s" in warnings[1]
    assert implausible({"network.bandwidth_bps": 60e9}) and not implausible({"network.efficiency": 1.0})


def test_constants_the_rows_cannot_tell_apart_are_said_to_be():
    together = np.array(
        [[-0.5, -0.5], [-0.8, -0.8], [-0.2, -0.2]]
    )  # bandwidth and efficiency act as their product
    assert "only a combination" in undetermined(["network.bandwidth_bps", "network.efficiency"], together)[0]
    unused = np.array([[-0.5, 0.0], [-0.8, 0.0]])
    assert undetermined(["network.bandwidth_bps", "network.latency_s"], unused)[0].startswith(
        "network.latency_s: "
    )
    assert undetermined(["a", "b"], np.array([[-0.5, 0.1], [-0.1, 0.9]])) == []


def test_least_squares_finds_a_power_law_and_steps_back_from_refused_values():
    x_data = np.array([1.0, 2.0, 4.0, 8.0])
    y = 3.0 * x_data**-0.5 + 0.2

    def residuals(x):
        a, b = np.exp(x)
        if b > 1:  # a bound, as efficiency's: the model cannot be evaluated there
            return None
        return np.log(a * x_data**-0.5 + b) - np.log(y)

    found = least_squares(residuals, np.log([30.0, 0.9]), max_evals=200)
    assert found.converged and np.exp(found.x) == pytest.approx([3.0, 0.2], rel=1e-6)
    capped = least_squares(residuals, np.log([30.0, 0.9]), max_evals=6)
    assert not capped.converged and capped.evaluations <= 6
    assert math.isfinite(float(capped.residuals @ capped.residuals))


def ring_iteration_s(workers: int, param_bytes: int, sync_every: int = 1) -> float:
    """A step, and the ring all-reduce's closed form on idle links shared by ``sync_every`` steps."""
    ring_s = (
        2 * (workers - 1) * TRUE["latency_s"]
        + 2 * (workers - 1) / workers * param_bytes / TRUE["bandwidth_bps"]
    )
    return TINY_STEP_S + ring_s / sync_every


TINY_STEP_S = 0.01


def predicted_s(tmp_path: Path, strategy: dict) -> tuple[float, Predictor]:
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(tiny(strategy=strategy, network=TRUE, workload={"param_bytes": 1_000_000}))
    )
    row = Row(1, "s.yaml", path, 1.0)
    predictor = Predictor([row], ["network.latency_s"], ITERATIONS, WARMUP)
    return predictor.seconds(row, (TRUE["latency_s"],)), predictor


def test_an_ar_sgd_iteration_is_a_round_whose_time_is_the_ring_closed_form(tmp_path):
    seconds, predictor = predicted_s(tmp_path, {"name": "arsgd"})
    assert seconds == pytest.approx(ring_iteration_s(4, 1_000_000), rel=1e-12)
    assert predictor.updates_per_step == {1: 1.0}  # an update is a round: one step of each worker


# Local SGD has no timing-only mode: its runs compute gradients (a few seconds of compiling)
@pytest.mark.slow
def test_a_local_sgd_iteration_is_a_local_step_sharing_its_rounds_averaging(tmp_path):
    seconds, predictor = predicted_s(tmp_path, {"name": "local_sgd", "sync_every": 4})
    assert seconds == pytest.approx(ring_iteration_s(4, 1_000_000, sync_every=4), rel=1e-12)
    assert predictor.updates_per_step == {1: 0.25}  # an update is an averaging round of 4 local steps


def test_a_stop_from_an_included_file_does_not_cut_the_fits_runs_short(tmp_path):
    """The fit times its own number of iterations: an included ``stop`` (one simulated second
    here, a few rounds) must not end its runs early and shorten the time per iteration."""
    (tmp_path / "shared.yaml").write_text("stop: {max_sim_time_s: 0.01}\n")
    data = tiny(strategy={"name": "arsgd"}, network=TRUE, workload={"param_bytes": 1_000_000})
    del data["stop"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**data, "include": ["shared.yaml"]}))
    row = Row(1, "s.yaml", path, 1.0)
    seconds = Predictor([row], ["network.latency_s"], ITERATIONS, WARMUP).seconds(row, (TRUE["latency_s"],))
    assert seconds == pytest.approx(ring_iteration_s(4, 1_000_000), rel=1e-12)


def test_a_scenario_includes_the_profile_and_its_own_values_win(tmp_path):
    from fred.scenario.loading import ScenarioError, load_scenario

    (tmp_path / "fit.yaml").write_text("# fitted\nnetwork:\n  bandwidth_bps: 3.0e+9\n  latency_s: 0.0002\n")
    (tmp_path / "more.yaml").write_text("network: {latency_s: 0.0003}\n")
    data = scenario("arsgd", 4, 1_000_000)
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump({**data, "include": ["fit.yaml", "more.yaml"], "network": {"sync_s": 1e-5}})
    )
    loaded = load_scenario(tmp_path / "s.yaml")
    assert (loaded.network.bandwidth_bps, loaded.network.latency_s, loaded.network.sync_s) == (
        3e9,
        3e-4,
        1e-5,
    )
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump({**data, "include": "fit.yaml", "network": {"bandwidth_bps": 1e9}})
    )
    assert load_scenario(tmp_path / "s.yaml").network.bandwidth_bps == 1e9  # the scenario's own value wins
    (tmp_path / "nested.yaml").write_text("include: fit.yaml\n")
    for include, words in [
        ("nested.yaml", "includes files itself"),
        ("missing.yaml", "missing.yaml"),
        (7, "give a file, or a list"),
    ]:
        (tmp_path / "s.yaml").write_text(yaml.safe_dump({**data, "include": include}))
        with pytest.raises(ScenarioError, match=words):
            load_scenario(tmp_path / "s.yaml")


ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "fit"


def _page_blocks() -> list[tuple[str, str]]:
    """docs/fit.md's fenced blocks, as (language, text)."""
    import re

    return re.findall(r"```(\w+)\n(.*?)```", (ROOT / "docs" / "fit.md").read_text(), re.S)


@pytest.fixture
def example(tmp_path, monkeypatch) -> Path:
    """A copy of docs/examples/fit/, the working directory."""
    import shutil

    folder = shutil.copytree(EXAMPLE, tmp_path / "fit", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(folder)
    return folder


def test_the_fit_pages_walkthrough_runs_as_printed_and_prints_what_the_page_shows(example, capsys):
    # The page's measured.csv and scenarios were not shipped: its commands could not be run.
    import shlex

    blocks = _page_blocks()
    [csv_text] = [
        text for lang, text in blocks if lang == "text" and text.startswith("scenario,measured_s\n")
    ]
    assert csv_text == (example / "measured.csv").read_text()
    at = next(
        i
        for i, (lang, text) in enumerate(blocks)
        if lang == "bash" and text.startswith("fred fit measured.csv")
    )
    command, (_, printed) = shlex.split(blocks[at][1]), blocks[at + 1]
    assert main(command[1:]) == 0
    assert capsys.readouterr().out == printed
    [profile] = [text for lang, text in blocks if lang == "yaml" and text.startswith("# fred fit:")]
    written = (example / "fit.yaml").read_text().splitlines()
    shown = [line for line in profile.splitlines() if line != "#   ..."]  # the page leaves rows 2-4 out
    assert [line for line in written if line in shown] == shown


@pytest.mark.slow  # regenerating the measurements is a fit's worth of runs again, and so is the Python block
def test_the_fit_examples_measurements_are_what_its_script_makes_and_the_python_block_gives_the_profile(
    example,
):
    import runpy

    shipped = (example / "measured.csv").read_text()
    runpy.run_path(str(example / "make_measured.py"), run_name="__main__")
    assert (example / "measured.csv").read_text() == shipped
    [python] = [
        text for lang, text in _page_blocks() if lang == "python" and "from fred.tools.fit import fit" in text
    ]
    namespace: dict = {}
    exec(
        python.split("result.values")[0], namespace
    )  # the lines after it are the page's answers, as comments
    result = namespace["result"]
    said = python.split("result.values")[1].split("# ")[1].splitlines()[0]
    assert repr(result.values) == said
    assert f"{result.mean_abs_error_pct(held_out=True):.2f}" == "1.42" and result.warnings == []
