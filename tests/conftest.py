"""Shared helpers: small graphs built from Python data, and the repository's graphs."""

from __future__ import annotations

from pathlib import Path

import pytest

from partitioner import load_graph
from partitioner.report import PIPED_WIDTH

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = sorted((ROOT / "graphs").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch):
    """Reports are laid out as for a pipe (``PIPED_WIDTH`` columns), whatever terminal
    runs the tests: a pytest-xdist worker's is 80 columns, which wraps the run table."""
    monkeypatch.setenv("COLUMNS", str(PIPED_WIDTH))


def make_graph(inputs, ops, outputs, dtype="float32", name="test"):
    """A graph from ``inputs`` ({name: shape} or {name: (shape, dtype)}), op dicts and outputs."""
    entries = []
    for key, spec in inputs.items():
        shape, dt = spec if isinstance(spec, tuple) else (spec, dtype)
        entries.append({"name": key, "shape": list(shape), "dtype": dt})
    return load_graph({"name": name, "inputs": entries, "ops": ops, "outputs": outputs})


def op(name, kind, inputs, **attrs):
    """One op entry; ``attrs`` become its attributes."""
    entry = {"name": name, "op": kind, "inputs": list(inputs)}
    if attrs:
        entry["attrs"] = attrs
    return entry


@pytest.fixture(params=GRAPHS, ids=[p.stem for p in GRAPHS])
def graph_path(request):
    return request.param
