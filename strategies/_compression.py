"""The one ``compression:`` format every strategy reads: ``{kind: <codec>, <its settings>}``.

    compression: {kind: fp16}                   (pipe_sgd)  16 low mantissa bits zeroed, half the bytes
    compression: {kind: int8}                   (pipe_sgd)  256 levels per tensor, a quarter of the bytes
    outer_compression: {kind: e3m0}             (diloco, local_sgd)  4-bit floats, an eighth of the bytes
    compression: {kind: topk, ratio: 0.01}      (ssgd, arsgd)  top-k with error feedback
    compression: {kind: powersgd, rank: 4}      (ssgd, arsgd)  PowerSGD with error feedback

A bare kind is that kind with its defaults (``compression: topk``), and ``none`` (or leaving it
out) is no compression. Each strategy accepts the kinds its field's union names; another kind is
refused naming the field, the value and the allowed kinds. The names ``fp16_truncate`` and
``int8_quantize`` are deprecated aliases of ``{kind: fp16}`` and ``{kind: int8}``: they run the same
and warn (a :class:`DeprecationWarning`) naming the form to write instead. The codecs themselves are
:mod:`fred.numerics.codecs`.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import Field

from fred.numerics import codecs
from fred.scenario.schema import Section

DEPRECATED_KINDS = {"fp16_truncate": "fp16", "int8_quantize": "int8"}  # old name -> its kind


class CompressionDeprecationWarning(DeprecationWarning):
    """A deprecated ``compression:`` name; shown by default (Python hides other DeprecationWarnings
    outside ``__main__``, so ``fred run`` would not say it)."""


warnings.filterwarnings("default", category=CompressionDeprecationWarning)


class FP16(Section):
    """Every float32 sent as its high 16 bits (a bfloat16 on the wire): half the bytes."""

    kind: Literal["fp16"] = "fp16"


class Int8(Section):
    """Each tensor mapped onto 256 levels between its min and max: a quarter of the bytes, and min and max."""

    kind: Literal["int8"] = "int8"


class E3M0(Section):
    """Each value a 4-bit float (sign, 3 exponent bits, no mantissa) times its tensor's largest
    magnitude: an eighth of the bytes, and a float32 scale per tensor (Streaming DiLoCo's)."""

    kind: Literal["e3m0"] = "e3m0"


class TopK(Section):
    """Top-k sparsification with error feedback: each tensor's ceil(ratio n) largest entries, all-gathered."""

    kind: Literal["topk"] = "topk"
    ratio: float = Field(
        default=0.01,
        gt=0,
        le=1,
        description="the fraction of each tensor's entries sent: "
        "k = ceil(ratio n) (value and int32 index, 8 bytes each); 1 sends everything",
    )


class PowerSGD(Section):
    """PowerSGD: each matrix's rank-r approximation by one warm-started power-iteration step."""

    kind: Literal["powersgd"] = "powersgd"
    rank: int = Field(
        default=4,
        ge=1,
        description="r; a matrix of smaller min(rows, cols) uses that, and a "
        "rank above every matrix's is refused",
    )


def compression_by_kind(value: Any) -> Any:
    """A field validator (``mode="before"``): ``none`` is None, a bare kind is ``{kind: ...}``, and a
    deprecated name is its kind, with a warning naming the new form."""
    if value == "none":
        return None
    if isinstance(value, str) and value in DEPRECATED_KINDS:
        kind = DEPRECATED_KINDS[value]
        warnings.warn(
            f"strategy.compression: {value} is deprecated; write compression: {{kind: {kind}}}",
            CompressionDeprecationWarning,
            stacklevel=2,
        )
        return {"kind": kind}
    return {"kind": value} if isinstance(value, str) else value


def quantizer(compression: FP16 | Int8 | E3M0) -> codecs.Quantizer:
    """The stateless codec a ``{kind: fp16}``, ``{kind: int8}`` or ``{kind: e3m0}`` section names."""
    return codecs.QUANTIZERS[compression.kind]()
