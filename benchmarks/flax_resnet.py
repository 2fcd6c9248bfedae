"""A bring-your-own model for ``realistic.py``: He et al.'s CIFAR ResNet-20 written in Flax linen, as a
user would write it (GroupNorm, option-A shortcuts), for ``model: {kind: python, factory:
"flax_resnet:resnet20"}``.

:data:`TRACES` counts how often Python runs the network's ``__call__``: once per trace of the
model (``init``, ``apply``, ``eval_shape``, ``make_jaxpr``, each compilation), so the benchmark
tells how many times a run traces the user's code.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

TRACES = [0]  # calls of ResNet20.__call__ in this process


class Block(nn.Module):
    """Two 3x3 convolutions with GroupNorm; the shortcut halves the image and pads the channels
    with zeros where the block strides (option A: no parameters)."""

    channels: int
    stride: int

    @nn.compact
    def __call__(self, x):
        y = nn.Conv(self.channels, (3, 3), (self.stride, self.stride), padding=1, use_bias=False)(x)
        y = nn.relu(nn.GroupNorm(num_groups=8)(y))
        y = nn.Conv(self.channels, (3, 3), padding=1, use_bias=False)(y)
        y = nn.GroupNorm(num_groups=8)(y)
        if self.stride != 1:
            x = x[:, ::2, ::2, :]
            extra = self.channels - x.shape[-1]
            x = jnp.pad(x, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
        return nn.relu(x + y)


class ResNet20(nn.Module):
    outputs: int

    @nn.compact
    def __call__(self, x):
        TRACES[0] += 1
        x = nn.Conv(16, (3, 3), padding=1, use_bias=False)(x)
        x = nn.relu(nn.GroupNorm(num_groups=8)(x))
        for stage, channels in enumerate((16, 32, 64)):
            for block in range(3):
                x = Block(channels, 2 if stage and not block else 1)(x)
        return nn.Dense(self.outputs)(jnp.mean(x, axis=(1, 2)))


def resnet20(outputs: int) -> ResNet20:
    """The factory a scenario names: ``outputs`` classes (fred passes the data's)."""
    return ResNet20(outputs)
