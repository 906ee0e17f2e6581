#!/usr/bin/env python3
"""Write TorchInductor's attention patterns as data for the ``inductor`` baseline.

TorchInductor's ``fuse_attention`` pass (``torch/_inductor/fx_passes/fuse_attention.py``)
rewrites matmul-softmax-matmul subgraphs into ``scaled_dot_product_attention``. Its
patterns ship precompiled in ``torch/_inductor/fx_passes/serialized_patterns/``. This
script walks the *inference* variants of those pattern objects (the ones Inductor
registers for graphs without gradients) and writes each as a list of nodes, with the
extra check Inductor runs on a match, to
``partitioner/strategies/inductor_sdpa_patterns.json``. The ``inductor`` strategy
reads that file; torch is needed only here.

    pip install -e '.[torch]'
    python graphs/export_sdpa_patterns.py            # rewrite the JSON file
    python graphs/export_sdpa_patterns.py --check    # exit 1 if the file differs
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import torch
from torch._inductor import pattern_matcher as pm
from torch._inductor.fx_passes import fuse_attention

OUT = Path(__file__).resolve().parent.parent / "partitioner" / "strategies" / "inductor_sdpa_patterns.json"


def _serialise(pattern) -> dict:
    """The pattern's nodes in post-order (operands before users) and its outputs: the
    attention result first, then any other value the pattern returns (``None`` for an
    output that is one of its inputs)."""
    nodes: list[dict] = []
    ids: dict[int, int] = {}

    def arg(x):
        if isinstance(x, pm.CallFunction):
            return {"node": visit(x)}
        if isinstance(x, pm.KeywordArg):
            return {"kw": x.name}
        if isinstance(x, pm.Ignored):
            return {"ignored": True}
        if isinstance(x, (list, tuple)):
            return [arg(a) for a in x]
        if isinstance(x, (torch.memory_format, torch.dtype, torch.layout, torch.device)):
            return {"torch": str(x)}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise TypeError(f"unexpected pattern argument {x!r}")

    def visit(p) -> int:
        if id(p) not in ids:
            (target,) = p.fns
            entry = {"target": str(target), "args": [arg(a) for a in p.args],
                     "kwargs": {k: arg(v) for k, v in p.kwargs.items()},
                     "users": p.users if isinstance(p.users, int) else "multiple"}
            ids[id(p)] = len(nodes)
            nodes.append(entry)
        return ids[id(p)]

    if isinstance(pattern, pm.MultiOutputPattern):
        outputs = [None if p is None else visit(p) for p in pattern.outputs]
    else:
        outputs = [visit(pattern)]
    return {"nodes": nodes, "outputs": outputs}


def _check(extra_check) -> dict:
    """What Inductor checks on a match (``_sfdp_params_check`` / ``_sfdp_extra_check``)."""
    if extra_check is fuse_attention._sfdp_params_check:
        return {"check": "params", "scale_op": None, "disable_cuda": False}
    if extra_check is fuse_attention._sfdp_extra_check:
        # registered uncalled (torch 2.13, pattern 24): a match hands the pattern matcher a
        # function instead of a bool, and it raises instead of rewriting
        return {"check": "uncalled", "scale_op": None, "disable_cuda": False}
    cells = dict(zip(extra_check.__code__.co_freevars, (c.cell_contents for c in extra_check.__closure__)))
    scale = cells.get("scale_factor_op")
    return {"check": "extra", "scale_op": None if scale is None else str(scale),
            "disable_cuda": bool(cells.get("disable_cuda"))}


def patterns() -> dict:
    entries = []
    for name, kwargs in fuse_attention._get_sfdp_patterns(torch.device("cpu")):
        if not name.endswith("_inference"):
            continue
        number = int(name.split("_")[3])
        module = importlib.import_module(f"torch._inductor.fx_passes.serialized_patterns._sfdp_pattern_{number}")
        pattern = getattr(module, name, None)
        if pattern is None:  # a duplicate Inductor skips when registering (skip_duplicates)
            continue
        entries.append({"name": name, "number": number, "half": "_half" in name, **_check(kwargs["extra_check"]),
                        **_serialise(pattern)})
    return {"source": f"torch {torch.__version__.split('+')[0]}: torch/_inductor/fx_passes/fuse_attention.py and "
                      "serialized_patterns/_sfdp_pattern_*.py, inference variants",
            "patterns": entries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON file differs from the torch patterns")
    args = parser.parse_args(argv)
    data = patterns()
    # one pattern per line: small, and a change to one pattern is a one-line diff
    lines = ",\n".join(json.dumps(p, separators=(",", ":")) for p in data["patterns"])
    text = f'{{"source": {json.dumps(data["source"])},\n"patterns": [\n{lines}\n]}}\n'
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
