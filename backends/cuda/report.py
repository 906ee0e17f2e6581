"""ptxas' figures beside the cost model's estimates, per kernel."""

from __future__ import annotations

from .compile import Compiled
from .render import Rendered


def resource_rows(rendered: Rendered, compiled: Compiled) -> list[dict]:
    """Per kernel: registers, spills and shared memory from ptxas next to the estimates,
    and whether the kernel spills or exceeds a budget."""
    rows = []
    for k in rendered.kernels:
        r = compiled.resources.get(k.name)
        est = k.estimate
        smem = (r.static_smem if r else 0) + k.smem_dynamic
        problems = []
        if r and r.spills:
            problems.append("SPILLS")
        if r and r.registers > est.registers_limit:
            problems.append("REGISTERS OVER")
        if smem > est.shared_memory_limit:
            problems.append("SHARED MEMORY OVER")
        rows.append({
            "group": k.index, "kind": k.kind, "kernel": k.name, "arch": compiled.arch,
            "registers": r.registers if r else None, "registers_estimate": est.registers,
            "spill_bytes": r.spills if r else None, "shared_memory": smem, "shared_memory_estimate": est.shared_memory,
            "status": " ".join(problems) or "OK",
        })
    return rows
