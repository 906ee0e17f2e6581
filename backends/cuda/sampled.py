"""Counting a plan too large to emulate whole: each kernel alone, on a sample of its
blocks (``--profile``; ``docs/backends.md``, *Counters*).

Kernel *i* runs by itself on the NumPy reference's values of every storage it reads,
so no kernel waits for the partial outputs of another. Only a sample of its blocks
runs: the first, the last and others evenly spaced between (:func:`sample`). It runs
twice, the storages it writes starting as ``0xFF`` bytes and then as ``0x00`` bytes
(``FILLS``); the elements that differ from the fill in either run are those its blocks
wrote (no value is both all ``0xFF`` and all ``0x00`` bytes), and they are checked
against the reference under the tolerance ``--run`` applies, in each run that shows
them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from backends.check import (UNIT_ROUNDOFF, OutputCheck, accumulated_terms, compare, memory_available,
                            reference_failure, rounding_spread, tolerance_dtype)
from partitioner.plan import Plan
from partitioner.reference import input_values, random_values, run_reference
from partitioner.report import PIPED_WIDTH, table_text

from ..base import BackendError
from .counters import KernelCounters
from .emulate import run_alone
from .render import Rendered

#: Blocks per kernel when a plan is too large to emulate whole.
SAMPLE_BLOCKS = 8
#: Largest plan emulated whole: FLOP (tensor-core products cost the emulator 32 times
#: their FLOP, every lane computing the warp's whole tile) and bytes moved.
WHOLE_FLOPS = 2**30
WHOLE_BYTES = 2**27
#: What a kernel's outputs hold where its blocks wrote nothing, one byte per run: a
#: value written as all ``0xFF`` bytes (a NaN, an integer -1) shows in the second.
FILLS = (0xFF, 0x00)


def emulated_whole(plan: Plan) -> bool:
    """Whether ``plan`` is small enough to emulate every kernel and block (a few
    minutes at most): ``WHOLE_FLOPS`` and ``WHOLE_BYTES``."""
    return plan.cost.flops <= WHOLE_FLOPS and plan.cost.bytes_read + plan.cost.bytes_written <= WHOLE_BYTES


def sample(grid_blocks: int, count: int) -> list[int]:
    """Linear indices of the blocks to run out of a grid: first, last, evenly spaced.

    Parameters
    ----------
    grid_blocks : int
        Blocks of the grid.
    count : int
        Blocks wanted (at least 1).

    Returns
    -------
    list of int
        ``count`` indices, ascending: the first block, the last and the others
        evenly spaced between; every block when the grid has no more than ``count``.

    Examples
    --------
    >>> sample(100, 5)
    [0, 25, 50, 74, 99]
    >>> sample(3, 8)
    [0, 1, 2]
    """
    if grid_blocks <= count:
        return list(range(grid_blocks))
    if count == 1:
        return [0]
    return sorted({round(k * (grid_blocks - 1) / (count - 1)) for k in range(count)})


@dataclass(frozen=True)
class SampledCheck:
    """One storage a kernel wrote on its sampled blocks: ``blocks`` run of
    ``grid_blocks``, ``checked`` of ``elements`` written there, compared with the
    reference (``check``; not ``ok`` when nothing was written)."""

    group: int
    kind: str
    blocks: int
    grid_blocks: int
    elements: int
    checked: int
    check: OutputCheck

    @property
    def ok(self) -> bool:
        return self.check.ok and self.checked > 0

    def to_dict(self) -> dict:
        return {"group": self.group, "kind": self.kind, "blocks": self.blocks, "grid_blocks": self.grid_blocks,
                "elements": self.elements, "checked": self.checked, **asdict(self.check), "ok": self.ok}


def reference_storages(plan: Plan, rendered: Rendered, seed: int) -> dict[str, np.ndarray]:
    """The reference's value of every storage the kernels read or write.

    Parameters
    ----------
    plan : Plan
        The plan ``rendered`` renders.
    rendered : Rendered
        Its kernels.
    seed : int
        Seed of the inputs, drawn as ``--run`` draws them (custom ops: their
        hooks, or drawn too).

    Returns
    -------
    dict of str to numpy.ndarray
        By storage name.

    Raises
    ------
    BackendError
        The values do not fit in memory, or the reference cannot run on these
        inputs (a gather index out of its axis).
    """
    g = plan.graph
    needed = {a["tensor"] for k in rendered.kernels for a in k.args}
    need, have = sum(g.tensor(t).nbytes for t in needed), memory_available()
    if have is not None and need > have:
        raise BackendError(f"the sampled check keeps {need / 2**30:,.1f} GiB of reference values, more than the "
                           f"{have / 2**30:,.1f} GiB available: run a smaller instance of the graph")
    try:
        return run_reference(g, _inputs(plan, seed), keep=needed)
    except ValueError as exc:
        raise BackendError(reference_failure(g, exc)) from None


def _inputs(plan: Plan, seed: int) -> dict[str, np.ndarray]:
    """The graph inputs as ``--run`` draws them, and the results of custom ops without
    semantics, drawn too."""
    g = plan.graph
    customs = [op.name for op in g.ops.values() if op.kind == "custom" and op.name not in g.hooks]
    return {**input_values(g, seed), **random_values(g, customs, seed)}


def check_written(plan: Plan, name: str, runs: list[np.ndarray], want: np.ndarray,
                  spread: np.ndarray | None = None) -> tuple[int, OutputCheck]:
    """Check the elements of storage ``name`` a sample wrote against the reference.

    Parameters
    ----------
    plan : Plan
        The plan (for the tolerance: ``tolerance_dtype``, ``accumulated_terms``).
    name : str
        The storage.
    runs : list of numpy.ndarray
        What the kernel left in each run, one per byte of ``FILLS``: that byte
        wherever it wrote nothing.
    want : numpy.ndarray
        The reference's value, same shape.
    spread : numpy.ndarray, optional
        The reference's spread under random rounding, same shape
        (``backends.check.rounding_spread``).

    Returns
    -------
    tuple
        The number of elements written (those differing from the fill in some run)
        and the :class:`~backends.check.OutputCheck` of every written element of
        every run that shows it.
    """
    g = plan.graph
    want = np.asarray(want).reshape(-1)
    spread = None if spread is None else np.asarray(spread).reshape(-1)
    got, wanted, spreads, written = [], [], [], np.zeros(want.size, dtype=bool)
    for fill, left in zip(FILLS, runs, strict=True):
        flat = np.ascontiguousarray(left).reshape(-1)
        shown = ~np.all(flat.view(np.uint8).reshape(flat.size, -1) == fill, axis=1) if flat.size else written
        got.append(flat[shown])
        wanted.append(want[shown])
        spreads.append(None if spread is None else spread[shown])
        written |= shown
    check = compare(name, tolerance_dtype(g, name), np.concatenate(got), np.concatenate(wanted),
                    accumulated_terms(g, name), None if spread is None else np.concatenate(spreads))
    return int(written.sum()), check


def check_sampled(plan: Plan, rendered: Rendered, seed: int,
                  blocks: int) -> tuple[list[SampledCheck], list[KernelCounters]]:
    """Run every kernel alone on sampled blocks, counting, and check what it wrote.

    Each kernel reads the reference's values and runs ``blocks`` of its blocks
    (:func:`sample`), once per byte of ``FILLS``; the elements they wrote are
    checked against the reference, and counted on the first run.

    Parameters
    ----------
    plan : Plan
        The plan ``rendered`` renders.
    rendered : Rendered
        From the CUDA backend's ``render``.
    seed : int
        Seed of the drawn inputs (as ``--run``'s).
    blocks : int
        Blocks per kernel (at least 1), chosen by :func:`sample`.

    Returns
    -------
    tuple
        A :class:`SampledCheck` per storage each kernel writes, and the kernels'
        counters, in launch order.

    Raises
    ------
    BackendError
        The reference cannot run, or a kernel fails on the emulator.
    """
    reference = reference_storages(plan, rendered, seed)
    checks, counted, beyond = [], [], {}
    for launch, kernel in enumerate(rendered.kernels):
        grid_blocks = math.prod(kernel.grid)
        chosen = sample(grid_blocks, blocks)
        (out, counters), *others = [run_alone(rendered, launch, reference, chosen, fill) for fill in FILLS]
        counted.append(counters)
        for name, got in out.items():
            runs = [got, *(other[name] for other, _ in others)]
            checked, check = check_written(plan, name, runs, reference[name])
            if not check.ok and check.dtype in UNIT_ROUNDOFF:
                beyond[len(checks)] = runs
            checks.append(SampledCheck(kernel.index, kernel.kind, len(chosen), grid_blocks, got.size, checked, check))
    if beyond:  # checked again against the reference's own spread (backends.check)
        names = sorted({checks[k].check.name for k in beyond})
        spreads = rounding_spread(plan.graph, _inputs(plan, seed), names, reference, seed)
        for k, runs in beyond.items():
            name = checks[k].check.name
            checks[k] = replace(checks[k], check=check_written(plan, name, runs, reference[name], spreads[name])[1])
    return checks, counted


def sampled_table(checks: list[SampledCheck], width: int = PIPED_WIDTH) -> str:
    """The checks as a text table."""
    rows = [[str(c.group), c.kind, c.check.name, f"{c.blocks}/{c.grid_blocks}", f"{c.checked:,}/{c.elements:,}",
             c.check.dtype, f"{c.check.max_abs_error:.3g}", f"{c.check.error_ratio:.3g}",
             ("yes" if c.ok else "NO") + (" (ill-conditioned)" if c.check.ill_conditioned else "")]
            for c in checks]
    title = ("Kernels run alone on sampled blocks (the first, the last, evenly spaced between), on the NumPy "
             "reference's inputs: the elements they wrote against the reference (tolerances in docs/backends.md)")
    return table_text(title, [(["group", "kind", "output", "blocks", "elements checked", "dtype", "max abs error",
                                "error / tolerance", "within tolerance"], rows)], {"output"}, width,
                      {"kind", "dtype"})
