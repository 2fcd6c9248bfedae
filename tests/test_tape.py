"""The numerics tape's bookkeeping: values known by identity and forgotten when freed, and the
document a file holds (runs replayed end to end are in ``test_replay.py``)."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from fred.numerics import tape


@pytest.fixture
def ops(monkeypatch):
    monkeypatch.setattr(tape, "_check_resolves", lambda name, key: None)  # nothing replays these tapes

    @tape.op("tests:double")
    def double(x):
        return {"x": x * 2, "n": 3}

    @tape.op("tests:same")
    def same(x):
        return x

    @tape.op("tests:scalar")
    def scalar(x):
        return np.float32(1.5), x + 1

    return double, same, scalar


def test_an_output_passed_back_is_known_by_identity_and_an_equal_copy_is_a_constant(ops):
    double, _, _ = ops
    with tape.Tape() as recording:
        out = double(jnp.ones(2))
        double(out["x"])
        double(jnp.array(out["x"]))  # the same numbers in another array
    first, again, copy = recording.calls
    assert first.out_codes == (3, (1,)) and again.arg_codes == ((1,),)  # leaves in key order: "n", "x"
    assert copy.arg_codes == ((3,),) and 3 in recording.constants  # a new value, copied onto the tape


def test_a_freed_output_is_forgotten(ops):
    double, _, _ = ops
    x = jnp.ones(2)
    with tape.Tape() as recording:
        out = double(x)
        assert len(recording._refs) == 2  # the input constant and the output
        del out
        assert len(recording._refs) == 1  # at once, not at the next collection
        double(jnp.ones(2))  # an input and an output no one keeps
        assert len(recording._refs) == 1


def test_an_array_returned_as_it_came_is_the_newer_value_and_forgotten_once(ops):
    _, same, _ = ops
    x = jnp.ones(2)
    with tape.Tape() as recording:
        y = same(x)
        same(y)
    assert y is x  # what makes the case: the same array is an input and then an output
    assert [c.arg_codes for c in recording.calls] == [((0,),), ((1,),)]
    del x, y
    assert recording._refs == {}


def test_a_numpy_scalar_output_is_a_value_without_a_reference(ops):
    _, _, scalar = ops
    x = jnp.ones(2)
    with tape.Tape() as recording:
        _, bumped = scalar(x)
        scalar(bumped)  # its outputs: no one keeps them
    assert recording.calls[0].out_codes == ((1,), (2,))
    assert recording.calls[1].arg_codes == ((2,),)
    assert sorted(ref.code for ref in recording._refs.values()) == [
        (0,),
        (2,),
    ]  # x and bumped; the scalar has no reference


def test_the_document_writes_calls_as_the_lists_a_file_holds(ops):
    double, _, _ = ops
    scaled = tape.op("tests:scaled", ("sgd", 0.1))(lambda x: x * 0.1)  # a factory's key: a tuple in memory
    with tape.Tape() as recording:
        scaled(double(jnp.ones(2))["x"])
    doc, blobs = tape.document(recording, recording.codes([]))

    def listed(codes):
        return [list(c) if isinstance(c, tuple) else c for c in codes]

    as_lists = {
        **doc,
        "calls": [
            [name, list(key) if key is not None else None, a, listed(ac), o, listed(oc)]
            for name, key, a, ac, o, oc in doc["calls"]
        ],
    }
    assert as_lists["calls"][1][1] == ["sgd", 0.1]
    assert bytes(tape.json_array(doc)) == json.dumps(as_lists).encode()
    assert tape.digest(doc, blobs) == tape.digest(as_lists, blobs)
    assert tape.parse(json.loads(json.dumps(doc)), blobs).calls == recording.calls


def test_a_call_given_a_placeholder_computes_with_its_value(ops):
    double, _, _ = ops
    with tape.Tape() as recording:
        holder = recording._placeholder(7)  # as a resumed run's fast-forward leaves it, then filled
        holder.value = jnp.full(2, 5.0)
        out = double(holder)
        plain = double(jnp.ones(2))  # no placeholder among its inputs
    assert recording.calls[0].arg_codes == ((7,),)
    np.testing.assert_array_equal(out["x"], [10.0, 10.0])
    np.testing.assert_array_equal(plain["x"], [2.0, 2.0])
