"""What a run's evaluations cost, bounded: not only how many there are, but how many rows of how
large a model each one computes.

100,000 evaluations pass the bound on their number (``eval.every_s``; see the scenario
reference), yet of a digits MLP every 10⁻⁶ simulated seconds they took minutes: about 2 ms each,
most of it the cost of an evaluation whatever its size. An evaluation costs, in multiply-adds,
its rows times the model's parameters, and :data:`EVAL_FIXED` more; a gradient step three
times that (forward and backward) for each of its examples, and :data:`TRAIN_FIXED` more. A run whose
evaluations
cost more than :data:`MAX_EVAL_WORK` **and** more than :data:`EVAL_RATIO` times its training is
refused before it starts (:func:`check_evaluations`, from the fewest evaluations the scenario
can make) or, when it only turns out so as it runs (evaluations every few microseconds while a
slow link holds the workers), failed as it passes the bound (:class:`EvaluationBudget`). A run
that evaluates a large model often but trains it more still runs: what is refused is a run that
would spend its time evaluating parameters its training has barely changed.
"""

from __future__ import annotations

import math

from fred.runs.memory import data_shape, param_count
from fred.scenario.schema import Scenario, run_work

# an evaluation's cost besides its arithmetic (dispatch, records): ~2 ms on a 2-core CPU, as multiply-adds
EVAL_FIXED = 2e7
MAX_EVAL_WORK = (
    5e11  # multiply-adds all of a run's evaluations may cost before the ratio is asked: about a minute
)
EVAL_RATIO = 10  # ... past which they may cost at most this many times the run's training
TRAIN_FACTOR = 3  # a gradient costs a forward and a backward pass: about 3 forward passes
TRAIN_FIXED = (
    3e6  # a gradient step's cost besides its arithmetic (its call, the simulation): ~0.3 ms, as multiply-adds
)


def evaluation_cost(rows: int, params: int) -> float:
    """Multiply-adds of one evaluation of ``rows`` examples by a model of ``params`` parameters."""
    return rows * params + EVAL_FIXED


def step_cost(examples: int, params: int) -> float:
    """Multiply-adds of one gradient step on ``examples`` examples by a model of ``params`` parameters."""
    return examples * params * TRAIN_FACTOR + TRAIN_FIXED


def too_costly(evaluated: float, trained: float) -> bool:
    """Whether evaluations of this cost are past the bound, against a training of that cost."""
    return evaluated > MAX_EVAL_WORK and evaluated > EVAL_RATIO * trained


def eval_rows(scenario: Scenario, examples: int) -> int:
    """The held-out rows an evaluation computes: the split ``data.eval_fraction`` makes of
    ``examples`` (roughly, for a source with a test split of its own), at most ``eval_examples``."""
    data = scenario.data
    rows = min(max(int(round(data.eval_fraction * examples)), 1), max(examples - 1, 1))
    return min(rows, data.eval_examples) if data.eval_examples is not None else rows


def fewest_evaluations(scenario: Scenario) -> float:
    """The fewest evaluations a run that reaches its stop makes (its first and last aside): every
    ``eval.every_s`` of the shortest time it lasts, or every ``eval.every_updates`` of its
    ``stop.max_updates`` when no time stop can come first. None are counted on where a
    ``stop.target_eval_loss`` may end it at any evaluation (the run's own budget still holds)."""
    stop, every_s, every_updates = scenario.stop, scenario.eval.every_s, scenario.eval.every_updates
    if stop.target_eval_loss is not None:
        return 0.0
    if every_s is not None:
        at_least_s = run_work(scenario).at_least_s
        return at_least_s / every_s if math.isfinite(at_least_s) else 0.0
    if stop.max_updates is None or stop.max_sim_time_s is not None or not every_updates:
        return 0.0  # a run stopped by its time makes however many updates fit in it
    return stop.max_updates // every_updates


def check_evaluations(scenario: Scenario) -> None:
    """Refuse, before anything is built, a run whose evaluations would cost past the bound."""
    if scenario.workload.timing_only:
        return  # its evaluations compute nothing
    shape = data_shape(scenario)
    if shape is None:
        return  # building it says what is wrong with the data; the run's own budget still holds
    params = param_count(scenario, shape)
    rows = eval_rows(scenario, shape.examples)
    evaluations = fewest_evaluations(scenario)
    evaluated = evaluations * evaluation_cost(rows, params)
    trained = run_work(scenario).steps * step_cost(scenario.data.batch_size, params)
    if too_costly(evaluated, trained):
        field = "eval.every_s" if scenario.eval.every_s is not None else "eval.every_updates"
        raise ValueError(
            f"{field}: at least {evaluations:,.0f} evaluations of {rows:,} rows by a model of {params:,} "
            "parameters "
            f"cost about {evaluated:.3g} multiply-adds, {_times(evaluated, trained)} the run's training; "
            "give a larger "
            f"{field} or fewer data.eval_examples (evaluations may cost {MAX_EVAL_WORK:.0e}, or {EVAL_RATIO} "
            "times "
            "the training)"
        )


def _times(evaluated: float, trained: float) -> str:
    return f"{evaluated / trained:,.0f} times" if trained > 0 else "with no"


class EvaluationBudget:
    """The same bound as a run goes: what its evaluations and its gradients have cost so far."""

    def __init__(self, rows: int, params: int):
        self.each = evaluation_cost(rows, params)
        self.params = params
        self.evaluated = 0.0
        self.trained = 0.0
        self.evaluations = 0

    def trained_on(self, examples: int) -> None:
        self.trained += step_cost(examples, self.params)

    def evaluated_once(self) -> bool:
        """Count an evaluation; whether the run's evaluations are now past the bound."""
        self.evaluations += 1
        self.evaluated += self.each
        return too_costly(self.evaluated, self.trained)

    def failure(self, scenario: Scenario) -> str:
        field = "eval.every_s" if scenario.eval.every_s is not None else "eval.every_updates"
        return (
            f"{field}: {self.evaluations:,} evaluations have cost {self.evaluated:.3g} multiply-adds, "
            f"{_times(self.evaluated, self.trained)} the run's training so far (evaluations may cost "
            f"{MAX_EVAL_WORK:.0e}, or {EVAL_RATIO} times the training); give a larger {field} or fewer "
            "data.eval_examples"
        )
