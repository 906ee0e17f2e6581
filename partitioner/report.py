"""Plan reports: a text report (``rich`` tables) and a JSON object.

Every cost figure is *modelled* (``docs/cost-model.md``); the only measured figure
is planning wall time, measured on the machine that ran the planner.
"""

from __future__ import annotations

import io
import shutil
import textwrap

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .cost import UNITS, contraction_dims, gemm_dims
from .plan import Plan

_MODELLED = "modelled by the cost model (docs/cost-model.md), not measured"
_MEASURED = "planning wall time measured on this machine"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f}"


def _gap(plan: Plan) -> str:
    return "-" if plan.solver.gap is None else f"{plan.solver.gap:.2%}"


def _header(plan: Plan) -> list[str]:
    g, hw = plan.graph, plan.hardware
    views = sum(1 for op in g.ops.values() if op.is_view)
    lines = [
        f"graph     {g.name}: {len(g.ops)} ops ({views} views, {len(g.composites)} composites expanded), "
        f"{len(g.inputs)} inputs, {len(g.outputs)} outputs" + (f"; source: {g.source}" if g.source else ""),
        f"hardware  {hw.name}: HBM {hw.hbm_bandwidth_gb_per_s:g} GB/s, launch overhead {hw.launch_overhead_us:g} us, "
        f"shared memory {hw.smem_per_block_optin_bytes} B/block, {hw.registers_per_thread} registers/thread",
    ]
    if g.dead_ops:
        shown = ", ".join(g.dead_ops[:8]) + (", ..." if len(g.dead_ops) > 8 else "")
        lines.append(f"dead code {len(g.dead_ops)} op(s) reach no output and are kept: {shown}")
    s = plan.solver
    bound = "" if s.bound is None else f", lower bound {s.bound:,.1f} {UNITS[plan.objective]}, gap {_gap(plan)}"
    goal = f" (objective: {plan.objective}{', recompute' * plan.recompute})" if plan.strategy == "ilp" else ""
    status = s.status
    if status == "WARM_START" and s.details.get("warm_start"):  # say whose plan it kept
        status += f" (the plan of {s.details['warm_start']})"
    lines.append(f"strategy  {plan.strategy}{goal}: {status}{bound}; planned in {s.wall_s:.2f} s ({_MEASURED})")
    if s.details.get("stopped_by"):
        # only the time limit is the user's to raise; the caps are fixed
        more = "; a larger --time-limit searches further" if any("--time-limit" in b for b in s.details["stopped_by"]) \
            else ""
        lines.append(f"unproven  stopped by {' and '.join(s.details['stopped_by'])}{more}")
    return lines


def _budget(used: int, limit: int) -> str:
    flag = " OVER" if used > limit else ""
    return f"{used}/{limit}{flag}"


#: Columns of text written to a file or a pipe (``$COLUMNS`` overrides it).
PIPED_WIDTH = 100
#: The narrowest a wrapping text column (op lists, reasons) gets before a table turns compact.
TEXT_MIN = 16


#: The narrowest layout: below it (``COLUMNS=10``) wrapping split numbers and names
#: mid-word; the terminal wraps a 40-column line instead, whole.
MIN_WIDTH = 40


def output_width() -> int:
    """Columns to lay text out in: the terminal's, else ``$COLUMNS``, else
    ``PIPED_WIDTH``; at least :data:`MIN_WIDTH`."""
    return max(MIN_WIDTH, shutil.get_terminal_size((PIPED_WIDTH, 24)).columns)


def _fits(headers: list[str], rows: list[list[str]], wrapping: set[str], width: int) -> bool:
    """Whether a table of these columns fits ``width`` with every cell and header of a
    non-wrapping column on one line (rich wraps neither; its borders take 3 columns
    per column, plus one)."""
    need = 1
    for k, header in enumerate(headers):
        need += 3 + (TEXT_MIN if header in wrapping else _widest(header, rows, k))
    return need <= width


def _widest(header: str, rows: list[list[str]], k: int) -> int:
    """Columns a non-wrapping column ``k`` needs: its header's or its widest cell's."""
    return max([len(header)] + [len(str(row[k])) for row in rows])


def table_text(title: str, layouts: list[tuple[list[str], list[list]]], wrapping: set[str], width: int,
               left: set[str] = frozenset()) -> str:
    """The first of ``layouts`` (``(headers, rows)``, widest first) that fits ``width``
    as a table whose numbers are never cut or wrapped (columns in ``wrapping`` fold
    instead); when none fits, the last as plain ``header: value`` lines."""
    out = io.StringIO()
    console = Console(file=out, width=width, no_color=True, highlight=False, soft_wrap=False)
    for headers, rows in layouts:
        if _fits(headers, rows, wrapping, width):
            table = Table(title=title, title_justify="left")
            for k, header in enumerate(headers):
                table.add_column(header, justify="left" if header in wrapping | left else "right",
                                 overflow="fold", no_wrap=header not in wrapping,
                                 min_width=TEXT_MIN if header in wrapping else _widest(header, rows, k))
            for row in rows:
                table.add_row(*(Text(str(cell)) for cell in row))  # Text: brackets are not markup
            console.print(table)
            return out.getvalue()
    headers, rows = layouts[-1]
    console.print(title, markup=False)
    for row in rows:
        line, indent = "", "  "  # a row's first line, then its continuation lines further in
        for pair in (f"{h}: {cell}" for h, cell in zip(headers, row)):
            if line and len(line) + 2 + len(pair) > width:  # break between fields, never inside one
                out.write(line + "\n")
                line, indent = "", "    "
            if not line and 4 + len(pair) > width:  # a long text field (op names) wraps at its spaces,
                # and a name wider than the line folds
                *full, last = textwrap.wrap(pair, max(1, width - 4), break_on_hyphens=False) or [""]
                out.writelines(f"{indent}{part}\n" for part in full)
                line, indent = "    " + last, "    "
            else:
                line = f"{line}; {pair}" if line else indent + pair
        out.write(line + "\n")
    return out.getvalue()


def _ops_summary(ops: tuple[str, ...]) -> str:
    return ", ".join(ops) if len(ops) <= 3 else f"{ops[0]}, {ops[1]}, ..., {ops[-1]} ({len(ops)} ops)"


def _over(b) -> str:
    """The budgets a group exceeds, or ``ok``."""
    over = [name.replace("_", " ") for name, _, _ in b.over()]
    return "OVER " + ", ".join(over) if over else "ok"


def _groups_table(plan: Plan, width: int) -> str:
    kernels = [(k, g) for k, g in enumerate(plan.cost.groups) if g.kind != "view"]
    full = (["#", "kind", "ops", "read MB", "written MB", "time us", "traffic us", "compute us", "energy uJ",
             "smem B", "regs", "params B", "ops/cap"],
            [[str(k), g.kind, ", ".join(g.ops), _mb(g.bytes_read), _mb(g.bytes_written), f"{g.modeled_time_us:,.2f}",
              f"{g.traffic_time_us:,.2f}", f"{g.compute_time_us:,.2f}", f"{g.energy_uj:,.1f}",
              _budget(g.budgets.shared_memory, g.budgets.shared_memory_limit),
              _budget(g.budgets.registers, g.budgets.registers_limit),
              _budget(g.budgets.kernel_params, g.budgets.kernel_params_limit),
              _budget(g.budgets.ops, g.budgets.ops_limit)] for k, g in kernels])
    compact = (["#", "kind", "ops", "MB", "time us", "budgets"],
               [[str(k), g.kind, _ops_summary(g.ops), _mb(g.bytes), f"{g.modeled_time_us:,.2f}", _over(g.budgets)]
                for k, g in kernels])
    title = (f"Fusion groups of the {plan.strategy} plan (#: position in launch order, as in --format json; the "
             f"missing numbers are groups of views alone, listed under views; times {_MODELLED})")
    return table_text(title, [full, compact], {"ops"}, width, {"kind", "budgets"})


def _tiling_lines(plan: Plan) -> list[str]:
    """One line per attention group: the FlashAttention tiling of its kernel."""
    return [f"attention #{k}: {g.tiling.describe()}" for k, g in enumerate(plan.cost.groups) if g.tiling is not None]


def _recomputed_lines(plan: Plan) -> list[str]:
    """One line per group that recomputes ops other groups compute too (never
    written: each group that reads one computes it)."""
    return [f"recomputed in #{k}: {', '.join(plan.graph.names(g.group.recomputed & plan.graph.compute_mask))}"
            for k, g in enumerate(plan.cost.groups) if g.group.recomputed & plan.graph.compute_mask]


def _horizontal_lines(plan: Plan) -> list[str]:
    """One line per horizontal contraction group: its products, one grid of their N
    tiles side by side, and the operand they share (read once)."""
    lines = []
    for k, g in enumerate(plan.cost.groups):
        products = [op for op in g.group.compute if op.op_class == "contraction"]
        if g.kind == "contraction" and len(products) > 1:
            batch, m, n, kk = contraction_dims(g.group)
            widths = " + ".join(str(gemm_dims(plan.graph, op)[2]) for op in products)
            batched = f"{batch} x " if batch > 1 else ""
            lines.append(f"horizontal #{k}: {len(products)} products ({', '.join(op.name for op in products)}) of "
                         f"one A operand '{products[0].inputs[0]}', one {batched}{m}x{n}x{kk} GEMM grid (N = {widths})")
    return lines


def _views_line(plan: Plan) -> str | None:
    views = [name for g in plan.cost.groups if g.kind == "view" for name in g.ops]
    if not views:
        return None
    shown = ", ".join(views[:12]) + (", ..." if len(views) > 12 else "")
    return f"views     {len(views)} reshape(s) outside any kernel, free (no launch, no bytes): {shown}"


def _totals_line(plan: Plan) -> str:
    c = plan.cost
    recomputed = f" ({c.recomputed_flops / 1e9:,.2f} recomputed)" if c.recomputed_flops else ""
    return (
        f"totals    launches {c.launches}, read {_mb(c.bytes_read)} MB, written {_mb(c.bytes_written)} MB, "
        f"{c.flops / 1e9:,.2f} GFLOP{recomputed}; time {c.modeled_time_us:,.1f} us, traffic-only time "
        f"{c.traffic_time_us:,.1f} us, energy {c.energy_uj:,.1f} uJ ({_MODELLED})"
    )


#: The heuristics ``--compare`` and ``benchmarks/compare.py`` set against the ILP:
#: this project's greedy and the production compilers' (docs/baselines.md), XLA
#: with its default flags and with its fused-attention rewrite turned on.
HEURISTICS = ("greedy", "xla", "xla-fmha", "tvm", "inductor")
COMPILERS = ("xla", "xla-fmha", "tvm", "inductor")
#: Totals this close (relative) are one objective value: plans sum per-group floats
#: in their own order, which can differ in the last bits ("-0.00% less").
TIE = 1e-12


def ilp_advantage(plans: list[Plan], among: tuple[str, ...] = HEURISTICS) -> dict | None:
    """How much better (modelled, under the ilp plan's objective) the ``ilp`` plan is
    than the best plan of the strategies ``among`` in ``plans``: ``{"objective": ...,
    "unit": "us" or "uJ", "best": name, "best_value": ..., "ilp_value": ..., "saving":
    fraction}``, where ``saving = 1 - ilp / best``; ``None`` without an ilp plan or
    one of ``among``. Totals within :data:`TIE` of each other are one value (the
    ilp's is given as the best's), not a saving of -0.00%."""
    by_name = {p.strategy: p for p in plans}
    rivals = [by_name[n] for n in among if n in by_name]
    if "ilp" not in by_name or not rivals:
        return None
    goal = by_name["ilp"].objective
    best = min(rivals, key=lambda p: p.cost.value(goal))  # the first of ``among`` on a tie
    ilp, value = by_name["ilp"].cost.value(goal), best.cost.value(goal)
    if abs(ilp - value) <= TIE * abs(value):
        ilp = value  # the same objective summed over other groups: float rounding, not a loss
    return {"objective": goal, "unit": UNITS[goal], "best": best.strategy, "best_value": value, "ilp_value": ilp,
            "saving": 1 - ilp / value if value else 0.0}


def comparison_table(plans: list[Plan], width: int = PIPED_WIDTH) -> str:
    """Side-by-side totals of several strategies' plans for one graph; with an ilp
    plan, each plan's time relative to it."""
    base = next((p for p in plans if p.strategy == "none"), plans[0])
    ilp = next((p for p in plans if p.strategy == "ilp"), None)
    goal = ilp.objective if ilp is not None else "time"
    headers = ["strategy", "launches", "read MB", "written MB", "time us", "traffic us", "energy uJ",
               f"vs none ({goal})"]
    headers += [f"vs ilp ({goal})"] if ilp is not None else []
    headers += ["plan time s", "status", "gap"]
    rows = []
    for p in plans:
        c = p.cost
        row = [p.strategy, str(c.launches), _mb(c.bytes_read), _mb(c.bytes_written), f"{c.modeled_time_us:,.1f}",
               f"{c.traffic_time_us:,.1f}", f"{c.energy_uj:,.1f}",
               f"{base.cost.value(goal) / c.value(goal):.2f}x" if c.value(goal) else "-"]
        if ilp is not None:
            row.append(f"{c.value(goal) / ilp.cost.value(goal):.3f}x" if ilp.cost.value(goal) else "-")
        rows.append(row + [f"{p.solver.wall_s:.2f}", p.solver.status, _gap(p)])
    shown = {"time": "time us", "traffic": "traffic us", "energy": "energy uJ"}[goal]
    dropped = {"read MB", "written MB", "time us", "traffic us", "energy uJ", f"vs none ({goal})", "plan time s"}
    keep = [k for k, h in enumerate(headers) if h not in dropped - {shown}]
    compact = ([headers[k] for k in keep], [[row[k] for k in keep] for row in rows])
    title = f"Strategies compared (bytes, times and energy {_MODELLED}; plan time {_MEASURED})"
    return table_text(title, [(headers, rows), compact], set(), width, {"strategy", "status"})


def advantage_lines(plans: list[Plan]) -> list[str]:
    """The ILP's modelled saving over the best heuristic, and over the best production
    compiler baseline when the comparison has one."""
    lines = []
    compared = {p.strategy for p in plans}
    for among, rival in ((HEURISTICS, "heuristic"), (COMPILERS, "compiler baseline")):
        adv = ilp_advantage(plans, among)
        if adv is None:
            continue
        if len(compared & set(among)) == 1:  # one rival only: name it, not "the best"
            what = f"{adv['best']} (the only {rival} compared)"
        else:
            what = f"best {rival} ({adv['best']})"
        less = "less modelled energy" if adv["objective"] == "energy" else (
            "less modelled time" if adv["objective"] == "time" else "less modelled traffic time")
        lines.append(f"ilp vs {what}: {adv['ilp_value']:,.1f} {adv['unit']} vs "
                     f"{adv['best_value']:,.1f} {adv['unit']}, {adv['saving']:.2%} {less}")
    return lines


def text_report(plan: Plan, comparison: list[Plan] | None = None, detailed: bool = True,
                width: int | None = None) -> str:
    """The plan as text: header, per-group table (``detailed``), totals, and the
    comparison table when ``comparison`` is given."""
    width = width or output_width()
    out = io.StringIO()
    console = Console(file=out, width=width, no_color=True, highlight=False, soft_wrap=False)
    for line in _header(plan):
        console.print(line, markup=False)
    if detailed:
        out.write(_groups_table(plan, width))
    else:
        for k, g in enumerate(plan.cost.groups):
            if g.kind != "view":
                console.print(f"  [{k}] {g.kind}: {', '.join(g.ops)}", markup=False)
    for line in _tiling_lines(plan) + _horizontal_lines(plan) + _recomputed_lines(plan):
        console.print(line, markup=False)
    views = _views_line(plan)
    if views:
        console.print(views, markup=False)
    console.print(_totals_line(plan), markup=False)
    if comparison:
        out.write(comparison_table(comparison, width))
        for line in advantage_lines(comparison):
            console.print(line, markup=False)
    return out.getvalue()


def json_report(plan: Plan, comparison: list[Plan] | None = None) -> dict:
    """The plan as one JSON-ready object (``Plan.to_dict``) plus, when given,
    ``comparison`` (each strategy's totals and solver status) and
    ``ilp_advantage`` / ``ilp_advantage_compilers`` (:func:`ilp_advantage` over every
    heuristic / over xla, tvm and inductor, when the comparison holds them and ilp)."""
    data = plan.to_dict()
    if comparison:
        data["comparison"] = [
            {"strategy": p.strategy, **p.to_dict()["totals"], "solver": p.to_dict()["solver"]} for p in comparison
        ]
        for key, among in (("ilp_advantage", HEURISTICS), ("ilp_advantage_compilers", COMPILERS)):
            adv = ilp_advantage(comparison, among)
            if adv is not None:
                data[key] = adv
    return data


def resource_table(rows: list[dict], width: int = PIPED_WIDTH) -> str:
    """A backend's :meth:`~backends.base.Backend.resources` rows as a text table: what
    the compiler measured beside the cost model's estimates."""
    arch = rows[0]["arch"] if rows else ""
    headers = ["group", "kind", "kernel", "regs ptxas", "regs est.", "spill B", "smem B", "smem est. B", "status"]
    cells = [[str(r["group"]), r["kind"], r["kernel"], str(r["registers"]), str(r["registers_estimate"]),
              str(r["spill_bytes"]), str(r["shared_memory"]), str(r["shared_memory_estimate"]), r["status"]]
             for r in rows]
    title = (f"Kernels compiled by nvcc for {arch}: ptxas figures (measured by the compiler) beside the cost "
             "model's estimates")
    return table_text(title, [(headers, cells)], set(), width, {"kind", "kernel", "status"})


def explain_text(explanations: list, a: str, b: str, width: int = PIPED_WIDTH) -> str:
    """``--explain``: per strategy, whether ``a`` and ``b`` share a group and why not
    (``explain.Explanation``; deltas modelled)."""
    rows = []
    for e in explanations:
        groups = f"{e.groups[0]}" if e.groups[0] == e.groups[1] else f"{e.groups[0]}, {e.groups[1]}"
        rows.append([e.strategy, e.verdict, groups, f"[{e.reason}] {e.message}" if e.reason else e.message])
    title = f"Do '{a}' and '{b}' share a kernel? (costs {_MODELLED})"
    return table_text(title, [(["strategy", "verdict", "groups", "why"], rows)], {"why"}, width,
                      {"strategy", "verdict"})
