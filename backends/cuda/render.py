"""Render every fusion group of a plan into one CUDA kernel from the Jinja2 templates.

One template per group kind (``templates/``): ``pointwise.cu.j2``,
``row_reduction.cu.j2``, ``contraction.cu.j2``, ``attention.cu.j2``, and for
single ops ``single_op.cu.j2`` (gather) and ``scan.cu.j2`` (cumsum);
``kernels/`` builds each one's context. Views need no kernel, a group that writes
nothing (dead code) needs none either, and custom ops have no semantics: those
groups are listed as not rendered. Rendering is deterministic: the same plan gives
the same sources byte for byte, and a kernel is named by a hash of its source, so
identical groups share one kernel.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources

from partitioner.cost import Budgets, GroupCost
from partitioner.group import Group
from partitioner.plan import Plan

from .kernels import attention, contraction, pointwise, reduction, single
from .kernels.common import TEMPLATES, environment

RUNTIME_HEADER = "partition_runtime.cuh"
_BUILDERS = {"pointwise": pointwise.build, "reduction": reduction.build, "contraction": contraction.build,
             "attention": attention.build, "single": single.build}


@dataclass
class Kernel:
    """One rendered group: its source and how to launch it.

    ``args`` lists the kernel parameters in order, ``{"tensor", "role" ("in" or
    "out"), "dtype", "shape"}``; tensors are storages (a view's data is its input's).
    ``smem_dynamic`` is the dynamic shared memory to launch with and
    ``smem_static`` the shared memory the source declares, in bytes. ``estimate``
    holds the cost model's budgets for the group.
    """

    index: int
    kind: str
    ops: tuple[str, ...]
    name: str
    source: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_dynamic: int
    smem_static: int
    args: list[dict]
    index_bits: int
    estimate: Budgets

    @property
    def file_name(self) -> str:
        return f"g{self.index:03d}_{self.kind}.cu"

    def manifest(self) -> dict:
        return {
            "group": self.index, "kind": self.kind, "ops": list(self.ops), "kernel": self.name,
            "file": self.file_name, "grid": list(self.grid), "block": list(self.block),
            "dynamic_shared_memory": self.smem_dynamic, "static_shared_memory": self.smem_static,
            "index_bits": self.index_bits, "args": self.args,
        }


@dataclass
class Rendered:
    """The kernels of a plan, and the groups that have none."""

    plan: Plan
    kernels: list[Kernel]
    skipped: list[dict] = field(default_factory=list)

    def manifest(self) -> dict:
        return {
            "graph": self.plan.graph.name, "strategy": self.plan.strategy, "hardware": self.plan.hardware.name,
            "kernels": [k.manifest() for k in self.kernels], "not_rendered": self.skipped,
        }


def runtime_header() -> str:
    """Text of the device-helper header every kernel includes."""
    return resources.files(TEMPLATES).joinpath(RUNTIME_HEADER).read_text()


def render_group(priced: GroupCost, index: int, hw) -> Kernel:
    """The kernel of one priced group of a plan that needs one (see :func:`skip_reason`);
    its estimate is the budgets the plan priced it with."""
    group = priced.group
    built = _BUILDERS[group.kind](group, index, hw)
    context = {**built["context"], "params": built["params"].decls}
    draft = environment().get_template(built["template"]).render(name="KERNEL_NAME", **context)
    # named by the code alone, so that identical groups (e.g. one per layer) share one kernel
    name = "k_" + hashlib.sha1(draft.encode()).hexdigest()[:12]
    source = f"// group {index} ({group.kind}): {', '.join(group.ops)}\n" + draft.replace("KERNEL_NAME", name)
    return Kernel(index, group.kind, group.ops, name, source, built["grid"],
                  built["block"], built["smem_dynamic"], built["smem_static"], built["params"].args, built["bits"],
                  priced.budgets)


def skip_reason(group: Group) -> tuple[str, str] | None:
    """Why a group gets no kernel, as ``(what, reason)`` (``what``: ``views``,
    ``custom``, ``dead code`` or ``empty``), or ``None``."""
    if group.kind == "view":
        return "views", "views only: no kernel"
    if group.empty:
        return "empty", "empty tensors: nothing to compute"
    custom = [op.name for op in group.compute if op.kind == "custom"]
    if custom:
        return "custom", f"custom op '{custom[0]}' has no semantics: no kernel"
    if not group.writes:
        return "dead code", "dead code: writes nothing"
    return None


def render(plan: Plan) -> Rendered:
    """Kernels for every group of ``plan`` that needs one, in plan order."""
    kernels, skipped = [], []
    for index, priced in enumerate(plan.cost.groups):
        why = skip_reason(priced.group)
        if why:
            skipped.append({"group": index, "ops": list(priced.ops), "what": why[0], "reason": why[1]})
        else:
            kernels.append(render_group(priced, index, plan.hardware))
    return Rendered(plan, kernels, skipped)
