"""YAML that asks the reader for too much: deep nesting, alias bombs, huge integers, huge
files, files that are not files, empty paths and echoed megabytes. Each was found by a fuzzer
sending mutated copies of the shipped scenarios through ``fred run``; each must end in one
short message and exit status 2, quickly, with nothing written."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import pytest
import yaml

from fred.scenario.loading import ScenarioError, apply_overrides, read_yaml, validate
from fred.scenario.yaml_reading import MAX_ALIAS_VALUES, MAX_DEPTH, MAX_FILE_BYTES
from fred.tools.cli import main
from tests.conftest import tiny

BASE = yaml.safe_dump(tiny(), sort_keys=False)


@contextmanager
def within(seconds: int):
    """Fail, rather than hang the suite, where the reader blocks (a FIFO) or expands for ever."""

    def stop(*_):
        raise TimeoutError(f"did not end within {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def refused(
    tmp_path, capsys, text: str | bytes | None = None, *args: str, path=None, seconds: int = 30
) -> str:
    """Run ``fred run`` on ``text`` (or ``path``); it must say why in one short message and exit 2."""
    if path is None:
        path = tmp_path / "s.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "out"
    with within(seconds):
        code = main(["run", str(path), "--out", str(out), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2, err[:2000]
    assert err.startswith("fred: ") and "Traceback" not in err
    assert len(err) < 10_000 and len(err.splitlines()) <= 25, err[:2000]
    assert not out.exists()
    return err


# ----------------------------------------------------------------------------- nesting
@pytest.mark.parametrize(
    "where, deep",
    [
        ("a list", "model: {kind: mlp, hidden: " + "[" * 1000 + "]" * 1000 + "}\n"),
        ("a mapping", "extra: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n"),
        ("block style", "extra:\n" + "".join(" " * i + "-\n" for i in range(1000))),
    ],
)
def test_deep_nesting_is_refused_not_a_recursion_error(where, deep, tmp_path, capsys):
    base = {k: v for k, v in tiny().items() if not deep.startswith(k)}
    err = refused(tmp_path, capsys, yaml.safe_dump(base) + deep)
    assert f"nested more than {MAX_DEPTH} deep" in err and "line " in err, where


def test_nesting_up_to_the_bound_reads(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")
    assert read_yaml(path)["x"] is not None


def test_deep_nesting_in_set_is_refused():
    with pytest.raises(ScenarioError, match="nested more than"):
        apply_overrides(tiny(), ["model.hidden=" + "[" * 1000 + "]" * 1000])


# ----------------------------------------------------------------------------- aliases
def bomb(levels: int) -> str:
    items = ["&l0 lol"] + [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return BASE.replace("name: tiny", "name: [" + ", ".join(items) + "]")


@pytest.mark.parametrize("levels", [6, 9])
def test_an_alias_bomb_is_refused_before_it_is_expanded(levels, tmp_path, capsys):
    start = time.monotonic()
    err = refused(tmp_path, capsys, bomb(levels), seconds=20)  # 9 levels hung; 6 echoed 4 MB
    assert f"repeat more than {MAX_ALIAS_VALUES:,} values" in err
    assert time.monotonic() - start < 10


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path, capsys):
    assert "inside its own anchor" in refused(tmp_path, capsys, BASE + "extra: &a [1, *a]\n")


def test_a_few_aliases_are_fine(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("name: tiny", "name: &n tiny\nextra_name: *n"))
    assert read_yaml(path)["extra_name"] == "tiny"


# ----------------------------------------------------------------------------- merge keys
def test_merge_keys_work_as_yaml_defines_them(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        BASE
        + (
            "a: &a {step_time_s: 1, y: 1}\n"
            "b: &b {step_time_s: 2, w: 2}\n"
            "listed: {<<: [*a, *b], w: 3}\n"  # of a list the earlier mapping wins; a key beside << wins
            "m: {deep: &m {<<: *b, step_time_s: 4}}\n"
            "chained: {<<: *m}\n"  # PyYAML gave b's 2 here: the merged-in value, not m's own
        )
    )
    data = read_yaml(path)
    assert data["listed"] == {"step_time_s": 1, "y": 1, "w": 3}
    assert data["chained"] == {"step_time_s": 4, "w": 2}


def test_a_scenario_with_a_merge_key_runs_validation(tmp_path):
    path = tmp_path / "s.yaml"
    text = BASE.replace("compute:\n    step_time_s: 0.01", "compute: &compute\n    step_time_s: 0.01")
    text = text.replace("stop:\n", "stop:\n  <<: {max_sim_time_s: 5.0}\n")
    path.write_text(text)
    scenario = validate(
        read_yaml(path)
    )  # "could not determine a constructor for the tag 'tag:yaml.org,2002:merge'"
    assert scenario.stop.max_sim_time_s == 5.0 and scenario.stop.max_updates == 12


def test_a_key_given_twice_beside_a_merge_key_is_still_refused(tmp_path, capsys):
    assert "given twice" in refused(tmp_path, capsys, BASE + "extra: {<<: {a: 1}, b: 1, b: 2}\n")


def test_a_merge_key_on_a_list_of_numbers_is_a_message(tmp_path, capsys):
    assert "merge key" in refused(tmp_path, capsys, BASE + "extra: {<<: [1, 2]}\n")


def test_a_list_as_a_key_is_a_message(tmp_path, capsys):
    assert "unhashable" in refused(tmp_path, capsys, BASE + "extra: {[1]: 2, [1]: 3}\n")


# ----------------------------------------------------------------------------- values
def test_a_very_long_name_is_refused_in_validation_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("name: tiny", "name: " + "x" * 300))
    with within(30):
        code = main(
            ["run", str(path), "--quiet"]
        )  # the default runs/<name>-<hash>: refused only after the run
    err = capsys.readouterr().err
    assert code == 2 and "name: got 'xxx" in err and "at most 100 bytes" in err
    assert not (tmp_path / "runs").exists()
    validate(tiny(name="é" * 50))  # 100 bytes
    with pytest.raises(ScenarioError, match="300 characters"):
        validate(tiny(name="x" * 300))


def test_an_integer_past_pythons_digit_limit_names_its_field(tmp_path, capsys):
    err = refused(tmp_path, capsys, BASE.replace("workers: 4", "workers: " + "9" * 5000))
    assert "cluster.workers: an integer of 5,000 digits" in err and "sys.set_int_max_str_digits" not in err
    err = refused(tmp_path, capsys, BASE, "--set", "seed=" + "9" * 5000)
    assert "an integer of 5,000 digits" in err and "sys.set_int_max_str_digits" not in err


def test_a_huge_hex_integer_is_refused_like_a_decimal_one(tmp_path, capsys):
    # 0x... has no digit limit in Python: it passed, and a list holding it broke the message
    err = refused(tmp_path, capsys, BASE.replace("workers: 4", "workers: [0x" + "f" * 20000 + "]"))
    assert "cluster.workers.0: an integer of 24,082 digits" in err


def test_a_value_too_long_to_show_is_described():
    from fred.scenario.yaml_reading import shown

    assert shown(10**5000) == "<an integer of about 5,000 digits>"
    assert shown([10**5000]) == "<a list holding an integer too long to show>"
    assert shown("x" * 1000).endswith("(1,002 characters)") and len(shown("x" * 1000)) < 230


def test_a_long_value_is_echoed_cut_to_200_characters(tmp_path, capsys):
    err = refused(tmp_path, capsys, BASE.replace("workers: 4", "workers: " + "w" * 100_000))
    assert "100,002 characters" in err and len(err) < 600


def test_many_problems_are_cut_to_twenty_lines_saying_how_many_more(tmp_path, capsys):
    extra = "".join(f"unknown{i}: 1\n" for i in range(200))
    err = refused(tmp_path, capsys, BASE + extra)
    assert "200 problems" in err and "and 180 more problems" in err
    with pytest.raises(ScenarioError) as caught:  # the caller still gets them all
        read_yaml_and_validate(tmp_path)
    assert len(caught.value.problems) == 200


def read_yaml_and_validate(tmp_path):
    return validate(read_yaml(tmp_path / "s.yaml"))


# ----------------------------------------------------------------------------- files
@pytest.mark.parametrize("what", ["scenario", "profile"])
def test_a_fifo_is_refused_without_blocking(what, tmp_path, capsys):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    if what == "scenario":
        err = refused(tmp_path, capsys, path=fifo, seconds=10)  # blocked for ever, waiting for a writer
    else:
        err = refused(
            tmp_path,
            capsys,
            yaml.safe_dump(tiny(cluster={"compute": {"step_time_s": None, "profile": "pipe.yaml"}})),
            seconds=10,
        )
        assert "cluster.compute.profile" in err
    assert "pipe.yaml is a FIFO (named pipe), not a regular file" in err


@pytest.mark.parametrize("what", ["scenario", "include"])
def test_a_name_too_long_to_open_is_refused_with_the_name_cut_short(what, tmp_path, capsys):
    name = "y" * 10_000 + ".yaml"
    if what == "scenario":
        err = refused(tmp_path, capsys, path=tmp_path / name, seconds=10)
    else:
        err = refused(tmp_path, capsys, yaml.safe_dump({**tiny(), "include": [name]}), seconds=10)
    assert "File name too long; give a readable file" in err and len(err) < 2_000


def test_a_device_is_refused(tmp_path, capsys):
    assert "/dev/zero is a device, not a regular file" in refused(
        tmp_path, capsys, path="/dev/zero", seconds=10
    )


def test_a_file_over_the_size_bound_is_refused_unread(tmp_path, capsys):
    start = time.monotonic()
    text = BASE + "extra: [" + ", ".join(["1.5"] * (MAX_FILE_BYTES // 5 + 1)) + "]\n"
    assert "is over 1 MiB" in refused(tmp_path, capsys, text)  # PyYAML: ~20 s a MiB
    assert time.monotonic() - start < 10


def test_a_runs_own_scenario_over_the_size_bound_still_loads_replays_and_resumes(tmp_path, monkeypatch):
    # A scenario under the bound that includes a file under it resolves to more than the bound,
    # and the run's own scenario.yaml (the resolved one) was refused on the way back in: the run
    # could not be loaded, replayed or resumed. (Here the bound is 4 kB, the files a few kB.)
    import fred
    from fred.runs.api import load_run
    from fred.scenario import yaml_reading
    from fred.tools.replay import replay

    monkeypatch.setattr(yaml_reading, "MAX_FILE_BYTES", 4096)
    changes = [{"worker": i % 4, "at_s": 1000.5 + i, "speed": 1.0} for i in range(80)]  # after the run's end
    (tmp_path / "speeds.yaml").write_text(
        yaml.safe_dump({"cluster": {"speed_changes": changes}}, default_flow_style=True)
    )
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump({**tiny(stop={"max_updates": 6}), "include": ["speeds.yaml"]})
    )
    made = fred.run(tmp_path / "s.yaml", out=tmp_path / "run")
    own = tmp_path / "run" / "scenario.yaml"
    sizes = [(tmp_path / name).stat().st_size for name in ("s.yaml", "speeds.yaml", "run/scenario.yaml")]
    assert max(sizes[:2]) <= 4096 < sizes[2], sizes
    assert len(load_run(tmp_path / "run").scenario.cluster.speed_changes) == 80
    assert replay(tmp_path / "run").passed
    (tmp_path / "again.checkpoint").mkdir()  # killed before its first checkpoint: resumed from the start
    (tmp_path / "again.checkpoint" / "scenario.yaml").write_text(own.read_text())
    assert main(["run", "--resume", str(tmp_path / "again"), "--no-user-code", "--quiet"]) == 0
    assert load_run(tmp_path / "again").summary["params_sha256"] == made.summary["params_sha256"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "S", "--out", ""], "--out is ''"),
        (["run", ""], "the scenario file is ''"),
        (["run", "--resume", ""], "--resume is ''"),
        (["compare", "S", "--runs", ""], "--runs is ''"),
        (["compare", "S", "--out", " "], "--out is ''"),
        (["sweep", "S", "--out", ""], "--out is ''"),
        (["calibrate", "-o", ""], "-o/--output is ''"),
        (["trace", "R", "-o", ""], "-o/--output is ''"),
        (["replay", "R", "--timings", ""], "--timings is ''"),
        (["plot", "R", "--out", ""], "--out is ''"),
    ],
)
def test_an_empty_path_is_refused(argv, says, tmp_path, capsys, monkeypatch):
    # --out '' ran into runs/ (run, plot) or into the working directory (compare, sweep, trace)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "S").write_text(BASE)
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["S"]
