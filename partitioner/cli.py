"""``partition GRAPH [--report] ...``: argument parsing and wiring only.

Exit status: 0 on success; 1 when ``--run`` finds an output beyond tolerance, or
on an internal failure; 2 on bad input (graph, hardware profile, arguments) or a
request this machine cannot carry out (no nvcc, no GPU, a custom op to run). Errors are one line on stderr, never a traceback
(set ``PARTITIONER_DEBUG=1`` to see one for an internal failure).
"""

from __future__ import annotations

import argparse
import json
import sys

from backends.base import BackendError, load_backend
from backends.check import check_table, run_and_check
from backends.cuda.sampled import SAMPLE_BLOCKS, emulated_whole, sampled_table

from . import __version__
from .cost import DEFAULT_MAX_OPS, OBJECTIVES, UNITS
from .draw import OPS_VIEW_LIMIT, VIEWS, DrawError, check_can_draw, draw, resolve_view
from .errors import GraphError, HardwareError
from .exits import OneLineParser, guarded, unwritable, write_output
from .explain import explain
from .hardware import PROFILES, load_hardware
from .import_cli import main as import_main
from .loader import load_graph
from .report import HEURISTICS, explain_text, json_report, output_width, resource_table, text_report
from .strategies import STRATEGIES, compare, partition, time_limit_problem
from .values import provenance, provenance_text


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="partition",
        description="Partition an operator graph into GPU fusion groups under a cost model.",
        epilog="partition import SOURCE -o OUT.yaml imports an ONNX file or a torch model "
               "(partition import --help).",
    )
    p.add_argument("graph", help="graph file (.yaml, .yml or .json, format v1)")
    p.add_argument("--report", action="store_true",
                   help="per-group details and a comparison of the none, greedy and ilp strategies")
    p.add_argument("--compare", action="store_true",
                   help="compare every strategy (none, greedy, xla, xla-fmha, tvm, inductor, ilp) instead of none, "
                        "greedy, ilp")
    p.add_argument("--draw", metavar="FILE",
                   help="draw the plan to FILE (.svg, .png: needs Graphviz's dot; .dot: plain text)")
    p.add_argument("--draw-view", choices=VIEWS, default="auto",
                   help=f"draw every op in its kernel (ops), one node per kernel (kernels), or ops up to "
                        f"{OPS_VIEW_LIMIT} ops and kernels beyond (auto, the default)")
    p.add_argument("--strategy", choices=sorted(STRATEGIES),
                   help="partitioning strategy (default ilp; with --explain, every strategy)")
    p.add_argument("--explain", nargs=2, metavar=("OP_A", "OP_B"),
                   help="say, per strategy, whether two ops share a kernel and if not, why")
    p.add_argument("--hardware", default="h100",
                   help=f"profile name ({', '.join(PROFILES)}) or a profile .yaml file (default h100)")
    p.add_argument("--time-limit", type=float, metavar="S",
                   help="ILP work budget in nominal seconds (default 60): 100,000 units of search work and one "
                   "CP-SAT deterministic second per second; the same plan on any machine")
    p.add_argument("--objective", choices=OBJECTIVES, default="time",
                   help="what the ilp minimises: time (modelled roofline time: launches plus the larger of "
                   "memory and compute time; the default), traffic (launches and bytes only) or energy "
                   "(modelled joules)")
    p.add_argument("--recompute", action="store_true",
                   help="let the ilp recompute elementwise and layout ops that two ops read (masks, RoPE tables, "
                   "activations no one kernel can hold with all their readers) in every group that reads them, "
                   "instead of writing them once: exact over those coverings too; slower")
    p.add_argument("--max-ops", type=int, default=DEFAULT_MAX_OPS, metavar="N",
                   help=f"cap on ops per group (default {DEFAULT_MAX_OPS})")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    code = p.add_argument_group("code generation (backends)")
    code.add_argument("--emit", choices=("cuda",), help="write one kernel per group (needs --out)")
    code.add_argument("--out", metavar="DIR", help="directory for --emit (created if missing)")
    code.add_argument("--compile", action="store_true",
                      help="compile the kernels with nvcc and report ptxas' registers, spills and shared memory")
    code.add_argument("--arch", default="sm_90", help="nvcc target architecture (default sm_90)")
    code.add_argument("--run", action="store_true",
                      help="run the plan on seeded random inputs and check every output against NumPy")
    code.add_argument("--backend", default="numpy", help="backend for --run: numpy or cuda (default numpy)")
    code.add_argument("--emulate", action="store_true",
                      help="run the cuda backend's kernels on the CPU emulator instead of a GPU")
    code.add_argument("--seed", type=int, default=0, help="seed of the random inputs for --run (default 0)")
    code.add_argument("--profile", action="store_true",
                      help="with --emulate: count per kernel global-memory efficiency, shared-memory bank "
                           "conflicts and instructions, as Nsight Compute defines them")
    code.add_argument("--sample-blocks", type=int, metavar="N",
                      help=f"with --profile: run each kernel alone on N of its blocks, on the NumPy reference's "
                           f"inputs (default: only for plans too large to emulate whole, {SAMPLE_BLOCKS} blocks)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def _progress_printer(unit: str = "us"):
    """Progress on stderr, only when stderr is a terminal and a solve runs over a second;
    ``unit`` is the objective's (``cost.UNITS``)."""
    if not sys.stderr.isatty():
        return None

    def show(phase: str, best: float | None, bound: float | None, elapsed: float) -> None:
        if elapsed < 1.0:
            return
        shown = "-" if bound is None else f"{bound:,.1f} {unit}"
        incumbent = "-" if best is None else f"{best:,.1f} {unit}"
        gap = "-" if bound is None or not best else f"{(best - bound) / best:.2%}"
        sys.stderr.write(f"\r[ilp {phase}] best {incumbent}  bound {shown}  gap {gap}  {elapsed:.1f} s   ")
        sys.stderr.flush()

    return show


_NO_KERNEL = {"views": "of views only (free)", "custom": "with a custom op (no semantics: not run)",
              "dead code": "of dead code", "empty": "of empty tensors"}


def _no_kernel_summary(groups: list[dict]) -> str:
    """``; no kernel for 24 groups of views only (free), 10 with a custom op ...``."""
    counts: dict[str, int] = {}
    for entry in groups:
        counts[entry["what"]] = counts.get(entry["what"], 0) + 1
    parts = [f"{n} group(s) {_NO_KERNEL[what]}" for what, n in counts.items()]
    return "; no kernel for " + ", ".join(parts) if parts else ""


def _explain(args: argparse.Namespace) -> int:
    graph = load_graph(args.graph)
    hw = load_hardware(args.hardware)
    names = (args.strategy,) if args.strategy else ("none", *HEURISTICS, "ilp")
    progress = _progress_printer(UNITS[args.objective])
    plans = compare(graph, hw, names, args.time_limit, args.max_ops, progress, args.objective, args.recompute)
    a, b = args.explain
    answers = [explain(plan, a, b) for plan in plans]
    if args.format == "json":
        write_output(json.dumps({"graph": graph.name, "hardware": hw.name, "ops": [a, b],
                                 "explain": [e.to_dict() for e in answers]}, indent=2) + "\n")
    else:
        write_output(explain_text(answers, a, b, output_width()))
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.explain:
        return _explain(args)
    args.strategy = args.strategy or "ilp"
    if args.draw:
        check_can_draw(args.draw)  # before planning: a missing dot should not cost a solve
    options = {"emulate": True, **({"profile": True} if args.profile else {})} if args.emulate else {}
    runner = load_backend(args.backend, **options) if args.run else None
    if runner is not None:
        runner.preflight(run=True)  # likewise a missing compiler or GPU
    if args.compile:
        load_backend("cuda", arch=args.arch).preflight(compile=True)
    graph = load_graph(args.graph)
    hw = load_hardware(args.hardware)
    progress = _progress_printer(UNITS[args.objective])
    try:
        if args.report or args.compare:
            names = ("none", *HEURISTICS, "ilp") if args.compare else ("none", "greedy", "ilp")
            if args.strategy not in names:
                names = (*names, args.strategy)
            plans = compare(graph, hw, names, args.time_limit, args.max_ops, progress, args.objective, args.recompute)
            plan = next(p for p in plans if p.strategy == args.strategy)
        else:
            plans = None
            plan = partition(graph, args.strategy, hw, args.time_limit, args.max_ops, progress, args.objective,
                             args.recompute)
    finally:
        if progress is not None:
            sys.stderr.write("\r\033[K")
    data = json_report(plan, plans)
    width = output_width()
    text = [text_report(plan, plans, detailed=args.report, width=width)]
    status = 0
    if args.draw:
        data["drawn"] = str(draw(plan, args.draw, args.draw_view))
        shown = "clusters of their ops" if resolve_view(plan, args.draw_view) == "ops" else "one node each"
        text.append(f"drawn     {args.draw}: {plan.cost.launches} kernel(s), "
                    f"{shown}\n")
    if args.emit or args.compile:
        backend = load_backend(args.emit or "cuda", arch=args.arch)
        rendered = backend.render(plan)
        # compiled before --emit writes anything: nvcc may reject the kernels or the arch
        built = backend.build(rendered) if args.compile else None
        if args.emit:
            emitted = backend.emit(rendered, args.out)
            data["emitted"] = {"dir": args.out, "files": [f.name for f in emitted.files],
                               "no_kernel": emitted.no_kernel}
            text.append(f"emitted   {emitted.kernels} kernel(s) and a manifest to {args.out}"
                        f"{_no_kernel_summary(emitted.no_kernel)}\n")
        if args.compile:
            rows = backend.resources(built)
            data["kernels"] = rows
            text.append(resource_table(rows, width))
            text.append(f"compiled  {len(rows)} kernel(s){_no_kernel_summary(rendered.skipped)}\n")
    if runner is not None:
        data["run_inputs"] = provenance(graph)
        text.append(provenance_text(graph, args.seed))
        if args.profile and (args.sample_blocks or not emulated_whole(plan)):
            sampled = runner.check_sampled(plan, args.seed, args.sample_blocks or SAMPLE_BLOCKS)
            data["run"] = [c.to_dict() for c in sampled]
            text.append(sampled_table(sampled, width))
        else:
            checks = run_and_check(plan, runner, args.seed)
            data["run"] = [vars(c) for c in checks]
            where = f"{args.backend}{' (CPU emulator)' if args.emulate else ''}"
            text.append(check_table(checks, f"Plan run on {where}, seed {args.seed}, against the NumPy reference "
                                            "(tolerances in docs/backends.md)", width))
        status = 0 if all(c["ok"] for c in data["run"]) else 1
        counted = runner.counters(width)
        if counted is not None:
            data["counters"] = counted.kernels
            text.append(counted.text)
    if args.format == "json":
        write_output(json.dumps(data, indent=2) + "\n")
    else:
        write_output("".join(text))
    return status


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``partition`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["import"]:  # the importers' own command line (partitioner/import_cli.py)
        return import_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    problem = time_limit_problem(args.time_limit)
    if problem:
        parser.error(f"--time-limit {problem}")
    if args.max_ops < 1:
        parser.error("--max-ops must be at least 1")
    if args.recompute and args.strategy not in (None, "ilp") and not args.compare:
        parser.error(f"--recompute applies to the ilp only, not to --strategy {args.strategy}")
    if args.time_limit is not None and args.strategy not in (None, "ilp") and not (args.compare or args.report):
        parser.error(f"--time-limit applies to the ilp only, not to --strategy {args.strategy}")
    if args.emit and not args.out:
        parser.error("--emit needs --out DIR")
    if args.out and not args.emit:
        parser.error("--out is the directory of --emit: add --emit cuda")
    if not args.run and (args.emulate or args.backend != "numpy" or args.seed != 0):
        parser.error("--backend, --emulate and --seed apply to --run: add --run")
    if args.draw == "":
        parser.error("--draw needs a file name (.svg, .png or .dot)")
    if args.draw_view != "auto" and not args.draw:
        parser.error("--draw-view applies to --draw: add --draw FILE")
    if args.arch != "sm_90" and not args.compile:
        parser.error("--arch applies to --compile: add --compile")
    if args.emulate and args.backend != "cuda":
        parser.error("--emulate runs the cuda backend: add --backend cuda")
    if args.profile and not args.emulate:
        parser.error("--profile counts on the CPU emulator: add --run --backend cuda --emulate")
    if args.sample_blocks is not None and not args.profile:
        parser.error("--sample-blocks applies to --profile: add --profile")
    if args.sample_blocks is not None and args.sample_blocks < 1:
        parser.error("--sample-blocks must be at least 1")
    if args.seed < 0:
        parser.error("--seed must be a non-negative integer")
    problem = args.out and unwritable(args.out, directory=True)
    if problem:
        parser.error(f"--out: {problem}")
    if args.explain and (args.report or args.compare or args.draw or args.emit or args.compile or args.run):
        parser.error("--explain answers on its own: drop --report, --compare, --draw, --emit, --compile and --run")
    bad_input = (GraphError, HardwareError, BackendError, DrawError)
    return guarded("partition", lambda: _run(args), bad_input)


if __name__ == "__main__":
    sys.exit(main())
