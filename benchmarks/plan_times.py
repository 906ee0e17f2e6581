"""Planning time and plan quality of the ILP, on the corpus or on a size ladder.

Run: python benchmarks/plan_times.py [--hardware h100] [--time-limit 60] [--recompute]
     python benchmarks/plan_times.py --ladder [--repeat 3] [--cache /tmp/ladder]

The default prints every strategy's modelled time on every graph in graphs/ (with
``--recompute``, the ilp's plan with recomputation too, and what it saves). With
``--ladder`` it plans GPT-2 at 1-48 layers, a full 32-layer Llama-7B, BERT-large,
ResNet-101/152, and 2-layer Phi-2, Phi-3 and Swin (exported by ``graphs/export_models.py --ladder`` into the cache
folder when missing; that needs the corpus extra) and prints ops, candidates,
status, gap, CPU seconds, peak RSS and the ratio to the previous rung of the same
family. Each graph is planned in a fresh process, so that peak RSS is its own;
with ``--repeat N``, in N fresh processes one after another, and the CPU seconds
are the least of the N (the machine's noise only ever adds time: the least is the
steadiest estimate of the work, as ``timeit`` takes it). Modelled times come from
the cost model; CPU seconds and RSS are measured in this one run, on this machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LADDER = [*(f"gpt2_{n}l_b8_s1024_f16" for n in (1, 2, 4, 8, 12, 24, 48)), "bert_large_24l_b32_s128_f16",
          "resnet101_b32_f16", "resnet152_b32_f16", "llama7b_32l_b4_s2048_bf16", "phi2_2l_b4_s2048_f16",
          "phi3_2l_b4_s2048_bf16", "swin_2l_b32_f16"]


def corpus(args: argparse.Namespace) -> None:
    from partitioner import compare, load_graph, partition

    extra = (" ilp --recompute us | saved | recomputed ops | candidates | scenarios | s | status |", "---|" * 7) \
        if args.recompute else ("", "")
    print("| graph | ops | none us | greedy us | ilp us | ilp/greedy | candidates | enumerate s | greedy s "
          f"| ilp s | status | gap |{extra[0]}")
    print(f"|---|---|---|---|---|---|---|---|---|---|---|---|{extra[1]}")
    for path in sorted((ROOT / "graphs").glob("*.yaml")):
        graph = load_graph(path)
        none, greedy, ilp = compare(graph, args.hardware, ("none", "greedy", "ilp"), args.time_limit)
        d = ilp.solver.details
        row = (f"| {graph.name} | {len(graph.ops)} | {none.cost.modeled_time_us:,.1f} | "
               f"{greedy.cost.modeled_time_us:,.1f} | {ilp.cost.modeled_time_us:,.1f} | "
               f"{ilp.cost.modeled_time_us / greedy.cost.modeled_time_us:.3f} | {d['candidates']} | "
               f"{d.get('enumeration_s', 0):.1f} | {greedy.solver.wall_s:.2f} | {ilp.solver.wall_s:.1f} | "
               f"{ilp.solver.status} | {ilp.solver.gap:.2%} |")
        if args.recompute:
            again = partition(graph, "ilp", args.hardware, args.time_limit, recompute=True)
            r = again.solver.details
            held = [name for ops in again.groups for name in ops]
            twice = sorted({name for name in held if held.count(name) > 1 and not graph.ops[name].is_view})
            saved = 1 - again.cost.modeled_time_us / ilp.cost.modeled_time_us
            row += (f" {again.cost.modeled_time_us:,.1f} | {saved:.2%} | {', '.join(twice) or '-'} | "
                    f"{r['candidates']} | {r.get('recomputation_scenarios', 1)} | {again.solver.wall_s:.1f} | "
                    f"{again.solver.status} |")
        print(row, flush=True)


def plan_one(path: str, hardware: str, time_limit: float | None) -> dict:
    """Plans one graph with the ilp (run in a child process by ``ladder``)."""
    from partitioner import load_graph, partition

    graph = load_graph(path)
    start = time.process_time()
    plan = partition(graph, "ilp", hardware, time_limit)
    d = plan.solver.details
    return {"graph": graph.name, "ops": len(graph.ops), "candidates": d["candidates"], "status": plan.solver.status,
            "gap": plan.solver.gap, "cpu_s": time.process_time() - start, "us": plan.cost.modeled_time_us,
            "parts": d.get("parts", 0), "reused": d.get("parts_reused", 0),
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "stopped_by": d.get("stopped_by", [])}


def ladder(args: argparse.Namespace) -> None:
    args.cache.mkdir(parents=True, exist_ok=True)
    missing = [name for name in LADDER if not (args.cache / f"{name}.yaml").exists()]
    if missing:
        subprocess.run([sys.executable, str(ROOT / "graphs" / "export_models.py"), *missing, "--out", str(args.cache)],
                       check=True)
    print("| graph | ops | candidates | parts (reused) | status | gap | CPU s | ratio to previous rung "
          "| peak RSS MB | ilp us | stopped by |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    previous: dict[str, float] = {}
    for name in LADDER:
        code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from plan_times import plan_one; "
                f"print(json.dumps(plan_one({str(args.cache / (name + '.yaml'))!r}, {args.hardware!r}, "
                f"{args.time_limit!r})))")
        runs = [json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                          check=True).stdout.splitlines()[-1]) for _ in range(args.repeat)]
        if any((x["status"], x["us"], x["candidates"]) != (runs[0]["status"], runs[0]["us"], runs[0]["candidates"])
               for x in runs):
            raise SystemExit(f"{name}: the runs disagree on status, plan cost or candidates: {runs}")
        r = min(runs, key=lambda x: x["cpu_s"])
        family = name.split("_")[0]
        ratio = f"{r['cpu_s'] / previous[family]:.2f}x" if family in previous else "-"
        previous[family] = r["cpu_s"]
        print(f"| {r['graph']} | {r['ops']} | {r['candidates']:,} | {r['parts']} ({r['reused']}) | {r['status']} | "
              f"{r['gap']:.2%} | {r['cpu_s']:.1f} | {ratio} | {r['rss_mb']:,.0f} | {r['us']:,.1f} | "
              f"{', '.join(r['stopped_by']) or '-'} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h100")
    parser.add_argument("--time-limit", type=float, default=None, help="the ILP's work budget (default: its own, 60)")
    parser.add_argument("--ladder", action="store_true", help="the size ladder instead of the corpus")
    parser.add_argument("--recompute", action="store_true",
                        help="on the corpus, plan with the ilp's recomputation too and print what it saves")
    parser.add_argument("--repeat", type=int, default=1,
                        help="with --ladder, plan each graph in this many fresh processes and report the least CPU s")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/partitioner-ladder"),
                        help="where the ladder's graphs are exported (default /tmp/partitioner-ladder)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    measured = (f"CPU seconds (the least of {args.repeat} fresh runs) and peak RSS" if args.ladder
                else "planning wall times")
    print(f"hardware {args.hardware}; machine: {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; us are modelled, {measured} measured in this run\n")
    (ladder if args.ladder else corpus)(args)


if __name__ == "__main__":
    main()
