"""A MiniLM-class sentence encoder, written the way PyTorch exports sentence-transformers.

Sits beside the example zoo (examples/zoo.py) but is not one of its models: it takes
integer inputs (token ids, an attention mask), so it needs realistic feeds
(`realistic_feeds`), and it is the quantiser's hard case (docs/quantization.md, "Accuracy
floor"). The graph is what `torch.onnx.export` emits at opset 17 for a BERT-style
post-norm encoder (all-MiniLM-L6-v2 at a smaller width) followed by mean pooling and L2
normalisation:

    input_ids, token_type_ids  -> Gather (word, type embeddings) + position embeddings
                               -> LayerNorm -> LAYERS x [x = LN(x + MHA(x)); x = LN(x + FFN(x))]
    attention_mask             -> (1 - mask) * finfo(float32).min added to every score row;
                                  mean pooling over the unmasked tokens
    -> mean pooling -> x / max(|x|, 1e-12) -> "sentence_embedding" 1 x HIDDEN

Trained BERT-family encoders carry a few outlier dimensions in their residual stream
(Bondarenko et al., 2021; Dettmers et al., 2022): LayerNorm weights tens of times larger
than the rest on those dimensions, and FFN outputs that write large values into them.
The weights here are seeded random with that structure built in (OUTLIER_DIMS), because it
is what makes per-tensor int8 collapse on such models.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from vpuc.examples.graph_builder import DEFAULT_IR_VERSION, DEFAULT_OPSET, GraphBuilder

VOCAB = 2048
TYPES = 2
SEQ_LEN = 32
HIDDEN = 128
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
FFN_DIM = 512
LAYERS = 4
OUTLIER_DIMS = (17, 90)  # residual-stream dimensions with outlier LayerNorm weights
OUTLIER_GAIN = 8.0  # LayerNorm weight on those dimensions (the rest ~ 1)
MARKER_DIM = 5  # the [SEP] embedding is large here
DELIMITER_OUTLIER = 240.0  # what the FFN writes into the outlier dims on [SEP]
FINAL_OUTLIER_GAIN = 0.02  # ... except in the last LayerNorm
PAD_ID, CLS_ID, SEP_ID = 0, 101, 102


def _linear(g: GraphBuilder, x: str, prefix: str, n_in: int, n_out: int, delimiter_unit: bool = False) -> str:
    """nn.Linear on (1, seq, n_in): MatMul by a (n_in, n_out) constant, then Add bias.
    `delimiter_unit`: FFN unit 0 fires on delimiter tokens only (first dense: reads the
    marker and outlier dimensions; second dense: writes DELIMITER_OUTLIER into the
    outlier dimensions), the mechanism by which BERT-family models put huge values on
    [SEP] in a few residual dimensions."""
    weight = g.rng.standard_normal((n_in, n_out)) * math.sqrt(1.0 / n_in)
    bias = g.rng.standard_normal(n_out) * 0.05
    if delimiter_unit and n_out == FFN_DIM:
        weight[:, 0] = 0.0
        weight[MARKER_DIM, 0], weight[list(OUTLIER_DIMS), 0] = 1.0, 0.15
        bias[0] = -4.0
    elif delimiter_unit:
        weight[0, :] = 0.0
        weight[0, list(OUTLIER_DIMS)] = DELIMITER_OUTLIER / 4.0
    w = g.constant(f"{prefix}.weight", weight.astype(np.float32))
    y = g.op("MatMul", [x, w], f"{prefix}/MatMul")
    return g.op("Add", [y, g.constant(f"{prefix}.bias", bias.astype(np.float32))], f"{prefix}/Add")


def _layer_norm(g: GraphBuilder, x: str, prefix: str, outlier_gain: float = OUTLIER_GAIN) -> str:
    # y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta, over the hidden axis
    mean = g.op("ReduceMean", [x], f"{prefix}/ReduceMean", axes=[-1], keepdims=1)
    centred = g.op("Sub", [x, mean], f"{prefix}/Sub")
    squared = g.op("Pow", [centred, "const.two"], f"{prefix}/Pow")
    variance = g.op("ReduceMean", [squared], f"{prefix}/ReduceMean_1", axes=[-1], keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [variance, "const.ln_eps"], f"{prefix}/Add")], f"{prefix}/Sqrt")
    normed = g.op("Div", [centred, std], f"{prefix}/Div")
    gamma = g.rng.uniform(0.6, 1.4, HIDDEN)
    beta = g.rng.standard_normal(HIDDEN) * 0.1
    gamma[list(OUTLIER_DIMS)] = outlier_gain * g.rng.uniform(0.8, 1.2, len(OUTLIER_DIMS))
    beta[list(OUTLIER_DIMS)] = g.rng.uniform(-4.0, 4.0, len(OUTLIER_DIMS))
    scaled = g.op("Mul", [normed, g.constant(f"{prefix}.weight", gamma.astype(np.float32))], f"{prefix}/Mul")
    return g.op("Add", [scaled, g.constant(f"{prefix}.bias", beta.astype(np.float32))], f"{prefix}/Add_1")


def _heads(g: GraphBuilder, x: str, prefix: str) -> str:
    """(1, seq, hidden) -> (1, heads, seq, head_dim)."""
    y = g.op("Reshape", [x, "const.heads_shape"], f"{prefix}/Reshape")
    return g.op("Transpose", [y], f"{prefix}/Transpose", perm=[0, 2, 1, 3])


def _attention(g: GraphBuilder, x: str, mask_bias: str, prefix: str) -> str:
    # softmax(Q K^T / sqrt(head_dim) + mask_bias) V, per head, then the output dense
    q = _heads(g, _linear(g, x, f"{prefix}/query", HIDDEN, HIDDEN), f"{prefix}/query")
    k = _heads(g, _linear(g, x, f"{prefix}/key", HIDDEN, HIDDEN), f"{prefix}/key")
    v = _heads(g, _linear(g, x, f"{prefix}/value", HIDDEN, HIDDEN), f"{prefix}/value")
    k_t = g.op("Transpose", [k], f"{prefix}/Transpose_k", perm=[0, 1, 3, 2])
    scores = g.op("MatMul", [q, k_t], f"{prefix}/MatMul")
    scaled = g.op("Div", [scores, "const.sqrt_head_dim"], f"{prefix}/Div")
    masked = g.op("Add", [scaled, mask_bias], f"{prefix}/Add")
    probs = g.op("Softmax", [masked], f"{prefix}/Softmax", axis=-1)
    context = g.op("MatMul", [probs, v], f"{prefix}/MatMul_1")
    merged = g.op("Transpose", [context], f"{prefix}/Transpose_1", perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [merged, "const.hidden_shape"], f"{prefix}/Reshape_1")
    return _linear(g, merged, f"{prefix}/output/dense", HIDDEN, HIDDEN)


def _feed_forward(g: GraphBuilder, x: str, prefix: str) -> str:
    # gelu(h) = 0.5 * h * (1 + erf(h / sqrt(2))); the second dense writes the outlier dims
    h = _linear(g, x, f"{prefix}/intermediate/dense", HIDDEN, FFN_DIM, delimiter_unit=True)
    erf = g.op("Erf", [g.op("Div", [h, "const.sqrt_two"], f"{prefix}/gelu/Div")], f"{prefix}/gelu/Erf")
    gated = g.op("Mul", [h, g.op("Add", [erf, "const.one"], f"{prefix}/gelu/Add")], f"{prefix}/gelu/Mul")
    gelu = g.op("Mul", [gated, "const.half"], f"{prefix}/gelu/Mul_1")
    return _linear(g, gelu, f"{prefix}/output/dense", FFN_DIM, HIDDEN, delimiter_unit=True)


def _layer(g: GraphBuilder, x: str, mask_bias: str, prefix: str, last: bool) -> str:
    attended = g.op(
        "Add", [_attention(g, x, mask_bias, f"{prefix}/attention"), x], f"{prefix}/attention/Add_1"
    )
    x = _layer_norm(g, attended, f"{prefix}/attention/LayerNorm")
    fed = g.op("Add", [_feed_forward(g, x, prefix), x], f"{prefix}/output/Add_1")
    # The last LayerNorm damps the outlier dimensions: a sentence embedding compared by cosine
    # similarity is not dominated by dimensions that are the same for every sentence.
    return _layer_norm(g, fed, f"{prefix}/output/LayerNorm", FINAL_OUTLIER_GAIN if last else OUTLIER_GAIN)


def _embeddings(g: GraphBuilder) -> str:
    table = g.rng.standard_normal((VOCAB, HIDDEN)) * 0.5
    table[SEP_ID, MARKER_DIM] = 12.0
    word = g.constant("embeddings.word", table.astype(np.float32))
    kind = g.constant("embeddings.type", (g.rng.standard_normal((TYPES, HIDDEN)) * 0.5).astype(np.float32))
    position = (g.rng.standard_normal((SEQ_LEN, HIDDEN)) * 0.5).astype(np.float32)
    x = g.op("Gather", [word, "input_ids"], "embeddings/word/Gather", axis=0)
    x = g.op(
        "Add",
        [x, g.op("Gather", [kind, "token_type_ids"], "embeddings/type/Gather", axis=0)],
        "embeddings/Add",
    )
    x = g.op("Add", [x, g.constant("embeddings.position", position[None])], "embeddings/Add_1")
    return _layer_norm(g, x, "embeddings/LayerNorm")


def _mask_bias(g: GraphBuilder) -> str:
    # HF BERT: (1.0 - mask[:, None, None, :]) * finfo(float32).min
    mask = g.op("Unsqueeze", ["attention_mask", "const.axes_12"], "extended_mask/Unsqueeze")
    mask = g.op("Cast", [mask], "extended_mask/Cast", to=TensorProto.FLOAT)
    inverted = g.op("Sub", ["const.one", mask], "extended_mask/Sub")
    return g.op("Mul", [inverted, "const.float_min"], "extended_mask/Mul")


def _mean_pool_normalise(g: GraphBuilder, x: str) -> str:
    # sum(x * mask) / max(sum(mask), 1e-9), then x / max(|x|_2, 1e-12)
    mask = g.op("Unsqueeze", ["attention_mask", "const.axes_last"], "pooling/Unsqueeze")
    mask = g.op("Cast", [mask], "pooling/Cast", to=TensorProto.FLOAT)
    summed = g.op(
        "ReduceSum", [g.op("Mul", [x, mask], "pooling/Mul"), "const.axes_1"], "pooling/ReduceSum", keepdims=0
    )
    count = g.op("ReduceSum", [mask, "const.axes_1"], "pooling/ReduceSum_1", keepdims=0)
    count = g.op("Clip", [count, "const.count_min", ""], "pooling/Clip")
    pooled = g.op("Div", [summed, count], "pooling/Div")
    norm = g.op("ReduceL2", [pooled], "normalize/ReduceL2", axes=[-1], keepdims=1)
    norm = g.op("Clip", [norm, "const.norm_min", ""], "normalize/Clip")
    return g.op("Div", [pooled, norm], "normalize/Div", output="sentence_embedding")


def _constants(g: GraphBuilder) -> None:
    g.constant("const.heads_shape", np.array([1, SEQ_LEN, HEADS, HEAD_DIM], np.int64))
    g.constant("const.hidden_shape", np.array([1, SEQ_LEN, HIDDEN], np.int64))
    g.constant("const.axes_12", np.array([1, 2], np.int64))
    g.constant("const.axes_last", np.array([-1], np.int64))
    g.constant("const.axes_1", np.array([1], np.int64))
    for name, value in {
        "sqrt_head_dim": math.sqrt(HEAD_DIM), "sqrt_two": math.sqrt(2.0), "two": 2.0, "one": 1.0,
        "half": 0.5, "ln_eps": 1e-12, "float_min": float(np.finfo(np.float32).min),
        "count_min": 1e-9, "norm_min": 1e-12,
    }.items():  # fmt: skip
        g.constant(f"const.{name}", np.array(value, np.float32))


def sentence_encoder(layers: int = LAYERS) -> onnx.ModelProto:
    """input_ids, token_type_ids, attention_mask: int64 1 x SEQ_LEN -> sentence_embedding
    1 x HIDDEN, with `layers` encoder layers (the tests use 2, to build faster)."""
    g = GraphBuilder("sentence_encoder", seed=11)
    _constants(g)
    x = _embeddings(g)
    mask_bias = _mask_bias(g)
    for layer in range(layers):
        x = _layer(g, x, mask_bias, f"encoder/layer.{layer}", last=layer == layers - 1)
    _mean_pool_normalise(g, x)
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, SEQ_LEN]) for n in INPUTS]
    out = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, [1, HIDDEN])
    graph = helper.make_graph(g.nodes, g.graph_name, ids, [out], initializer=g.initializers)
    model = helper.make_model(
        graph, producer_name="vpuc.examples", opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)]
    )
    model.ir_version = DEFAULT_IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def realistic_feeds(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`count` tokenised sentences as a tokenizer pads them: [CLS] w1 .. wn [SEP] then [PAD],
    n uniform in [4, SEQ_LEN - 2], word ids uniform over the vocabulary above the special
    ids; token types 0; mask 1 on the real tokens. Stacks of shape (count, 1, SEQ_LEN)."""
    rng = np.random.default_rng([seed, 15])
    ids = np.full((count, 1, SEQ_LEN), PAD_ID, np.int64)
    mask = np.zeros((count, 1, SEQ_LEN), np.int64)
    for i in range(count):
        words = int(rng.integers(4, SEQ_LEN - 1))
        ids[i, 0, 0], ids[i, 0, words + 1] = CLS_ID, SEP_ID
        ids[i, 0, 1 : words + 1] = rng.integers(SEP_ID + 1, VOCAB, words)
        mask[i, 0, : words + 2] = 1
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask}
