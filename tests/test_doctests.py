"""The public API's docstrings: numpydoc form (Parameters, Returns, Raises, Examples),
checked by numpydoc's own validator, and their examples run as doctests."""

from __future__ import annotations

import doctest
import importlib

import pytest
from numpydoc.validate import validate

from .conftest import ROOT

# module -> (the optional extras its examples need, its public functions)
PUBLIC = {
    "partitioner": (("onnx", "torch"), ["from_onnx", "from_torch"]),
    "partitioner.loader": ((), ["load_graph"]),
    "partitioner.strategies": ((), ["partition", "compare"]),
    "partitioner.plan": ((), ["evaluate"]),
    "partitioner.reference": ((), ["run_reference"]),
    "partitioner.hardware": ((), ["load_hardware"]),
    "partitioner.legality": ((), ["check_group", "decide", "is_legal"]),
    "partitioner.cost": ((), ["group_cost"]),
    "partitioner.attention": ((), ["pairs"]),
    "partitioner.explain": ((), ["explain"]),
    "partitioner.draw": ((), ["draw", "to_dot"]),
    "partitioner.importers": (("onnx",), ["extra"]),
    "partitioner.importers.onnx": (("onnx",), ["read", "bind_dims", "convert"]),
    "partitioner.importers.torch": (("torch",), ["program_of", "convert"]),
    "backends.base": ((), ["available", "load_backend"]),
    "backends.check": ((), ["run_and_check"]),
}
# The CUDA backend's entry points: an example would need nvcc or g++ and seconds.
WITHOUT_EXAMPLES = ["backends.cuda.emulate.run", "backends.cuda.emit.write", "backends.cuda.compile.compile_kernels"]

# numpydoc's codes (numpydoc.validate.ERROR_MSGS): a one-line summary; every
# parameter documented, in order, with a type and a description; Returns; Examples.
REQUIRED = {"GL08", "SS01", "SS06", "PR01", "PR02", "PR03", "PR04", "PR07", "RT01", "RT03", "EX01"}


def _needs(extras):
    for name in extras:
        pytest.importorskip(name, reason=f"the examples need the '{name}' extra")


@pytest.mark.parametrize("path", [f"{m}.{name}" for m, (_, names) in PUBLIC.items() for name in names]
                         + WITHOUT_EXAMPLES)
def test_docstring_is_numpydoc(path):
    module = path.rsplit(".", 1)[0]
    _needs(PUBLIC.get(module, ((), []))[0])
    required = REQUIRED - {"EX01"} if path in WITHOUT_EXAMPLES else REQUIRED
    errors = [f"{code}: {message}" for code, message in validate(path)["errors"] if code in required]
    assert not errors, f"{path}: " + "; ".join(errors)


@pytest.mark.parametrize("module", list(PUBLIC))
def test_examples_run(module, monkeypatch):
    extras, names = PUBLIC[module]
    _needs(extras)
    monkeypatch.chdir(ROOT)  # the examples name graphs/ as a user at the repository root would
    tests = [t for t in doctest.DocTestFinder().find(importlib.import_module(module))
             if t.name.rsplit(".", 1)[-1] in names and t.examples]
    assert sorted(t.name.rsplit(".", 1)[-1] for t in tests) == sorted(names)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{module}: {result.failed} of {result.attempted} examples failed (output above)"
