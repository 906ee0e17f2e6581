"""Every strategy on every graph in graphs/ and every hardware profile, side by side.

Run: python benchmarks/compare.py [--hardware h100 h200 a100] [--time-limit 120]
     [--markdown docs/results.md] [--figure docs/results.png]

For each graph and profile, every strategy (none, greedy, xla, xla-fmha, tvm, inductor, ilp)
plans the graph, one after another in this one process, so that their planning
wall times are measured side by side on the same machine. Prints the Markdown and
writes it to ``--markdown``: a summary (on how many graph/profile pairs the ILP is
strictly better than the best heuristic, by how much, planning times on the
largest graph), the ILP's advantage per graph and profile, and every strategy's
modelled bytes, launches and time and measured planning time. ``--figure`` gets a
bar chart of modelled time per strategy per graph (log scale), one panel per
profile, and each heuristic's time relative to the ILP's. Modelled figures come from the cost model (docs/cost-model.md); only
planning times are measured. Needs matplotlib (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from partitioner import Plan, compare, load_graph
from partitioner.exits import unwritable
from partitioner.report import COMPILERS, HEURISTICS, ilp_advantage

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("none", *HEURISTICS, "ilp")
#: ILP better than the best heuristic by more than this relative margin counts as
#: strictly better (the objective is exact; this only absorbs float rounding of µs).
STRICT = 1e-9


@dataclass
class Row:
    """One graph planned by every strategy on one profile."""

    graph: str
    ops: int
    hardware: str
    plans: dict[str, Plan]

    def advantage(self, among: tuple[str, ...] = HEURISTICS) -> dict:
        """:func:`ilp_advantage` over the strategies ``among``."""
        return ilp_advantage(list(self.plans.values()), among)

    def strictly_better(self, among: tuple[str, ...] = HEURISTICS) -> bool:
        adv = self.advantage(among)
        return adv["ilp_value"] < adv["best_value"] * (1 - STRICT)


def run(hardware: list[str], time_limit: float) -> list[Row]:
    rows = []
    for path in sorted((ROOT / "graphs").glob("*.yaml")):
        graph = load_graph(path)
        for hw in hardware:
            plans = {p.strategy: p for p in compare(graph, hw, STRATEGIES, time_limit)}
            rows.append(Row(graph.name, len(graph.ops), hw, plans))
            print(f"planned {graph.name} on {hw}", file=sys.stderr, flush=True)
    return rows


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _versus(rows: list[Row], among: tuple[str, ...], what: str) -> list[str]:
    better = [r for r in rows if r.strictly_better(among)]
    lines = [f"- Against the {what}: the ILP is strictly better on **{len(better)} of {len(rows)}** graph/profile "
             f"pairs ({len({r.graph for r in better})} of {len({r.graph for r in rows})} graphs) and equal on the "
             "rest."]
    if better:
        savings = [r.advantage(among)["saving"] for r in better]
        top = max(better, key=lambda r: r.advantage(among)["saving"])
        lines.append(f"  Where better, it saves a median **{_pct(statistics.median(savings))}** and at most "
                     f"**{_pct(max(savings))}** of that heuristic's modelled time (max: {top.graph} on {top.hardware}, "
                     f"against {top.advantage(among)['best']}).")
    wins: dict[str, int] = {}
    for r in rows:
        wins[r.advantage(among)["best"]] = wins.get(r.advantage(among)["best"], 0) + 1
    lines.append("  Best of them per pair: " + ", ".join(f"{k} {v}" for k, v in wins.items()) + ".")
    return lines


def summary(rows: list[Row]) -> list[str]:
    """The headline numbers, as Markdown lines. The ILP is exact over all legal plans,
    so it is never worse than any heuristic; the question is by how much it is better."""
    largest = max(rows, key=lambda r: (r.ops, r.graph))
    times = ", ".join(f"{s} {largest.plans[s].solver.wall_s:.2f} s" for s in STRATEGIES)
    return [
        *_versus(rows, COMPILERS, "best production-compiler heuristic (xla, xla-fmha, tvm, inductor)"),
        *_versus(rows, HEURISTICS, "best heuristic including this project's greedy"),
        f"- Planning time on the largest graph ({largest.graph}, {largest.ops} ops, {largest.hardware}), "
        f"measured in this run: {times}.",
    ]


def advantage_table(rows: list[Row]) -> list[str]:
    lines = ["| graph | ops | hardware | best compiler | its us | ilp saves | best heuristic | its us | ilp us "
             "| ilp saves | ilp status |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, h = r.advantage(COMPILERS), r.advantage(HEURISTICS)
        lines.append(f"| {r.graph} | {r.ops} | {r.hardware} | {c['best']} | {c['best_value']:,.1f} | {_pct(c['saving'])} "
                     f"| {h['best']} | {h['best_value']:,.1f} | {h['ilp_value']:,.1f} | {_pct(h['saving'])} "
                     f"| {r.plans['ilp'].solver.status} |")
    return lines


def full_table(rows: list[Row]) -> list[str]:
    lines = ["| graph | hardware | strategy | read+written MB | launches | time us | vs ilp | plan time s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ilp = r.plans["ilp"].cost.modeled_time_us
        for name in STRATEGIES:
            c = r.plans[name].cost
            lines.append(f"| {r.graph} | {r.hardware} | {name} | {(c.bytes_read + c.bytes_written) / 1e6:,.1f} "
                         f"| {c.launches} | {c.modeled_time_us:,.1f} | {c.modeled_time_us / ilp:.3f}x "
                         f"| {r.plans[name].solver.wall_s:.3f} |")
    return lines


def markdown(rows: list[Row], figure: Path | None, markdown_path: Path) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Results: the ILP against the fusion heuristics of production compilers",
        "",
        "Generated by `python benchmarks/compare.py` from the current code; do not edit by hand. Every strategy "
        "plans every graph in `graphs/` under the same cost model (`docs/cost-model.md`) and the same fusion "
        "rules (`docs/legality.md`); the baselines are described in `docs/baselines.md`. Times in us are "
        "**modelled**; planning times (s) are **measured** in one run, strategies side by side, on this machine: "
        f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "## Summary",
        "",
        *summary(rows),
        "",
    ]
    if figure is not None:
        rel = os.path.relpath(figure, markdown_path.parent)
        lines += [f"![Modelled time per strategy per graph]({rel})", "",
                  "Modelled time per strategy and graph (log scale), one panel per hardware profile; the last "
                  "panel shows each heuristic's time over the ILP's on the first profile.", ""]
    lines += ["## ILP against the best heuristic", "", *advantage_table(rows), "",
              "## Every strategy", "",
              "`read+written MB`: global-memory traffic; `vs ilp`: modelled time over the ILP's.", "",
              *full_table(rows), ""]
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    """Grouped bars of modelled time per strategy per graph (log scale), a panel per
    profile, and a last panel with each heuristic's time over the ILP's (first profile)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(dict.fromkeys(r.hardware for r in rows))
    graphs = list(dict.fromkeys(r.graph for r in rows))
    fig, axes = plt.subplots(len(profiles) + 1, 1, figsize=(14, 4 * (len(profiles) + 1)), squeeze=False)
    colours = dict(zip(STRATEGIES, plt.get_cmap("tab10").colors))

    def bars(ax, hw: str, names: tuple[str, ...], value) -> None:
        by_graph = {r.graph: r for r in rows if r.hardware == hw}
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            xs = [g + (k - (len(names) - 1) / 2) * width for g in range(len(graphs))]
            ax.bar(xs, [value(by_graph[g], name) for g in graphs], width, label=name, color=colours[name],
                   edgecolor="black" if name == "ilp" else "none", linewidth=0.8)
        ax.set_xticks(range(len(graphs)))
        ax.set_xticklabels(graphs, rotation=12, ha="right", fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)

    for ax, hw in zip(axes[:-1, 0], profiles):
        bars(ax, hw, STRATEGIES, lambda r, n: r.plans[n].cost.modeled_time_us)
        ax.set_yscale("log")
        ax.set_ylabel("modelled time (us, log)")
        ax.set_title(f"{hw}: modelled time per strategy (lower is better)", loc="left", fontsize=11)
    ax = axes[-1, 0]
    bars(ax, profiles[0], HEURISTICS,
         lambda r, n: r.plans[n].cost.modeled_time_us / r.plans["ilp"].cost.modeled_time_us)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_ylim(0.95, None)
    ax.set_ylabel("time / ilp time")
    unproven = [r.graph for r in rows if r.hardware == profiles[0] and r.plans["ilp"].solver.status != "OPTIMAL"]
    baseline = f"the ILP plan; not proven optimal on {', '.join(unproven)}" if unproven else "the ILP's proven optimum"
    ax.set_title(f"{profiles[0]}: each heuristic's modelled time relative to the ILP's (1.0 = {baseline})",
                 loc="left", fontsize=11)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=len(STRATEGIES), loc="upper center", fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", nargs="+", default=["h100", "h200", "a100"])
    parser.add_argument("--time-limit", type=float, default=120.0, help="ILP limit per graph, s")
    parser.add_argument("--markdown", type=Path, default=ROOT / "docs" / "results.md")
    parser.add_argument("--figure", type=Path, default=ROOT / "docs" / "results.png")
    args = parser.parse_args()
    # what the end needs is checked before the minutes of planning
    for path in (args.markdown, args.figure):
        problem = unwritable(path)
        if problem:
            parser.error(f"cannot write {path}: {problem}")
    if importlib.util.find_spec("matplotlib") is None:
        parser.error("the figure needs matplotlib: pip install -e '.[bench]'")
    rows = run(args.hardware, args.time_limit)
    plot(rows, args.figure)
    text = markdown(rows, args.figure, args.markdown)
    args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
