"""A small GPT-style decoder for next-token prediction (docs/scenarios.md): the ``model`` section,
its layers and memory figures; the network itself is :mod:`fred.numerics.transformer`.

Its layers are GPT-2's modules and names; its head is the token embedding, transposed, so it
holds FLOPs and no bytes of its own.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from fred.scenario import model_workloads
from fred.scenario.errors import Refusal
from fred.scenario.model_workloads import dense, layer, norm
from fred.scenario.schema.data import SEQUENCE_SOURCES
from fred.scenario.schema.model import MAX_LAYERS, Inputs, ModelSection
from fred.scenario.workloads import Layer

# Floats one sequence's training step holds for its backward pass, roughly: per block the residual
# stream's values (this many of width d_model a token) and three attention maps, then three times
# the logits; all scaled as measured on CPU.
STORED_PER_TOKEN, STORED_SCALE = 16, 1.5


class TransformerModel(ModelSection):
    """A small GPT-style decoder for next-token prediction (docs/scenarios.md)."""

    kind: Literal["transformer"] = "transformer"
    layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)] = Field(default=2, description="decoder blocks")
    d_model: Annotated[int, Field(ge=1, le=65536)] = Field(
        default=64, description="the width; the MLP's is 4 x d_model"
    )
    heads: Annotated[int, Field(ge=1)] = Field(default=4, description="attention heads; they divide d_model")
    context: Annotated[int, Field(ge=1, le=65536)] | None = Field(
        default=None,
        description="positions it embeds (default: the data's sequence length, which it must not be below)",
    )
    vocab: Annotated[int, Field(ge=2, le=10_000_000)] | None = Field(
        default=None, description="tokens it embeds and predicts (default: the data's vocabulary)"
    )
    listed: ClassVar[int] = 50
    inputs: ClassVar[Inputs] = "sequences"

    @model_validator(mode="after")
    def _heads_divide_the_width(self) -> "TransformerModel":
        if self.d_model % self.heads:
            fits = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            raise Refusal(
                f"heads {self.heads} do not divide d_model {self.d_model}: each head takes d_model / heads "
                f"of the width; give heads one of {', '.join(map(str, fits))}, or another d_model"
            )
        return self

    def build(self, feature_shape: tuple[int, ...], outputs: int) -> Any:
        """The decoder for sequences of ``feature_shape`` ``(T,)`` whose tokens are below ``outputs``
        (the data's vocabulary, the default ``vocab``)."""
        from fred.numerics import models, transformer

        if len(feature_shape) != 1:
            raise Refusal(
                f"model 'transformer' needs token sequences of shape (T,); this data set has {feature_shape}"
            )
        tokens = feature_shape[0]
        positions, vocab = self.context or tokens, self.vocab or outputs
        if positions < tokens:
            raise Refusal(
                f"model.context {positions} is shorter than the data's sequences of {tokens} tokens; give "
                f"model.context at least {tokens}, or leave it out"
            )
        if vocab < outputs:
            raise Refusal(
                f"model.vocab {vocab} is smaller than the data's {outputs} tokens: every token needs its "
                f"embedding; give model.vocab at least {outputs}, or leave it out"
            )
        init, apply = transformer.build(self.layers, self.d_model, self.heads, positions, vocab)
        return models.Model(init, apply, width=self.activation_width(feature_shape, outputs))

    def takes(self, feature_shape: tuple[int, ...]) -> bool:
        return len(feature_shape) == 1

    def layer_list(self, feature_shape: tuple[int, ...], outputs: int) -> list[Layer] | None:
        if len(feature_shape) != 1:
            return None
        tokens, d = feature_shape[0], self.d_model
        positions, vocab = self.context or tokens, self.vocab or outputs
        found = [layer("wte", vocab * d, 0), layer("wpe", positions * d, 0)]
        for i in range(self.layers):
            p = f"h.{i}"
            found += [
                norm(f"{p}.ln_1", d),
                dense(f"{p}.attn.c_attn", d, 3 * d, tokens),
                layer(
                    f"{p}.attn.products", 0, 2 * (2 * tokens * tokens * d)
                ),  # Q K^T and the weighted V: the full square
                dense(f"{p}.attn.c_proj", d, d, tokens),
                norm(f"{p}.ln_2", d),
                dense(f"{p}.mlp.c_fc", d, 4 * d, tokens),
                dense(f"{p}.mlp.c_proj", 4 * d, d, tokens),
            ]
        return found + [norm("ln_f", d), layer("lm_head", 0, tokens * 2 * d * vocab)]

    def activation_width(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        """The attention scores, the MLP's hidden layer or the logits, whichever is largest."""
        if len(feature_shape) != 1:
            return 0
        t, d = feature_shape[0], self.d_model
        return max(self.heads * t * t, 4 * d * t, (self.vocab or outputs) * t)

    def stored_floats(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        if len(feature_shape) != 1:
            return 0
        t, d = feature_shape[0], self.d_model
        per_block = STORED_PER_TOKEN * t * d + 3 * self.heads * t * t
        return int(STORED_SCALE * (self.layers * per_block + 3 * t * (self.vocab or outputs)))

    def check_data(self, data: Any) -> None:
        source = data.source
        if source.kind not in SEQUENCE_SOURCES:
            raise Refusal(
                f"model.kind {self.kind} predicts the next token of token sequences; "
                f"data.source.kind {source.kind} has none: use data.source.kind text or synthetic_tokens"
            )
        if self.context is not None and self.context < source.context:
            raise Refusal(
                f"model.context {self.context} is shorter than the data's sequences (data.source.context "
                f"{source.context}): the model embeds positions up to its context; give model.context at "
                f"least {source.context}, or leave it out"
            )
        if self.vocab is not None:
            declared = model_workloads.declared_shape(source, None)
            if declared is not None and self.vocab < declared[1]:
                raise Refusal(
                    f"model.vocab {self.vocab} is smaller than the data's {declared[1]} tokens: every "
                    f"token must have an embedding; give model.vocab at least {declared[1]}, or leave it out"
                )
