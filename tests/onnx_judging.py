"""How the ONNX suites judge a test case (a model, data sets of inputs and expected
outputs) run through ``partitioner.importers.onnx.convert`` and ``run_reference``:
``tests/test_onnx_node_suite.py`` (ONNX's node cases) and
``tests/test_onnx_model_data.py`` (the model cases under ``onnx/backend/test/data``).

A case passes, within the dtype tolerances of ``backends/check.py``, or is refused in
one line: at import (a dtype or construct the format lacks), at run (a ``custom`` op
has no semantics, or onnx.reference cannot run a node it accepted), or because a
datum is not a tensor this test can feed or compare. Anything else is a wrong value
or a crash. Import this module after ``pytest.importorskip("onnx")``.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from backends.check import accumulated_terms, compare
from partitioner.dtypes import DTYPES
from partitioner.errors import GraphError
from partitioner.importers import onnx as onnx_importer
from partitioner.reference import run_reference


class UnreadableDatum(Exception):
    """A case's input or expected output that is no tensor (a sequence, an optional)
    or cannot be parsed: the case is refused with this reason, in one line."""


def array(value) -> np.ndarray:
    """A test datum as NumPy (Cast cases and the stored ``.pb`` files hold TensorProto)."""
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def by_onnx_reference(graph, tensor: str) -> bool:
    """Whether ``tensor`` is a custom op's result computed by ``onnx.reference``: two
    of ONNX's own implementations (its reference and the code that wrote the expected
    values) may then differ in float rounding, so the case's own rtol and atol judge
    it, as ONNX's backend runner judges any backend."""
    return getattr(graph.hooks.get(tensor), "via", None) == "onnx.reference"


def judge(case, *, at_case_tolerance: bool = False) -> tuple[str, str]:
    """``(pass | refused | wrong | crash, detail)`` for one case: anything with
    ``name``, ``model`` (an ``onnx.ModelProto``), ``data_sets`` (an iterable of
    ``(inputs, expected outputs)``, in the graph's order; it may raise
    :class:`UnreadableDatum`), ``rtol`` and ``atol``. ``at_case_tolerance`` judges
    every output at the case's rtol and atol (expected values that ONNX writes rounded).
    An exception other than a refusal propagates: the caller reports it as a crash."""
    try:
        result = onnx_importer.convert(case.model)
        graph = result.load()
    except GraphError as exc:
        return "refused", str(exc)
    initializers = {t.name for t in case.model.graph.initializer}
    inputs = [v.name for v in case.model.graph.input if v.name not in initializers]
    outputs = [v.name for v in case.model.graph.output]
    try:
        for given, expected in case.data_sets:
            feed = {result.renamed.get(n, n): array(v) for n, v in zip(inputs, given)}
            try:
                values = run_reference(graph, {k: v for k, v in feed.items() if k in graph.inputs})
            except NotImplementedError as exc:  # a custom op: no semantics
                return "refused", str(exc)
            except ValueError as exc:  # onnx.reference accepts a node it then cannot run (Scan-8)
                if "onnx.reference failed" not in str(exc):
                    raise
                return "refused", str(exc)
            for name, want in zip(outputs, expected):
                want = array(want)
                got = values.get(result.renamed.get(name, name))
                if got is None or got.shape != want.shape or str(got.dtype) != str(want.dtype):
                    return "wrong", f"output '{name}': {None if got is None else (got.dtype, got.shape)} " \
                                    f"against {(want.dtype, want.shape)}"
                if at_case_tolerance or by_onnx_reference(graph, result.renamed.get(name, name)):
                    if not np.allclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True):
                        return "wrong", f"output '{name}': not within the case's rtol {case.rtol}"
                    continue
                dtype = str(want.dtype)
                terms = accumulated_terms(graph, result.renamed.get(name, name))
                check = compare(name, dtype if dtype in DTYPES else "int64", got, want, terms)
                if not check.ok:
                    return "wrong", f"output '{name}': max abs error {check.max_abs_error:.3g}"
    except UnreadableDatum as exc:
        return "refused", str(exc)
    return "pass", ""


def judge_all(cases: Iterable, at_case_tolerance: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
    """Every case's :func:`judge` by name, an exception reported as a crash; the
    NumPy and ONNX warnings that the cases raise are silenced. ``at_case_tolerance``:
    the names of the cases judged at their own rtol and atol."""
    rounded = set(at_case_tolerance)
    results = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in cases:
            try:
                results[case.name] = judge(case, at_case_tolerance=case.name in rounded)
            except Exception as exc:  # noqa: BLE001 - a crash is what the suites report
                results[case.name] = ("crash", f"{type(exc).__name__}: {exc}")
    return results


def assert_none_wrong_and_refusals_one_line(results: dict[str, tuple[str, str]]) -> None:
    """No case gives a wrong value or crashes, and every refusal is one line."""
    counts = Counter(kind for kind, _ in results.values())
    bad = {name: o for name, o in results.items() if o[0] in ("wrong", "crash")}
    assert not bad, f"{counts}: {sorted(bad.items())[:20]}"
    multiline = [name for name, (kind, detail) in results.items() if kind == "refused" and "\n" in detail]
    assert not multiline, multiline[:10]
