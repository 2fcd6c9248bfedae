"""The ``model`` section: which model trains, one class per kind."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from fred.scenario.schema.base import Section, _absolute


class LogisticModel(Section):
    kind: Literal["logistic"] = "logistic"


MAX_LAYERS = 100  # compile time and memory grow with depth: 2,000 layers compiled for 20 minutes, to 24 GB


def _few_layers(layers: list[int]) -> list[int]:
    if len(layers) > MAX_LAYERS:
        raise ValueError(f"got {len(layers):,} layers; at most {MAX_LAYERS}: JAX compiles every layer of every "
                         "gradient program, and its time and memory grow with depth (2,000 layers: 20 minutes, 24 GB)")
    return layers


class MLPModel(Section):
    kind: Literal["mlp"] = "mlp"
    hidden: list[Annotated[int, Field(gt=0)]] = Field(default_factory=lambda: [64], description="hidden layer widths; at most 100 layers")
    activation: Literal["relu", "tanh", "sigmoid", "gelu"] = "relu"

    _layers = field_validator("hidden")(_few_layers)


class CNNModel(Section):
    kind: Literal["cnn"] = "cnn"
    channels: list[Annotated[int, Field(gt=0)]] = Field(default_factory=lambda: [8, 16], description="convolution layers' channels; at most 100 layers")
    kernel_size: Annotated[int, Field(gt=0)] = 3
    hidden: Annotated[int, Field(gt=0)] = 64

    _layers = field_validator("channels")(_few_layers)



RESNET_DEPTHS = tuple(range(8, 111, 6))  # 6n + 2: three stages of n basic blocks of two convolutions, a first one, a head


class ResNetModel(Section):
    """He et al.'s CIFAR ResNet: three stages of (depth - 2) / 6 basic blocks (docs/scenarios.md)."""

    kind: Literal["resnet"] = "resnet"
    depth: int = Field(default=20, description="20, 32, 44, 56 (or any 6n + 2 from 8 to 110): convolution layers + the head")
    width: Annotated[int, Field(ge=1, le=1024)] = Field(default=16, description="the first stage's channels (then 2x, 4x)")
    norm: Literal["group", "none"] = Field(default="group", description="group: GroupNorm, gcd(8, channels) groups, "
                                                                         "after every convolution; none: no normalisation")

    @field_validator("depth")
    @classmethod
    def _six_n_plus_two(cls, value: int) -> int:
        if value not in RESNET_DEPTHS:
            raise ValueError(f"got {value}; a CIFAR ResNet has 6n + 2 layers (three stages of n blocks of two "
                             "convolutions, a first convolution and the head): give 20, 32, 44 or 56 (any 6n + 2 "
                             "from 8 to 110)")
        return value


class TransformerModel(Section):
    """A small GPT-style decoder for next-token prediction (docs/scenarios.md)."""

    kind: Literal["transformer"] = "transformer"
    layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)] = Field(default=2, description="decoder blocks")
    d_model: Annotated[int, Field(ge=1, le=65536)] = Field(default=64, description="the width; the MLP's is 4 x d_model")
    heads: Annotated[int, Field(ge=1)] = Field(default=4, description="attention heads; they divide d_model")
    context: Annotated[int, Field(ge=1, le=65536)] | None = Field(
        default=None, description="positions it embeds (default: the data's sequence length, which it must not be below)")
    vocab: Annotated[int, Field(ge=2, le=10_000_000)] | None = Field(
        default=None, description="tokens it embeds and predicts (default: the data's vocabulary)")

    @model_validator(mode="after")
    def _heads_divide_the_width(self) -> "TransformerModel":
        if self.d_model % self.heads:
            fits = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            raise ValueError(f"heads {self.heads} do not divide d_model {self.d_model}: each head takes d_model / heads "
                             f"of the width; give heads one of {', '.join(map(str, fits))}, or another d_model")
        return self


IMPORT_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
LOSSES = ("cross_entropy", "mse")


class PythonModel(Section):
    """A model from the user's own code: ``factory`` is imported and called with ``args`` (running it)."""

    kind: Literal["python"] = "python"
    factory: str = Field(description="'package.module:function' returning a Flax (linen or NNX) module, "
                                      "an Equinox module, or a pair (init, apply) of functions")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the factory")
    loss: str | None = Field(default=None, description="cross_entropy, mse, or 'package.module:function' "
                                                        "(default: cross_entropy for class labels, mse for regression)")
    code_dir: str = Field(default_factory=os.getcwd, description="the folder searched last (after installed packages "
                          "and PYTHONPATH) for the modules of factory and loss; default: the scenario file's folder "
                          "(the working directory for a scenario built in Python); a relative one is taken from there")

    _code_dir_absolute = field_validator("code_dir")(_absolute)

    @field_validator("factory")
    @classmethod
    def _import_path(cls, value: str) -> str:
        if not _is_import_path(value):
            raise ValueError(f"got {value[:200]!r}; give 'package.module:function', e.g. 'mymodels:make_cnn'")
        return value

    @field_validator("loss")
    @classmethod
    def _loss_name(cls, value: str | None) -> str | None:
        if value is not None and value not in LOSSES and not _is_import_path(value):
            raise ValueError(f"got {value[:200]!r}; allowed: {', '.join(LOSSES)}, or 'package.module:function'")
        return value


def _is_import_path(value: str) -> bool:
    return re.fullmatch(IMPORT_PATH, value) is not None


ModelConfig = Annotated[Union[LogisticModel, MLPModel, CNNModel, ResNetModel, TransformerModel, PythonModel],
                        Field(discriminator="kind")]
