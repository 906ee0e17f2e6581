"""TorchInductor's attention rewrite, on our IR: which ops Inductor hands to
``scaled_dot_product_attention`` (its ``fuse_attention`` joint-graph pass).

The patterns are Inductor's own: the inference variants of its precompiled
``_sfdp_pattern_N`` graphs (torch 2.13), written to ``inductor_sdpa_patterns.json``
by ``graphs/export_sdpa_patterns.py``. They are matched as Inductor's pattern
matcher matches them (``torch/_inductor/pattern_matcher.py``): from the output
node back through each operand in order; ``KeywordArg`` binds anything
consistently, ``Ignored`` matches anything, and every intermediate node must have
exactly the pattern's number of users (so nothing outside the pattern reads it).
Before matching, Inductor removes no-op ops (``remove_noop_ops``); here that is a
``clone`` (``identity``) of a value that no transpose or broadcast made
non-contiguous, and a ``reshape`` to the same shape. The extra checks follow
``_sfdp_params_check`` and ``_sfdp_extra_check`` on a CUDA device: query, key and
value of one dtype, float32 only with TF32 matmuls (off by default, so never), a
mask of the query's dtype, bool or float32 with at least one dimension, a Python
number as the scale, and no pattern registered with ``disable_cuda``. Pattern 24
is registered with its check function uncalled, which makes a match raise inside
Inductor instead of rewriting: it never rewrites.

Each op of our IR stands for the ATen op the importer made it from (table
``_KINDS``); a ``full`` constant is a literal operand here.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from ..graph import Graph

_KINDS = {
    "aten.view.default": "reshape", "aten._unsafe_view.default": "reshape", "aten.expand.default": "broadcast_to",
    "aten.clone.default": "identity", "aten.permute.default": "transpose", "aten.bmm.default": "matmul",
    "aten.mul.Tensor": "mul", "aten.mul.Scalar": "mul", "aten.div.Tensor": "div", "aten.add.Tensor": "add",
    "aten.sub.Tensor": "sub", "aten.exp.default": "exp", "aten.amax.default": "reduce_max",
    "aten.sum.dim_IntList": "reduce_sum", "aten.any.dim": "reduce_max", "prims.convert_element_type.default": "cast",
    "aten.where.self": "where", "aten.eq.Scalar": "eq", "aten.logical_not.default": "logical_not",
}
_REDUCTIONS = ("aten.amax.default", "aten.sum.dim_IntList", "aten.any.dim")
#: Leading arguments of each target that are operands (the rest are attributes).
_OPERANDS = {"aten.mul.Tensor": 2, "aten.mul.Scalar": 2, "aten.div.Tensor": 2, "aten.add.Tensor": 2,
             "aten.sub.Tensor": 2, "aten.eq.Scalar": 2, "aten.bmm.default": 2, "aten.where.self": 3}
_MASK_DTYPES = ("bool", "float32")


@lru_cache(maxsize=1)
def patterns() -> tuple[dict, ...]:
    """Inductor's inference attention patterns that can rewrite on a CUDA device."""
    data = json.loads(resources.files(__package__).joinpath("inductor_sdpa_patterns.json").read_text())
    return tuple(p for p in data["patterns"] if p["check"] != "uncalled" and not p["disable_cuda"])


class _Match:
    """One attempt to match one pattern with its output at one op."""

    def __init__(self, g: Graph, pattern: dict, noop: dict[str, str], users: dict[str, int]):
        self.g, self.pattern, self.noop, self.users = g, pattern, noop, users
        self.node_of: dict[int, str] = {}
        self.bound: dict[str, object] = {}

    def arg(self, spec, operand) -> bool:
        """Whether ``operand`` (a tensor name or a literal) matches the argument ``spec``."""
        if isinstance(spec, dict) and "node" in spec:
            return self.node(spec["node"], operand)
        if isinstance(spec, dict) and "kw" in spec:
            if spec["kw"] in self.bound:
                return self.bound[spec["kw"]] == operand
            self.bound[spec["kw"]] = operand
            return True
        return True  # Ignored, and attributes our IR keeps elsewhere (checked by the caller)

    def node(self, index: int, operand, output: bool = False) -> bool:
        while isinstance(operand, str) and operand in self.noop:
            operand = self.noop[operand]  # remove_noop_ops ran before the patterns
        if index in self.node_of:
            return self.node_of[index] == operand
        spec = self.pattern["nodes"][index]
        op = self.g.ops.get(operand) if isinstance(operand, str) else None
        if spec["target"] == "aten.full.default":  # a literal here, or a custom op where a tensor was needed
            full = op is not None and op.kind == "custom" and op.attrs["kind"] == "aten.full.default"
            return (op is None and not isinstance(operand, str) or full) and self.arg(spec["args"][1], operand)
        if op is None or _KINDS.get(spec["target"]) != op.kind:
            return False
        if not output and spec["users"] != "multiple" and self.users[operand] != spec["users"]:
            return False
        self.node_of[index] = operand
        args, count = spec["args"], _OPERANDS.get(spec["target"], 1)
        if spec["target"] in _REDUCTIONS and op.attrs["keepdims"] != bool(args[2] if len(args) > 2 else False):
            return False
        if spec["target"] == "aten.permute.default" and isinstance(args[1], list) and op.attrs["perm"] != args[1]:
            return False
        if spec["target"] == "aten.bmm.default" and any(len(self.g.tensor(t).shape) != 3 for t in op.inputs):
            return False
        operands = op.inputs[:count]
        return len(operands) == count and all(self.arg(a, o) for a, o in zip(args, operands))

    def checks(self) -> bool:
        """``_sfdp_params_check`` and ``_sfdp_extra_check`` as Inductor runs them on CUDA."""
        g, b = self.g, self.bound
        if not all(isinstance(b.get(k), str) for k in ("query", "key", "value")):
            return False
        dtypes = {g.tensor(b[k]).dtype for k in ("query", "key", "value")}
        if len(dtypes) != 1 or dtypes == {"float32"}:  # float32 needs TF32 matmuls, off by default
            return False
        nodes = self.pattern["nodes"]
        adds = [i for i in sorted(self.node_of) if nodes[i]["target"] == "aten.add.Tensor"]
        if adds:
            mask = g.ops[self.node_of[adds[0]]].inputs[1]
            if not isinstance(mask, str) or g.tensor(mask).dtype not in (*dtypes, *_MASK_DTYPES) \
                    or not g.tensor(mask).shape:
                return False
        if self.pattern["scale_op"] is not None:
            scaled = next(i for i in sorted(self.node_of) if nodes[i]["target"] == self.pattern["scale_op"])
            if isinstance(g.ops[self.node_of[scaled]].inputs[1], str):
                return False
        return True

    def ops(self) -> set[str]:
        """The ops the rewrite replaces: every matched op and the no-ops removed between them."""
        matched = set(self.node_of.values())
        removed = {name for name, source in self.noop.items() if source in matched and any(
            self.noop.get(r, r) in matched or r in matched for r in self.g.consumers[name])}
        return matched | removed


def _noop(g: Graph) -> dict[str, str]:
    """No-op ops Inductor removes before matching -> the value they pass on."""
    noop = {}
    for name, op in g.ops.items():
        src = op.inputs[0] if op.inputs else None
        if not isinstance(src, str):
            continue
        if op.kind == "reshape" and op.is_view and g.tensor(src).shape == op.out.shape:
            noop[name] = src
        elif op.kind == "identity" and not _strided(g, src):
            noop[name] = src
    return noop


def _strided(g: Graph, tensor: str) -> bool:
    """Whether a value may be non-contiguous: a transpose or broadcast, seen through views."""
    while tensor in g.ops and g.ops[tensor].is_view:
        tensor = g.ops[tensor].inputs[0]
    return tensor in g.ops and g.ops[tensor].kind in ("transpose", "broadcast_to")


def _users(g: Graph, noop: dict[str, str]) -> dict[str, int]:
    """Ops reading each tensor once the no-ops are gone (their readers read the source)."""
    count = {name: 0 for name in (*g.inputs, *g.ops)}
    for name, op in g.ops.items():
        if name in noop:
            continue
        for t in op.tensor_inputs:
            while t in noop:
                t = noop[t]
            count[t] += 1
    return count


def sdpa_rewrites(g: Graph) -> list[tuple[str, set[str]]]:
    """``(pattern name, ops)`` for every subgraph Inductor rewrites to SDPA, in graph
    order; a later match never takes an op an earlier one took."""
    noop = _noop(g)
    users = _users(g, noop)
    found, taken = [], set()
    for name, op in g.ops.items():
        if op.kind != "reshape" or name in noop:
            continue
        for pattern in patterns():
            match = _Match(g, pattern, noop, users)
            first, *others = pattern["outputs"]
            if not match.node(first, name, output=True) or not match.checks():
                continue
            if any(other is not None and other not in match.node_of for other in others):
                continue  # a pattern that also returns its permuted key or value: they must be there
            ops = match.ops()
            if not ops & taken:
                found.append((pattern["name"], ops))
                taken |= ops
            break
    return found
