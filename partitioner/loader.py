"""Graph format v1 (YAML or JSON) -> :class:`Graph`, with every rejection the format lists.

Every error is a :class:`GraphError` whose message is one line:
``FILE: op 'NAME': problem`` (or ``FILE: problem`` when no op is at fault).
"""

from __future__ import annotations

import json
import numbers
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import networkx as nx
import yaml

from .composites import COMPOSITES, Primitive, expand
from .dtypes import DTYPES, DTYPES_1_1
from .errors import GraphError, InferenceError, SizeError
from .graph import Graph, Op
from . import onnx_semantics
from .ops import REGISTRY, Attr, TensorType
from .schema import validator
from .values import parse_inline
from .yamlio import parse_document, parse_error_message, read_error_message, read_text

FORMAT_VERSION = 1.1
#: The versions this reader knows; 1.1 adds constant values, ops and dtypes (``docs/graph-format.md``).
FORMAT_VERSIONS = (1, 1.1)
FORMAT_1_1_OPS = frozenset({"arange", "cumsum", "floor_divide", "remainder", "fmod", "trunc", "max_pool2d",
                            "avg_pool2d"})
#: The largest tensor the format accepts, in bytes: 1 TiB, seven times an H200's
#: 141 GB of HBM. The ILP's exact integer objective sums bytes times a launch
#: denominator of up to 1,000 over up to 300,000 candidates, in 64 bits.
MAX_TENSOR_BYTES = 1 << 40
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")


# ---------------------------------------------------------------- parsing


def _parse(path: Path) -> Any:
    label = str(path)
    suffix = path.suffix.lower()
    if path.is_dir():
        raise GraphError(f"{label}: is a directory; expected a graph file (.yaml, .yml or .json)")
    if suffix not in (".yaml", ".yml", ".json"):
        raise GraphError(f"{label}: unknown file type {suffix or '(none)'!r}; expected .yaml, .yml or .json")
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise GraphError(f"{label}: {read_error_message(exc)}") from None
    try:
        return parse_document(text, suffix)
    except (ValueError, yaml.YAMLError) as exc:
        raise GraphError(f"{label}: {parse_error_message(exc)}") from None
    except RecursionError:
        raise GraphError(f"{label}: the file nests too deeply to be a graph") from None


# ---------------------------------------------------------------- validation helpers


class _Context:
    """Formats one-line errors for one file."""

    def __init__(self, label: str):
        self.label = label

    def error(self, problem: str, op: str | None = None) -> GraphError:
        where = f"op '{op}': " if op else ""
        return GraphError(f"{self.label}: {where}{' '.join(problem.split())}")


_KINDS = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
          "number": "a number"}


def _show(value: Any) -> str:
    """A value as the user wrote it (JSON spelling: null, true)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _schema_error(ctx: _Context, data: Any, error: jsonschema.ValidationError) -> GraphError:
    path = list(error.absolute_path)
    op = None
    if len(path) >= 2 and path[0] in ("ops", "inputs") and isinstance(path[1], int):
        entry = data[path[0]][path[1]]
        name = entry.get("name") if isinstance(entry, dict) else None
        kind = "op" if path[0] == "ops" else "input"
        op = name if isinstance(name, str) and kind == "op" else None
        prefix = "" if op else (f"input '{name}': " if isinstance(name, str) else f"{path[0]}[{path[1]}]: ")
        path = path[2:]
    else:
        prefix = ""
    field = ".".join(str(p) for p in path)
    if error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        problem = f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
        problem += f" in {field}" if field else ""
    elif error.validator == "required":
        problem = f"missing required key {error.message.split(' is a required')[0]}" + (f" in {field}" if field else "")
    elif error.validator == "anyOf" and path and path[0] == "inputs":
        problem = f"operand {path[1]} must be a tensor name or a number, got {_show(error.instance)}"
    elif error.validator == "enum" and field.endswith("dtype"):
        problem = f"unknown dtype {error.instance!r} (known: {', '.join(DTYPES)})"
    elif error.validator == "type":
        expected = _KINDS.get(str(error.validator_value), str(error.validator_value))
        subject = f"'{field}'" if field else ("the entry" if prefix else "the file")
        problem = f"{subject} must be {expected}, got {_show(error.instance)}"
    else:
        problem = f"{field or 'the file'}: {error.message}"
    return ctx.error(prefix + problem, op)


def _check_attr(ctx: _Context, op: str, key: str, attr: Attr, value: Any) -> Any:
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    ok = {
        "int": is_int(value),
        "number": (is_int(value) or isinstance(value, float)),
        "ints": isinstance(value, list) and all(is_int(v) for v in value),
        "bool": isinstance(value, bool),
        "dtype": value in DTYPES,
        "str": isinstance(value, str),
        "approximate": value in ("none", "tanh"),
    }[attr.kind]
    if not ok:
        expected = {
            "int": "an integer", "number": "a number", "ints": "a list of integers", "bool": "true or false",
            "dtype": f"one of {', '.join(DTYPES)}", "str": "a string", "approximate": "'none' or 'tanh'",
        }[attr.kind]
        raise ctx.error(f"attribute '{key}' must be {expected}, got {_show(value)}", op)
    return list(value) if isinstance(value, list) else value


def _check_attrs(ctx: _Context, op: str, kind: str, given: dict, declared: dict[str, Attr]) -> dict:
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(declared) or "none"
        raise ctx.error(f"unknown attribute {', '.join(map(repr, unknown))} for {kind} (known: {known})", op)
    attrs = {}
    for key, attr in declared.items():
        if given.get(key) is None:
            if attr.required:
                raise ctx.error(f"{kind} needs attribute '{key}'", op)
            attrs[key] = list(attr.default) if isinstance(attr.default, list) else attr.default
        else:
            attrs[key] = _check_attr(ctx, op, key, attr, given[key])
    return attrs


# ---------------------------------------------------------------- building


def _declared(kind: str):
    if kind in COMPOSITES:
        spec = COMPOSITES[kind]
        return spec.min_inputs, spec.max_inputs, spec.attrs, False
    spec = REGISTRY[kind]
    return spec.min_inputs, spec.max_inputs, spec.attrs, spec.literals_allowed


def _check_op_entry(ctx: _Context, entry: dict, names: set[str]) -> None:
    name, kind = entry["name"], entry["op"]
    if kind not in REGISTRY and kind not in COMPOSITES:
        raise ctx.error(f"unknown op '{kind}'", name)
    low, high, _, literals_allowed = _declared(kind)
    inputs = entry.get("inputs", [])
    if len(inputs) < low or (high is not None and len(inputs) > high):
        expected = f"{low}" if low == high else (f"{low} to {high}" if high is not None else f"at least {low}")
        noun = "operand" if expected == "1" else "operands"
        raise ctx.error(f"{kind} takes {expected} {noun}, got {len(inputs)}", name)
    for i, operand in enumerate(inputs):
        if isinstance(operand, str):
            if operand not in names:
                raise ctx.error(f"input '{operand}' names nothing (no graph input or op has that name)", name)
        elif not literals_allowed:
            raise ctx.error(f"operand {i} of {kind} must be a tensor, got the literal {operand}", name)
    if kind == "custom" and ("shape" not in entry or "dtype" not in entry):
        raise ctx.error("custom ops must state their shape and dtype", name)


def _check_names(ctx: _Context, data: dict) -> None:
    seen: set[str] = set()
    for entry in [*data.get("inputs", []), *data["ops"]]:
        name = entry["name"]
        op = name if entry in data["ops"] else None
        if not NAME_PATTERN.fullmatch(name):
            raise ctx.error(f"name {name!r} is not valid (names match [A-Za-z_][A-Za-z0-9_.:/-]*)", op)
        if name in seen:
            raise ctx.error(f"the name '{name}' is used twice", op)
        seen.add(name)


def _order_ops(ctx: _Context, data: dict) -> list[dict]:
    """User ops in a deterministic topological order (file order among ready ops)."""
    entries = {entry["name"]: (i, entry) for i, entry in enumerate(data["ops"])}
    deps = nx.DiGraph()
    deps.add_nodes_from(entries)
    for name, (_, entry) in entries.items():
        for operand in entry.get("inputs", []):
            if isinstance(operand, str) and operand in entries:
                deps.add_edge(operand, name)
    # find_cycle restarts from every source op (seconds on DenseNet's 760): only look for one that exists
    if nx.is_directed_acyclic_graph(deps):
        order = nx.lexicographical_topological_sort(deps, key=lambda n: entries[n][0])
        return [entries[name][1] for name in order]
    cycle = nx.find_cycle(deps)
    ring = [u for u, _ in cycle] + [cycle[0][0]]
    raise ctx.error(f"the graph has a cycle through ops {' -> '.join(ring)}", cycle[0][0])


def _infer_primitive(ctx: _Context, prim: Primitive, tensors: dict[str, TensorType], owner: str) -> TensorType:
    operands = [tensors[i] if isinstance(i, str) else i for i in prim.inputs]
    try:
        return REGISTRY[prim.kind].infer(operands, prim.attrs)
    except InferenceError as exc:
        where = f" (in its expansion: {prim.kind} '{prim.name}')" if prim.name != owner else ""
        raise ctx.error(f"{exc}{where}", owner) from None


def _build_ops(ctx: _Context, entry: dict, tensors: dict[str, TensorType], user_names: set[str]) -> list[Op]:
    """The primitives of one user op, shapes and dtypes inferred and checked."""
    name, kind = entry["name"], entry["op"]
    _, _, declared, _ = _declared(kind)
    attrs = _check_attrs(ctx, name, kind, entry.get("attrs", {}), declared)
    inputs = list(entry.get("inputs", []))
    if kind in COMPOSITES:
        try:
            prims = expand(name, kind, inputs, [tensors[i] for i in inputs], attrs)
        except InferenceError as exc:
            raise ctx.error(str(exc), name) from None
        origin = name
    else:
        prims = [Primitive(name, kind, tuple(inputs), attrs)]
        origin = None
    ops = []
    for prim in prims:
        if prim.name != name and (prim.name in tensors or prim.name in user_names):
            raise ctx.error(f"its expansion names an op '{prim.name}', but that name is already used", name)
        if kind == "custom":
            out = TensorType(tuple(entry["shape"]), entry["dtype"])
        else:
            out = _infer_primitive(ctx, prim, tensors, name)
        promoted = out.dtype
        _check_size(ctx, f"op '{prim.name}'", out)  # before the stated shape: an overflow is the problem to name
        if prim.name == name:
            if "shape" in entry and tuple(entry["shape"]) != out.shape:
                raise ctx.error(f"stated shape {entry['shape']} disagrees with the inferred shape {list(out.shape)}", name)
            if "dtype" in entry:
                out = TensorType(out.shape, entry["dtype"])
        tensors[prim.name] = out
        ops.append(Op(prim.name, prim.kind, tuple(prim.inputs), prim.attrs, out, promoted, origin))
    return ops


def format_1_1_feature(data: dict, tensors: dict[str, TensorType] | None = None) -> str | None:
    """What in a graph dict needs format 1.1 (constant values, its ops, its dtypes),
    as a phrase, or ``None``; ``tensors`` adds the inferred dtypes."""
    if "values" in data or any("value" in e for e in data.get("inputs", [])):
        return "constant values"
    op = next((e for e in data.get("ops", []) if e.get("op") in FORMAT_1_1_OPS), None)
    if op is not None:
        return f"op '{op['name']}' ({op['op']})"
    op = next((e for e in data.get("ops", []) if e.get("op") == "custom" and "onnx" in (e.get("attrs") or {})), None)
    if op is not None:
        return f"op '{op['name']}' (custom with an 'onnx' node)"
    dtypes = [e.get("dtype") for e in (*data.get("inputs", []), *data.get("ops", []))]
    dtypes += [t.dtype for t in (tensors or {}).values()]
    used = sorted({d for d in dtypes if d in DTYPES_1_1})
    return f"dtype {used[0]}" if used else None


def _check_size(ctx: _Context, what: str, t: TensorType) -> None:
    """Reject a tensor above :data:`MAX_TENSOR_BYTES` (the exact integer costs must fit
    64 bits) with a :class:`SizeError`."""
    if t.nbytes > MAX_TENSOR_BYTES:
        raise SizeError(str(ctx.error(f"{what}: {t.dtype}{list(t.shape)} is {t.nbytes:.3g} bytes, above the format's "
                                      f"limit of 2^40 bytes (1 TiB) per tensor")))


def _native(value: Any) -> Any:
    """``value`` with NumPy scalars turned into Python numbers (dicts given to the API
    may hold them), so that every later type check sees ``int`` or ``float``."""
    if isinstance(value, dict):
        return {k: _native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_native(v) for v in value]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return value


def _build(data: Any, ctx: _Context, path: str | None, default_name: str) -> Graph:
    data = _native(data)
    if not isinstance(data, dict):
        raise ctx.error("a graph file must hold a mapping with 'inputs', 'ops' and 'outputs'")
    error = jsonschema.exceptions.best_match(validator().iter_errors(data))
    if error is not None:
        raise _schema_error(ctx, data, error)
    if data.get("format", FORMAT_VERSION) > FORMAT_VERSION:
        raise ctx.error(f"format {data['format']} is newer than this reader (it reads format {FORMAT_VERSION})")
    if data.get("format", FORMAT_VERSION) not in FORMAT_VERSIONS:
        raise ctx.error(f"format {data['format']} is no version of the format (1 or 1.1)")
    _check_names(ctx, data)
    names = {entry["name"] for entry in [*data.get("inputs", []), *data["ops"]]}
    for entry in data["ops"]:
        _check_op_entry(ctx, entry, names)
    default_dtype = data.get("dtype", "float32")
    inputs = {e["name"]: TensorType(tuple(e["shape"]), e.get("dtype", default_dtype)) for e in data.get("inputs", [])}
    for name, t in inputs.items():
        _check_size(ctx, f"input '{name}'", t)
    values = {}
    for entry in data.get("inputs", []):
        if "value" in entry:
            try:
                values[entry["name"]] = parse_inline(entry["value"], inputs[entry["name"]])
            except ValueError as exc:
                raise ctx.error(f"input '{entry['name']}': {exc}") from None
    tensors: dict[str, TensorType] = dict(inputs)
    ops: dict[str, Op] = {}
    for entry in _order_ops(ctx, data):
        for op in _build_ops(ctx, entry, tensors, names):
            ops[op.name] = op
    if data.get("format") == 1:
        feature = format_1_1_feature(data, tensors)
        if feature is not None:
            raise ctx.error(f"{feature} is format 1.1, but the file says format: 1")
    if "values" in data and not data["values"].endswith(".npz"):
        raise ctx.error(f"'values' names an .npz side file, got {data['values']!r}")
    outputs = data["outputs"]
    if not outputs:
        raise ctx.error("'outputs' is empty: name at least one tensor to write")
    for out in outputs:
        if out not in names:
            raise ctx.error(f"output '{out}' names nothing (no graph input or op has that name)")
    if len(set(outputs)) != len(outputs):
        raise ctx.error("'outputs' names a tensor twice")
    graph = Graph(data.get("name", default_name), data.get("source", ""), inputs, ops, tuple(outputs), path, values,
                  data.get("values"))
    onnx_semantics.attach(graph)  # an ONNX custom op's kept node: its semantics (onnx imported only when run)
    return graph


def load_graph(source: str | os.PathLike | dict) -> Graph:
    """Load a graph in format v1 (``docs/graph-format.md``).

    Composite ops are expanded into primitives (``NAME:part``, the last named
    ``NAME``); shapes and dtypes are inferred and checked against stated ones.

    Parameters
    ----------
    source : str, os.PathLike or dict
        A ``.yaml``, ``.yml`` or ``.json`` file, or a dict of the same structure.

    Returns
    -------
    Graph
        Ops in topological order (``graph.ops``), the producer/consumer DAG with
        tensor sizes in bytes (``graph.dag``), inputs and outputs.

    Raises
    ------
    GraphError
        One line naming the file, the op and the problem, for every rejection
        listed in ``docs/graph-format.md``.

    Examples
    --------
    >>> g = load_graph("graphs/mlp_gelu_f16.yaml")
    >>> list(g.ops)
    ['h:weight_t', 'h:matmul', 'h', 'a', 'y:weight_t', 'y:matmul', 'y']
    >>> g.tensor("h").shape, g.tensor("h").dtype
    ((8192, 4096), 'float16')
    >>> load_graph({"format": 1, "name": "bad", "inputs": [{"name": "x", "shape": [4], "dtype": "float16"}],
    ...             "ops": [{"name": "y", "op": "relu", "inputs": ["z"]}], "outputs": ["y"]})
    Traceback (most recent call last):
    ...
    partitioner.errors.GraphError: <graph>: op 'y': input 'z' names nothing (no graph input or op has that name)
    """
    if isinstance(source, dict):
        return _build(source, _Context("<graph>"), None, "graph")
    path = Path(source)
    return _build(_parse(path), _Context(str(path)), str(path), path.stem)
