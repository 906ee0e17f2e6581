"""The ``none`` strategy: one kernel per op (views stay free)."""

from __future__ import annotations

from ..graph import Graph
from ..hardware import Hardware
from .base import Options, Strategy


class NoFusion(Strategy):
    """Every op in a group of its own: the unfused baseline."""

    name = "none"

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        return [[name] for name in graph.ops], {"status": "UNFUSED"}
