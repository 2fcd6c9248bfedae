"""The multi-layer perceptron: dense layers over the flattened input, an activation between them."""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from fred.scenario.model_workloads import mlp_layers
from fred.scenario.schema.model import ModelSection, _few_layers
from fred.scenario.workloads import Layer

# Jaxpr equations of one tile's gradient (Numerics.tiles_per_program counts them), counted for JAX 0.10
TILE_EQUATIONS, TILE_EQUATIONS_PER_LAYER = 49, 21  # and this many more a hidden layer


class MLPModel(ModelSection):
    kind: Literal["mlp"] = "mlp"
    hidden: list[Annotated[int, Field(gt=0)]] = Field(
        default_factory=lambda: [64], description="hidden layer widths; at most 100 layers"
    )
    activation: Literal["relu", "tanh", "sigmoid", "gelu"] = "relu"
    listed: ClassVar[int] = 20
    default: ClassVar[bool] = True

    _layers = field_validator("hidden")(_few_layers)

    def sizes(self, feature_shape: tuple[int, ...], outputs: int) -> list[int]:
        """The widths of its layers, inputs first."""
        return [math.prod(feature_shape), *self.hidden, outputs]

    def build(self, feature_shape: tuple[int, ...], outputs: int) -> Any:
        from fred.numerics import models

        width = self.activation_width(feature_shape, outputs)
        model = models.mlp(self.sizes(feature_shape, outputs), models.ACTIVATIONS[self.activation])
        return model._replace(width=width)

    def layer_list(self, feature_shape: tuple[int, ...], outputs: int) -> list[Layer] | None:
        return mlp_layers(self.sizes(feature_shape, outputs))

    def activation_width(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        return max(self.sizes(feature_shape, outputs))

    def program_layers(self) -> int:
        return 1 + len(self.hidden)

    def hidden_units(self) -> list[int]:
        return list(self.hidden)

    def tile_equations(self) -> int:
        return TILE_EQUATIONS + TILE_EQUATIONS_PER_LAYER * len(self.hidden)
