"""``partition GRAPH [--report] ...``: argument parsing and wiring only.

Exit status: 0 on success, 2 on bad input (graph, hardware profile, arguments),
1 on an internal failure. Errors are one line on stderr, never a traceback
(set ``PARTITIONER_DEBUG=1`` to see one for an internal failure).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback

from . import __version__
from .cost import DEFAULT_MAX_OPS
from .errors import GraphError, HardwareError
from .hardware import PROFILES, load_hardware
from .loader import load_graph
from .report import json_report, text_report
from .strategies import STRATEGIES, compare, partition


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="partition",
        description="Partition an operator graph into GPU fusion groups under a cost model.",
    )
    p.add_argument("graph", help="graph file (.yaml, .yml or .json, format v1)")
    p.add_argument("--report", action="store_true",
                   help="per-group details and a comparison of the none, greedy and ilp strategies")
    p.add_argument("--strategy", choices=sorted(STRATEGIES), default="ilp", help="partitioning strategy (default ilp)")
    p.add_argument("--hardware", default="h100",
                   help=f"profile name ({', '.join(PROFILES)}) or a profile .yaml file (default h100)")
    p.add_argument("--time-limit", type=float, metavar="S", help="ILP wall-clock limit in seconds (default 60)")
    p.add_argument("--max-ops", type=int, default=DEFAULT_MAX_OPS, metavar="N",
                   help=f"cap on ops per group (default {DEFAULT_MAX_OPS})")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def _progress_printer():
    """Progress on stderr, only when stderr is a terminal and a solve runs over a second."""
    if not sys.stderr.isatty():
        return None

    def show(phase: str, best_us: float, bound_us: float | None, elapsed: float) -> None:
        if elapsed < 1.0:
            return
        bound = "-" if bound_us is None else f"{bound_us:,.1f} us"
        gap = "-" if bound_us is None or not best_us else f"{(best_us - bound_us) / best_us:.2%}"
        sys.stderr.write(f"\r[ilp {phase}] best {best_us:,.1f} us  bound {bound}  gap {gap}  {elapsed:.1f} s   ")
        sys.stderr.flush()

    return show


def _run(args: argparse.Namespace) -> int:
    graph = load_graph(args.graph)
    hw = load_hardware(args.hardware)
    progress = _progress_printer()
    try:
        if args.report:
            plans = compare(graph, hw, ("none", "greedy", "ilp"), args.time_limit, args.max_ops, progress)
            plan = next(p for p in plans if p.strategy == args.strategy)
        else:
            plans = None
            plan = partition(graph, args.strategy, hw, args.time_limit, args.max_ops, progress)
    finally:
        if progress is not None:
            sys.stderr.write("\r\033[K")
    if args.format == "json":
        print(json.dumps(json_report(plan, plans), indent=2))
    else:
        sys.stdout.write(text_report(plan, plans, detailed=args.report))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``partition`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
        parser.error("--time-limit must be a positive number of seconds")
    if args.max_ops < 1:
        parser.error("--max-ops must be at least 1")
    try:
        return _run(args)
    except (GraphError, HardwareError) as exc:
        print(f"partition: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("partition: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence: one line, exit 1
        if os.environ.get("PARTITIONER_DEBUG"):
            traceback.print_exc()
        print(f"partition: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
