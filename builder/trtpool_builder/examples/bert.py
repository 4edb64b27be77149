"""`bert_base`: a BERT-base shaped encoder (post-LayerNorm, erf-GELU, additive mask).

Weights ~ N(0, 0.02) as in BERT's initialisation; LayerNorm scales are one and
biases zero. Options shrink it (`num_layers`, `hidden`, ...) for fast tests.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from trtpool_builder.examples.graph import FLOAT, INT64, GraphBuilder, tensor

MASK_VALUE = -10000.0  # finite, so an fp16 conversion of the graph stays finite too


class _BertWriter:
    def __init__(
        self,
        seed: int,
        num_layers: int,
        hidden: int,
        num_heads: int,
        intermediate: int,
        vocab_size: int,
        max_positions: int,
    ) -> None:
        if hidden % num_heads:
            raise ValueError(f"bert_base: hidden {hidden} is not divisible by num_heads {num_heads}")
        self.rng = np.random.default_rng(seed)
        self.g = GraphBuilder()
        self.num_layers, self.hidden, self.num_heads = num_layers, hidden, num_heads
        self.intermediate, self.vocab_size, self.max_positions = intermediate, vocab_size, max_positions

    def normal(self, name: str, *shape: int) -> str:
        value = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        return self.g.const(name, value)

    def dense(self, x: str, name: str, n_in: int, n_out: int) -> str:
        y = self.g.op("MatMul", [x, self.normal(f"{name}.weight", n_in, n_out)], f"{name}.MatMul")
        return self.g.op("Add", [y, self.normal(f"{name}.bias", n_out)], f"{name}.Add")

    def layer_norm(self, x: str, name: str) -> str:
        scale = self.g.const(f"{name}.weight", np.ones(self.hidden, np.float32))
        bias = self.g.const(f"{name}.bias", np.zeros(self.hidden, np.float32))
        return self.g.op("LayerNormalization", [x, scale, bias], f"{name}.LayerNormalization", axis=-1, epsilon=1e-12)

    def gelu(self, x: str, name: str) -> str:
        """x * 0.5 * (1 + erf(x / sqrt(2))): opset 17 has no Gelu operator."""
        g = self.g
        y = g.op("Div", [x, g.const(f"{name}.sqrt2", np.array(math.sqrt(2.0), np.float32))], f"{name}.Div")
        y = g.op("Erf", [y], f"{name}.Erf")
        y = g.op("Add", [y, g.const(f"{name}.one", np.array(1.0, np.float32))], f"{name}.Add")
        y = g.op("Mul", [x, y], f"{name}.Mul")
        return g.op("Mul", [y, g.const(f"{name}.half", np.array(0.5, np.float32))], f"{name}.Mul")

    def heads(self, x: str, name: str, key: bool = False) -> str:
        """[b, s, hidden] -> [b, heads, s, d] (keys: [b, heads, d, s])."""
        g, d = self.g, self.hidden // self.num_heads
        shape = g.const(f"{name}.split_shape", np.array([0, 0, self.num_heads, d], np.int64))
        y = g.op("Reshape", [x, shape], f"{name}.Reshape")
        return g.op("Transpose", [y], f"{name}.Transpose", perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])

    def attention(self, x: str, mask: str, name: str) -> str:
        g, h = self.g, self.hidden
        q = self.heads(self.dense(x, f"{name}.query", h, h), f"{name}.query")
        k = self.heads(self.dense(x, f"{name}.key", h, h), f"{name}.key", key=True)
        v = self.heads(self.dense(x, f"{name}.value", h, h), f"{name}.value")
        scores = g.op("MatMul", [q, k], f"{name}.scores.MatMul")
        scale = np.array(1.0 / math.sqrt(h // self.num_heads), np.float32)
        scores = g.op("Mul", [scores, g.const(f"{name}.scale", scale)], f"{name}.scores.Mul")
        scores = g.op("Add", [scores, mask], f"{name}.scores.Add")
        probs = g.op("Softmax", [scores], f"{name}.Softmax", axis=-1)
        context = g.op("MatMul", [probs, v], f"{name}.context.MatMul")
        context = g.op("Transpose", [context], f"{name}.context.Transpose", perm=[0, 2, 1, 3])
        merge = g.const(f"{name}.merge_shape", np.array([0, 0, h], np.int64))
        context = g.op("Reshape", [context, merge], f"{name}.context.Reshape")
        out = self.dense(context, f"{name}.output", h, h)
        return self.layer_norm(g.op("Add", [out, x], f"{name}.residual"), f"{name}.LayerNorm")

    def feed_forward(self, x: str, name: str) -> str:
        y = self.gelu(self.dense(x, f"{name}.intermediate", self.hidden, self.intermediate), f"{name}.gelu")
        y = self.dense(y, f"{name}.output", self.intermediate, self.hidden)
        return self.layer_norm(self.g.op("Add", [y, x], f"{name}.residual"), f"{name}.LayerNorm")

    def embeddings(self) -> str:
        g = self.g
        words = g.op(
            "Gather",
            [self.normal("embeddings.word", self.vocab_size, self.hidden), "input_ids"],
            "embeddings.word.Gather",
            axis=0,
        )
        seq_len = g.op("Shape", ["input_ids"], "embeddings.seq_len", start=1, end=2)
        zero = g.const("embeddings.zero", np.array([0], np.int64))
        positions = g.op(
            "Slice",
            [self.normal("embeddings.position", self.max_positions, self.hidden), zero, seq_len, zero],
            "embeddings.position.Slice",
        )
        x = g.op("Add", [words, positions], "embeddings.position.Add")
        # Token type 0 for every token: its embedding row is a constant vector.
        x = g.op("Add", [x, self.normal("embeddings.token_type", self.hidden)], "embeddings.token_type.Add")
        return self.layer_norm(x, "embeddings.LayerNorm")

    def additive_mask(self) -> str:
        """attention_mask [b, s] (1 = attend) -> (1 - mask) * -10000 as [b, 1, 1, s]."""
        g = self.g
        m = g.op("Cast", ["attention_mask"], "mask.Cast", to=FLOAT)
        m = g.op("Sub", [g.const("mask.one", np.array(1.0, np.float32)), m], "mask.Sub")
        m = g.op("Mul", [m, g.const("mask.value", np.array(MASK_VALUE, np.float32))], "mask.Mul")
        return g.op("Unsqueeze", [m, g.const("mask.axes", np.array([1, 2], np.int64))], "mask.Unsqueeze")

    def build(self) -> onnx.ModelProto:
        g = self.g
        mask = self.additive_mask()
        x = self.embeddings()
        for i in range(self.num_layers):
            name = f"encoder.layer{i}"
            x = self.feed_forward(self.attention(x, mask, f"{name}.attention"), f"{name}.ffn")
        x = g.output("Identity", [x], "last_hidden_state")
        first = g.op("Gather", [x, g.const("pooler.index", np.array(0, np.int64))], "pooler.Gather", axis=1)
        pooled = self.dense(first, "pooler.dense", self.hidden, self.hidden)
        g.output("Tanh", [pooled], "pooler_output")
        return g.model(
            "bert_base",
            [tensor("input_ids", INT64, ["batch", "sequence"]), tensor("attention_mask", INT64, ["batch", "sequence"])],
            [
                tensor("last_hidden_state", FLOAT, ["batch", "sequence", self.hidden]),
                tensor("pooler_output", FLOAT, ["batch", self.hidden]),
            ],
        )


def build_bert_base(
    seed: int = 0,
    num_layers: int = 12,
    hidden: int = 768,
    num_heads: int = 12,
    intermediate: int | None = None,
    vocab_size: int = 30522,
    max_positions: int = 512,
) -> onnx.ModelProto:
    """`intermediate` defaults to 4 * hidden (3072 for BERT-base)."""
    return _BertWriter(
        seed, num_layers, hidden, num_heads, intermediate or 4 * hidden, vocab_size, max_positions
    ).build()
