"""Semantics of ONNX ``custom`` ops: the source node, kept in the graph, run by ``onnx.reference``.

An ONNX op the importer leaves ``custom`` (no format op means the same) keeps its
source node in the graph file: attribute ``onnx`` of the custom op (format 1.1) holds
a one-node ONNX model, serialized and base64-encoded: the node with its attributes,
the model's opsets (and its local functions), typed inputs ``x0, x1, ...`` that are
the custom op's tensor operands in order, and output ``y`` the result this custom op
stands for (one custom op per node output). A run executes that model with ONNX's own
reference implementation, :class:`onnx.reference.ReferenceEvaluator`, on the real
values of the operands, so ``--run`` checks the rest of the plan on the values the
model computes.

``onnx`` stays optional: this module imports it only when a model is encoded (by the
importer, which needs onnx anyway) or first evaluated (by a run). A graph loaded where
onnx is not installed has no hook for such an op; a run then draws its result at
random and says so.
"""

from __future__ import annotations

import base64
import importlib.util
from typing import Any, Sequence

import numpy as np

from .dtypes import numpy_dtype

#: The custom op's attribute that holds the encoded one-node model.
ATTR = "onnx"
#: What the run report names as these ops' semantics.
VIA = "onnx.reference"
#: (op type, output index) that onnx.reference computes wrongly, checked against
#: onnxruntime: MaxPool's Indices with overlapping windows (onnx 1.23: no channel
#: offset, and other positions than the maximum's). These keep no node.
WRONG = {("MaxPool", 1)}


def available() -> bool:
    """Whether onnx is installed (found without importing it)."""
    return importlib.util.find_spec("onnx") is not None


def encode(node: Any, operands: Sequence[str | None], inputs: Sequence[tuple[tuple[int, ...], int]],
           output: int, output_type: tuple[tuple[int, ...], int], opsets: dict[str, int],
           functions: Sequence[Any] = ()) -> str | None:
    """The one-node model of ONNX node ``node`` as the custom op's ``onnx`` attribute.

    Parameters
    ----------
    node : onnx.NodeProto
        The source node, with its attributes.
    operands : sequence of str or None
        For each of the node's inputs, in order, the name of the custom op's operand it
        reads (``"x0"``, ``"x1"``, ...: positions among the custom op's tensor
        inputs), or None for an absent optional input.
    inputs : sequence of (shape, ONNX element type)
        The custom op's tensor inputs, in order (the model's ``x0, x1, ...``).
    output : int
        Which of the node's outputs the custom op is.
    output_type : (shape, ONNX element type)
        That output's static shape and element type.
    opsets : dict of str to int
        The source model's opset per domain.
    functions : sequence of onnx.FunctionProto
        The source model's local functions (a node may call one).

    Returns
    -------
    str or None
        Base64 of the serialized model, or None when ``onnx.reference`` cannot
        evaluate the node (an op it does not implement, or an output in
        :data:`WRONG`): a run then draws its result. An op version it accepts but cannot run (Scan-8's batch axis) fails
        the run in one line, naming the op.
    """
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    if node.domain in ("", "ai.onnx") and (node.op_type, output) in WRONG:
        return None
    outputs = [f"y{k}" if name else "" for k, name in enumerate(node.output)]
    outputs[output] = "y"
    one = helper.make_node(node.op_type, [name or "" for name in operands], outputs, name=node.name or "node",
                           domain=node.domain)
    one.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [one], "custom", [helper.make_tensor_value_info(f"x{k}", elem, list(shape)) for k, (shape, elem) in
                          enumerate(inputs)],
        [helper.make_tensor_value_info("y", output_type[1], list(output_type[0]))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                              functions=list(functions))
    model.ir_version = min(model.ir_version, onnx.IR_VERSION)
    try:
        ReferenceEvaluator(model)
    except Exception:  # noqa: BLE001 - an op onnx.reference does not implement has no hook
        return None
    return base64.b64encode(model.SerializeToString()).decode("ascii")


class OnnxHook:
    """A custom op's semantics from its ``onnx`` attribute: ``hook(*operands)`` runs
    the node with ``onnx.reference`` (imported on the first call) and returns its
    result, in the op's dtype.

    Raises (when called)
    --------------------
    ValueError
        The attribute is not a model this module wrote, or the evaluation failed.
    """

    via = VIA

    def __init__(self, encoded: str, dtype: str):
        self.encoded = encoded
        self.dtype = dtype
        self._evaluator = None

    def _load(self) -> Any:
        if self._evaluator is None:
            import onnx
            from onnx.reference import ReferenceEvaluator

            try:
                model = onnx.load_model_from_string(base64.b64decode(self.encoded, validate=True))
                self._evaluator = ReferenceEvaluator(model)
            except Exception as exc:  # noqa: BLE001 - a corrupt or hand-edited attribute
                raise ValueError(f"its 'onnx' attribute is no ONNX model onnx.reference can run "
                                 f"({type(exc).__name__}: {exc})") from None
        return self._evaluator

    def __call__(self, *operands: np.ndarray) -> np.ndarray:
        evaluator = self._load()
        try:
            (result,) = evaluator.run(["y"], {f"x{k}": np.asarray(a) for k, a in enumerate(operands)})
        except Exception as exc:  # noqa: BLE001 - onnx.reference raises many types on bad data
            raise ValueError(f"onnx.reference failed on it ({type(exc).__name__}: {exc})") from None
        result = np.asarray(result)
        want = numpy_dtype(self.dtype)
        if result.dtype != want and result.dtype.itemsize == want.itemsize and result.dtype.kind not in "fiub":
            result = result.view(want)  # an element type onnx represents in its own NumPy dtype
        return result


def attach(graph: Any) -> None:
    """Give each ``custom`` op of ``graph`` with an ``onnx`` attribute its hook
    (``Graph.hooks``), when onnx is installed and no hook is attached already."""
    ops = [op for op in graph.ops.values() if op.kind == "custom" and op.attrs.get(ATTR)]
    if ops and available():
        for op in ops:
            graph.hooks.setdefault(op.name, OnnxHook(op.attrs[ATTR], op.out.dtype))
