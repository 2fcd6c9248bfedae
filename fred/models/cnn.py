"""The small convolutional network: 'SAME' convolutions of stride 1 with a bias and ReLU, then a
dense hidden layer and the outputs (the head's parameters are named ``x_dense0_w``, ...)."""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from fred.scenario.errors import Refusal
from fred.scenario.model_workloads import conv, mlp_layers
from fred.scenario.schema.model import Inputs, ModelSection, _few_layers
from fred.scenario.workloads import Layer

# Jaxpr equations of one tile's gradient (Numerics.tiles_per_program counts them), counted for JAX 0.10
TILE_EQUATIONS, TILE_EQUATIONS_PER_CONVOLUTION = 68, 25  # and this many more a convolution


class CNNModel(ModelSection):
    kind: Literal["cnn"] = "cnn"
    channels: list[Annotated[int, Field(gt=0)]] = Field(
        default_factory=lambda: [8, 16], description="convolution layers' channels; at most 100 layers"
    )
    kernel_size: Annotated[int, Field(gt=0)] = 3
    hidden: Annotated[int, Field(gt=0)] = 64
    listed: ClassVar[int] = 30
    inputs: ClassVar[Inputs] = "images"

    _layers = field_validator("channels")(_few_layers)

    def build(self, feature_shape: tuple[int, ...], outputs: int) -> Any:
        from fred.numerics import models

        width = self.activation_width(feature_shape, outputs)
        if len(feature_shape) != 3:
            raise Refusal(
                f"model 'cnn' needs image data of shape (H, W, C); this data set has {feature_shape}"
            )
        height, width_px, _ = feature_shape
        k = self.kernel_size
        if k > max(height, width_px):  # a larger kernel only multiplies padding, and its memory
            raise Refusal(
                f"model.kernel_size is {k} but the images are {height} x {width_px}: use at "
                f"most {max(height, width_px)}"
            )
        return models.conv_net(self.channels, k, self.hidden, feature_shape, outputs)._replace(width=width)

    def takes(self, feature_shape: tuple[int, ...]) -> bool:
        return len(feature_shape) == 3 and self.kernel_size <= max(feature_shape[:2])

    def layer_list(self, feature_shape: tuple[int, ...], outputs: int) -> list[Layer] | None:
        if len(feature_shape) != 3:
            return None
        height, width, c_in = feature_shape
        chans = [c_in, *self.channels]
        convs = [
            conv(f"conv{i}", a, b, self.kernel_size, height * width, bias=True)
            for i, (a, b) in enumerate(zip(chans, chans[1:]))
        ]
        return convs + mlp_layers([height * width * chans[-1], self.hidden, outputs], "x_dense")

    def activation_width(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        """A convolution's is its patches: kernel_size² × channels at every pixel."""
        pixels = math.prod(feature_shape[:-1]) if len(feature_shape) == 3 else 1
        chans = [feature_shape[-1], *self.channels]
        return max(pixels * self.kernel_size**2 * max(chans), math.prod(feature_shape), self.hidden, outputs)

    def program_layers(self) -> int:
        return 1 + len(self.channels) + 1

    def tile_equations(self) -> int:
        return TILE_EQUATIONS + TILE_EQUATIONS_PER_CONVOLUTION * len(self.channels)
