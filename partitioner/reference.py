"""NumPy execution of a whole graph, op by op (the unfused reference)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .dtypes import FLOATS, INTEGERS, cast_array, numpy_dtype
from .graph import Graph
from .ops import TensorType, normalize_axis
from .values import constants


# ops whose result holds only values of their (first, or every) tensor operand
_MOVES = frozenset({"reshape", "transpose", "broadcast_to", "slice", "concat", "cast", "identity"})


def _index_bounds(graph: Graph) -> dict[str, int]:
    """Graph input (or custom op) -> exclusive upper bound for its random values, where they reach a
    gather's indices, directly or through ops that only move values (layout ops,
    casts, the data of another gather): then the drawn indices are in range."""
    bounds: dict[str, int] = {}
    for op in graph.ops.values():
        if op.kind != "gather":
            continue
        data, indices = op.inputs
        dim = graph.tensor(data).shape[normalize_axis(op.attrs["axis"], len(graph.tensor(data).shape))]
        stack, seen = [indices], set()
        while stack:
            tensor = stack.pop()
            if tensor in seen:
                continue
            seen.add(tensor)
            if tensor in graph.inputs or graph.ops[tensor].kind == "custom":  # drawn values
                bounds[tensor] = min(bounds.get(tensor, dim), dim)
            elif graph.ops[tensor].kind in _MOVES:
                stack.extend(graph.ops[tensor].tensor_inputs)
            elif graph.ops[tensor].kind == "gather":
                stack.append(graph.ops[tensor].inputs[0])
    return bounds


def input_values(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """A value for every graph input: its constant value where the graph gives one
    (``partitioner.values``), a seeded random one otherwise (:func:`random_values`;
    drawn for every input, so that a constant does not change the others' draws).

    Raises
    ------
    GraphError
        The graph's side file of values is unreadable or does not match its inputs.
    """
    return {**random_values(graph, list(graph.inputs), seed), **constants(graph).values}


def random_values(graph: Graph, names: list[str], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random values for the tensors ``names`` (graph inputs, or custom ops'
    results standing in for what a custom op would compute): standard normal floats,
    booleans, and integers in ``[0, 16)``, or within the indexed axis where they feed
    a gather."""
    rng = np.random.default_rng(seed)
    bounds = _index_bounds(graph)
    values = {}
    for name in names:
        t = graph.tensor(name)
        if t.dtype in FLOATS:
            data = rng.standard_normal(t.shape, dtype=np.float32)
        elif t.dtype in INTEGERS:
            data = rng.integers(0, max(1, bounds.get(name, 16)), t.shape)
        else:
            data = rng.integers(0, 2, t.shape).astype(bool)
        values[name] = np.asarray(data).astype(numpy_dtype(t.dtype))
    return values


def run_op(graph: Graph, name: str, values: dict[str, np.ndarray]) -> np.ndarray:
    """One op's result from its operands in ``values`` (the registry's semantics; a
    stated dtype casts the promoted result)."""
    op = graph.ops[name]
    operands = [values[i] if isinstance(i, str) else i for i in op.inputs]
    types = [graph.tensor(i) if isinstance(i, str) else i for i in op.inputs]
    try:
        result = np.asarray(op.spec.reference(operands, op.attrs, types, TensorType(op.out.shape, op.promoted)))
    except IndexError as exc:  # data-dependent: a gather index outside its axis
        raise ValueError(f"op '{name}': {exc}") from None
    return result if op.out.dtype == op.promoted else cast_array(result, op.out.dtype)


def _run_hook(graph: Graph, name: str, values: dict[str, np.ndarray]) -> np.ndarray:
    """A custom op's result from the semantics its importer attached, checked
    against the op's stated shape and dtype."""
    op = graph.ops[name]
    try:
        result = np.asarray(graph.hooks[name](*[values[t] for t in op.tensor_inputs]))
    except ValueError as exc:
        raise ValueError(f"op '{name}' ({op.attrs['kind']}): {exc}") from None
    if result.shape != op.out.shape or result.dtype != numpy_dtype(op.out.dtype):
        raise ValueError(f"op '{name}': its semantics hook gave {result.dtype}{list(result.shape)}, "
                         f"not the stated {op.out.dtype}{list(op.out.shape)}")
    return result


def run_reference(graph: Graph, inputs: dict[str, np.ndarray] | None = None, seed: int = 0,
                  keep: Iterable[str] | None = None,
                  perturb: Callable[[str, dict[str, np.ndarray]], np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Execute ``graph`` op by op with NumPy: the unfused reference every backend is checked against.

    Parameters
    ----------
    graph : Graph
        A loaded graph.
    inputs : dict of str to numpy.ndarray, optional
        Values for graph inputs; missing ones are the graph's constant values, or
        else drawn by :func:`input_values` (floats standard normal, integers
        within the axis they index). A ``custom`` op's name gives its result (a
        stand-in); otherwise a custom op runs through its importer's hook
        (``Graph.hooks``).
    seed : int
        The seed for the drawn inputs.
    keep : iterable of str, optional
        The tensors to return. Others are dropped once their last reader ran, so
        the run holds only the live values (a check of a whole network's outputs
        needs a fraction of the memory). By default every tensor is kept.
    perturb : callable, optional
        ``perturb(name, values)`` gives what stands for op ``name``'s result from
        then on, from the values so far (its result among them): a check rounds
        results again at random with it (``backends.check.rounding_spread``).

    Returns
    -------
    dict of str to numpy.ndarray
        Every graph input and every op's result (or those of ``keep``), by tensor
        name, in the tensor's shape and dtype (bfloat16 through ``ml_dtypes``).

    Raises
    ------
    ValueError
        A given input has the wrong shape or dtype or names no input, or a gather
        index is outside its axis; a :class:`GraphError` when the graph's side
        file of values is unreadable or does not match.
    NotImplementedError
        The graph has a ``custom`` op with neither a given result nor a hook.

    Examples
    --------
    >>> import numpy as np
    >>> from partitioner import load_graph
    >>> g = load_graph({"format": 1, "name": "scale", "dtype": "float32",
    ...                 "inputs": [{"name": "x", "shape": [2, 3]}],
    ...                 "ops": [{"name": "y", "op": "mul", "inputs": ["x", "x"]}], "outputs": ["y"]})
    >>> values = run_reference(g, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    >>> values["y"]
    array([[ 0.,  1.,  4.],
           [ 9., 16., 25.]], dtype=float32)
    >>> sorted(run_reference(g, seed=1))
    ['x', 'y']
    """
    given = dict(inputs or {})
    customs = {name for name, op in graph.ops.items() if op.kind == "custom"}
    unknown = sorted(set(given) - set(graph.inputs) - customs)
    if unknown:
        raise ValueError(f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a graph input")
    values = input_values(graph, seed)
    for name, array in given.items():
        t = graph.tensor(name)
        array = np.asarray(array)
        if array.shape != t.shape or array.dtype != numpy_dtype(t.dtype):
            raise ValueError(f"input '{name}' must be {t.dtype}{list(t.shape)}, got {array.dtype}{list(array.shape)}")
        values[name] = array
    kept = None if keep is None else set(keep)
    last = graph.last_readers(graph.ops) if kept is not None else {}
    for position, (name, op) in enumerate(graph.ops.items()):
        if op.kind != "custom":
            values[name] = run_op(graph, name, values)
            if perturb is not None:
                values[name] = perturb(name, values)
        elif name in given:
            values[name] = given[name]
        elif name in graph.hooks:
            values[name] = _run_hook(graph, name, values)
        else:
            raise NotImplementedError(f"op '{name}' is custom (kind {op.attrs['kind']!r}) and has no semantics")
        if kept is not None:
            for tensor in (*op.tensor_inputs, name):
                if last.get(tensor, -1) <= position and tensor not in kept:
                    values.pop(tensor, None)
    if kept is not None:
        for name in set(values) - kept:  # inputs nothing reads
            del values[name]
    return values
