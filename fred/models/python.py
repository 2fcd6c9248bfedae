"""A model from the user's own code (docs/bring-your-own.md): ``factory`` is imported and called
with ``args`` (running it); :mod:`fred.numerics.user_code` adapts what it returns.

Its layers are not known, so its parameters and widest value come from one probe of the
user's model by their shapes alone (``jax.eval_shape``, nothing allocated), made once per
configuration, data shape and outputs in a process and shared by every question that needs it
(the memory estimate, the bound on evaluations).
"""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import Field, field_validator

from fred.scenario.errors import Refusal
from fred.scenario.schema.base import _absolute
from fred.scenario.schema.model import ModelSection

IMPORT_PATH = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)
LOSSES = ("cross_entropy", "mse")
PROBES_KEPT = 256  # probes a process keeps: one a model and data shape it estimates


class Probe(NamedTuple):
    """What one trace of the user's model tells: its parameters, and the most floats one example
    holds in it (0: not known)."""

    params: int
    width: int


_PROBES: dict[tuple[str, tuple[int, ...], int], Probe] = {}


class PythonModel(ModelSection):
    """A model from the user's own code: ``factory`` is imported and called with ``args`` (running it)."""

    kind: Literal["python"] = "python"
    factory: str = Field(
        description="'package.module:function' returning a Flax (linen or NNX) module, "
        "an Equinox module, or a pair (init, apply) of functions"
    )
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the factory")
    loss: str | None = Field(
        default=None,
        description="cross_entropy, mse, or 'package.module:function' "
        "(default: cross_entropy for class labels, mse for regression)",
    )
    code_dir: str = Field(
        default_factory=os.getcwd,
        description="the folder searched last (after installed packages "
        "and PYTHONPATH) for the modules of factory and loss; default: the scenario file's folder "
        "(the working directory for a scenario built in Python); a relative one is taken from there",
    )
    listed: ClassVar[int] = 60
    layers_known: ClassVar[bool] = False

    _code_dir_absolute = field_validator("code_dir")(_absolute)

    @field_validator("factory")
    @classmethod
    def _import_path(cls, value: str) -> str:
        if not _is_import_path(value):
            raise Refusal(f"got {value[:200]!r}; give 'package.module:function', e.g. 'mymodels:make_cnn'")
        return value

    @field_validator("loss")
    @classmethod
    def _loss_name(cls, value: str | None) -> str | None:
        if value is not None and value not in LOSSES and not _is_import_path(value):
            raise Refusal(f"got {value[:200]!r}; allowed: {', '.join(LOSSES)}, or 'package.module:function'")
        return value

    def build(self, feature_shape: tuple[int, ...], outputs: int) -> Any:
        from fred.numerics import user_code

        return user_code.build(self, feature_shape, outputs)

    def probe(self, feature_shape: tuple[int, ...], outputs: int) -> Probe:
        """The user's model's parameters and widest value, traced once for this configuration,
        ``feature_shape`` and ``outputs`` in this process (a broken model raises each time asked)."""
        key = (self.model_dump_json(), tuple(int(d) for d in feature_shape), int(outputs))
        if key not in _PROBES:
            from fred.numerics import user_code

            found = Probe(*user_code.sizes(self, key[1], key[2]))
            if len(_PROBES) >= PROBES_KEPT:
                _PROBES.clear()
            _PROBES[key] = found
        return _PROBES[key]

    def param_count(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        return self.probe(feature_shape, outputs).params

    def activation_width(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        return self.probe(feature_shape, outputs).width

    def program_layers(self) -> int:
        return 0

    def code_fields(self) -> list[str]:
        found = [f"model.factory {self.factory!r}"]
        if self.loss is not None and self.loss not in LOSSES:
            found.append(f"model.loss {self.loss!r}")
        return found


def _is_import_path(value: str) -> bool:
    return re.fullmatch(IMPORT_PATH, value) is not None
