"""The ``numpy`` backend: runs a plan group by group with the op registry's NumPy
semantics, keeping in memory only what crosses group boundaries (exactly the
storages the cost model counts as written), and only while a later group reads it."""

from __future__ import annotations

import numpy as np

from partitioner.plan import Plan
from partitioner.reference import run_op

from .base import Backend, BackendError


class _Values(dict):
    """Tensor values of one group: its own results, else the memory a storage holds."""

    def __init__(self, graph, memory):
        super().__init__()
        self.graph, self.memory = graph, memory

    def __missing__(self, tensor: str) -> np.ndarray:
        return self.memory[self.graph.storage[tensor]].reshape(self.graph.tensor(tensor).shape)


class NumpyBackend(Backend):
    """Reference executor of plans (no code to render or build)."""

    name = "numpy"

    def render(self, plan: Plan) -> Plan:
        return plan

    def build(self, rendered: Plan) -> Plan:
        return rendered

    def run(self, built: Plan, storages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph outputs' storages; any other storage is dropped once no later
        group reads it, so memory holds only what is live (as on a device)."""
        g = built.graph
        memory = dict(storages)
        written = {}
        last = {}  # storage -> the last group that touches it (a view it evaluates too)
        for position, priced in enumerate(built.cost.groups):
            for name in priced.group.ops:
                for tensor in g.ops[name].tensor_inputs:
                    last[g.storage[tensor]] = position
        for position, priced in enumerate(built.cost.groups):
            group = priced.group
            if group.kind == "view":
                continue
            custom = [op.name for op in group.compute if op.kind == "custom"]
            if custom:
                if custom[0] not in memory:
                    raise BackendError(f"op '{custom[0]}' is custom and has no semantics; supply its value to run")
                continue
            values = _Values(g, memory)
            inside = g.last_readers(group.ops)
            for step, name in enumerate(group.ops):
                op = g.ops[name]
                values[name] = values[op.inputs[0]].reshape(op.out.shape) if op.is_view else run_op(g, name, values)
                for tensor in (*op.tensor_inputs, name):  # an attention group's scores: gigabytes each
                    if inside.get(tensor, -1) <= step and tensor in values and tensor not in group.writes:
                        del values[tensor]
            for base in group.writes:
                memory[base] = values[base]
                if base in g.output_storages:
                    written[base] = memory[base]
            for base in {g.storage[t] for name in group.ops for t in g.ops[name].tensor_inputs}:
                if last[base] == position and base not in g.output_storages:  # no later group reads it
                    memory.pop(base, None)
        return written
