"""The least-squares solver of ``fred fit``: Levenberg-Marquardt on the logarithms of the
constants, with forward differences for the Jacobian (the model is a simulation, not a formula)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fred.scenario.errors import Refusal


@dataclass
class Solution:
    """Where Levenberg-Marquardt stopped: log values, residuals and Jacobian there."""

    x: np.ndarray
    residuals: np.ndarray
    jacobian: np.ndarray
    evaluations: int
    converged: bool


STEP = 1e-3  # forward-difference step in log value: 0.1 %, well above the simulated times' rounding
MAX_STEP = 3.0  # at most a factor e^3 = 20 in one step: a wild start is walked back, not jumped over
TINY_STEP = 1e-7  # a step changing no constant by more than 1e-7 of itself: converged
TINY_GAIN = 1e-9  # a step lowering the squared error by less than this share of it: converged


def least_squares(
    residuals: Callable[[np.ndarray], np.ndarray | None],
    x0: np.ndarray,
    max_evals: int,
    tell: Callable[[str], None] = lambda line: None,
) -> Solution:
    """Minimise ``|residuals(x)|^2`` from ``x0`` by Levenberg-Marquardt with forward differences;
    ``residuals`` gives None where the model cannot be evaluated (a value the scenario refuses),
    which is stepped back from."""
    evaluations = 0

    def f(x: np.ndarray) -> np.ndarray | None:
        nonlocal evaluations
        evaluations += 1
        return residuals(x)

    x, r = x0.copy(), f(x0)
    if r is None:
        raise Refusal("the starting values cannot be evaluated")
    lam, converged, J = 1e-3, False, np.zeros((len(r), len(x)))
    for iteration in range(1, max_evals + 1):
        J = _jacobian(f, x, r)
        cost, gradient, normal = float(r @ r), J.T @ r, J.T @ J
        stepped = False
        while evaluations < max_evals and lam < 1e12:
            scale = np.diag(normal) + 1e-12
            step = np.linalg.solve(normal + lam * np.diag(scale), -gradient)
            step *= min(1.0, MAX_STEP / max(float(np.abs(step).max()), 1e-300))
            if (
                float(np.abs(step).max()) < TINY_STEP
            ):  # nothing left to move: damping has shrunk the step to nothing
                lam = 1e12
                break
            trial = f(x + step)
            if trial is not None and float(trial @ trial) < cost:
                x, r, lam, stepped = x + step, trial, max(lam / 3, 1e-12), True
                break
            lam *= 4
        tell(
            f"iteration {iteration}: rms error of log time {math.sqrt(float(r @ r) / len(r)):.3g}, "
            f"{evaluations} evaluations"
        )
        done = not stepped or cost - float(r @ r) <= TINY_GAIN * cost or float(r @ r) < 1e-24
        if done or evaluations + len(x) >= max_evals:
            converged = done and (stepped or lam >= 1e12 or float(r @ r) < 1e-24)
            break
    return Solution(
        x, r, _jacobian(f, x, r) if evaluations + len(x) <= max_evals else J, evaluations, converged
    )


def _jacobian(f: Callable[[np.ndarray], np.ndarray | None], x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Forward differences, backward where the forward point cannot be evaluated (a bound)."""
    columns = []
    for i in range(len(x)):
        h = np.zeros_like(x)
        h[i] = STEP
        moved = f(x + h)
        columns.append((moved - r) / STEP if moved is not None else (r - _or_same(f(x - h), r)) / STEP)
    return np.stack(columns, axis=1)


def _or_same(value: np.ndarray | None, r: np.ndarray) -> np.ndarray:
    return value if value is not None else r  # no slope either way: the constant is pinned there
