"""Fewer SimPy steps for the same run: events handled in the turn they would have had anyway
(fred.simulation.turns), and jitter drawn ahead (fred.simulation.compute)."""

from __future__ import annotations

import math

import simpy

from fred.numerics import rng
from fred.scenario.schema import Scenario
from fred.simulation.compute import NORMALS_AHEAD, ComputeModel
from fred.simulation.turns import reserve, schedule_reserved, succeed_in_turn
from tests.conftest import tiny


def relay(in_turn: bool, rival_at_s: float) -> tuple[list[tuple[str, float]], int]:
    """A timer whose callback triggers an event a process waits for, and a rival process whose
    timer ends at ``rival_at_s``: what happened in which order, and the steps SimPy took."""
    env, log = simpy.Environment(), []
    arrived = env.event()

    def waiter():
        yield arrived
        log.append(("waiter", env.now))

    def rival():
        yield env.timeout(rival_at_s)
        log.append(("rival", env.now))

    env.process(waiter())
    env.process(rival())
    timer = env.timeout(1.0)
    timer.callbacks.append(lambda _: succeed_in_turn(env, arrived) if in_turn else arrived.succeed())
    steps = 0
    while env.peek() < math.inf:
        env.step()
        steps += 1
    return log, steps


def test_an_event_next_anyway_is_processed_in_the_step_that_triggers_it():
    log, steps = relay(in_turn=False, rival_at_s=2.0)
    in_turn, fewer = relay(in_turn=True, rival_at_s=2.0)
    assert in_turn == log == [("waiter", 1.0), ("rival", 2.0)]
    assert fewer == steps - 1


def test_an_event_with_another_due_first_waits_for_its_turn():
    # The rival's timer ends at the same instant, before the triggered event would: it goes first.
    log, steps = relay(in_turn=False, rival_at_s=1.0)
    in_turn, same = relay(in_turn=True, rival_at_s=1.0)
    assert in_turn == log == [("rival", 1.0), ("waiter", 1.0)]
    assert same == steps


def test_a_reserved_place_goes_before_what_was_scheduled_after_it():
    env, log = simpy.Environment(), []
    place = reserve(env)
    env.timeout(0.0).callbacks.append(lambda _: log.append("scheduled later"))
    schedule_reserved(env, place, lambda _: log.append("reserved"))
    env.run()
    assert log == ["reserved", "scheduled later"]


def test_jitter_drawn_ahead_is_the_stream_drawn_one_at_a_time():
    scenario = Scenario.model_validate(
        tiny(cluster={"workers": 2, "jitter": {"kind": "lognormal", "sigma": 0.3}})
    )
    model = ComputeModel(scenario)
    draws = 2 * NORMALS_AHEAD + 3  # across blocks
    durations = [model.duration_s(1) for _ in range(draws)]
    stream = rng.stream(scenario.seed, "compute", 1)
    one_by_one = [model.base_step_s * math.exp(0.3 * float(stream.standard_normal())) for _ in range(draws)]
    assert durations == one_by_one
