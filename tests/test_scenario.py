"""Scenario validation: every problem named, with its field, its value and the fix."""

from __future__ import annotations

import pytest
import yaml

from fred.scenario.loading import ScenarioError, apply_overrides, load_scenario, validate
from fred.scenario.schema import Scenario
from tests.conftest import tiny


def problems(data) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        validate(data)
    return err.value.problems


def test_a_valid_scenario_fills_in_every_default():
    scenario = validate(tiny())
    resolved = scenario.resolved()
    assert resolved["network"]["bandwidth_bps"] == 1.25e9
    assert resolved["strategy"] == {
        "name": "asgd", "reduction": "exact", "exact_tile": 8, "lr": 0.1, "clock": "simulated",
        "lr_schedule": {"kind": "constant"},
        "optimizer": {"kind": "sgd", "momentum": 0.0, "nesterov": False, "weight_decay": 0.0},
    }  # fmt: skip
    assert validate(resolved) == scenario  # the resolved form round-trips


def test_a_misspelt_key_gets_a_did_you_mean():
    [message] = problems(tiny(model={"hiden": [8]}))
    assert message.startswith("model.hiden: unknown key; did you mean 'hidden'?")
    assert "activation" in message  # and lists what is allowed


def test_a_misspelt_strategy_hyper_parameter_is_found_in_the_strategy_section():
    [message] = problems(tiny(strategy={"name": "ssgd", "agregation": "ps"}))
    assert "strategy.agregation" in message and "'aggregation'" in message


@pytest.mark.parametrize(
    ("section", "hint"),
    [
        (
            {"strategy": {"name": "asgd", "momentum": 0.9}},
            "strategy.momentum: unknown key; momentum is a key of strategy.optimizer (kind sgd). Allowed "
            "here: clock, "
            "exact_tile, lr,",
        ),
        (
            {"strategy": {"name": "asgd", "sync_every": 4}},
            "strategy.sync_every: unknown key; sync_every is a key of strategy (name local_sgd). Allowed "
            "here:",
        ),
        (
            {"network": {"workers": 4}},
            "network.workers: unknown key; workers is a key of cluster. Allowed here:",
        ),
        (
            {"cluster": {"latency_s": 1e-3}},
            "cluster.latency_s: unknown key; latency_s is a key of network, network.intra_node, "
            "network.sites and 1 "
            "more. Allowed",
        ),
        (
            {"model": {"kind": "mlp", "channels": [4]}},
            "model.channels: unknown key; channels is a key of model (kind cnn).",
        ),
        (
            {"cluster": {"seed": 3}},
            "cluster.seed: unknown key; seed is a key of the top level (or did you mean 'speed'?) Allowed "
            "here:",
        ),
    ],
    ids=["optimizer", "another strategy", "cluster", "network", "another model kind", "top level"],
)
def test_a_key_in_the_wrong_section_is_told_where_it_belongs(section, hint):
    data = tiny()
    data.update({k: {**data.get(k, {}), **v} if k != "model" else v for k, v in section.items()})
    [message] = problems(data)
    assert message.startswith(hint), message


def test_a_key_nowhere_in_the_schema_gets_no_such_hint():
    [message] = problems(tiny(cluster={"wrokers": 3}))
    assert message.startswith("cluster.wrokers: unknown key; did you mean 'workers'? Allowed here:")
    [message] = problems(tiny(cluster={"zzz": 3}))
    assert message.startswith("cluster.zzz: unknown key. Allowed here:")


def test_problems_from_set_are_said_to_be_the_sets(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(tiny()))
    with pytest.raises(ScenarioError) as refused:
        load_scenario(path, ["stategy.lr=0.1", "cluster.workers=-1"])
    assert str(refused.value).splitlines()[0] == "--set: 2 problems"
    assert refused.value.problems == [
        "--set cluster.workers=-1: got -1; Input should be greater than or equal to 1",
        "--set stategy.lr=0.1: stategy: unknown key; did you mean 'strategy'? Allowed here: cluster, data, "
        "eval, faults, "
        "model, name, network, seed, stop, strategy, workload",
    ]


def test_a_file_and_a_set_each_get_their_own_problems(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(tiny(data={"batch_size": 0})))
    with pytest.raises(ScenarioError) as refused:
        load_scenario(path, ["strategy.momentum=0.9"])
    assert str(refused.value).splitlines()[0] == f"{path} and --set: 2 problems"
    [file_problem, set_problem] = sorted(refused.value.problems, key=lambda p: p.startswith("--set"))
    assert file_problem.startswith("data.batch_size: got 0;")
    assert set_problem.startswith(
        "--set strategy.momentum=0.9: unknown key; momentum is a key of strategy.optimizer"
    )


def test_an_unknown_strategy_suggests_the_closest_name():
    [message] = problems(tiny(strategy={"name": "asdg"}))
    assert "unknown strategy 'asdg'" in message and "did you mean 'asgd'" in message


def test_every_problem_is_reported_with_its_value():
    found = problems(tiny(cluster={"workers": -2}, data={"batch_size": 0, "sharding": "random"}))
    assert len(found) == 3
    assert any(m.startswith("cluster.workers: got -2;") for m in found)
    assert any(m.startswith("data.batch_size: got 0;") for m in found)
    assert any("data.sharding: got 'random'" in m and "'iid'" in m for m in found)


@pytest.mark.parametrize(
    "overrides, said",
    [
        (
            {"model": {"kind": "mpl"}},
            "model.kind: got 'mpl'; did you mean 'mlp'? allowed: logistic, mlp, cnn",
        ),  # pydantic's tag error
        (
            {"data": {"source": {"kind": "cifar"}}},
            "data.source.kind: got 'cifar'; did you mean 'cifar10'? allowed: digits, synthetic,",
        ),
        ({"seed": True}, "seed: got true; a number is needed here"),  # it said "a number or a name"
        ({"name": ""}, "name: got ''; use a plain, non-empty name"),  # it did not show the value
    ],
)
def test_a_wrong_kind_boolean_or_name_is_told_with_its_value_and_what_is_allowed(overrides, said):
    assert any(said in m for m in problems(tiny(**overrides))), problems(tiny(**overrides))


def test_a_run_without_an_end_is_refused():
    data = tiny()
    data["stop"] = {"target_eval_loss": 0.1}
    [message] = problems(data)
    assert "max_sim_time_s or max_updates" in message


def test_missing_sections_are_named():
    data = tiny()
    del data["strategy"]
    assert problems(data) == ["strategy: missing; this field is required"]


def test_stragglers_must_name_existing_workers():
    [message] = problems(tiny(cluster={"workers": 2, "stragglers": [{"worker": 5, "slow_factor": 2}]}))
    assert "stragglers.0.worker: worker index 5 does not exist; workers are 0..1" in message


@pytest.mark.parametrize(
    ("cluster", "field"),
    [
        ({"speed": {1: 2.0, 3: 0.5}}, "speed.3: worker index 3"),
        (
            {"stragglers": [{"worker": 0, "slow_factor": 2}, {"worker": 2, "slow_factor": 2}]},
            "stragglers.1.worker: worker index 2",
        ),
        (
            {"speed_changes": [{"worker": 4, "at_s": 1.0, "speed": 0.5}]},
            "speed_changes.0.worker: worker index 4",
        ),
    ],
)
def test_a_missing_worker_is_named_by_its_field(cluster, field):
    [message] = problems(tiny(cluster={"workers": 2, **cluster}))
    assert field in message and "(cluster.workers is 2)" in message


@pytest.mark.parametrize(
    ("jitter", "needle"),
    [
        ({"sigma": 0.3}, "sigma 0.3 is given with kind 'none', which ignores it; add kind: lognormal"),
        ({"kind": "lognormal"}, "kind: lognormal needs its sigma"),
    ],
)
def test_jitter_half_given_is_refused(jitter, needle):
    # Either half alone gave steps of exactly step_time_s: a scenario that meant jitter had none.
    [message] = problems(tiny(cluster={"jitter": jitter}))
    assert message.startswith("cluster.jitter:") and needle in message


def test_a_partial_server_link_takes_the_workers_values_for_the_rest():
    network = validate(
        tiny(network={"latency_s": 0.0, "bandwidth_bps": 1e8, "server": {"bandwidth_bps": 5e7}})
    ).network
    assert network.server is not None and (network.server.latency_s, network.server.bandwidth_bps) == (
        0.0,
        5e7,
    )
    assert validate(tiny(network={"server": {"latency_s": 1e-3}})).network.server.bandwidth_bps == 1.25e9


def test_a_strategy_checks_the_cluster_it_runs_on():
    [message] = problems(tiny(strategy={"name": "sgd"}))
    assert "set cluster.workers: 1 (got 4)" in message


def test_flops_timing_needs_device_flops():
    [message] = problems(tiny(workload={"flops_per_example": 1e9}))
    assert "device_flops" in message
    profile_only = validate(
        tiny(workload={"profile": "resnet50"})
    )  # bytes from the profile, time from step_time_s
    assert profile_only.workload.resolved_param_bytes() == int(25.6e6 * 4)


def test_set_overrides_parse_values_as_yaml():
    data = apply_overrides(tiny(), ["cluster.workers=16", "model.hidden=[32, 8]", "strategy.lr=0.5"])
    scenario = validate(data)
    assert scenario.cluster.workers == 16 and scenario.model.hidden == [32, 8] and scenario.strategy.lr == 0.5


def test_exponents_without_a_dot_or_sign_are_numbers_in_files_sets_and_grids(tmp_path):
    # YAML 1.1 (PyYAML) reads 1e-3 and 1.25e9 as strings: validation turned them into numbers,
    # but a sweep's table and labels kept strings, and 1e-3 and 0.001 were two grid values.
    from fred.scenario.loading import read_yaml
    from fred.tools.sweep import parse_grid

    path = tmp_path / "s.yaml"
    path.write_text("strategy: {lr: 1e-3}\nnetwork: {bandwidth_bps: 1.25e9, latency_s: 5e-5}\n")
    assert read_yaml(path) == {
        "strategy": {"lr": 0.001},
        "network": {"bandwidth_bps": 1.25e9, "latency_s": 5e-5},
    }
    assert apply_overrides({}, ["strategy.lr=2E-3"]) == {"strategy": {"lr": 0.002}}
    assert parse_grid(["strategy.lr=1e-3,1e-2"]) == {"strategy.lr": [0.001, 0.01]}
    assert apply_overrides({}, ["name=e5"]) == {"name": "e5"}  # a name stays a name


def test_set_indexes_lists_and_refuses_paths_through_values():
    data = apply_overrides(
        tiny(cluster={"stragglers": [{"worker": 1, "slow_factor": 3}]}),
        ["cluster.stragglers.0.slow_factor=2"],
    )
    assert validate(data).cluster.stragglers[0].slow_factor == 2  # the list was replaced by {"0": ...}
    for item, needle in [
        ("cluster.stragglers.1.worker=0", "cluster.stragglers is a list of 1; index it 0..0"),
        ("name.x=1", "name is 'tiny', not a section"),
        ("=5", "a part of the path is empty"),
        ("cluster.workers.=3", "a part of the path is empty"),
    ]:
        with pytest.raises(ScenarioError, match=needle):
            apply_overrides(data, [item])


@pytest.mark.parametrize(
    "text, needle",
    [
        (
            "name: x\ncluster: {workers: 4}\nstop: {max_updates: 3}\n"
            "cluster: {compute: {step_time_s: 0.5}}\n",
            "line 4, column 1: the key 'cluster' is given twice",
        ),
        ("name: x\nmodel: {kind: mlp\n", "YAML syntax error at line"),
    ],
    ids=["key-given-twice", "syntax-error"],
)
def test_a_file_yaml_cannot_read_as_one_scenario_is_refused_with_its_line(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert needle in err.value.problems[0]


def test_yaml_cannot_construct_python_objects(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ScenarioError):
        load_scenario(path)


def test_non_utf8_files_are_refused_with_a_reason(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "not UTF-8" in err.value.problems[0]


def test_the_digest_identifies_the_resolved_scenario():
    a, b = validate(tiny()), validate(tiny(network={"latency_s": 5e-5}))  # the default, spelt out
    assert a.digest() == b.digest()
    assert a.digest() != validate(tiny(seed=8)).digest()


def test_the_resolved_scenario_lists_worker_speeds_in_worker_order_whatever_the_input_order():
    given = [
        validate(tiny(cluster={"workers": 4, "speed": speed}))
        for speed in ({3: 2.0, 0: 0.5}, {0: 0.5, 3: 2.0})
    ]
    assert [list(s.resolved()["cluster"]["speed"]) for s in given] == [["0", "3"], ["0", "3"]]


def test_scenarios_are_built_in_python_the_same_way():
    from strategies.asgd import ASGD

    scenario = Scenario(strategy=ASGD(lr=0.2), stop={"max_updates": 3})
    assert scenario.strategy.lr == 0.2 and scenario.cluster.workers == 1


def test_a_value_that_fits_no_branch_of_a_union_is_one_problem_with_its_alternatives():
    [message] = problems(
        tiny(cluster={"workers": 4}, strategy={"name": "sgp", "lr": 0.1, "topology": "star"})
    )
    assert message == (
        "strategy.topology: got 'star'; Input should be 'directed_exponential', 'ring' or 'complete', "
        "or a valid list"
    )


def test_a_value_shaped_like_one_branch_of_a_union_is_told_what_is_wrong_inside_it():
    [message] = problems(
        tiny(cluster={"workers": 4}, strategy={"name": "sgp", "lr": 0.1, "topology": [[[1, "x"]]]})
    )
    assert message.startswith("strategy.topology.0.0.1: got 'x'; Input should be a valid number")


def test_a_scenario_may_state_the_fred_it_is_written_for():
    for version in ("0.1", "0.2", "0.2.7"):  # this fred's and older: read; the digest does not depend on it
        assert validate(tiny(fred=version)).digest() == validate(tiny()).digest()
    [newer] = problems(tiny(fred="0.3"))
    assert newer == (
        "scenario: fred: the scenario is written for fred 0.3, newer than this fred 0.2.0: it "
        "may use keys or meanings this fred does not have (CHANGELOG.md); upgrade fred (pip "
        'install -U fred), or set fred: "0.2" once the scenario uses only what this fred '
        "documents"
    )
    later = "scenario: fred: the scenario is written for fred 1.0, newer"
    assert problems(tiny(fred="1.0"))[0].startswith(later)
    [number] = problems(tiny(fred=0.3))
    assert number == (
        "scenario: fred: got 0.3; give the fred version the scenario is written for as "
        '"MAJOR.MINOR" (this fred is 0.2); write it as a string, fred: "0.3"'
    )
    assert problems(tiny(fred="two"))[0].startswith("scenario: fred: got 'two'; give the fred version")
