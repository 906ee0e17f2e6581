"""XLA's fused-attention rewrite (``CudnnFusedMHARewriter``), on our IR.

Source: ``xla/service/gpu/transforms/cudnn_fused_mha_rewriter.cc`` of openxla/xla at
6ea94383ecedfecc3a1a62c18cf5a1ceb21cb3db (the merge of the branch whose commit
1aea158147bc our ``xla`` baseline cites). ``NVPTXCompiler::
OptimizeHloPostLayoutAssignment`` runs it only when ``--xla_gpu_enable_cudnn_fmha``
is true, and ``xla/debug_options_flags.cc`` makes that false (since 8799ff0f4b,
2024-05-07: flash attention does not keep numerics bit for bit). It also needs an
Ampere or newer GPU and cuDNN 9, which every profile here has. The pass was
deleted upstream in cae096dd1b5c (2025-02-03); nothing replaced it inside XLA.

What it rewrites into one cuDNN fused-attention call: ``bmm1`` (the scores), an
optional scale (a multiply by a broadcast scalar constant; a divide by a constant
is a multiply once the algebraic simplifier has run), an optional bias (an add,
after the scale), the softmax as exactly reduce-max, subtract, exp, reduce-sum,
divide (converts in between allowed), and ``bmm2``. Both products in float16 or
bfloat16, one head dim for Q, K and V, at most 128 and a multiple of 8; no
grouped-query layout; a ``select`` on the scores (a mask applied in place rather
than added) is not matched. Q, K and V may come in any layout: layout assignment
and ``CudnnFusedMHATransposeFusion`` fold their transposes into the call, so the
layout ops that only feed the products join its group.
"""

from __future__ import annotations

from .. import attention
from ..graph import Graph

MAX_HEAD_DIM = 128
HEAD_DIM_MULTIPLE = 8
_PASS_THROUGH = ("cast", "identity", "broadcast_to")
_SOFTMAX = ("reduce_max", "sub", "exp", "reduce_sum", "div")


def fmha_rewrites(g: Graph) -> list[set[str]]:
    """The op sets XLA's rewrite turns into fused-attention calls, in graph order."""
    found = []
    for p in attention.pairs(g):
        if _matches(g, p):
            found.append(_layout_prologue(g, p) | set(g.names(p.middle)) | {p.c1, p.c2})
    return found


def _matches(g: Graph, p: attention.Pair) -> bool:
    if p.dtype not in ("float16", "bfloat16") or p.d != p.dv:
        return False
    if p.d > MAX_HEAD_DIM or p.d % HEAD_DIM_MULTIPLE or p.normalise[0] != "div" or _grouped_query(g, p):
        return False
    steps = []
    for name in g.names(p.middle):
        op = g.ops[name]
        if op.is_view or op.kind in _PASS_THROUGH and (op.kind != "broadcast_to" or _same_size(g, op)):
            continue
        if p.forms[name] == "raw":
            literal = any(not isinstance(i, str) for i in op.inputs)
            if op.kind in ("mul", "div") and literal and not steps:
                steps.append("scale")
            elif op.kind == "add" and not literal and "bias" not in steps:
                steps.append("bias")
            else:
                return False
        elif op.kind not in _SOFTMAX:
            return False
    return True


def _same_size(g: Graph, op) -> bool:
    return g.tensor(op.inputs[0]).numel == op.out.numel


def _layout_prologue(g: Graph, p: attention.Pair) -> set[str]:
    """Layout ops between Q, K or V and the products that nothing else reads: XLA folds
    them into the call."""
    inside = {p.c1, p.c2}
    frontier = [t for t in (*g.ops[p.c1].inputs, g.ops[p.c2].inputs[1]) if t in g.ops]
    while frontier:
        name = frontier.pop()
        op = g.ops[name]
        if name in inside or op.kind not in ("reshape", "transpose", "identity", "broadcast_to"):
            continue
        if not set(g.consumers[name]) <= inside | set(g.names(p.middle)):
            continue
        inside.add(name)
        frontier.extend(t for t in op.tensor_inputs if t in g.ops)
    return inside - {p.c1, p.c2}


def _grouped_query(g: Graph, p: attention.Pair) -> bool:
    """Whether K or V reach the products through a broadcast that grows them."""
    for start in (g.ops[p.c1].inputs[1], g.ops[p.c2].inputs[1]):
        name = start
        while name in g.ops and g.ops[name].kind in ("reshape", "transpose", "identity", "broadcast_to"):
            op = g.ops[name]
            if op.kind == "broadcast_to" and not _same_size(g, op):
                return True
            name = op.inputs[0]
    return False
