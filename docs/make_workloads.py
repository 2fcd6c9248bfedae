"""Derive fred's workload profiles from the models' architectures: ``fred/scenario/workloads.json``.

    python docs/make_workloads.py            # rewrites the file; tests/test_workloads.py checks it is current

Each model is written out layer by layer as its reference implementation builds it
(torchvision for the CNNs, Hugging Face transformers for BERT and GPT-2), with the
implementation's module names. A layer is one module with its parameters (a convolution,
a batch norm, a linear layer, an embedding, a layer norm), in forward order; the attention
products, which have no parameters, are a layer of their own. For each: its parameter
bytes in float32 and its forward FLOPs for one example.

FLOPs count 2 per multiply-add of convolutions, linear layers and the attention products,
plus 1 per output of a bias add. Normalisation, activations, pooling, softmax, residual adds
and embedding lookups count 0: element-wise work, memory-bound, under 1 % of the products.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

OUT = Path(__file__).resolve().parents[1] / "fred" / "scenario" / "workloads.json"
FLOAT32_BYTES = 4


class Layer(NamedTuple):
    name: str
    params: int
    forward_flops: int


# ----------------------------------------------------------------------------- building blocks
def conv(name: str, c_in: int, c_out: int, k: int, out_hw: int, bias: bool = False) -> Layer:
    outputs = c_out * out_hw * out_hw
    return Layer(
        name,
        c_in * c_out * k * k + (c_out if bias else 0),
        2 * c_in * k * k * outputs + (outputs if bias else 0),
    )


def batch_norm(name: str, channels: int) -> Layer:
    return Layer(name, 2 * channels, 0)  # weight and bias; the running statistics are buffers


def linear(name: str, n_in: int, n_out: int, tokens: int = 1) -> Layer:
    return Layer(name, n_in * n_out + n_out, tokens * (2 * n_in * n_out + n_out))


def embedding(name: str, rows: int, width: int) -> Layer:
    return Layer(name, rows * width, 0)


def layer_norm(name: str, width: int) -> Layer:
    return Layer(name, 2 * width, 0)


def attention_products(name: str, tokens: int, width: int) -> Layer:
    """Q K^T and the weighted sum of V over all heads, the full tokens x tokens square (a causal
    mask is applied to it, not used to skip it, in the reference implementations)."""
    return Layer(name, 0, 2 * (2 * tokens * tokens * width))


# ----------------------------------------------------------------------------- models
def resnet(blocks: tuple[int, int, int, int]) -> list[Layer]:
    """torchvision's ResNet with Bottleneck blocks (v1.5: the stride on the 3x3 convolution), 224x224
    input."""
    layers = [conv("conv1", 3, 64, 7, 112), batch_norm("bn1", 64)]  # then a 3x3 max pool, stride 2: 56x56
    c_in, hw = 64, 56
    for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
        for b in range(count):
            stride = 2 if stage > 1 and b == 0 else 1
            out_hw, prefix = hw // stride, f"layer{stage}.{b}"
            layers += [
                conv(f"{prefix}.conv1", c_in, width, 1, hw),
                batch_norm(f"{prefix}.bn1", width),
                conv(f"{prefix}.conv2", width, width, 3, out_hw),
                batch_norm(f"{prefix}.bn2", width),
                conv(f"{prefix}.conv3", width, 4 * width, 1, out_hw),
                batch_norm(f"{prefix}.bn3", 4 * width),
            ]
            if b == 0:
                layers += [
                    conv(f"{prefix}.downsample.0", c_in, 4 * width, 1, out_hw),
                    batch_norm(f"{prefix}.downsample.1", 4 * width),
                ]
            c_in, hw = 4 * width, out_hw
    return layers + [linear("fc", 2048, 1000)]  # after a global average pool


def vgg16() -> list[Layer]:
    """torchvision's vgg16 (configuration D, no batch norm), 224x224 input; names are Sequential indices."""
    config = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers, c_in, hw, index = [], 3, 224, 0
    for item in config:
        if item == "M":  # a 2x2 max pool
            hw, index = hw // 2, index + 1
            continue
        layers.append(conv(f"features.{index}", c_in, int(item), 3, hw, bias=True))
        c_in, index = int(item), index + 2  # the convolution and its ReLU
    return layers + [
        linear("classifier.0", 512 * 7 * 7, 4096),
        linear("classifier.3", 4096, 4096),
        linear("classifier.6", 4096, 1000),
    ]


def bert_base(tokens: int) -> list[Layer]:
    """Hugging Face BertModel for bert-base-uncased: the encoder and its pooler, one sequence of
    ``tokens``."""
    d, ff = 768, 3072
    layers = [
        embedding("embeddings.word_embeddings", 30522, d),
        embedding("embeddings.position_embeddings", 512, d),
        embedding("embeddings.token_type_embeddings", 2, d),
        layer_norm("embeddings.LayerNorm", d),
    ]
    for i in range(12):
        p = f"encoder.layer.{i}"
        layers += [
            linear(f"{p}.attention.self.query", d, d, tokens),
            linear(f"{p}.attention.self.key", d, d, tokens),
            linear(f"{p}.attention.self.value", d, d, tokens),
            attention_products(f"{p}.attention.self.products", tokens, d),
            linear(f"{p}.attention.output.dense", d, d, tokens),
            layer_norm(f"{p}.attention.output.LayerNorm", d),
            linear(f"{p}.intermediate.dense", d, ff, tokens),
            linear(f"{p}.output.dense", ff, d, tokens),
            layer_norm(f"{p}.output.LayerNorm", d),
        ]
    return layers + [linear("pooler.dense", d, d)]  # on the first token only


def gpt2_small(tokens: int) -> list[Layer]:
    """Hugging Face GPT2LMHeadModel for gpt2: its language-model head is the token embedding, reused."""
    d, ff, vocab = 768, 3072, 50257
    layers = [embedding("wte", vocab, d), embedding("wpe", 1024, d)]
    for i in range(12):
        p = f"h.{i}"
        layers += [
            layer_norm(f"{p}.ln_1", d),
            linear(f"{p}.attn.c_attn", d, 3 * d, tokens),
            attention_products(f"{p}.attn.products", tokens, d),
            linear(f"{p}.attn.c_proj", d, d, tokens),
            layer_norm(f"{p}.ln_2", d),
            linear(f"{p}.mlp.c_fc", d, ff, tokens),
            linear(f"{p}.mlp.c_proj", ff, d, tokens),
        ]
    head = Layer("lm_head", 0, tokens * 2 * d * vocab)  # tied to wte: its gradient is wte's, counted there
    return layers + [layer_norm("ln_f", d), head]


TORCHVISION = "torchvision.models ({0}.py), {1}; parameter count from the weights' documentation"
MODELS: dict[str, dict[str, Any]] = {
    "resnet50": {
        "title": "ResNet-50",
        "example": "one 224x224 RGB image",
        "layers": resnet((3, 4, 6, 3)),
        "published_params": 25.557032e6,
        "sources": [
            "He, Zhang, Ren and Sun, Deep Residual Learning for Image Recognition, CVPR 2016 (Table 1)",
            TORCHVISION.format("resnet", "resnet50: 25,557,032 parameters, 4.09 G multiply-adds"),
        ],
        # The rounded figures scenarios have always timed resnet50 with: 25.6 M parameters, and
        # 3 x 4.1 G per example where 4.1 G counts multiply-adds (half the FLOPs counted here).
        "scenario_totals": {"param_bytes": 102400000, "flops_per_example": 1.23e10},
    },
    "resnet101": {
        "title": "ResNet-101",
        "example": "one 224x224 RGB image",
        "layers": resnet((3, 4, 23, 3)),
        "published_params": 44.549160e6,
        "sources": [
            "He, Zhang, Ren and Sun, Deep Residual Learning for Image Recognition, CVPR 2016 (Table 1)",
            TORCHVISION.format("resnet", "resnet101: 44,549,160 parameters, 7.80 G multiply-adds"),
        ],
    },
    "vgg16": {
        "title": "VGG-16",
        "example": "one 224x224 RGB image",
        "layers": vgg16(),
        "published_params": 138.357544e6,
        "sources": [
            "Simonyan and Zisserman, Very Deep Convolutional Networks for Large-Scale Image Recognition, "
            "ICLR 2015 (configuration D, Table 2: 138 M)",
            TORCHVISION.format("vgg", "vgg16: 138,357,544 parameters, 15.47 G multiply-adds"),
        ],
    },
    "bert_base": {
        "title": "BERT-base",
        "example": "one sequence of 128 tokens",
        "layers": bert_base(128),
        "published_params": 110e6,
        "sources": [
            "Devlin, Chang, Lee and Toutanova, BERT: Pre-training of Deep Bidirectional Transformers for "
            "Language Understanding, NAACL 2019 (BERT-base: L=12, H=768, A=12, 110 M)",
            "Hugging Face transformers BertModel, bert-base-uncased config.json (vocab 30522, 512 positions, "
            "2 token types, intermediate 3072)",
        ],
    },
    "gpt2": {
        "title": "GPT-2 small",
        "example": "one sequence of 1,024 tokens",
        "layers": gpt2_small(1024),
        "published_params": 124e6,
        "sources": [
            "Radford et al., Language Models are Unsupervised Multitask Learners, 2019 (the smallest model: "
            "12 layers, d_model 768)",
            "Hugging Face transformers GPT2LMHeadModel, gpt2 config.json (vocab 50257, n_ctx 1024): "
            "124,439,808 parameters, as its model card gives (124 M)",
        ],
    },
}


def profiles() -> dict[str, Any]:
    """The file's content: every model's layers as ``[name, param_bytes, forward_flops]``."""
    workloads = {}
    for name, spec in MODELS.items():
        entry = {key: value for key, value in spec.items() if key != "layers"}
        entry["layers"] = [
            [layer.name, FLOAT32_BYTES * layer.params, layer.forward_flops] for layer in spec["layers"]
        ]
        workloads[name] = entry
    return {
        "generated_by": "docs/make_workloads.py",
        "counting": " ".join(__doc__.split("\n\n")[2:4]).replace("\n", " ").strip(),
        "workloads": workloads,
    }


def render() -> str:
    """The JSON text, one layer a line, so that a change reads as a diff of layers."""
    data = profiles()
    text = json.dumps(data, indent=1)
    for entry in data["workloads"].values():
        for layer in entry["layers"]:
            spread = json.dumps(layer, indent=1).replace("\n", "\n" + " " * 4)  # as indent=1 nests it
            text = text.replace(spread, json.dumps(layer), 1)
    return text + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    for name, entry in profiles()["workloads"].items():
        params = sum(layer[1] for layer in entry["layers"]) // FLOAT32_BYTES
        flops = sum(layer[2] for layer in entry["layers"])
        print(
            f"{name:10} {params:>12,} parameters  {flops / 1e9:8.2f} GFLOP forward per example  "
            f"{len(entry['layers'])} layers"
        )
