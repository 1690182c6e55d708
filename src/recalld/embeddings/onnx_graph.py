"""Build an ONNX graph of a BERT sentence encoder straight from its safetensors weights.

The graph covers the whole sentence-transformers pipeline, so one `session.run` turns token
ids into finished vectors: embeddings, the encoder layers, mean pooling over the attention mask
and L2 normalisation. Inputs are `input_ids` and `attention_mask` (int64, `[batch, seq]`); the
output is `embeddings` (float32, `[batch, hidden]`).

Nothing here needs torch or transformers; the graph is written with `onnx.helper` and is
meant to be built once and cached (see `recalld.embeddings.local`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

# LayerNormalization is a standard op from opset 17 on, and onnxruntime runs it natively.
OPSET = 17
# What transformers 4.8 (which trained this model) added to masked attention scores.
_MASK_BIAS = -10000.0

# onnxruntime's contrib operators (Attention).
MS_DOMAIN = "com.microsoft"

Weights = Mapping[str, npt.NDArray[Any]]


def attention_node_name(qkv: str) -> str:
    """The name of the fused `Attention` node whose QKV projection is `qkv`."""
    return f"{qkv}.attention"


def matmul_node_name(linear: str) -> str:
    """The name of the MatMul node of the linear layer `linear` (e.g. for `nodes_to_exclude`)."""
    return f"{linear}.matmul"


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT encoder, as read from a Hugging Face `config.json`."""

    num_layers: int
    num_heads: int
    hidden_size: int
    layer_norm_eps: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BertConfig:
        """Read the fields the graph needs; refuse anything but absolute positions and GELU."""
        if data.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"unsupported activation {data.get('hidden_act')!r}")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        return cls(
            num_layers=int(data["num_hidden_layers"]),
            num_heads=int(data["num_attention_heads"]),
            hidden_size=int(data["hidden_size"]),
            layer_norm_eps=float(data["layer_norm_eps"]),
        )


class _Builder:
    """Collects nodes and initializers, naming every output uniquely."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: npt.NDArray[Any]) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(
        self, op_type: str, inputs: list[str], output: str = "", name: str = "", **attrs: Any
    ) -> str:
        self._count += 1
        out = output or f"{op_type.lower()}_{self._count}"
        name = name or f"{op_type}_{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def linear(self, x: str, name: str, weight: npt.NDArray[Any], bias: npt.NDArray[Any]) -> str:
        # torch stores Linear weights as [out, in]; MatMul wants [in, out]. A constant B is what
        # onnxruntime's dynamic quantiser looks for, and it scales each output column on its own.
        w = self.const(f"{name}.weight_t", weight.T.astype(np.float32))
        product = self.op("MatMul", [x, w], name=matmul_node_name(name))
        return self.op("Add", [product, self.const(f"{name}.bias", bias)])

    def layer_norm(self, x: str, name: str, weights: Weights, eps: float) -> str:
        scale = self.const(f"{name}.weight", weights[f"{name}.weight"])
        bias = self.const(f"{name}.bias", weights[f"{name}.bias"])
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)


class _UnfusedAttention:
    """Self-attention in standard ops: the QKV product, Split, per-head Reshape and Transpose,
    the score MatMul with the mask bias, Softmax, the context MatMul and the merge back."""

    def __init__(self, g: _Builder, config: BertConfig, masked: str) -> None:
        self.g = g
        hidden, heads = config.hidden_size, config.num_heads
        self.split_heads = g.const("shape.split_heads", _i64(0, 0, heads, hidden // heads))
        self.merge_heads = g.const("shape.merge_heads", _i64(0, 0, hidden))
        self.qkv_sizes = g.const("shape.qkv_sizes", _i64(hidden, hidden, hidden))
        # `masked` (1 where padding) as an additive bias on the scores, [batch, 1, 1, seq].
        bias = g.op("Mul", [masked, g.const("const.mask_bias", _f32(_MASK_BIAS))])
        self.bias = g.op("Unsqueeze", [bias, g.const("axes.1_2", _i64(1, 2))])

    def __call__(self, x: str, name: str, qkv_w: npt.NDArray[Any], qkv_b: npt.NDArray[Any]) -> str:
        g = self.g
        qkv = g.linear(x, name, qkv_w, qkv_b)
        q, k, v = (f"{name}.q", f"{name}.k", f"{name}.v")
        g.nodes.append(
            helper.make_node(
                "Split", [qkv, self.qkv_sizes], [q, k, v], name=f"{name}.split", axis=-1
            )
        )
        qh = g.op("Transpose", [g.op("Reshape", [q, self.split_heads])], perm=[0, 2, 1, 3])
        kt = g.op("Transpose", [g.op("Reshape", [k, self.split_heads])], perm=[0, 2, 3, 1])
        vh = g.op("Transpose", [g.op("Reshape", [v, self.split_heads])], perm=[0, 2, 1, 3])
        scores = g.op("Add", [g.op("MatMul", [qh, kt]), self.bias])
        context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), vh])
        return g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), self.merge_heads])


class _FusedAttention:
    """Self-attention as one onnxruntime `Attention` node (com.microsoft), which the dynamic
    quantiser turns into `QAttention`: the same QKV product, scores, mask and softmax, without
    the Split, Reshape and Transpose nodes and their copies."""

    def __init__(self, g: _Builder, config: BertConfig) -> None:
        self.g = g
        self.heads = config.num_heads
        # A [batch, seq] mask of 1s and 0s; the op adds mask_filter_value where it is 0.
        self.mask_index = g.op("Cast", ["attention_mask"], to=TensorProto.INT32)

    def __call__(self, x: str, name: str, qkv_w: npt.NDArray[Any], qkv_b: npt.NDArray[Any]) -> str:
        g = self.g
        weight = g.const(f"{name}.weight_t", qkv_w.T.astype(np.float32))
        bias = g.const(f"{name}.bias", qkv_b.astype(np.float32))
        return g.op(
            "Attention",
            [x, weight, bias, self.mask_index],
            name=attention_node_name(name),
            domain=MS_DOMAIN,
            num_heads=self.heads,
            scale=1.0,  # 1/sqrt(head_dim) is folded into the query weights
            mask_filter_value=_MASK_BIAS,
        )


def _i64(*values: int) -> npt.NDArray[np.int64]:
    return np.array(values, dtype=np.int64)


def _f32(value: float) -> npt.NDArray[np.float32]:
    return np.array(value, dtype=np.float32)


def build_bert_graph(
    weights: Weights, config: BertConfig, *, attention_op: bool = False
) -> onnx.ModelProto:
    """Build the full encode-pool-normalise graph.

    Args:
        weights: The safetensors tensors of a `BertModel` (names as in `model.safetensors`).
        config: Layer count, heads, width and LayerNorm epsilon.
        attention_op: Each layer's self-attention as one onnxruntime `Attention` node
            (com.microsoft) instead of MatMul, Split, Reshape, Transpose and Softmax nodes.

    Returns:
        A checked ONNX model with inputs `input_ids`, `attention_mask` and output `embeddings`.
    """
    g = _Builder()
    hidden = config.hidden_size
    eps = config.layer_norm_eps

    # Constants shared by every layer.
    one = g.const("const.one", _f32(1.0))
    half = g.const("const.half", _f32(0.5))
    sqrt2 = g.const("const.sqrt2", _f32(math.sqrt(2.0)))

    # Embeddings. Every text is a single segment, so token_type_ids are all zero: row 0 of the
    # token-type table is folded into the position table instead of gathering it per token.
    words = g.op(
        "Gather",
        [g.const("embeddings.word", weights["embeddings.word_embeddings.weight"]), "input_ids"],
    )
    positions = (
        weights["embeddings.position_embeddings.weight"]
        + weights["embeddings.token_type_embeddings.weight"][0]
    )
    seq_len = g.op("Shape", ["input_ids"], start=1, end=2)
    pos = g.op(
        "Slice",
        [g.const("embeddings.position", positions), g.const("const.zero_1d", _i64(0)), seq_len],
    )
    x = g.layer_norm(g.op("Add", [words, pos]), "embeddings.LayerNorm", weights, eps)

    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    attention = (
        _FusedAttention(g, config)
        if attention_op
        else _UnfusedAttention(g, config, g.op("Sub", [one, mask]))
    )

    # Folding 1/sqrt(head_dim) into the query projection saves a Mul on every score matrix.
    scale = 1.0 / math.sqrt(hidden // config.num_heads)
    for i in range(config.num_layers):
        p = f"encoder.layer.{i}"
        att = f"{p}.attention.self"
        # One [hidden, 3*hidden] projection: one activation quantisation and one larger GEMM
        # instead of three.
        q_w, k_w, v_w = (weights[f"{att}.{n}.weight"] for n in ("query", "key", "value"))
        q_b, k_b, v_b = (weights[f"{att}.{n}.bias"] for n in ("query", "key", "value"))
        qkv_w = np.concatenate([q_w * scale, k_w, v_w])
        qkv_b = np.concatenate([q_b * scale, k_b, v_b])
        context = attention(x, f"{att}.qkv", qkv_w, qkv_b)
        out = f"{p}.attention.output"
        attended = g.linear(
            context, f"{out}.dense", weights[f"{out}.dense.weight"], weights[f"{out}.dense.bias"]
        )
        x = g.layer_norm(g.op("Add", [attended, x]), f"{out}.LayerNorm", weights, eps)

        inter = f"{p}.intermediate.dense"
        h = g.linear(x, inter, weights[f"{inter}.weight"], weights[f"{inter}.bias"])
        # Exact (erf) GELU, written in the shape onnxruntime's GeluFusion recognises.
        erf = g.op("Erf", [g.op("Div", [h, sqrt2])])
        h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [erf, one])]), half])
        dense = f"{p}.output.dense"
        h = g.linear(h, dense, weights[f"{dense}.weight"], weights[f"{dense}.bias"])
        x = g.layer_norm(g.op("Add", [h, x]), f"{p}.output.LayerNorm", weights, eps)

    # Mean pooling as a batched [1, seq] x [seq, hidden] product with the mask.
    mask_row = g.op("Unsqueeze", [mask, g.const("axes.1", _i64(1))])
    summed = g.op("MatMul", [mask_row, x])
    count = g.op("ReduceSum", [mask_row, g.const("axes.2", _i64(2))], keepdims=1)
    mean = g.op("Div", [summed, g.op("Max", [count, g.const("const.min_count", _f32(1e-9))])])
    # L2 normalisation with torch.nn.functional.normalize's epsilon.
    norm = g.op("ReduceL2", [mean], axes=[-1], keepdims=1)
    unit = g.op("Div", [mean, g.op("Max", [norm, g.const("const.min_norm", _f32(1e-12))])])
    g.op("Squeeze", [unit, g.const("axes.1b", _i64(1))], output="embeddings")

    graph = helper.make_graph(
        g.nodes,
        "bert_sentence_encoder",
        inputs=[
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        outputs=[helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", hidden])],
        initializer=g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)],
        producer_name="recalld",
    )
    model.ir_version = 8  # the newest IR that opset 17 runtimes are guaranteed to read
    onnx.checker.check_model(model)
    return model
