"""A small GPT-style decoder for next-token prediction (GPT-2's architecture, Radford et al. 2019).

Token and learned positional embeddings; ``layers`` pre-LayerNorm blocks, each causal
multi-head self-attention (``heads`` heads of ``d_model / heads``) and an MLP of ``4 d_model``
with GELU (tanh approximation), both added to the residual stream; a final LayerNorm, and the
output projection. The embeddings are tied, as GPT-2's: the output projection is the token
embedding transposed (no bias), so a token's gradient reaches its one matrix from both ends
and the model holds ``vocab x d_model`` parameters once. LayerNorm's epsilon is 1e-5.

For a batch of token sequences ``(N, T)`` (integers below ``vocab``) it gives ``(N, T, vocab)``
logits, position ``t`` predicting token ``t + 1`` from tokens ``0..t`` alone: an example's
outputs are its own. GPT-2's initialisation: weights Normal(0, 0.02), the two projections that
write to the residual stream Normal(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorm's scales 1
and shifts 0; from the key given. Parameters are a flat dict named as the layers of the
``transformer`` model kind (:mod:`fred.models.transformer`), which also holds the network's
configuration and memory figures: ``wte``, ``wpe``, ``h.0.ln_1.scale``, ``h.0.attn.c_attn.w``,
..., ``ln_f.bias``.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import jax
import jax.numpy as jnp

from fred.numerics.models import Params

INIT_STD = 0.02
EPSILON = 1e-5


def build(layers: int, d: int, heads: int, positions: int, vocab: int) -> tuple[Callable, Callable]:
    """``(init, apply)`` of the decoder of ``layers`` blocks of width ``d`` and ``heads`` heads that
    embeds ``positions`` positions and ``vocab`` tokens, for sequences ``(N, T)`` of at most
    ``positions`` tokens below ``vocab``."""
    shapes = _shapes(d, layers, positions, vocab)

    def init(key: jax.Array) -> Params:
        # One draw for every weight, cut in forward order: one random program to compile.
        drawn = [(name, shape) for name, shape in shapes if not name.endswith((".scale", ".b", ".bias"))]
        sizes = [math.prod(shape) for _, shape in drawn]
        normals = jax.random.normal(key, (sum(sizes),), jnp.float32)
        params: Params = {}
        for (name, shape), start, size in zip(drawn, itertools.accumulate([0, *sizes]), sizes):
            std = INIT_STD / math.sqrt(2 * layers) if name.endswith("c_proj.w") else INIT_STD
            params[name] = normals[start : start + size].reshape(shape) * std
        for name, shape in shapes:
            if name.endswith(".scale"):
                params[name] = jnp.ones(shape, jnp.float32)
            elif name.endswith((".b", ".bias")):
                params[name] = jnp.zeros(shape, jnp.float32)
        return params

    def apply(params: Params, x: jax.Array) -> jax.Array:
        t = x.shape[1]
        h = params["wte"][x] + params["wpe"][:t]
        causal = jnp.tril(jnp.ones((t, t), bool))
        for i in range(layers):
            p = f"h.{i}"
            h = h + _attention(params, p, _layer_norm(params, f"{p}.ln_1", h), heads, causal)
            m = jax.nn.gelu(_dense(params, f"{p}.mlp.c_fc", _layer_norm(params, f"{p}.ln_2", h)))
            h = h + _dense(params, f"{p}.mlp.c_proj", m)
        return _layer_norm(params, "ln_f", h) @ params["wte"].T

    return jax.jit(init), apply  # one compiled program draws them all (eagerly: one per shape)


def _shapes(d: int, layers: int, positions: int, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every parameter's name and shape, in forward order."""
    shapes: list[tuple[str, tuple[int, ...]]] = [("wte", (vocab, d)), ("wpe", (positions, d))]
    norm = lambda name: [(f"{name}.scale", (d,)), (f"{name}.bias", (d,))]
    dense = lambda name, n_in, n_out: [(f"{name}.w", (n_in, n_out)), (f"{name}.b", (n_out,))]
    for i in range(layers):
        p = f"h.{i}"
        shapes += [
            *norm(f"{p}.ln_1"),
            *dense(f"{p}.attn.c_attn", d, 3 * d),
            *dense(f"{p}.attn.c_proj", d, d),
            *norm(f"{p}.ln_2"),
            *dense(f"{p}.mlp.c_fc", d, 4 * d),
            *dense(f"{p}.mlp.c_proj", 4 * d, d),
        ]
    return shapes + norm("ln_f")


def _dense(params: Params, name: str, x: jax.Array) -> jax.Array:
    return x @ params[f"{name}.w"] + params[f"{name}.b"]


def _layer_norm(params: Params, name: str, x: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    var = jnp.mean(jnp.square(centred), axis=-1, keepdims=True)
    return centred * jax.lax.rsqrt(var + EPSILON) * params[f"{name}.scale"] + params[f"{name}.bias"]


def _attention(params: Params, prefix: str, x: jax.Array, heads: int, causal: jax.Array) -> jax.Array:
    n, t, d = x.shape
    q, k, v = jnp.split(
        _dense(params, f"{prefix}.attn.c_attn", x).reshape(n, t, 3 * heads, d // heads), 3, axis=2
    )
    scores = jnp.einsum("nthd,nshd->nhts", q, k) / math.sqrt(d // heads)
    weights = jax.nn.softmax(jnp.where(causal, scores, jnp.finfo(scores.dtype).min), axis=-1)
    return _dense(params, f"{prefix}.attn.c_proj", jnp.einsum("nhts,nshd->nthd", weights, v).reshape(n, t, d))
