"""Calibration: measured compute times, written as a profile that scenarios include."""

from __future__ import annotations

import pytest
import yaml

import fred
from fred.tools.cli import main
from tests.conftest import tiny


def test_calibrate_writes_a_profile_that_a_scenario_includes(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(tiny()))
    profile = tmp_path / "profile.yaml"
    assert main(["calibrate", str(scenario), "--repeats", "5", "--warmup", "2", "-o", str(profile)]) == 0
    measured = yaml.safe_load(profile.read_text())
    assert measured["step_time_s"] == measured["measured"]["median_s"] > 0
    assert measured["measured"]["p10_s"] <= measured["step_time_s"] <= measured["measured"]["p90_s"]
    assert "median" in capsys.readouterr().out

    using = tmp_path / "using.yaml"
    using.write_text(
        yaml.safe_dump(tiny(cluster={"compute": {"step_time_s": None, "profile": "profile.yaml"}}))
    )
    loaded = fred.load_scenario(using)  # the relative path is found next to the scenario
    assert loaded.cluster.compute.step_time_s == measured["step_time_s"]
    result = fred.run(using)
    computes = result.events[result.events["kind"] == "compute"]
    assert (computes["end_s"] - computes["start_s"]).to_numpy() == pytest.approx(measured["step_time_s"])
    # fred sweep includes the profile too (it once read the YAML without it)
    assert (
        main(
            [
                "sweep",
                str(using),
                "--grid",
                "seed=1,2",
                "--runs",
                str(tmp_path / "runs"),
                "--out",
                str(tmp_path / "s.parquet"),
            ]
        )
        == 0
    )


def test_a_missing_or_bad_profile_is_named(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        yaml.safe_dump(tiny(cluster={"compute": {"step_time_s": None, "profile": "nope.yaml"}}))
    )
    assert main(["run", str(scenario), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("step_time_s: -1\n")
    scenario.write_text(
        yaml.safe_dump(tiny(cluster={"compute": {"step_time_s": None, "profile": "bad.yaml"}}))
    )
    assert main(["run", str(scenario), "--out", str(tmp_path / "o")]) == 2
    assert "no positive, finite step_time_s" in capsys.readouterr().err
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "latin1.yaml").write_bytes(b"step_time_s: 0.1 # \xe9\n")
    cases = [
        ("step_time_s: .nan\n", "no positive, finite step_time_s"),
        ("step_time_s: true\n", "no positive, finite step_time_s"),
        ("step_time_s: .inf\n", "no positive, finite step_time_s"),
    ]
    for i, (text, _needle) in enumerate(cases):
        (tmp_path / f"p{i}.yaml").write_text(text)
    named = [(f"p{i}.yaml", needle) for i, (_, needle) in enumerate(cases)]
    for profile, needle in named + [("dir.yaml", "is a directory"), ("latin1.yaml", "is not UTF-8 text")]:
        scenario.write_text(
            yaml.safe_dump(tiny(cluster={"compute": {"step_time_s": None, "profile": profile}}))
        )
        assert main(["run", str(scenario), "--out", str(tmp_path / "o")]) == 2, profile
        assert needle in capsys.readouterr().err, profile
    (tmp_path / "ok.yaml").write_text("step_time_s: 0.02\n")
    scenario.write_text(yaml.safe_dump(tiny(cluster={"compute": {"profile": "ok.yaml", "step_time_s": 5}})))
    assert main(["run", str(scenario), "--out", str(tmp_path / "o")]) == 2  # 5 was silently replaced by 0.02
    assert "a profile gives the step time; drop step_time_s, or the profile" in capsys.readouterr().err


def test_an_absent_backend_is_a_clear_error(tmp_path, capsys):
    import jax

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU is present here")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(tiny()))
    assert main(["calibrate", str(scenario), "--backend", "gpu", "-o", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no gpu backend here" in err
    assert (
        f'pip install "jax[cuda13]=={jax.__version__}"' in err and f'"jax[cuda12]=={jax.__version__}"' in err
    )
    assert "https://docs.jax.dev/en/latest/installation.html" in err


def test_calibrate_takes_a_model_and_batch_without_a_scenario(tmp_path):
    profile = tmp_path / "mlp.yaml"
    args = ["calibrate", "--model", "{kind: mlp, hidden: [8]}", "--batch", "16", "--reduction", "fast"]
    assert main([*args, "--repeats", "2", "--warmup", "1", "-o", str(profile)]) == 0
    measured = yaml.safe_load(profile.read_text())["measured"]
    assert measured["model"] == {"kind": "mlp", "hidden": [8], "activation": "relu"}
    assert (measured["batch_size"], measured["reduction"]) == (16, "fast")

    assert main(["calibrate", "--repeats", "2", "--warmup", "1", "-o", str(profile)]) == 0  # fred's defaults
    measured = yaml.safe_load(profile.read_text())["measured"]
    assert (measured["model"]["kind"], measured["batch_size"], measured["reduction"]) == ("mlp", 32, "exact")


def test_calibrate_flags_override_a_scenario(tmp_path):
    from fred.tools.calibrate import calibration_scenario

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(tiny(model={"kind": "mlp", "hidden": [4]})))
    kept = calibration_scenario(scenario, batch=8)
    assert (kept.model.kind, kept.model.hidden, kept.data.batch_size) == ("mlp", [4], 8)
    assert kept.data.source == fred.load_scenario(scenario).data.source  # the file's data set
    replaced = calibration_scenario(scenario, ["data.batch_size=16"], model="logistic")  # the whole section
    assert (replaced.model.kind, replaced.data.batch_size) == ("logistic", 16)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "foo"], "model.kind: got 'foo'; allowed: logistic, mlp, cnn"),
        (["--model", "[1, 2]"], "give a kind (logistic, mlp, cnn, resnet, transformer, python) or a mapping"),
        (["--model", "{kind: mlp, hidden: [0]}"], "model.hidden.0: got 0"),
        (["--batch", "0"], "data.batch_size: got 0"),
        (["--repeats", "0"], "--repeats 0: a median needs at least 1 timed call"),
        (["--warmup", "-1"], "--warmup -1: give 0 or more untimed calls"),
    ],
)
def test_calibrate_says_what_is_wrong_with_a_flag(tmp_path, capsys, flags, message):
    assert main(["calibrate", *flags, "-o", str(tmp_path / "p.yaml")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_the_profile_never_replaces_the_scenario_it_times(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(tiny()))
    before = scenario.read_text()
    assert main(["calibrate", str(scenario), "--repeats", "1", "-o", str(scenario)]) == 2
    assert "is what this command reads" in capsys.readouterr().err
    assert scenario.read_text() == before
