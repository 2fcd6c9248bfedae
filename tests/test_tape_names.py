"""The names the numerics tape writes for the gradient sums' calls and trees stay those that
tapes and checkpoints hold, whichever module defines them: replay and resume look calls up by
name, and a tape's digest is over its names."""

from __future__ import annotations

import pytest

from fred.numerics import assembly, tape

OPS = ["tree_sum", "assemble", "stacked_sum", "take_row", "unstack", "mean_grad", "divide"]


@pytest.mark.parametrize("name", OPS)
def test_each_recorded_sum_keeps_its_tape_name_and_replay_finds_it(name):
    fn = getattr(assembly, name)
    assert fn.__tape_name__ == f"fred.numerics.gradients:{name}"
    assert tape.resolve(fn.__tape_name__) is fn


def test_the_sums_trees_keep_their_tape_names():
    stacked = assembly.Stacked(None, {"w": None})  # structures: the tape writes leaves apart
    part = assembly.GradSum({"w": None}, None, 4)
    for tree, name in [(stacked, "Stacked"), (part, "GradSum")]:
        assert tape.encode(tree)["named"] == f"fred.numerics.gradients:{name}"
        assert tape.resolve(f"fred.numerics.gradients:{name}") is type(tree)
