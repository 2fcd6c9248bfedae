"""The workload library: derived from the architectures, equal to the published totals, named by scenarios."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import fred
from fred.scenario import workloads
from fred.scenario.loading import ScenarioError, validate
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[1]

# The papers' and libraries' own totals (see the sources in each profile), typed here, not derived.
PUBLISHED_PARAMS = {
    "resnet50": 25.56e6,
    "resnet101": 44.55e6,
    "vgg16": 138.36e6,
    "bert_base": 110e6,
    "gpt2": 124e6,
}
TORCHVISION_MULTIPLY_ADDS = {"resnet50": 4.09e9, "resnet101": 7.80e9, "vgg16": 15.47e9}  # its "GFLOPS" column


def generator():
    spec = importlib.util.spec_from_file_location("make_workloads", ROOT / "docs" / "make_workloads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_shipped_library_is_what_the_generator_derives():
    # A number edited by hand in the JSON, or an architecture changed without regenerating, fails here.
    shipped = (ROOT / "fred" / "scenario" / "workloads.json").read_text(encoding="utf-8")
    assert shipped == generator().render(), "run: python docs/make_workloads.py"


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_totals_match_the_published_ones(name):
    workload = workloads.load(name)
    assert workload.param_count == pytest.approx(PUBLISHED_PARAMS[name], rel=0.005)
    assert workload.param_bytes == 4 * workload.param_count


def test_the_torchvision_models_have_torchvisions_exact_counts_and_multiply_adds():
    exact = {"resnet50": 25_557_032, "resnet101": 44_549_160, "vgg16": 138_357_544}
    for name, multiply_adds in TORCHVISION_MULTIPLY_ADDS.items():
        workload = workloads.load(name)
        assert workload.param_count == exact[name]
        assert workload.forward_flops_per_example == pytest.approx(2 * multiply_adds, rel=0.005)


def test_the_transformers_have_hugging_faces_exact_counts():
    assert workloads.load("bert_base").param_count == 109_482_240  # BertModel, bert-base-uncased
    assert workloads.load("gpt2").param_count == 124_439_808  # GPT2LMHeadModel, gpt2 (head tied to wte)


def test_layers_are_modules_in_forward_order_with_their_own_numbers():
    resnet = workloads.load("resnet50")
    names = [layer.name for layer in resnet.layers]
    assert len(set(names)) == len(names) and names[0] == "conv1" and names[-1] == "fc"
    assert (
        sum(name.endswith(("conv1", "conv2", "conv3", "downsample.0")) for name in names) == 53
    )  # 49 + 4 projections
    fc = resnet.layers[-1]
    assert (fc.param_bytes, fc.forward_flops) == (4 * (2048 * 1000 + 1000), 2 * 2048 * 1000 + 1000)
    gpt2 = {layer.name: layer for layer in workloads.load("gpt2").layers}
    assert gpt2["lm_head"].param_bytes == 0 and gpt2["lm_head"].forward_flops == 1024 * 2 * 768 * 50257
    assert gpt2["h.0.attn.products"] == workloads.Layer("h.0.attn.products", 0, 4 * 1024 * 1024 * 768)
    assert gpt2["wte"].forward_flops == 0 and gpt2["wte"].param_bytes == 4 * 50257 * 768


def test_a_training_step_is_three_forward_passes():
    for name in workloads.names():
        workload = workloads.load(name)
        assert workload.flops_per_example == 3 * workload.forward_flops_per_example


def test_resnet50_keeps_its_rounded_totals_for_scenarios_and_the_others_time_with_their_layers():
    resnet50 = workloads.load("resnet50")
    assert (resnet50.timed_param_bytes, resnet50.timed_flops_per_example) == (102_400_000, 3 * 4.1e9)
    for name in set(workloads.names()) - {"resnet50"}:
        workload = workloads.load(name)
        assert (workload.timed_param_bytes, workload.timed_flops_per_example) == (
            workload.param_bytes,
            workload.flops_per_example,
        )


def test_a_scenario_times_a_small_model_as_a_profile_of_the_library():
    data = tiny(
        cluster={"compute": {"step_time_s": None, "device_flops": 1e15}}, workload={"profile": "resnet101"}
    )
    result = fred.run(data | {"stop": {"max_updates": 2}})
    resnet101 = workloads.load("resnet101")
    assert result.summary["param_bytes"] == resnet101.param_bytes == 178_196_640
    pushes = result.events[result.events["kind"] == "push"]
    assert (pushes["bytes"] == resnet101.param_bytes).all()
    steps = result.events[result.events["kind"] == "compute"]
    step_s = 8 * resnet101.flops_per_example / 1e15  # the tiny scenario's batch of 8
    assert (steps["end_s"] - steps["start_s"]).to_numpy() == pytest.approx(step_s, rel=1e-12)


def test_an_unknown_profile_is_refused_naming_the_library():
    with pytest.raises(
        ScenarioError, match="workload.profile: got 'resnet_50'; .*'resnet101', 'resnet50' or 'vgg16'"
    ):
        validate(tiny(workload={"profile": "resnet_50"}))
    with pytest.raises(ValueError, match="no workload profile 'resnet_50'; did you mean 'resnet50'"):
        workloads.load("resnet_50")
