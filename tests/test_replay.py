"""``fred replay``: a run's numerics re-executed from its tape, without the simulator, give its bits.

Shipped scenarios are replayed in ``test_golden.py``; here every strategy on a tiny
scenario, what a tampered run directory does, and the command line.
"""

from __future__ import annotations

import json
import shutil
import weakref

import jax
import numpy as np
import pytest

import fred
from fred.numerics import tape
from fred.runs import host
from fred.runs.host import cpu_isa
from fred.scenario import registry
from fred.tools.cli import main
from fred.tools.replay import ReplayError, _Steps, compare, needed, replay
from tests.conftest import cluster_for, tiny

VARIANTS = {
    "ssgd_ps": {"name": "ssgd", "aggregation": "ps"},
    "pipe_sgd_int8": {"name": "pipe_sgd", "compression": {"kind": "int8"}},
    "bfasgd_abs": {"name": "bfasgd", "statistic": "abs"},
    "sgp_crash": {"name": "sgp"},
}


def strategy_run(name: str, out) -> fred.RunResult:
    strategy = VARIANTS.get(name, {"name": name})
    faults = (
        {"worker_crash": [{"worker": 2, "at_s": 0.03}], "sync_timeout_s": 0.01}
        if name.endswith("crash")
        else {}
    )
    data = tiny(strategy=strategy, cluster=cluster_for(name), stop={"max_updates": 15}, faults=faults)
    return fred.run(data, out=out)


@pytest.mark.parametrize("name", registry.names() + list(VARIANTS))
def test_every_strategy_replays_bit_for_bit_from_computed_values(name, tmp_path):
    run = strategy_run(name, tmp_path / "run")
    report = replay(tmp_path / "run")
    assert report.passed and report.leaves["equal"].all()
    assert report.replayed_calls > 0 and len(report.gradients) > 0
    # The final parameters are computed by replayed calls, not stored: none is a constant.
    recorded = tape.parse(*tape.read(tmp_path / "run" / "tape.npz")[:2])
    produced = {r for call in recorded.calls for r in tape.refs(call.out_codes)}
    finals = tape.refs(recorded.final[1])
    assert finals and all(r in produced and r not in recorded.constants for r in finals)
    assert run.summary["updates"] == 15


def test_gradient_timings_sit_next_to_the_simulated_compute_time(tmp_path):
    strategy_run("asgd", tmp_path / "run")
    grads = replay(tmp_path / "run").gradients
    assert list(grads.columns) == ["call", "shards", "rows", "real_s", "simulated_s", "compiled"]
    assert (grads["real_s"] > 0).all() and (grads["simulated_s"] == 0.01).all()
    assert (grads["rows"] == 8 * grads["shards"]).all()  # workers starting together share one call
    assert grads["compiled"].sum() == len(
        grads[["rows", "shards"]].drop_duplicates()
    )  # one first call per shape


def test_a_replay_tells_how_far_it_is(tmp_path):
    told = []
    fred.run(tiny(stop={"max_updates": 150}), out=tmp_path / "run")  # ~300 calls: a report every third
    report = replay(tmp_path / "run", progress=lambda done, total: told.append((done, total)))
    assert told[-1] == (report.replayed_calls, report.replayed_calls)
    # every ceil(total / 100)th call and the last: at most 101 reports, and at least 50 for 100 calls or more
    assert [d for d, _ in told] == sorted({d for d, _ in told}) and 50 <= len(told) <= 101


def test_only_the_calls_the_final_parameters_need_are_replayed():
    calls = [
        tape.Call("a", None, 0, [[0]], 1, [[1]]),
        tape.Call("eval", None, 0, [[1]], 1, [[2]]),
        tape.Call("b", None, 2, [[1], 3], 1, [[3]]),
    ]
    assert needed(calls, (1, [[3]])) == [True, False, True]


def _tamper_rows(run_dir, fix_digest: bool) -> None:
    """Change the first batch index of the first gradient call (the row after it)."""
    doc, blobs, _ = tape.read(run_dir / "tape.npz")
    gradient = next(c for c in doc["calls"] if c[0] == "gradients")
    rows = gradient[3][-2][0]  # the call's inputs are (params..., rows, shards)
    _, kind, shape, offset = next(entry for entry in doc["constants"] if entry[0] == rows)
    assert np.dtype(kind).kind == "i" and len(shape) == 1, "that is the batch's row indices"
    blob = blobs[f"blob{kind}"].copy()
    blob[offset] = (blob[offset] + 1) % 100
    blobs[f"blob{kind}"] = blob
    tape.write(run_dir / "tape.npz", doc, blobs)
    if fix_digest:
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["tape_sha256"] = tape.digest(doc, blobs)
        (run_dir / "summary.json").write_text(json.dumps(summary))


def test_a_changed_batch_index_is_caught_by_the_checksum(tmp_path):
    strategy_run("asgd", tmp_path / "run")
    _tamper_rows(tmp_path / "run", fix_digest=False)
    with pytest.raises(
        ReplayError, match="was changed after the run; run its scenario again to replace it, fred run"
    ):
        replay(tmp_path / "run")


def test_a_changed_batch_index_with_a_forged_checksum_fails_the_check(tmp_path):
    strategy_run("asgd", tmp_path / "run")
    _tamper_rows(tmp_path / "run", fix_digest=True)
    report = replay(tmp_path / "run")
    assert not report.passed and not report.leaves["equal"].all()
    assert report.leaves["max_abs_diff"].max() > 0


def test_a_missing_tape_or_table_is_a_clear_error(tmp_path, capsys):
    strategy_run("asgd", tmp_path / "run")
    shutil.copytree(tmp_path / "run", tmp_path / "no-tape")
    (tmp_path / "no-tape" / "tape.npz").unlink()
    assert main(["replay", str(tmp_path / "no-tape")]) == 2
    assert "has no tape.npz" in capsys.readouterr().err
    (tmp_path / "run" / "updates.parquet").unlink()
    assert main(["replay", str(tmp_path / "run")]) == 2
    assert "not a complete run directory: it has no updates.parquet" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damage", ["tape.npz", "params.npz", "summary.json", "events.parquet", "scenario.yaml"]
)
def test_a_damaged_record_is_named_not_a_traceback(tmp_path, capsys, damage):
    strategy_run("asgd", tmp_path / "run")
    file = tmp_path / "run" / damage
    file.write_bytes(
        b"name: [unclosed\n"
        if damage == "scenario.yaml"
        else file.read_bytes()[: len(file.read_bytes()) // 2]
    )
    for command in (
        ["replay", str(tmp_path / "run")],
        ["trace", str(tmp_path / "run"), "-o", str(tmp_path / "t.json")],
    ):
        if command[0] == "trace" and damage == "tape.npz":
            continue  # trace does not read the tape
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert damage in err and "Traceback" not in err, err
        if damage != "scenario.yaml":  # how to write it afresh: from its scenario.yaml, which is whole
            assert f"fred run {tmp_path / 'run' / 'scenario.yaml'} --out {tmp_path / 'run'}" in err, err


def test_a_changed_scenario_is_told_from_a_failed_replay(tmp_path):
    strategy_run("asgd", tmp_path / "run")
    path = tmp_path / "run" / "scenario.yaml"
    path.write_text(path.read_text().replace("activation: relu", "activation: tanh"))
    with pytest.raises(ReplayError, match="scenario.yaml does not match scenario_sha256"):
        replay(tmp_path / "run")


def test_the_command_line_reports_and_writes_timings(tmp_path, capsys):
    strategy_run("ssgd", tmp_path / "run")
    assert main(["replay", str(tmp_path / "run"), "--timings", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "bitwise check: passed" in out and "gradient calls" in out
    assert (tmp_path / "t.csv").read_text().startswith("call,shards,rows,real_s,simulated_s,compiled")
    assert main(["replay", str(tmp_path / "run"), "--check", "close"]) == 0


def test_an_absent_backend_is_a_clean_error(tmp_path, capsys):
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU is present")
    strategy_run("asgd", tmp_path / "run")
    assert main(["replay", str(tmp_path / "run"), "--backend", "gpu"]) == 2
    assert "no gpu backend" in capsys.readouterr().err


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="no GPU backend")
def test_a_cpu_run_replayed_on_a_gpu_agrees_step_by_step(tmp_path):
    run = strategy_run("ssgd", tmp_path / "run")
    assert run.summary["backend"] == "cpu"  # fred computes on CPU even where a GPU is present
    report = replay(
        tmp_path / "run", backend="gpu", check="close", rtol=1e-5, atol=1e-6, matmul_precision="highest"
    )
    assert report.device.lower().startswith(("cuda", "gpu"))
    assert report.passed, report.steps
    assert report.steps["calls"].sum() == report.replayed_calls
    assert np.isfinite(report.gradients["real_s"]).all()


def test_a_run_records_its_backend_and_jax_version(tmp_path):
    run = strategy_run("asgd", tmp_path / "run")
    assert run.summary["backend"] == "cpu" and run.summary["jax_version"] == jax.__version__
    assert replay(tmp_path / "run").notes == []


def test_a_run_from_another_jax_version_is_replayed_with_a_note(tmp_path, capsys):
    strategy_run("asgd", tmp_path / "run")
    path = tmp_path / "run" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "jax_version": "0.0.1"}))
    assert main(["replay", str(tmp_path / "run")]) == 0
    assert "made with JAX 0.0.1" in capsys.readouterr().err


def test_a_run_from_another_cpu_instruction_set_is_replayed_with_a_note(tmp_path):
    run = strategy_run("asgd", tmp_path / "run")
    assert run.summary["cpu_isa"] == cpu_isa()
    path = tmp_path / "run" / "summary.json"
    other = "x86_64-avx2" if cpu_isa() != "x86_64-avx2" else "x86_64-avx512f"
    path.write_text(json.dumps({**json.loads(path.read_text()), "cpu_isa": other}))
    report = replay(tmp_path / "run")
    assert report.passed  # the same machine still gives the same bits; the note is about promises
    assert any(f"made on a {other} CPU" in note for note in report.notes)


def test_the_cpu_instruction_set_is_named_by_its_widest_vector_extension(monkeypatch):
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    for flags, expected in [({"sse2", "avx", "avx2", "avx512f"}, "x86_64-avx512f"),
                            ({"sse2", "avx", "avx2"}, "x86_64-avx2"),
                            ({"sse2"}, "x86_64-sse"), (set(), "x86_64-unknown")]:  # fmt: skip
        monkeypatch.setattr(host, "_x86_flags", lambda flags=flags: frozenset(flags))
        assert host.cpu_isa() == expected
    monkeypatch.setattr(host.platform, "machine", lambda: "arm64")
    assert host.cpu_isa() == "arm64"


def test_close_compares_every_step_from_the_same_inputs(tmp_path):
    strategy_run("ssgd", tmp_path / "run")
    report = replay(tmp_path / "run", check="close")
    steps = report.steps
    assert report.passed and set(steps["function"]) >= {"gradients"}
    assert steps["calls"].sum() == report.replayed_calls
    assert (steps["max_abs_diff"] == 0).all() and (steps["outside_tolerance"] == 0).all()  # same backend


def test_a_step_outside_the_tolerance_is_counted():
    steps = _Steps(jax.devices("cpu")[0], rtol=1e-5, atol=0.0)
    double = lambda x: 2 * x  # noqa: E731
    x = jax.numpy.arange(4.0)
    steps.check(3, "double", double, (x,), 2 * x)  # agrees
    steps.check(5, "double", double, (x,), 2 * x * (1 + 1e-3))  # one step off by 1e-3, relative
    row = steps.table().iloc[0]
    assert (row["calls"], row["outside_tolerance"], row["worst_call"]) == (2, 1, 5)
    assert row["max_rel_diff"] == pytest.approx(1e-3, rel=1e-3)


def test_the_same_nan_and_inf_agree_and_a_nan_against_a_number_does_not():
    steps = _Steps(jax.devices("cpu")[0], rtol=1e-5, atol=0.0)
    same = lambda x: x  # noqa: E731
    x = jax.numpy.array([1.0, jax.numpy.nan, jax.numpy.inf, -jax.numpy.inf])
    steps.check(0, "same", same, (x,), x)  # a diverged run's step, replayed: inf - inf is NaN
    steps.check(1, "same", same, (x,), x.at[0].set(jax.numpy.nan))
    row = steps.table().iloc[0]
    assert (row["outside_tolerance"], row["worst_call"], row["max_abs_diff"]) == (1, 1, np.inf)
    leaves = compare({"w": np.asarray(x)}, {"w": np.asarray(x)})
    assert (
        leaves["equal"].all() and (leaves["max_abs_diff"] == 0).all() and (leaves["max_rel_diff"] == 0).all()
    )


def test_a_diverged_run_passes_the_close_check_on_its_own_backend(tmp_path):
    data = tiny(strategy={"lr": 1e30}, stop={"max_updates": 40}, eval={"every_updates": 40})
    fred.run(data, out=tmp_path / "run")
    report = replay(tmp_path / "run", check="close")
    assert fred.load_run(tmp_path / "run").summary["status"] == "diverged" and report.passed


def test_a_timing_only_run_has_nothing_to_replay(tmp_path, capsys):
    data = tiny(strategy={"name": "arsgd"}, stop={"max_updates": 3}, workload={"timing_only": True})
    fred.run(data, out=tmp_path / "run")
    assert main(["replay", str(tmp_path / "run")]) == 2
    assert "timing-only run" in capsys.readouterr().err


def test_a_call_that_now_returns_another_structure_is_a_clear_error(tmp_path):
    """A tape from a fred whose gradient calls returned other trees (before 2026-11-23 a call
    for several workers returned a list of per-worker sums, now one stacked result) is
    refused, not replayed by pairing leaves that no longer match."""
    strategy_run("ssgd", tmp_path / "run")
    doc, blobs, _ = tape.read(tmp_path / "run" / "tape.npz")
    call = next(c for c in doc["calls"] if c[0] == "gradients" and c[3][-1] > 1)
    call[4] = next(
        c[4] for c in doc["calls"] if c[0] == "fred.numerics.gradients:stacked_sum"
    )  # another recorded tree
    tape.write(tmp_path / "run" / "tape.npz", doc, blobs)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    summary["tape_sha256"] = tape.digest(doc, blobs)
    (tmp_path / "run" / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ReplayError, match="numerics differ from this one"):
        replay(tmp_path / "run")


def test_a_constant_array_is_copied_onto_the_tape_not_kept_alive_by_it(monkeypatch):
    # np.asarray's view of a jax array held the array (and its device buffer) for the
    # whole run: SGP's per-share mixing weights, 32,000 of them in a 32-node OSGP run.
    monkeypatch.setattr(tape, "_check_resolves", lambda name, key: None)  # nothing replays this tape

    @tape.op("tests:scale")
    def scale(x, weight):
        return x * weight

    weight = jax.numpy.float32(0.25)
    alive = weakref.ref(weight)
    with tape.Tape() as recording:
        scale(jax.numpy.ones(3), weight)
    del weight
    assert alive() is None  # the tape holds no reference: gone as soon as the caller drops it
    (constant,) = [c for c in recording.constants.values() if c.shape == ()]
    assert constant.dtype == np.float32 and constant == 0.25 and constant.base is None


def test_a_run_whose_final_parameters_no_recorded_call_computes_is_refused_not_passed(
    tmp_path, monkeypatch, capsys
):
    # A strategy computing outside fred.numerics.tape.op leaves its parameters on the tape as a
    # constant; replay then compared params.npz with that copy and said "passed".
    shipped = registry.get("asgd")

    def start(sim, config):
        params = shipped.start(sim, config)
        return lambda: jax.tree.map(lambda x: x + 0.0, params())  # a computation the tape does not see

    monkeypatch.setitem(registry._REGISTRY, "asgd", shipped._replace(start=start))
    fred.run(tiny(stop={"max_updates": 3}), out=tmp_path / "run")
    with pytest.raises(
        ReplayError, match="applied 3 updates, but no recorded call computes its final parameters"
    ):
        replay(tmp_path / "run")
    assert main(["replay", str(tmp_path / "run")]) == 2 and "fred.numerics.tape.op" in capsys.readouterr().err


def test_an_op_replay_could_not_find_is_refused_at_its_first_recorded_call():
    # A typo in the name, or a function defined inside start(), ran and was recorded, and
    # only `fred replay` failed, with an AttributeError traceback.
    @tape.op("strategies.asgd:no_such_function")
    def double(x):
        return 2 * x

    assert double(1.0) == 2.0  # with no tape recording it is just the function
    with tape.Tape(), pytest.raises(TypeError, match="no_such_function.*cannot be found by replay"):
        double(jax.numpy.ones(2))


def test_an_op_takes_its_arguments_by_position_only():
    @tape.op("fred.numerics.gradients:mean_grad")
    def scaled(x, weight):
        return x * weight

    with pytest.raises(TypeError, match="by position only.*pass weight by position"):
        scaled(1.0, weight=2.0)


def test_replay_reads_no_table(tmp_path, monkeypatch):
    # A long run's events are hundreds of MB, and replay needs only the scenario, summary and
    # parameters: it used more memory than the run it checked.
    import pandas as pd

    from fred.runs.records import EVENT_COLUMNS

    fred.run(tiny(stop={"max_updates": 3}), out=tmp_path / "run")
    monkeypatch.setattr(pd, "read_parquet", lambda *a, **k: pytest.fail("replay read a table"))
    assert replay(tmp_path / "run").passed
    light = fred.load_run(tmp_path / "run", tables=False)
    assert light.events.empty and list(light.events.columns) == EVENT_COLUMNS
    monkeypatch.undo()
    full = fred.load_run(tmp_path / "run")
    for table in ("metrics", "updates", "events"):  # typed as read: not object columns
        assert getattr(light, table).dtypes.equals(getattr(full, table).dtypes), table
    # Empty tables answered as a run that never learned: time_to None, no staleness.
    for ask in (lambda r: r.time_to(10.0), lambda r: r.staleness("worker")):
        with pytest.raises(ValueError, match="tables=False"):
            ask(light)
        ask(full)
    assert "tables: not read" in repr(light)
