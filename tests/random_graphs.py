"""A Hypothesis strategy for small random operator graphs mixing every op class."""

from __future__ import annotations

from hypothesis import strategies as st

from partitioner import load_graph

KINDS = ("unary", "binary", "reduce", "normalize", "matmul", "siblings", "transpose", "reshape", "broadcast",
         "slice", "concat", "custom", "gather", "pool")


@st.composite
def small_graphs(draw, max_ops: int = 8, empty: bool = False):
    """A valid format-v1 graph with at most ``max_ops`` primitive ops; with ``empty``,
    zero-size tensors too: inputs with a zero dimension, and slices to zero length
    whose results non-empty reductions may read."""
    return load_graph(draw(graph_specs(max_ops, empty)))


@st.composite
def repeated_graphs(draw, block_ops: int = 4, copies: int = 2):
    """``copies`` copies of one random block of at most ``block_ops`` ops (as a
    network's repeated layers): each copy reads the previous copy's result in place of
    input ``x`` when their shapes agree (a chain of layers), and otherwise shares
    the graph's inputs with it (siblings of one input). Every copy's result is an output."""
    spec = draw(graph_specs(block_ops))
    block = load_graph(spec)
    last = spec["outputs"][0]
    chained = "x" in block.inputs and block.tensor(last).shape == block.inputs["x"].shape
    ops, outputs, x = [], [], "x"
    for k in range(copies):
        rename = {op["name"]: f"l{k}_{op['name']}" for op in spec["ops"]}
        rename["x"] = x
        for op in spec["ops"]:
            ops.append({**op, "name": rename[op["name"]],
                        "inputs": [rename.get(i, i) if isinstance(i, str) else i for i in op["inputs"]]})
        outputs.append(rename[last])
        x = rename[last] if chained else "x"
    names = {i for op in ops for i in op["inputs"] if isinstance(i, str)}
    inputs = [entry for entry in spec["inputs"] if entry["name"] in names]
    return load_graph({"name": "repeated", "inputs": inputs, "ops": ops, "outputs": outputs})


@st.composite
def graph_specs(draw, max_ops: int = 8, empty: bool = False):
    """The format-v1 spec (a dict) of a :func:`small_graphs` graph."""
    # large enough that bytes weigh as much as launches in the objective
    sizes = [(256, 512), (512, 512), (128, 1024)] + ([(0, 512), (256, 0), (0, 0)] if empty else [])
    kinds = KINDS + (("empty_slice",) * 2 if empty else ())
    m, n = draw(st.sampled_from(sizes))
    dtype = draw(st.sampled_from(["float32", "float16"]))
    inputs = {"x": [m, n], "y": [m, n], "w": [n, n], "v": [n, 384], "bias": [n], "idx": [m]}
    pool: list[tuple[str, tuple[int, ...]]] = [("x", (m, n)), ("y", (m, n))]
    ops: list[dict] = []

    def add(kind, operands, out_shape, **extra):
        name = f"o{len(ops)}"
        ops.append({"name": name, "op": kind, "inputs": list(operands), **extra})
        pool.append((name, tuple(out_shape)))
        return name

    while len(ops) < max_ops:
        kind = draw(st.sampled_from(kinds))
        # prefer recent results so that the graph is deep rather than a fan of inputs
        src, shape = pool[len(pool) - 1 - draw(st.integers(0, min(3, len(pool) - 1)))]
        rank = len(shape)
        if kind == "binary":
            partners = [t for t, s in pool if s == shape and t != src] + (["bias"] if shape[-1:] == (n,) else [])
            other = draw(st.sampled_from(partners + [0.5]))
            add(draw(st.sampled_from(["add", "mul", "maximum"])), [src, other], shape)
        elif kind == "reduce" and rank:
            axis = draw(st.sampled_from(list(range(rank))))
            keep = draw(st.booleans())
            out = tuple(1 if i == axis else d for i, d in enumerate(shape)) if keep else shape[:axis] + shape[axis + 1:]
            # max has no identity: the loader rejects it over an empty axis
            kinds_of = ["reduce_sum", "reduce_mean"] + (["reduce_max"] if shape[axis] else [])
            add(draw(st.sampled_from(kinds_of)), [src], out,
                attrs={"axes": [axis], "keepdims": keep})
        elif kind == "normalize" and rank and len(ops) <= max_ops - 2:
            mean = add("reduce_mean", [src], shape[:-1] + (1,), attrs={"axes": [-1], "keepdims": True})
            add("sub", [src, mean], shape)
        elif kind == "matmul" and shape[-1:] == (n,) and rank == 2:
            add("matmul", [src, "w"], shape)
        elif kind == "siblings" and shape[-1:] == (n,) and rank == 2 and len(ops) <= max_ops - 2:
            # horizontal siblings: two products of one A (q/k/v projections)
            add("matmul", [src, "w"], shape)
            add("matmul", [src, "v"], (shape[0], 384))
        elif kind == "transpose" and rank == 2:
            add("transpose", [src], shape[::-1], attrs={"perm": [1, 0]})
        elif kind == "reshape" and rank:
            target = (shape[0] * shape[1],) if rank == 2 else (shape[0], 1)
            add("reshape", [src], target, attrs={"shape": list(target)})
        elif kind == "broadcast" and rank == 2 and shape[1] == 1:
            add("broadcast_to", [src], (shape[0], n), attrs={"shape": [shape[0], n]})
        elif kind == "slice" and rank and shape[-1] > 1:
            add("slice", [src], shape[:-1] + (shape[-1] // 2,),
                attrs={"starts": [0], "ends": [shape[-1] // 2], "axes": [-1]})
        elif kind == "empty_slice" and rank:
            add("slice", [src], shape[:-1] + (0,), attrs={"starts": [0], "ends": [0], "axes": [-1]})
        elif kind == "concat" and rank:
            add("concat", [src, src], (2 * shape[0],) + shape[1:], attrs={"axis": 0})
        elif kind == "pool" and rank == 2 and min(shape) >= 2 and len(ops) <= max_ops - 3:
            # a window op: 2 x 2, stride 2, over the rows and columns as one image, and back
            half = (shape[0] // 2, shape[1] // 2)
            image = add("reshape", [src], (1, 1) + shape, attrs={"shape": [1, 1, *shape]})
            pooled = add(draw(st.sampled_from(["max_pool2d", "avg_pool2d"])), [image], (1, 1) + half,
                         attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
            del pool[-2:]  # later ops read rank-2 values
            add("reshape", [pooled], half, attrs={"shape": list(half)})
        elif kind == "custom":
            add("custom", [src], shape, attrs={"kind": "opaque"}, shape=list(shape), dtype=dtype)
        elif kind == "gather" and rank == 2 and (shape[0] or not m):  # no index fits an empty axis
            add("gather", [src, "idx"], (m,) + shape[1:], attrs={"axis": 0})
        else:
            add(draw(st.sampled_from(["exp", "relu", "neg", "tanh"])), [src], shape)
    names = [o["name"] for o in ops]
    outputs = [names[-1]] + draw(st.lists(st.sampled_from(names[:-1]), max_size=2, unique=True))
    used = {i for o in ops for i in o["inputs"] if isinstance(i, str)}
    entries = [{"name": k, "shape": v, "dtype": "int64" if k == "idx" else dtype}
               for k, v in inputs.items() if k in used]
    return {"name": "random", "inputs": entries, "ops": ops, "outputs": outputs}


@st.composite
def shared_graphs(draw, max_ops: int = 6):
    """A :func:`small_graphs` graph of ``max_ops - 3`` ops or fewer, and then an
    elementwise op ``m`` of its last result that two more ops read (an add, a
    reduction over any axis, or a product): a value a covering may
    recompute from its operand in each reader's group (``Graph.recomputable_mask``)."""
    spec = draw(graph_specs(max(1, max_ops - 3)))
    block = load_graph(spec)
    last = spec["ops"][-1]["name"]
    shape = block.tensor(last).shape
    ops = list(spec["ops"])
    ops.append({"name": "m", "op": draw(st.sampled_from(["exp", "tanh", "neg", "relu"])), "inputs": [last]})
    # readers that often cannot share a group (reductions over other axes, a
    # product and a reduction): m is then recomputable (Graph.recomputable_mask)
    readers = ["add"] + [f"reduce{axis}" for axis in range(len(shape))] * 2 + \
        (["matmul"] * 2 if len(shape) == 2 and shape[-1] == 512 else [])
    for name in ("r1", "r2"):
        kind = draw(st.sampled_from(readers))
        if kind == "matmul":
            ops.append({"name": name, "op": "matmul", "inputs": ["m", "wm"]})
        elif kind.startswith("reduce"):
            axis = int(kind[len("reduce"):])
            ops.append({"name": name, "op": "reduce_sum", "inputs": ["m"], "attrs": {"axes": [axis], "keepdims": True}})
        else:
            ops.append({"name": name, "op": kind, "inputs": ["m", draw(st.sampled_from([last, 0.5]))]})
    names = {i for o in ops for i in o["inputs"] if isinstance(i, str)}
    dtype = next(entry["dtype"] for entry in spec["inputs"] if entry["name"] != "idx")
    inputs = [entry for entry in spec["inputs"] if entry["name"] in names]
    if "wm" in names:  # its own name: the block's w is [n, n], which need not be 512 wide
        inputs.append({"name": "wm", "shape": [512, 512], "dtype": dtype})
    # m's operand an output too: then a copy saves m's write and reads what is written anyway
    outputs = list(dict.fromkeys(spec["outputs"] + [last] * draw(st.booleans()) + ["r1", "r2"]))
    return load_graph({"name": "shared", "inputs": inputs, "ops": ops, "outputs": outputs})


@st.composite
def prologue_graphs(draw, max_ops: int = 6):
    """A :func:`small_graphs` graph of ``max_ops - 2`` ops or fewer, with a batch
    norm's parameter chain in it: ``s = rsqrt(p + eps)`` or ``s = p * 0.5`` of a
    parameter ``p`` of its last result's last dimension (or a large one, of its
    shape, that costs more than a launch to read), then ``m = t * s`` for that
    result ``t``, sometimes read once more by another op: ``cost.input_prologues``
    that a group holding their readers may take in (``_Search.dominated``)."""
    spec = draw(graph_specs(max(1, max_ops - 2)))
    block = load_graph(spec)
    last = spec["ops"][-1]["name"]
    shape = list(block.tensor(last).shape)
    dtype = next(entry["dtype"] for entry in spec["inputs"] if entry["name"] != "idx")
    small = draw(st.booleans()) or not shape
    param = shape[-1:] if small else shape
    ops = list(spec["ops"])
    if draw(st.booleans()):
        ops += [{"name": "ve", "op": "add", "inputs": ["p", 1e-5]}, {"name": "s", "op": "rsqrt", "inputs": ["ve"]}]
    else:
        ops.append({"name": "s", "op": "mul", "inputs": ["p", 0.5]})
    ops.append({"name": "m", "op": "mul", "inputs": [last, "s"]})
    outputs = list(spec["outputs"]) + ["m"]
    if draw(st.booleans()):  # a second reader of the prologue
        ops.append({"name": "m2", "op": "add", "inputs": ["m", "s"]})
        outputs.append("m2")
    names = {i for o in ops for i in o["inputs"] if isinstance(i, str)}
    inputs = [entry for entry in spec["inputs"] if entry["name"] in names] + \
        [{"name": "p", "shape": param, "dtype": dtype}]
    return load_graph({"name": "prologue", "inputs": inputs, "ops": ops, "outputs": list(dict.fromkeys(outputs))})


@st.composite
def copy_graphs(draw):
    """Copies of one tensor (``cost.movable_copies``), as an unrolled recurrent
    network's per-step weight transposes and slices of one product: a ``[256, 256]``
    tensor, a graph input or ``exp`` of one, read by two or three transposes, row
    slices or casts, each read by one op (a matmul, a row sum, an add, a relu), and
    sometimes also by an op of its own; the readers' results are outputs."""
    dtype = draw(st.sampled_from(["float32", "float16"]))
    computed = draw(st.booleans())
    ops = [{"name": "p", "op": "exp", "inputs": ["x"]}] if computed else []
    source = "p" if computed else "x"
    outputs = ["p"] if computed and draw(st.booleans()) else []
    for k in range(draw(st.integers(2, 3))):
        copy = draw(st.sampled_from(["transpose", "rows", "cast"]))
        name = f"c{k}"
        if copy == "transpose":
            ops.append({"name": name, "op": "transpose", "inputs": [source], "attrs": {"perm": [1, 0]}})
        elif copy == "rows":
            start = draw(st.sampled_from([0, 64, 128]))
            ops.append({"name": name, "op": "slice", "inputs": [source],
                        "attrs": {"starts": [start], "ends": [start + 128], "axes": [0]}})
        else:
            other = "float16" if dtype == "float32" else "float32"
            ops.append({"name": name, "op": "cast", "inputs": [source], "attrs": {"dtype": other}})
        reader = draw(st.sampled_from(["matmul", "reduce_sum", "add", "relu"] if copy != "cast" else
                                      ["reduce_sum", "relu"]))
        inputs = {"matmul": [name, "w"], "reduce_sum": [name], "add": [name, name], "relu": [name]}[reader]
        attrs = {"attrs": {"axes": [1]}} if reader == "reduce_sum" else {}
        ops.append({"name": f"r{k}", "op": reader, "inputs": inputs, **attrs})
        outputs.append(f"r{k}")
    if draw(st.booleans()):  # an op of the tensor's own, sharing it with the copies
        ops.append({"name": "own", "op": "neg", "inputs": [source]})
        outputs.append("own")
    names = {i for o in ops for i in o["inputs"]}
    inputs = [{"name": "x", "shape": [256, 256], "dtype": dtype}]
    if "w" in names:
        inputs.append({"name": "w", "shape": [256, 64], "dtype": dtype})
    return load_graph({"name": "copies", "inputs": inputs, "ops": ops, "outputs": outputs})
