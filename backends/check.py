"""Running a plan on a backend and checking its outputs against the NumPy reference.

The tolerance is derived per output from its dtype and from the sums upstream of it
(``docs/backends.md``, *The tolerance rule*). NaN and ±inf must sit at the same
positions as in the reference, with the same signs for inf; every other element
must satisfy

    |got − want| ≤ n·u·|want| + (n·u + c·√T·u_acc)·max |want|

where ``u`` is the unit roundoff of the least precise float dtype upstream (2^-11
for float16), ``n`` the ulps a chain of correctly rounded ops may drift by (8; 4 for
the 8-bit floats, whose ulp is already a quarter of a value), ``T`` the number of
terms the output's upstream sums add up (matmul K, conv Ci·kh·kw, reduction
lengths, window taps, scan lengths, summed over every upstream op), ``u_acc`` the
unit roundoff of the dtype they accumulate in (float32, or float64), and ``c = 8``.

- ``n·u·|want|``: each op rounds once; an input that another summation order moved
  by one ulp across a rounding boundary moves the result by an ulp or two.
- ``n·u·max |want|``: an element that such a sum leaves near zero by cancellation
  carries the error of its largest terms, not of its own size; the tensor's largest
  value stands for that scale.
- ``c·√T·u_acc·max |want|``: rounding errors of sums in another order (a K loop
  blocked by 32, a tree across a warp, online softmax) grow like the square root
  of the number of terms, relative to their magnitude; c covers the largest of
  millions of elements (about 5 standard deviations) and the partial sums of
  positive terms, which grow up to the total.

A wrong kernel is off by the size of a term or of a value: a dropped term of a
K = 3072 dot product is about 1/200 of the output's scale, above the bound, and a
wrong element by its own size. Integers and bool are exact.

Some outputs carry their rounding errors further than a few ulps: ``exp`` turns an
absolute error of its argument into a relative one of its result, so a float32
softmax of scores near 500 is off by about 500 ulps of the scores' rounding in any
correct order. An output beyond the rule is checked again against the reference's
own spread: :data:`ROUNDING_RUNS` runs with every rounded result rounded again at
random (:class:`RandomRounding`), whose root-mean-square distance
from the reference, per element and times :data:`SPREAD_FACTOR`, replaces the
bound where it is larger. A kernel off by a term or a value stays off: the spread of
a well-conditioned element is a few ulps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partitioner.dtypes import FLOAT8S, cast_array, compute_dtype, itemsize, numpy_dtype
from partitioner.graph import Graph, Op
from partitioner.ops import matmul_shapes, normalize_axis
from partitioner.pooling import window_elements
from partitioner.plan import Plan
from partitioner.reference import input_values, random_values, run_op, run_reference
from partitioner.report import PIPED_WIDTH, table_text

from .base import Backend, BackendError

#: Unit roundoff (half an ulp at 1) of each float dtype: 2^-(mantissa bits + 1).
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8,
                 "float8_e4m3fn": 2.0**-4, "float8_e5m2": 2.0**-3}
#: Ulps a chain of correctly rounded ops may drift by after an input moved by one.
ULPS = 8
#: Safety factor on the square-root growth of a sum's rounding error.
SUM_FACTOR = 8
#: Runs of the reference under random rounding an output beyond the rule is checked
#: against again (:func:`rounding_spread`), and the factor on their spread.
ROUNDING_RUNS = 8
SPREAD_FACTOR = 2


@dataclass(frozen=True)
class OutputCheck:
    """One graph output compared with the reference.

    ``max_abs_error`` is the largest absolute error and ``max_rel_error`` the
    largest error relative to the reference's largest magnitude (both inf when NaN
    or inf sit at other positions than in the reference). ``dtype`` is the one whose
    roundoff applied, ``terms`` the terms summed upstream, and ``error_ratio`` the
    largest error over its element's tolerance: the output passes (``ok``) when it
    is at most 1. ``ill_conditioned`` says that the reference's spread under random
    rounding (:func:`rounding_spread`) set some element's tolerance."""

    name: str
    dtype: str
    terms: int
    max_abs_error: float
    max_rel_error: float
    error_ratio: float
    ok: bool
    ill_conditioned: bool = False


def tolerance(dtype: str, terms: int = 0) -> tuple[float, float]:
    """``(rtol, scale_tol)`` of the rule above: an element may be off by ``rtol·|want|
    + scale_tol·max |want|``. ``terms`` is the number of terms summed upstream;
    integers and bool get ``(0, 0)``: exact."""
    if dtype not in UNIT_ROUNDOFF:
        return 0.0, 0.0
    u = UNIT_ROUNDOFF[dtype]
    rtol = (ULPS // 2 if dtype in FLOAT8S else ULPS) * u
    return rtol, rtol + SUM_FACTOR * float(np.sqrt(terms)) * _accumulator_roundoff(dtype)


def _accumulator_roundoff(dtype: str) -> float:
    """Unit roundoff of the dtype sums of ``dtype`` accumulate in: float64's, or float32's."""
    return UNIT_ROUNDOFF["float64" if dtype == "float64" else "float32"]


def compare(name: str, dtype: str, got: np.ndarray, want: np.ndarray, terms: int = 0,
            spread: np.ndarray | None = None) -> OutputCheck:
    """Compare one output with its reference value under :func:`tolerance`, or
    :data:`SPREAD_FACTOR` times ``spread`` where that is larger.

    Parameters
    ----------
    name : str
        The output, for the report.
    dtype : str
        The dtype whose roundoff applies (:func:`tolerance_dtype`).
    got, want : numpy.ndarray
        The backend's and the reference's values, same shape.
    terms : int
        Terms summed upstream of the output (:func:`accumulated_terms`).
    spread : numpy.ndarray, optional
        The reference's spread under random rounding, per element, in the output's
        units (:func:`rounding_spread`).

    Returns
    -------
    OutputCheck
    """
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    rtol, scale_tol = tolerance(dtype, terms)
    special = ~np.isfinite(w) | ~np.isfinite(g)
    same_special = np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(
        np.where(np.isinf(g), np.sign(g), 0), np.where(np.isinf(w), np.sign(w), 0))
    finite_w = np.where(special, 0.0, w)
    diff = np.abs(np.where(special, 0.0, g) - finite_w)
    scale = np.max(np.abs(finite_w), initial=0.0)
    allowed = rtol * np.abs(finite_w) + scale_tol * scale
    conditioned = False
    if spread is not None and rtol:
        spread = SPREAD_FACTOR * np.where(special, 0.0, spread)
        conditioned = bool(np.any(spread > allowed))
        allowed = np.maximum(allowed, spread)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / allowed)  # x/0 = inf: any error on an exact output
    worst = float(np.max(ratio, initial=0.0)) if same_special else float("inf")
    max_abs = float(np.max(diff, initial=0.0)) if same_special else float("inf")
    if _exact_mismatch(got, want, rtol, scale_tol):  # integers apart by 1 may be one float64 above 2^53
        worst, max_abs = float("inf"), max(max_abs, 1.0)
    return OutputCheck(name, dtype, terms, max_abs, float(max_abs / scale) if scale else max_abs, worst,
                       worst <= 1.0, conditioned)


def _exact_mismatch(got, want, rtol: float, scale_tol: float) -> bool:
    """Whether an exact output (integers, bool: no tolerance) differs in its own
    dtype, where the float64 comparison cannot tell int64 values above 2^53 apart."""
    got, want = np.asarray(got), np.asarray(want)
    return (rtol == scale_tol == 0 and got.dtype == want.dtype and got.dtype.kind in "iub"
            and not np.array_equal(got, want))


def terms_summed(graph: Graph, op: Op) -> int:
    """Terms one result element of ``op`` adds up, each a rounding in its accumulator:
    K of a matmul, Ci/groups·kh·kw of a conv, the reduced elements of a sum, mean or
    product, the taps of an average pool, the length of a scan; 0 for ops whose
    result does not depend on an order (elementwise, layout, max, min, arg-reductions)."""
    operands = [graph.tensor(t) for t in op.inputs if isinstance(t, str)]
    if op.kind == "matmul":
        return matmul_shapes(operands[0].shape, operands[1].shape)[2]
    if op.kind == "conv2d":
        _, ci, kh, kw = operands[1].shape
        return ci * kh * kw
    if op.kind in ("reduce_sum", "reduce_mean", "reduce_prod"):
        return operands[0].numel // max(op.out.numel, 1)
    if op.kind == "avg_pool2d":
        return window_elements(op.attrs)
    if op.kind == "cumsum":
        return operands[0].shape[normalize_axis(op.attrs["axis"], len(operands[0].shape))]
    return 0


def accumulated_terms(graph: Graph, tensor: str) -> int:
    """``T`` of the tolerance rule for ``tensor``: the terms summed by the op that
    computes it and by every op upstream (errors of chained sums add, as the square
    roots of their lengths add in quadrature; 0 for a graph input)."""
    if tensor not in graph.ops:
        return 0
    names = [tensor, *graph.names(graph.ancestors_mask[graph.index[tensor]])]
    return sum(terms_summed(graph, graph.ops[n]) for n in names)


def storage_values(graph: Graph, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Graph-input values, and custom ops' results where ``values`` has them, keyed by
    storage (both are their own storages)."""
    return {name: values[name] for name in (*graph.inputs, *graph.ops) if name in values}


def output_value(graph: Graph, storages: dict[str, np.ndarray], tensor: str) -> np.ndarray:
    """A graph output from the storages a backend returned (outputs may be views; an
    empty tensor needs no kernel, so a backend may not return it)."""
    t = graph.tensor(tensor)
    base = graph.storage[tensor]
    if base not in storages and t.numel == 0:
        return np.empty(t.shape, dtype=numpy_dtype(t.dtype))
    return storages[base].reshape(t.shape)


def run_and_check(plan: Plan, backend: Backend, seed: int = 0,
                  inputs: dict[str, np.ndarray] | None = None) -> list[OutputCheck]:
    """Run ``plan`` on ``backend`` and check every graph output against the reference.

    The reference is :func:`partitioner.run_reference`, the unfused NumPy
    execution; tolerances are per dtype (``docs/backends.md``).

    Parameters
    ----------
    plan : Plan
        From :func:`partitioner.partition`.
    backend : Backend
        From :func:`backends.base.load_backend`.
    seed : int
        The seed for the inputs not given.
    inputs : dict of str to numpy.ndarray, optional
        Values for graph inputs.

    Returns
    -------
    list of OutputCheck
        One per graph output: the largest absolute and relative errors, the
        dtype whose tolerance applied, and whether it passed (``ok``).

    Raises
    ------
    BackendError
        The reference cannot run on the inputs, the tensors do not fit in memory,
        or the backend cannot build or run. A custom op runs in the reference
        through its importer's hook (``Graph.hooks``), or else its result is drawn
        at random (the run report says which); the plan runs on that result.

    Examples
    --------
    >>> import partitioner
    >>> from backends.base import load_backend
    >>> g = partitioner.load_graph({"format": 1, "name": "gelu", "dtype": "float32",
    ...                             "inputs": [{"name": "x", "shape": [64, 32]}],
    ...                             "ops": [{"name": "y", "op": "gelu", "inputs": ["x"]}], "outputs": ["y"]})
    >>> [(c.name, c.ok) for c in run_and_check(partitioner.partition(g, "ilp"), load_backend("numpy"))]
    [('y', True)]
    """
    g = plan.graph
    customs = [op.name for op in g.ops.values() if op.kind == "custom"]
    need, have = memory_needed(plan), memory_available()
    if have is not None and need > have:  # the kernel's OOM killer would end the run without a word
        raise BackendError(f"the check needs about {need / 2**30:,.1f} GiB at its peak (estimated from the live "
                           f"values of the plan's groups), more than the {have / 2**30:,.1f} GiB available: run a "
                           "smaller instance of the graph")
    try:
        inputs = {**input_values(g, seed), **(inputs or {})}
        # a custom op runs in the reference through its hook, or stands in as drawn data;
        # the plan then runs on the reference's result of it, like any input
        stand_ins = random_values(g, [c for c in customs if c not in g.hooks], seed)
        reference = _reference(g, {**inputs, **stand_ins}, [*g.outputs, *customs])
        fed = {**inputs, **{c: reference[c] for c in customs}}
        storages = {**storage_values(g, fed), **backend.run(backend.build(backend.render(plan)), fed)}
    except MemoryError:
        raise BackendError(f"the check ran out of memory (about {need / 2**30:,.1f} GiB estimated at its peak): "
                           "run a smaller instance of the graph") from None
    checks = [compare(t, tolerance_dtype(g, t), output_value(g, storages, t), reference[t], accumulated_terms(g, t))
              for t in g.outputs]
    beyond = sorted({c.name for c in checks if not c.ok and c.dtype in UNIT_ROUNDOFF})
    if not beyond:
        return checks
    spreads = rounding_spread(g, {**inputs, **stand_ins}, beyond, reference, seed)
    return [compare(t, c.dtype, output_value(g, storages, t), reference[t], c.terms, spreads[t])
            if t in spreads else c for t, c in zip(g.outputs, checks)]


def rounding_spread(graph: Graph, inputs: dict[str, np.ndarray], outputs: list[str],
                    reference: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """Per element of each of ``outputs``, the root mean square of the distances
    from ``reference`` of :data:`ROUNDING_RUNS` runs of the reference under random
    rounding (:class:`RandomRounding`), in the output's units
    (float64): how far its rounding errors carry. A run that leaves an element
    non-finite where the reference has a number adds nothing there. Empty when a run
    cannot complete (a moved value made a gather index fall outside its axis): the
    outputs then keep the rule's verdict.
    """
    rounding = RandomRounding(graph, np.random.default_rng(seed))
    squares = {t: np.zeros(graph.tensor(t).shape) for t in outputs}
    for _ in range(ROUNDING_RUNS):
        try:
            run = run_reference(graph, inputs, keep=outputs, perturb=rounding)
        except ValueError:
            return {}
        for t in outputs:
            with np.errstate(invalid="ignore", over="ignore"):
                distance = run[t].astype(np.float64) - reference[t].astype(np.float64)
                squares[t] += np.where(np.isfinite(distance), distance, 0.0) ** 2
    return {t: np.sqrt(total / ROUNDING_RUNS) for t, total in squares.items()}


#: Bytes :func:`compare` holds per element of the output it compares: about nine
#: float64 arrays at once (measured: a 100-million-element float32 output peaked at
#: 6.96 GB of resident memory, 70 bytes an element, on this project's machine).
COMPARE_BYTES_PER_ELEMENT = 72


def memory_needed(plan: Plan) -> int:
    """Bytes a check holds at its peak, estimated op by op as the numpy backend runs
    the plan: the graph inputs, the storages written by earlier groups and read by
    this or a later one, the group's values still to be read, and each op's result
    twice in its compute dtype (the result and NumPy's temporary), with the
    reference's outputs held beside them; then the comparison, output by output
    (:data:`COMPARE_BYTES_PER_ELEMENT`). The reference, which frees values one op
    at a time, needs no more."""
    g = plan.graph
    groups = [p.group for p in plan.cost.groups]
    last = {}
    for k, group in enumerate(groups):
        for base in group.reads:
            last[base] = k
    inputs = sum(t.nbytes for t in g.inputs.values())
    live, peak = 0, 0
    for k, group in enumerate(groups):
        readers = g.last_readers(group.ops)
        held = 0
        for position, name in enumerate(group.ops):
            out = g.ops[name].out
            if g.ops[name].is_view:
                continue
            peak = max(peak, inputs + live + held + _temporary_bytes(g, g.ops[name]))
            if readers.get(name, -1) > position or name in group.writes:
                held += out.nbytes
        live += sum(g.tensor(w).nbytes for w in group.writes)
        live -= sum(g.tensor(b).nbytes for b in group.reads if last[b] == k and b in g.ops
                    and b not in g.output_storages)
    # the reference's outputs are held while the plan runs, then compared with the
    # plan's one by one, each in float64 temporaries
    outputs = [g.tensor(t) for t in g.outputs]
    held = sum(t.nbytes for t in outputs)
    compared = max((t.numel for t in outputs), default=0) * COMPARE_BYTES_PER_ELEMENT
    return max(peak + held, inputs + 2 * held + compared)


def _temporary_bytes(g: Graph, op) -> int:
    """What NumPy allocates computing ``op``: its result and one temporary in the
    compute dtype; for a conv2d also the float32 copy of its input windows (im2col)
    that the reference's einsum makes."""
    out = op.out
    size = 2 * out.numel * max(itemsize(out.dtype), itemsize(compute_dtype(out.dtype)))
    if op.kind == "conv2d":
        _, ci, kh, kw = g.tensor(op.inputs[1]).shape
        n, _, ho, wo = out.shape
        size += n * ho * wo * op.attrs["groups"] * ci * kh * kw * 4
    return size


def memory_available() -> int | None:
    """Bytes of memory the system can still give (Linux's ``MemAvailable``), or
    ``None`` where it does not say."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class RandomRounding:
    """Rounds each op's result again at random, as ``run_reference``'s ``perturb``:
    the roundings a kernel may make otherwise, made at random (as Monte Carlo
    arithmetic does: D. S. Parker, "Monte Carlo Arithmetic", UCLA CSD-970002, 1997).

    A float result moves by one or two ulps of its dtype, up or down, element by
    element; one summing ``T`` terms (:func:`terms_summed`) also by up to
    ``√T·u_acc`` times the sum of its terms' magnitudes (the op run on its operands'
    magnitudes), as a sum in another order may. Results that only move values (layout
    ops, a gather, ``identity``) stay, and so do the elements a cast left unchanged,
    infinities, NaN, an element a move would overflow, and zeros but for the sum's
    move."""

    def __init__(self, graph: Graph, rng: np.random.Generator):
        self.graph, self.rng = graph, rng

    def __call__(self, name: str, values: dict[str, np.ndarray]) -> np.ndarray:
        g = self.graph
        op, value = g.ops[name], values[name]
        dtype = op.out.dtype
        if dtype not in UNIT_ROUNDOFF or op.op_class in ("injective", "broadcast") or op.kind in ("gather", "identity"):
            return value
        x = np.asarray(value).astype(np.float64)
        _, exponent = np.frexp(x)
        ulps = self.rng.choice(np.array([-2.0, -1.0, 1.0, 2.0]), size=x.shape)
        move = np.where(x == 0, 0.0, ulps * np.ldexp(2 * UNIT_ROUNDOFF[dtype], exponent - 1))  # a zero is exact
        terms = terms_summed(g, op)
        with np.errstate(over="ignore", invalid="ignore"):
            if terms:  # (a sum's zero may be a cancellation)
                magnitudes = run_op(g, name, {t: np.abs(values[t]) for t in op.tensor_inputs}).astype(np.float64)
                move += self.rng.uniform(-1.0, 1.0, x.shape) * float(np.sqrt(terms)) * _accumulator_roundoff(dtype) \
                    * magnitudes
            moved = cast_array(x + move, dtype)
            stay = ~np.isfinite(x) | ~np.isfinite(moved.astype(np.float64))
        if op.kind == "cast":
            stay |= x == values[op.tensor_inputs[0]].astype(np.float64)
        return np.where(stay, value, moved)


def _reference(g: Graph, inputs: dict[str, np.ndarray], keep: list[str]) -> dict[str, np.ndarray]:
    try:
        return run_reference(g, inputs, keep=keep)  # only the live values: whole networks fit
    except ValueError as exc:
        raise BackendError(reference_failure(g, exc)) from None


def reference_failure(g: Graph, exc: ValueError) -> str:
    """The line for a reference that cannot run (a gather index outside its axis, a
    custom op's semantics that fail), naming the graph's file (where it came from one)
    and the op (``exc``'s own words)."""
    where = f"{g.path}: " if g.path else ""
    return f"{where}the reference cannot run: {exc}"


_PRECISION = ("float8_e5m2", "float8_e4m3fn", "bfloat16", "float16", "float32", "float64")


def tolerance_dtype(graph: Graph, tensor: str) -> str:
    """The dtype whose tolerance applies to ``tensor``: the least precise float dtype
    anything upstream of it computed or stored in (a float64 output of float32
    math is only as exact as float32); its own dtype if it is not a float."""
    own = graph.tensor(tensor).dtype
    if own not in _PRECISION:
        return own
    worst = own
    names = [tensor] if tensor in graph.ops else []
    if names:
        names += graph.names(graph.ancestors_mask[graph.index[tensor]])
    for name in names:
        op = graph.ops[name]
        for dtype in (op.promoted, op.out.dtype):
            if dtype in _PRECISION and _PRECISION.index(dtype) < _PRECISION.index(worst):
                worst = dtype
    return worst


def check_table(checks: list[OutputCheck], title: str, width: int = PIPED_WIDTH) -> str:
    """The checks as a text table: per output the dtype whose tolerance applied, the
    terms summed upstream, the largest absolute and relative (to the largest
    magnitude) errors, and ``error/tol``, the largest error over its tolerance, at
    most 1 for a pass."""
    rows = [[c.name, c.dtype, f"{c.terms:,}", f"{c.max_abs_error:.3g}", f"{c.max_rel_error:.3g}",
             f"{c.error_ratio:.3g}", ("yes" if c.ok else "NO") + (" (ill-conditioned)" if c.ill_conditioned else "")]
            for c in checks]
    # the least precise dtype upstream (tolerance_dtype), which need not be the output's
    full = (["output", "tol. dtype", "terms", "abs error", "rel error", "error/tol", "within tolerance"], rows)
    keep = (0, 1, 5, 6)  # narrow widths: the verdict and its margin
    compact = ([full[0][k] for k in keep], [[row[k] for k in keep] for row in rows])
    return table_text(title, [full, compact], {"output"}, width, {"tol. dtype"})
