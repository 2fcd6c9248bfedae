"""He et al.'s CIFAR ResNet (docs/scenarios.md): the ``model`` section, its layers and memory
figures; the network itself is :mod:`fred.numerics.resnet`.

Its layers are named as its parameters' keys begin (``layer2.0.conv1`` holds ``layer2.0.conv1.w``):
3x3 convolutions without bias (padding 1), a norm after each (or none), option-A shortcuts (no
parameters), a dense head after a global average pool.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from fred.scenario.errors import Refusal
from fred.scenario.model_workloads import conv, dense, norm
from fred.scenario.schema.model import Inputs, ModelSection
from fred.scenario.workloads import Layer

RESNET_DEPTHS = tuple(
    range(8, 111, 6)
)  # 6n + 2: three stages of n basic blocks of two convolutions, a first one, a head
STORED_PER_OUTPUT = (
    6  # floats a training step holds per convolution output: measured on CPU (ResNet-20, 256 rows)
)
TILE_EQUATIONS_PER_LAYER = (
    76  # jaxpr equations of one tile's gradient a layer, about (JAX 0.10; ResNet-20's tile: 1,528)
)


class ResNetModel(ModelSection):
    """He et al.'s CIFAR ResNet: three stages of (depth - 2) / 6 basic blocks (docs/scenarios.md)."""

    kind: Literal["resnet"] = "resnet"
    depth: int = Field(
        default=20, description="20, 32, 44, 56 (or any 6n + 2 from 8 to 110): convolution layers + the head"
    )
    width: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=16, description="the first stage's channels (then 2x, 4x)"
    )
    norm: Literal["group", "none"] = Field(
        default="group",
        description="group: GroupNorm, gcd(8, channels) groups, "
        "after every convolution; none: no normalisation",
    )
    listed: ClassVar[int] = 40
    inputs: ClassVar[Inputs] = "images"

    @field_validator("depth")
    @classmethod
    def _six_n_plus_two(cls, value: int) -> int:
        if value not in RESNET_DEPTHS:
            raise Refusal(
                f"got {value}; a CIFAR ResNet has 6n + 2 layers (three stages of n blocks of two "
                "convolutions, a first convolution and the head): give 20, 32, 44 or 56 (any 6n + 2 "
                "from 8 to 110)"
            )
        return value

    def build(self, feature_shape: tuple[int, ...], outputs: int) -> Any:
        from fred.numerics import models, resnet

        if len(feature_shape) != 3:
            raise Refusal(
                f"model 'resnet' needs image data of shape (H, W, C); this data set has {feature_shape}"
            )
        init, apply = resnet.build(self.depth, self.width, self.norm == "group", feature_shape, outputs)
        return models.Model(init, apply, width=self.activation_width(feature_shape, outputs))

    def takes(self, feature_shape: tuple[int, ...]) -> bool:
        return len(feature_shape) == 3

    def convolutions(self, feature_shape: tuple[int, ...]) -> list[tuple[str, int, int, int]]:
        """(name, input channels, output channels, output pixels) of every convolution, in forward
        order, for images of ``feature_shape`` ``(H, W, C)``."""
        height, width_px, channels = feature_shape
        found = [("conv1", channels, self.width, height * width_px)]
        c_in = self.width
        for stage in range(3):
            c_out = self.width << stage
            for b in range((self.depth - 2) // 6):
                stride = 2 if stage > 0 and b == 0 else 1
                # padding 1: ceil(size / stride)
                height, width_px = -(-height // stride), -(-width_px // stride)
                for i, c in ((1, c_in), (2, c_out)):
                    found.append((f"layer{stage + 1}.{b}.conv{i}", c, c_out, height * width_px))
                c_in = c_out
        return found

    def layer_list(self, feature_shape: tuple[int, ...], outputs: int) -> list[Layer] | None:
        if len(feature_shape) != 3:
            return None
        layers = []
        for name, c_in, c_out, pixels in self.convolutions(feature_shape):
            layers.append(conv(name, c_in, c_out, 3, pixels))
            if self.norm == "group":
                layers.append(norm(name[: -len("conv1")] + "norm" + name[-1], c_out))
        return layers + [dense("fc", self.width << 2, outputs)]  # after a global average pool

    def activation_width(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        """With its GroupNorm's temporary: twice the first stage's activations (XLA's convolutions
        do not lay out a layer's 3x3 patches)."""
        if len(feature_shape) != 3:
            return 0
        pixels = feature_shape[0] * feature_shape[1]
        return 2 * pixels * max(self.width, feature_shape[2])

    def stored_floats(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        """A few per convolution output (the output, its normalisation and activation, their gradients)."""
        if len(feature_shape) != 3:
            return 0
        outputs_per_example = sum(pixels * c_out for _, _, c_out, pixels in self.convolutions(feature_shape))
        return STORED_PER_OUTPUT * outputs_per_example

    def tile_equations(self) -> int:
        return TILE_EQUATIONS_PER_LAYER * self.depth
