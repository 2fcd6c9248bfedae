"""Logistic regression: one dense layer from the flattened input to the outputs."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from fred.scenario.model_workloads import mlp_layers
from fred.scenario.schema.model import ModelSection
from fred.scenario.workloads import Layer


class LogisticModel(ModelSection):
    kind: Literal["logistic"] = "logistic"
    listed: ClassVar[int] = 10

    def sizes(self, feature_shape: tuple[int, ...], outputs: int) -> list[int]:
        """The widths of its layers, inputs first."""
        return [math.prod(feature_shape), outputs]

    def build(self, feature_shape: tuple[int, ...], outputs: int) -> Any:
        from fred.numerics import models

        width = self.activation_width(feature_shape, outputs)
        model = models.mlp(
            self.sizes(feature_shape, outputs), models.ACTIVATIONS["relu"]
        )  # one layer: none applied
        return model._replace(width=width)

    def layer_list(self, feature_shape: tuple[int, ...], outputs: int) -> list[Layer] | None:
        return mlp_layers(self.sizes(feature_shape, outputs))

    def activation_width(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        return max(self.sizes(feature_shape, outputs))
