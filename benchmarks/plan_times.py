"""Planning time and plan quality of every strategy on every graph in graphs/.

Run: python benchmarks/plan_times.py [--hardware h100] [--time-limit 120]

Prints one Markdown table. Modelled times come from the cost model; planning wall
times are measured in this one run, side by side, on this machine.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

from partitioner import compare, load_graph

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h100")
    parser.add_argument("--time-limit", type=float, default=120.0)
    args = parser.parse_args()
    print(f"hardware {args.hardware}; machine: {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; times in us are modelled, wall times measured\n")
    print("| graph | ops | none us | greedy us | ilp us | ilp/greedy | candidates | enumerate s | greedy s "
          "| ilp s | status | gap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted((ROOT / "graphs").glob("*.yaml")):
        graph = load_graph(path)
        none, greedy, ilp = compare(graph, args.hardware, ("none", "greedy", "ilp"), args.time_limit)
        d = ilp.solver.details
        print(f"| {graph.name} | {len(graph.ops)} | {none.cost.modeled_time_us:,.1f} | "
              f"{greedy.cost.modeled_time_us:,.1f} | {ilp.cost.modeled_time_us:,.1f} | "
              f"{ilp.cost.modeled_time_us / greedy.cost.modeled_time_us:.3f} | {d['candidates']} | "
              f"{d['enumeration_s']:.1f} | {greedy.solver.wall_s:.2f} | {ilp.solver.wall_s:.1f} | "
              f"{ilp.solver.status} | {ilp.solver.gap:.2%} |", flush=True)


if __name__ == "__main__":
    main()
