"""Attention graphs as exporters write them: Q·Kᵀ, scale, masks and biases, a row
softmax (the composite, or the primitive chain spelt out), and ·V, with grouped-query
heads shared through reshape and broadcast_to."""

from __future__ import annotations

import math

from .conftest import make_graph, op


def attention(*, batch=1, heads=2, kv_heads=None, sq=33, sk=31, d=32, dv=None, dtype="float16", scale=True,
              mask=None, softmax="composite", probs_output=False, epilogue=False, extras=(), name="attention",
              extra_outputs=()):
    """One attention layer. ``mask``: ``None``; ``"causal"`` (``where`` with a boolean
    ``[sq, sk]`` mask, -inf elsewhere); ``"padding"`` (``where`` with a boolean
    ``[batch, 1, 1, sk]`` key mask); ``"additive"`` (a float ``[batch, 1, sq, sk]``
    mask added after the scale); ``"bias"`` (a T5-style ``[1, heads, sq, sk]`` bias
    added to unscaled scores). ``softmax``: ``"composite"``, ``"primitives"``
    (max, sub, exp, sum, div written out, in float32 for half inputs) or ``"safe"``
    (PyTorch's ``_safe_softmax``, as ``scaled_dot_product_attention`` exports:
    probabilities 0 in rows of -inf only). ``extras`` add
    ops that make the best plan less obvious: ``"q_prologue"`` (Q scaled by an op of
    its own), ``"k_written"`` (K computed by an op that is also an output, so never
    a recomputed feeder), ``"score_side"`` (exp of the raw scores as an output),
    ``"out_consumers"`` (two more ops read the output). ``extra_outputs`` names more
    of its tensors as graph outputs."""
    kv_heads = kv_heads or heads
    dv = dv or d
    inputs = {"q": ([batch, heads, sq, d], dtype), "k": ([batch, kv_heads, sk, d], dtype),
              "v": ([batch, kv_heads, sk, dv], dtype)}
    ops = []
    q, k, v = "q", "k", "v"
    outputs = []
    if "q_prologue" in extras:
        ops.append(op("q_half", "mul", ["q", 0.5]))
        q = "q_half"
    if "k_written" in extras:
        ops.append(op("k_neg", "neg", ["k"]))
        k = "k_neg"
        outputs.append("k_neg")
    if kv_heads != heads:  # grouped-query: each K/V head serves heads // kv_heads query heads
        group = heads // kv_heads
        for t, width in (("k", d), ("v", dv)):
            ops += [op(f"{t}5", "reshape", [k if t == "k" else v], shape=[batch, kv_heads, 1, sk, width]),
                    op(f"{t}b", "broadcast_to", [f"{t}5"], shape=[batch, kv_heads, group, sk, width]),
                    op(f"{t}4", "reshape", [f"{t}b"], shape=[batch, heads, sk, width])]
        k, v = "k4", "v4"
    ops += [op("kt", "transpose", [k], perm=[0, 1, 3, 2]), op("scores", "matmul", [q, "kt"])]
    x = "scores"
    if "score_side" in extras:
        ops.append(op("side", "exp", ["scores"]))
        outputs.append("side")
    if scale:
        ops.append(op("scaled", "mul", [x, 1 / math.sqrt(d)]))
        x = "scaled"
    if mask == "causal":
        inputs["causal"] = ([sq, sk], "bool")
        ops.append(op("masked", "where", ["causal", x, -math.inf]))
        x = "masked"
    elif mask == "padding":
        inputs["keep"] = ([batch, 1, 1, sk], "bool")
        ops.append(op("masked", "where", ["keep", x, -math.inf]))
        x = "masked"
    elif mask in ("additive", "bias"):
        inputs["mask"] = ([batch, 1, sq, sk] if mask == "additive" else [1, heads, sq, sk], dtype)
        ops.append(op("masked", "add", [x, "mask"]))
        x = "masked"
    if softmax == "composite":
        ops.append(op("probs", "softmax", [x], axis=-1))
    elif softmax == "safe":
        ops += [op("p0", "softmax", [x], axis=-1), op("is_inf", "eq", [x, -math.inf]),
                op("finite", "logical_not", ["is_inf"]), op("live", "reduce_max", ["finite"], axes=[-1], keepdims=True),
                op("dead", "logical_not", ["live"]), op("probs", "where", ["dead", 0.0, "p0"])]
    else:
        half = dtype != "float32"
        if half:
            ops.append(op("x32", "cast", [x], dtype="float32"))
            x = "x32"
        ops += [op("row_max", "reduce_max", [x], axes=[-1], keepdims=True), op("shifted", "sub", [x, "row_max"]),
                op("e", "exp", ["shifted"]), op("row_sum", "reduce_sum", ["e"], axes=[-1], keepdims=True),
                op("p32" if half else "probs", "div", ["e", "row_sum"])]
        if half:
            ops.append(op("probs", "cast", ["p32"], dtype=dtype))
    ops.append(op("out", "matmul", ["probs", v]))
    last = "out"
    if epilogue:
        inputs["residual"] = ([batch, heads, sq, dv], dtype)
        ops.append(op("y", "add", ["out", "residual"]))
        last = "y"
    outputs.insert(0, last)
    if "out_consumers" in extras:
        ops += [op("c_abs", "abs", [last]), op("c_mul", "mul", [last, 3.0])]
        outputs += ["c_abs", "c_mul"]
    if probs_output:
        outputs.append("probs")
    outputs += extra_outputs
    return make_graph(inputs, ops, outputs, dtype=dtype, name=name)

