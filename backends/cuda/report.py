"""ptxas' figures beside the cost model's estimates, per kernel."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

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


def resource_table(rows: list[dict], width: int = 200) -> str:
    """The rows as a text table."""
    arch = rows[0]["arch"] if rows else ""
    table = Table(title=f"Kernels compiled by nvcc for {arch}: ptxas figures (measured by the compiler) "
                        "beside the cost model's estimates", title_justify="left")
    for column in ("group", "kind", "kernel", "regs ptxas", "regs est.", "spill B", "smem B", "smem est. B",
                   "status"):
        table.add_column(column, justify="left" if column in ("kind", "kernel", "status") else "right")
    for row in rows:
        table.add_row(str(row["group"]), row["kind"], row["kernel"], str(row["registers"]),
                      str(row["registers_estimate"]), str(row["spill_bytes"]), str(row["shared_memory"]),
                      str(row["shared_memory_estimate"]), row["status"])
    out = io.StringIO()
    Console(file=out, width=width, no_color=True, highlight=False).print(table)
    return out.getvalue()
