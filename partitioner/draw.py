"""A picture of a plan: the operator graph with each fusion group as a coloured cluster.

``draw(plan, "plan.svg")`` (or ``.png``, ``.dot``) writes the graph in Graphviz's
DOT language, built with the ``graphviz`` Python package, and for ``.svg`` and
``.png`` renders it with Graphviz's ``dot`` program (Debian/Ubuntu package
``graphviz``; Homebrew ``graphviz``). A ``.dot`` file needs no program.

Two views. The *op view* draws

* one cluster per kernel (a group holding compute ops), coloured by its kind and
  labelled ``#k kind, time us`` with the group's modelled time (attention groups
  add their tiling: query rows x keys per tile, K/V tiles streamed per block);
* one node per op (DOT id ``op<topological index>``, SVG ``<title>`` the same),
  labelled with its name and op kind; views (reshapes) small and
  grey; graph inputs as grey ellipses; graph outputs with a double border;
* edges that cross from one kernel into another (or from an input into a kernel)
  labelled with what that kernel reads of the tensor from memory, as the cost
  model counts it (``Group.bytes_read_of``: a slice its elements, a gather its
  rows), once per tensor and kernel, on the first such edge.

The *kernel view*, for large graphs, draws one node per kernel (DOT id
``k<group index>``) with its kind, modelled time and first and last ops, and one
edge per pair of kernels that pass data, labelled with the MB the consumer reads
from the producer (as the cost model counts them); views between kernels are
looked through. ``view="auto"`` picks the op view up to ``OPS_VIEW_LIMIT`` ops.
Both carry a legend of the kind colours.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .exits import unwritable
from .legality import holders
from .plan import Plan

FORMATS = (".svg", ".png", ".dot")
#: Above this many ops, clusters are ranked one by one (dot's default) instead of
#: together (``newrank``): GPT-2 12L (1,113 ops) then lays out in ~13 s instead of
#: ~75 s (measured, Graphviz 2.43). Bounding ``nslimit`` would be faster still but
#: crashed Graphviz 2.42/2.43 on that graph.
LARGE_GRAPH_OPS = 400
#: Fill colours per group kind (light, so labels stay readable).
#: ``view="auto"`` draws every op up to this many ops, one node per kernel beyond:
#: GPT-2 2L's 231 ops as ops come out 1145 x 12148 px.
OPS_VIEW_LIMIT = 120
VIEWS = ("auto", "ops", "kernels")
KIND_COLOURS = {
    "pointwise": "#dbeafe",
    "reduction": "#dcfce7",
    "contraction": "#ffedd5",
    "attention": "#ede9fe",
    "single": "#fee2e2",
}


class DrawError(ValueError):
    """A plan cannot be drawn here: an unknown file type or no Graphviz ``dot``."""


def _mb(n: int) -> str:
    if n < 1e3:
        return f"{n} B"
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} KB"


def to_dot(plan: Plan, view: str = "auto"):
    """The plan as a ``graphviz.Digraph``: no rendering, no ``dot`` program needed.

    Parameters
    ----------
    plan : Plan
        From :func:`partitioner.partition`.
    view : str
        ``ops`` (each kernel a cluster of its ops), ``kernels`` (one node per
        kernel), or ``auto``: the op view up to ``OPS_VIEW_LIMIT`` ops.

    Returns
    -------
    graphviz.Digraph
        Kernels coloured by kind and labelled with their modelled time, edges that
        cross kernels labelled with what the kernel reads of the tensor (once per
        tensor and kernel), and a colour legend.

    Examples
    --------
    >>> import partitioner
    >>> plan = partitioner.partition(partitioner.load_graph("graphs/mlp_gelu_f16.yaml"), "ilp")
    >>> dot = to_dot(plan)
    >>> dot.source.splitlines()[0]
    'digraph mlp_gelu_f16 {'
    >>> "2 kernels, 142.0 us modelled" in dot.source
    True
    """
    import graphviz  # imported here: only drawing needs it

    g = plan.graph
    kernels = resolve_view(plan, view) == "kernels"
    what = f"one node per kernel ({len(g.ops)} ops)" if kernels else "ops in their kernels"
    # the graph's and the profile's names are free text: a backslash in them is no escape
    title = graphviz.escape(f"{g.name}: {plan.strategy} plan on {plan.hardware.name}, {plan.cost.launches} kernels, "
                            f"{plan.cost.modeled_time_us:,.1f} us modelled; {what}")
    dot = graphviz.Digraph(name=graphviz.escape(g.name), graph_attr={
        "rankdir": "TB", "fontname": "Helvetica", "fontsize": "12", "nodesep": "0.15",
        "ranksep": "0.3", "label": title,
        "labelloc": "t",
        # Graphviz 2.43 switches newrank on whenever the attribute is present, whatever its value
        **({} if len(g.ops) > LARGE_GRAPH_OPS or kernels else {"newrank": "true"})},
        node_attr={"fontname": "Helvetica", "fontsize": "10", "shape": "box", "style": "rounded,filled",
                   "fillcolor": "white", "height": "0.3", "margin": "0.06,0.02"},
        edge_attr={"fontname": "Helvetica", "fontsize": "8", "arrowsize": "0.5", "color": "#555555"})
    (_kernel_view if kernels else _op_view)(plan, dot)
    _legend(plan, dot, kernels)
    return dot


def resolve_view(plan: Plan, view: str) -> str:
    """``ops`` or ``kernels``: the view ``view`` (``auto``, ``ops``, ``kernels``) draws
    ``plan`` in. Raises ``ValueError`` for another ``view``."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; use one of {', '.join(VIEWS)}")
    if view == "auto":
        return "kernels" if len(plan.graph.ops) > OPS_VIEW_LIMIT else "ops"
    return view


def _label(k: int, group) -> str:
    label = f"#{k} {group.kind}, {group.modeled_time_us:,.2f} us"
    if not group.launches:  # a group of zero-element results: drawn, never launched
        label += " (no elements: not launched)"
    if group.tiling is not None:
        t = group.tiling
        label += f"\n{t.block_m}x{t.block_n} tiles, {t.k_tiles} K/V tile(s) per block"
    return label


def _legend(plan: Plan, dot, kernels: bool) -> None:
    """One node listing the colour of each kind the plan uses, and what edges mean."""
    kinds = list(dict.fromkeys(g.kind for g in plan.cost.groups if g.kind != "view"))
    rows = "".join(f'<TR><TD BGCOLOR="{KIND_COLOURS.get(k, "#eeeeee")}">{k}</TD></TR>' for k in kinds)
    edges = "MB the consumer kernel reads" if kernels else "MB a kernel reads of a tensor, on its first edge in " \
        "(views dashed)"
    dot.node("legend", f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0"><TR><TD><B>kernel kinds</B></TD></TR>'
                       f'{rows}<TR><TD>edges: {edges}</TD></TR></TABLE>>', shape="plaintext", style="")


def _kernel_view(plan: Plan, dot) -> None:
    g = plan.graph
    owner = {name: k for k, group in enumerate(plan.cost.groups) for name in group.ops
             if not group.group.recomputed >> g.index[name] & 1}  # a recomputed value passes between none
    for k, group in enumerate(plan.cost.groups):
        if group.kind != "view":
            ops = group.ops[0] if len(group.ops) == 1 else f"{group.ops[0]} ... {group.ops[-1]} ({len(group.ops)} ops)"
            dot.node(f"k{k}", f"{_label(k, group)}\n{ops}", fillcolor=KIND_COLOURS.get(group.kind, "#eeeeee"))
    passed: dict[tuple[int, int], int] = {}
    for k, group in enumerate(plan.cost.groups):
        for base in group.group.reads:
            producer = owner.get(base)
            if producer is not None and producer != k:
                passed[(producer, k)] = passed.get((producer, k), 0) + group.group.bytes_read_of[base]
    for (producer, consumer), nbytes in sorted(passed.items()):
        dot.edge(f"k{producer}", f"k{consumer}", label=_mb(nbytes), color="#c2410c", fontcolor="#c2410c")


def _op_view(plan: Plan, dot) -> None:
    g = plan.graph
    held = holders([c.group for c in plan.cost.groups])

    def node(name: str, k: int) -> str:
        """A plain id (':' in a DOT id means a port); a recomputed op has one per copy."""
        i = g.index[name]
        return f"op{i}" if len(held[name]) == 1 else f"op{i}g{k}"

    outputs = g.output_storages
    for k, group in enumerate(plan.cost.groups):
        if group.kind == "view":
            for name in group.ops:
                dot.node(node(name, k), name, fontsize="7", fontcolor="#777777", color="#bbbbbb", height="0.2")
            continue
        with dot.subgraph(name=f"cluster_{k}") as cluster:
            cluster.attr(label=_label(k, group), style="filled,rounded",
                         fillcolor=KIND_COLOURS.get(group.kind, "#eeeeee"), color="#888888", fontsize="10")
            for name in group.ops:
                op = g.ops[name]
                again = "\n(recomputed)" if len(held[name]) > 1 else ""
                if op.is_view:
                    cluster.node(node(name, k), name + again, fontsize="7", fontcolor="#777777", color="#bbbbbb",
                                 height="0.2")
                else:
                    cluster.node(node(name, k), f"{name}\n{op.kind}{again}",
                                 peripheries="2" if name in outputs else "1")
    labelled: set[tuple[str, int]] = set()

    def read(base: str, k: int) -> str:
        """What kernel ``k`` reads of ``base``, on the first edge that carries it there
        (its readers' edges share one figure: the labels into a kernel sum to its reads)."""
        if (base, k) in labelled or base not in plan.cost.groups[k].group.bytes_read_of:
            return ""
        labelled.add((base, k))
        return _mb(plan.cost.groups[k].group.bytes_read_of[base])

    for k, (name, tensor) in enumerate(g.inputs.items()):
        if g.consumers.get(name):
            dot.node(f"in{k}", f"{name}\n{list(tensor.shape)}", shape="ellipse", style="filled",
                     fillcolor="#f3f4f6", color="#9ca3af", fontsize="8")
            for reader in g.consumers[name]:
                for kr in held[reader]:
                    label = "" if g.ops[reader].is_view else read(name, kr)
                    dot.edge(f"in{k}", node(reader, kr), label=label, color="#9ca3af")
    for u, v in g.dag.edges():
        for kv in held[v]:
            # a recomputed value is computed where it is read; any other comes from its one group
            ku = kv if kv in held[u] else held[u][0]
            if ku == kv:
                dot.edge(node(u, ku), node(v, kv))
            elif plan.cost.groups[kv].kind == "view":
                dot.edge(node(u, ku), node(v, kv), style="dashed", color="#aaaaaa")  # a free view: no traffic
            else:
                dot.edge(node(u, ku), node(v, kv), label=read(g.storage[u], kv), color="#c2410c",
                         fontcolor="#c2410c", penwidth="1.4")


def check_can_draw(path: str | Path) -> None:
    """Raise :class:`DrawError` unless a plan can be drawn to ``path`` on this machine:
    a ``.svg``, ``.png`` or ``.dot`` file in a writable directory, and Graphviz's
    ``dot`` for the first two."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise DrawError(f"cannot draw to '{path}': use a .svg, .png or .dot file")
    problem = unwritable(path)
    if problem:
        raise DrawError(f"cannot draw to '{path}': {problem}")
    if suffix != ".dot" and shutil.which("dot") is None:
        raise DrawError("drawing to .svg or .png needs Graphviz's 'dot' program: install the graphviz system "
                        "package (apt-get install graphviz), or draw to a .dot file")


def draw(plan: Plan, path: str | Path, view: str = "auto") -> Path:
    """Write a picture of ``plan`` to a file.

    Parameters
    ----------
    plan : Plan
        From :func:`partitioner.partition`.
    path : str or Path
        A ``.svg`` or ``.png`` file (rendered by Graphviz's ``dot`` program) or a
        ``.dot`` file (the Graphviz source; no program needed).
    view : str
        ``auto``, ``ops`` or ``kernels``, as for :func:`to_dot`.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    DrawError
        Another suffix, ``.svg``/``.png`` without Graphviz's ``dot``, a
        missing or unwritable directory (:func:`check_can_draw`), ``dot``
        failing, or the write failing.

    Examples
    --------
    >>> import tempfile, pathlib, partitioner
    >>> plan = partitioner.partition(partitioner.load_graph("graphs/mlp_gelu_f16.yaml"), "ilp")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     draw(plan, pathlib.Path(tmp) / "mlp.dot", view="kernels").read_text().startswith("digraph mlp_gelu_f16")
    True
    >>> draw(plan, "mlp.pdf")
    Traceback (most recent call last):
    ...
    partitioner.draw.DrawError: cannot draw to 'mlp.pdf': use a .svg, .png or .dot file
    """
    check_can_draw(path)
    path = Path(path)
    dot = to_dot(plan, view)
    try:
        if path.suffix.lower() == ".dot":
            path.write_text(dot.source)
        else:
            path.write_bytes(dot.pipe(format=path.suffix.lower()[1:]))
    except subprocess.CalledProcessError as exc:
        raise DrawError(f"Graphviz's dot failed on this graph (exit status {exc.returncode}); "
                        "draw to a .dot file to inspect it") from exc
    except OSError as exc:
        raise DrawError(f"cannot write '{path}': {exc.strerror}") from None
    return path
