"""The transformer model of the example zoo, written the way PyTorch exports an encoder.

Sits beside `examples/zoo.py`, which registers `transformer_encoder` by name. The graph
spells out what `torch.onnx.export` emits for `nn.TransformerEncoderLayer` at opset 17:
LayerNorm decomposed into ReduceMean/Sub/Pow/Sqrt/Div, attention as MatMul, Reshape and
Transpose with constant int64 shapes, and erf-GELU.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from vpuc.examples.graph_builder import GraphBuilder

SEQ_LEN = 16
D_MODEL = 32
HEADS = 2
HEAD_DIM = D_MODEL // HEADS
FFN_DIM = 64
LAYERS = 2


def _scalar(g: GraphBuilder, name: str, value: float) -> str:
    return g.constant(name, np.array(value, dtype=np.float32))


def _linear(g: GraphBuilder, x: str, prefix: str, in_features: int, out_features: int) -> str:
    """nn.Linear on a 3-D tensor: MatMul with a (in, out) constant, then Add bias."""
    weight = g.he_weight(f"{prefix}.weight", (in_features, out_features), in_features)
    y = g.op("MatMul", [x, weight], f"{prefix}/matmul")
    return g.op("Add", [y, g.small_bias(f"{prefix}.bias", out_features)], f"{prefix}/add")


def _layer_norm(g: GraphBuilder, x: str, prefix: str, output: str | None = None) -> str:
    # y = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * gamma + beta, over d_model
    mean = g.op("ReduceMean", [x], f"{prefix}/mean", axes=[-1], keepdims=1)
    centred = g.op("Sub", [x, mean], f"{prefix}/sub")
    squared = g.op("Pow", [centred, "const.two"], f"{prefix}/pow")
    variance = g.op("ReduceMean", [squared], f"{prefix}/var", axes=[-1], keepdims=1)
    shifted = g.op("Add", [variance, "const.ln_eps"], f"{prefix}/add_eps")
    std = g.op("Sqrt", [shifted], f"{prefix}/sqrt")
    normed = g.op("Div", [centred, std], f"{prefix}/div")
    gamma = g.rng.uniform(0.8, 1.2, D_MODEL).astype(np.float32)
    beta = (g.rng.standard_normal(D_MODEL) * 0.05).astype(np.float32)
    scaled = g.op("Mul", [normed, g.constant(f"{prefix}.weight", gamma)], f"{prefix}/mul")
    bias = g.constant(f"{prefix}.bias", beta)
    return g.op("Add", [scaled, bias], f"{prefix}/add", output=output)


def _split_heads(g: GraphBuilder, x: str, prefix: str) -> str:
    """(1, seq, d_model) -> Reshape (1, seq, heads, head_dim) -> Transpose (1, heads, seq, hd)."""
    y = g.op("Reshape", [x, "const.heads_shape"], f"{prefix}/reshape")
    return g.op("Transpose", [y], f"{prefix}/transpose", perm=[0, 2, 1, 3])


def _self_attention(g: GraphBuilder, x: str, prefix: str) -> str:
    # attn(x) = softmax(Q K^T / sqrt(head_dim)) V, per head, then the output projection
    q = _split_heads(g, _linear(g, x, f"{prefix}/q_proj", D_MODEL, D_MODEL), f"{prefix}/q")
    k = _split_heads(g, _linear(g, x, f"{prefix}/k_proj", D_MODEL, D_MODEL), f"{prefix}/k")
    v = _split_heads(g, _linear(g, x, f"{prefix}/v_proj", D_MODEL, D_MODEL), f"{prefix}/v")
    k_t = g.op("Transpose", [k], f"{prefix}/k_transpose", perm=[0, 1, 3, 2])
    scores = g.op("MatMul", [q, k_t], f"{prefix}/scores")
    scaled = g.op("Div", [scores, "const.sqrt_head_dim"], f"{prefix}/scale")
    weights = g.op("Softmax", [scaled], f"{prefix}/softmax", axis=-1)
    context = g.op("MatMul", [weights, v], f"{prefix}/context")
    merged = g.op("Transpose", [context], f"{prefix}/merge_transpose", perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [merged, "const.model_shape"], f"{prefix}/merge_reshape")
    return _linear(g, merged, f"{prefix}/out_proj", D_MODEL, D_MODEL)


def _feed_forward(g: GraphBuilder, x: str, prefix: str) -> str:
    # gelu(h) = 0.5 * h * (1 + erf(h / sqrt(2)))
    h = _linear(g, x, f"{prefix}/fc1", D_MODEL, FFN_DIM)
    erf_in = g.op("Div", [h, "const.sqrt_two"], f"{prefix}/gelu/div")
    erf = g.op("Erf", [erf_in], f"{prefix}/gelu/erf")
    erf_plus_one = g.op("Add", [erf, "const.one"], f"{prefix}/gelu/add")
    gated = g.op("Mul", [h, erf_plus_one], f"{prefix}/gelu/mul")
    gelu = g.op("Mul", [gated, "const.half"], f"{prefix}/gelu/mul_half")
    return _linear(g, gelu, f"{prefix}/fc2", FFN_DIM, D_MODEL)


def _encoder_layer(g: GraphBuilder, x: str, prefix: str, output: str | None = None) -> str:
    """Post-norm layer (PyTorch's default norm_first=False): x = LN(x + f(x)) twice."""
    attended = g.op("Add", [x, _self_attention(g, x, f"{prefix}/attn")], f"{prefix}/residual1")
    x = _layer_norm(g, attended, f"{prefix}/norm1")
    fed = g.op("Add", [x, _feed_forward(g, x, f"{prefix}/ffn")], f"{prefix}/residual2")
    return _layer_norm(g, fed, f"{prefix}/norm2", output=output)


def _shared_constants(g: GraphBuilder) -> None:
    g.constant("const.heads_shape", np.array([1, SEQ_LEN, HEADS, HEAD_DIM], dtype=np.int64))
    g.constant("const.model_shape", np.array([1, SEQ_LEN, D_MODEL], dtype=np.int64))
    _scalar(g, "const.sqrt_head_dim", math.sqrt(HEAD_DIM))
    _scalar(g, "const.sqrt_two", math.sqrt(2.0))
    _scalar(g, "const.two", 2.0)
    _scalar(g, "const.one", 1.0)
    _scalar(g, "const.half", 0.5)
    _scalar(g, "const.ln_eps", 1e-5)


def transformer_encoder() -> onnx.ModelProto:
    """Two post-norm encoder layers (2 heads, d_model 32, FFN 64, erf-GELU).

    input "tokens" 1x16x32 (batch, seq, d_model) -> layer0 -> layer1
    -> output "hidden" 1x16x32. Each layer: x = LN(x + MHA(x)); x = LN(x + FFN(x)).
    """
    g = GraphBuilder("transformer_encoder", seed=5)
    _shared_constants(g)
    x = "tokens"
    for layer in range(LAYERS):
        is_last = layer == LAYERS - 1
        x = _encoder_layer(g, x, f"layer{layer}", output="hidden" if is_last else None)
    shape = [1, SEQ_LEN, D_MODEL]
    return g.model({"tokens": shape}, {"hidden": shape}, doc=transformer_encoder.__doc__)
