"""Counters of an emulated run, as Nsight Compute defines them (``docs/backends.md``,
*Counters*).

A program built with ``-DEMU_PROFILE`` records every access the kernels make through
``PART_LDG``/``PART_STG``/``PART_LDS``/``PART_STS`` (and WMMA loads and stores, which
the emulator header models) and writes, per launch, one line per (site, region) to
``counters.tsv``; :func:`parse` reads it back per kernel.

- A *request* is one warp-level execution of an access: lane k's n-th execution of a
  site since its warp last converged (a barrier, a warp collective) pairs with the
  other lanes' n-th.
- Global memory: a request's *sectors* are the distinct 32-byte aligned segments its
  lanes touch, its *ideal* ``ceil(distinct bytes / 32)``; efficiency is ideal over
  sectors (1 when coalesced).
- Shared memory: 32 banks of 4 bytes; a request takes, per phase (the warp for
  accesses of up to 4 bytes, each half-warp for 8, each quarter-warp for 16), as many
  *wavefronts* as the most distinct 4-byte words one bank holds; its *ideal* is the
  number of phases. Wavefronts over ideal is the bank-conflict factor (1: none).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from partitioner.report import PIPED_WIDTH, table_text

from ..base import BackendError
from .render import Kernel

#: Access kinds of the counters file: (memory space, direction).
KINDS = {"ldg": ("global", "load"), "stg": ("global", "store"), "lds": ("shared", "load"),
         "sts": ("shared", "store")}
#: Warp-level instructions the emulator counts besides memory requests.
OPS = ("barriers", "warp_syncs", "shuffles", "votes", "mma")
#: The region of a contraction's or attention's operand fragment reads.
MAIN_LOOP = "main loop"
#: The templates' regions (``PART_REGION``) in the order a kernel runs them.
REGIONS = ("tile loads", MAIN_LOOP, "epilogue", "score writes")
#: The file the emulated program is compiled from (``emulate.py``).
PROGRAM = "plan.cpp"


@dataclass(frozen=True)
class Requests:
    """Requests of one memory space and direction, summed.

    ``units`` are sectors (global) or wavefronts (shared); ``ideal`` the fewest
    the same bytes could take (``ceil(bytes / 32)`` per request; the phases per
    request); ``bytes`` the distinct bytes each request touched, summed.
    """

    space: str
    requests: int = 0
    units: int = 0
    ideal: int = 0
    bytes: int = 0

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.space, self.requests + other.requests, self.units + other.units,
                        self.ideal + other.ideal, self.bytes + other.bytes)

    @property
    def efficiency(self) -> float | None:
        """Global memory: ideal sectors over sectors (1.0 when coalesced); ``None``
        without requests."""
        return self.ideal / self.units if self.units else None

    @property
    def per_request(self) -> float | None:
        """Shared memory: wavefronts per request; ``None`` without requests."""
        return self.units / self.requests if self.requests else None

    @property
    def ideal_per_request(self) -> float | None:
        """Shared memory: the phases a request needs, on average."""
        return self.ideal / self.requests if self.requests else None

    @property
    def conflict(self) -> float | None:
        """Shared memory: wavefronts over the ideal (1.0 without bank conflicts)."""
        return self.units / self.ideal if self.ideal else None

    def to_dict(self) -> dict:
        if self.space == "global":
            return {"requests": self.requests, "sectors": self.units, "ideal_sectors": self.ideal,
                    "bytes": self.bytes, "efficiency": self.efficiency}
        return {"requests": self.requests, "wavefronts": self.units, "ideal_wavefronts": self.ideal,
                "bytes": self.bytes, "wavefronts_per_request": self.per_request,
                "ideal_per_request": self.ideal_per_request, "conflict_factor": self.conflict}


@dataclass(frozen=True)
class Site:
    """One access, in one ``region``: in the kernel's source (``file`` the kernel's
    file as ``--emit`` writes it, ``line`` in it, ``label`` the access's text) or a
    WMMA load or store that the emulator header models (``file`` the header)."""

    kind: str
    file: str
    line: int
    region: str
    label: str
    counts: Requests

    def to_dict(self) -> dict:
        space, direction = KINDS[self.kind]
        return {"space": space, "direction": direction, "file": self.file, "line": self.line,
                "region": self.region, "access": self.label, **self.counts.to_dict()}


@dataclass
class KernelCounters:
    """What one launch counted: ``blocks`` emulated of ``grid_blocks``, warp-level
    instruction counts ``ops`` (``OPS``), and every site."""

    kernel: Kernel
    blocks: int
    grid_blocks: int
    ops: dict[str, int]
    sites: list[Site] = field(default_factory=list)

    def requests(self, kind: str, region: str | None = None) -> Requests:
        """Requests of ``kind`` (``ldg``, ``stg``, ``lds``, ``sts``), in ``region`` or
        in all of them."""
        total = Requests(KINDS[kind][0])
        for site in self.sites:
            if site.kind == kind and (region is None or site.region == region):
                total += site.counts
        return total

    @property
    def regions(self) -> list[str]:
        """The named regions with requests, in the order of ``REGIONS``."""
        return sorted({s.region for s in self.sites if s.region}, key=_region_order)

    def to_dict(self) -> dict:
        k = self.kernel
        memory = {space: {direction: self.requests(kind).to_dict() for kind, (sp, direction) in KINDS.items()
                          if sp == space} for space in ("global", "shared")}
        regions = {r: {space: {direction: self.requests(kind, r).to_dict()
                               for kind, (sp, direction) in KINDS.items() if sp == space}
                       for space in ("global", "shared")} for r in self.regions}
        instructions = {f"{space}_{direction}s": self.requests(kind).requests
                        for kind, (space, direction) in KINDS.items()}
        return {"group": k.index, "kind": k.kind, "kernel": k.name, "ops": list(k.ops), "blocks": self.blocks,
                "grid_blocks": self.grid_blocks, **memory, "regions": regions,
                "instructions": {**instructions, **self.ops}, "sites": [s.to_dict() for s in self.sites]}


def _region_order(region: str) -> tuple:
    return (REGIONS.index(region), "") if region in REGIONS else (len(REGIONS), region)


def parse(text: str, kernels: list[Kernel], first_lines: dict[str, int]) -> list[KernelCounters]:
    """The counters file of a run of ``kernels`` (launched in this order), per kernel.

    Parameters
    ----------
    text : str
        The file's contents.
    kernels : list of Kernel
        The kernels launched, in order.
    first_lines : dict of str to int
        Line of the emulated program (``PROGRAM``) where each kernel's source
        begins, by kernel name: sites are reported by line in the kernel's file.

    Returns
    -------
    list of KernelCounters
        One per launch, in launch order.

    Raises
    ------
    BackendError
        The file does not hold one launch per kernel, or a line is malformed.
    """
    out: list[KernelCounters] = []
    merged: dict[tuple, Requests] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        try:
            if fields[0] == "launch":
                ops = dict(f.split("=") for f in fields[4:])
                out.append(KernelCounters(kernels[int(fields[1])], int(fields[2]), int(fields[3]),
                                          {name: int(ops[name]) for name in OPS}))
            elif fields[0] == "site" and len(fields) == 11:
                launch, kind, file, line_no, region = int(fields[1]), fields[2], fields[3], int(fields[4]), fields[5]
                counts = Requests(KINDS[kind][0], *(int(f) for f in fields[6:10]))
                if file == PROGRAM:
                    kernel = kernels[launch]
                    file, line_no = kernel.file_name, line_no - first_lines[kernel.name] + 1
                key = (launch, kind, file, line_no, region, fields[10])  # one site per WMMA fragment type: merged
                merged[key] = merged[key] + counts if key in merged else counts
            else:
                raise ValueError(fields[0])
        except (IndexError, KeyError, ValueError):
            raise BackendError(f"the emulator's counters file is malformed at line {number}: {line[:80]!r}") from None
    if len(out) != len(kernels):
        raise BackendError(f"the emulator counted {len(out)} launch(es) for {len(kernels)} kernel(s)")
    # by region in running order, then by file and line
    for (launch, kind, file, line_no, region, label), counts in sorted(
            merged.items(), key=lambda item: (item[0][0], _region_order(item[0][4]), item[0][2], item[0][3])):
        out[launch].sites.append(Site(kind, file, line_no, region, label, counts))
    return out


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _banks(r: Requests) -> str:
    """``wavefronts per request (ideal)``, or ``-``."""
    return "-" if not r.requests else f"{r.per_request:.2f} ({r.ideal_per_request:.2f})"


def main_loop_summary(counted: list[KernelCounters]) -> str:
    """One line on the shared-memory loads of every contraction's and attention's main
    loop: the worst bank-conflict factor and where (empty without such loops)."""
    loops = [(c.requests("lds", MAIN_LOOP), c) for c in counted]
    loops = [(r, c) for r, c in loops if r.requests]
    if not loops:
        return ""
    worst, where = max(loops, key=lambda pair: pair[0].conflict)
    return (f"main loops: shared-memory operand reads take at most {worst.conflict:.2f}x their ideal wavefronts "
            f"({worst.per_request:.2f} per request, ideal {worst.ideal_per_request:.2f}: group {where.kernel.index}, "
            f"{where.kernel.kind}) over {len(loops)} kernel(s)\n")


def counters_text(counted: list[KernelCounters], width: int = PIPED_WIDTH) -> str:
    """The counters as text tables.

    Parameters
    ----------
    counted : list of KernelCounters
        From :func:`parse`.
    width : int
        Columns the tables may take.

    Returns
    -------
    str
        Memory per kernel, per named region, the instruction mix, and a line on the
        main loops' bank conflicts.
    """
    emulated = all(c.blocks == c.grid_blocks for c in counted)
    blocks = "every block" if emulated else "sampled blocks (see 'blocks')"
    memory = [[str(c.kernel.index), c.kernel.kind, f"{c.blocks}/{c.grid_blocks}",
               _ratio(c.requests("ldg").efficiency), _ratio(c.requests("stg").efficiency),
               _banks(c.requests("lds")), _banks(c.requests("sts")), _banks(c.requests("lds", MAIN_LOOP))]
              for c in counted]
    out = [table_text(f"Memory counters per kernel, emulated ({blocks}; Nsight Compute's definitions, "
                      "docs/backends.md): global efficiency = ideal / requested sectors; shared: wavefronts "
                      "per request (ideal)",
                      [(["group", "kind", "blocks", "ld.global eff", "st.global eff", "ld.shared wf/req",
                         "st.shared wf/req", "main loop ld.shared"], memory)], set(), width, {"kind"})]
    regions = [[str(c.kernel.index), region, _ratio(c.requests("ldg", region).efficiency),
                _ratio(c.requests("stg", region).efficiency), _banks(c.requests("lds", region)),
                _banks(c.requests("sts", region))] for c in counted for region in c.regions]
    if regions:
        out.append(table_text("Per named region", [(["group", "region", "ld.global eff", "st.global eff",
                                                    "ld.shared wf/req", "st.shared wf/req"], regions)],
                              set(), width, {"region"}))
    mix = [[str(c.kernel.index), c.kernel.kind, *(f"{c.requests(kind).requests:,}" for kind in KINDS),
            *(f"{c.ops[name]:,}" for name in OPS)] for c in counted]
    out.append(table_text("Instruction mix per kernel (warp-level instructions executed)",
                          [(["group", "kind", "ld.global", "st.global", "ld.shared", "st.shared", "barriers",
                             "syncwarp", "shuffles", "votes", "mma"], mix)], set(), width, {"kind"}))
    out.append(main_loop_summary(counted))
    return "".join(out)
