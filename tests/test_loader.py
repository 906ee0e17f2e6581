"""Graph format v1: every rule of docs/graph-format.md, good and bad cases."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from partitioner import GraphError, load_graph
from partitioner.cli import main

from .conftest import GRAPHS, ROOT

GOOD = """
format: 1
name: layernorm_gelu
source: hand-written
dtype: float16
inputs:
  - {name: x, shape: [8, 16]}
  - {name: gamma, shape: [16], dtype: float32}
ops:
  - {name: mu,  op: reduce_mean, inputs: [x], attrs: {axes: [-1], keepdims: true}}
  - {name: xc,  op: sub,         inputs: [x, mu]}
  - {name: sq,  op: mul,         inputs: [xc, xc]}
  - {name: var, op: reduce_mean, inputs: [sq], attrs: {axes: [-1], keepdims: true}}
  - {name: ve,  op: add,         inputs: [var, 1e-5]}
  - {name: inv, op: rsqrt,       inputs: [ve]}
  - {name: xn,  op: mul,         inputs: [xc, inv]}
  - {name: y,   op: mul,         inputs: [xn, gamma], dtype: float16}
outputs: [y]
"""


def write(tmp_path, text, name="g.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_good_graph_loads_with_inferred_shapes_and_dtypes(tmp_path):
    g = load_graph(write(tmp_path, GOOD))
    assert g.name == "layernorm_gelu" and g.source == "hand-written"
    assert list(g.ops) == ["mu", "xc", "sq", "var", "ve", "inv", "xn", "y"]
    assert g.ops["mu"].out.shape == (8, 1) and g.ops["mu"].out.dtype == "float16"
    assert g.ops["ve"].inputs[1] == pytest.approx(1e-5)  # YAML 1.2 float without a dot
    # y computes in float32 (float16 x float32) and is then cast to the stated float16
    assert g.ops["y"].promoted == "float32" and g.ops["y"].out.dtype == "float16"
    assert g.dag.edges["xc", "sq"]["bytes"] == 8 * 16 * 2
    assert g.outputs == ("y",)


def test_json_and_yaml_give_the_same_graph(tmp_path):
    import yaml

    data = yaml.safe_load(GOOD.replace("1e-5", "1.0e-5"))
    y = load_graph(write(tmp_path, GOOD))
    j = load_graph(write(tmp_path, json.dumps(data), "g.json"))
    assert [(o.name, o.kind, o.out) for o in y.ops.values()] == [(o.name, o.kind, o.out) for o in j.ops.values()]


def test_defaults_name_from_stem_and_float32(tmp_path):
    g = load_graph(write(tmp_path, """
        inputs: [{name: a, shape: [3]}]
        ops: [{name: b, op: exp, inputs: [a]}]
        outputs: [b]
    """, "my_graph.yml"))
    assert g.name == "my_graph" and g.inputs["a"].dtype == "float32"


def test_ops_in_any_order(tmp_path):
    g = load_graph(write(tmp_path, """
        inputs: [{name: a, shape: [3]}]
        ops:
          - {name: c, op: neg, inputs: [b]}
          - {name: b, op: exp, inputs: [a]}
        outputs: [c]
    """))
    assert list(g.ops) == ["b", "c"]


def test_composites_expand_into_named_primitives(tmp_path):
    g = load_graph(write(tmp_path, """
        dtype: float16
        inputs: [{name: x, shape: [4, 8]}, {name: w, shape: [8]}, {name: b, shape: [8]},
                 {name: lw, shape: [5, 8]}]
        ops:
          - {name: ln, op: layer_norm, inputs: [x, w, b], attrs: {axes: [-1], eps: 1.0e-5}}
          - {name: sm, op: softmax, inputs: [ln], attrs: {axis: -1}}
          - {name: lin, op: linear, inputs: [sm, lw]}
        outputs: [lin]
    """))
    assert g.composites["ln"][0] == "ln:in" and g.composites["ln"][-1] == "ln"
    assert g.ops["ln:in"].kind == "cast" and g.ops["ln:in"].out.dtype == "float32"
    assert g.ops["ln"].kind == "cast" and g.ops["ln"].out.dtype == "float16"
    assert [g.ops[n].kind for n in g.composites["sm"]] == [
        "cast", "reduce_max", "sub", "exp", "reduce_sum", "div", "cast"]
    assert g.ops["lin:weight_t"].kind == "transpose" and g.ops["lin"].out.shape == (4, 5)


def test_unused_ops_are_kept_as_dead_code(tmp_path):
    g = load_graph(write(tmp_path, """
        inputs: [{name: a, shape: [3]}]
        ops: [{name: b, op: exp, inputs: [a]}, {name: dead, op: neg, inputs: [a]}]
        outputs: [b]
    """))
    assert "dead" in g.ops and g.dead_ops == ("dead",)


def test_custom_op_takes_its_stated_shape_and_dtype(tmp_path):
    g = load_graph(write(tmp_path, """
        inputs: [{name: a, shape: [3]}]
        ops: [{name: c, op: custom, inputs: [a], attrs: {kind: aten.cumsum}, shape: [3], dtype: int64}]
        outputs: [c]
    """))
    assert g.ops["c"].out.shape == (3,) and g.ops["c"].out.dtype == "int64"


@pytest.mark.parametrize("path", GRAPHS, ids=[p.stem for p in GRAPHS])
def test_every_graph_in_graphs_loads_and_reproduces_stated_dtypes(path):
    g = load_graph(path)
    assert g.ops
    if "torch.export" in g.source:
        for op in g.ops.values():
            # every exported op states PyTorch's dtype; inference must reproduce it (no hidden cast)
            assert op.promoted == op.out.dtype or op.kind == "custom", op.name


BAD = {
    "malformed_yaml": ("inputs: [a, b\nops: []", None, "malformed YAML"),
    "not_a_mapping": ("- 1\n- 2\n", None, "mapping"),
    "unknown_top_key": ("inputs: []\nops: []\noutputs: [x]\nextra: 1\n", None, "unknown key 'extra'"),
    "unknown_input_key": ("inputs: [{name: a, shape: [1], size: 3}]\nops: []\noutputs: [a]\n", None,
                          "unknown key 'size'"),
    "unknown_op_key": ("inputs: [{name: a, shape: [1]}]\nops: [{name: b, op: exp, inputs: [a], colour: red}]\n"
                       "outputs: [b]\n", "b", "unknown key 'colour'"),
    "unknown_op": ("inputs: [{name: a, shape: [1]}]\nops: [{name: b, op: frobnicate, inputs: [a]}]\noutputs: [b]\n",
                   "b", "unknown op 'frobnicate'"),
    "name_twice": ("inputs: [{name: a, shape: [1]}]\nops: [{name: a, op: exp, inputs: [a]}]\noutputs: [a]\n",
                   "a", "used twice"),
    "bad_name": ("inputs: [{name: a, shape: [1]}]\nops: [{name: 9b, op: exp, inputs: [a]}]\noutputs: [a]\n",
                 "9b", "not valid"),
    "input_names_nothing": ("inputs: [{name: a, shape: [1]}]\nops: [{name: b, op: exp, inputs: [z]}]\n"
                            "outputs: [b]\n", "b", "'z' names nothing"),
    "wrong_attr_type": ("inputs: [{name: a, shape: [2, 3]}]\n"
                        "ops: [{name: b, op: reduce_sum, inputs: [a], attrs: {axes: -1}}]\noutputs: [b]\n",
                        "b", "'axes' must be a list of integers"),
    "unknown_attr": ("inputs: [{name: a, shape: [2, 3]}]\n"
                     "ops: [{name: b, op: exp, inputs: [a], attrs: {fast: true}}]\noutputs: [b]\n",
                     "b", "unknown attribute 'fast'"),
    "missing_attr": ("inputs: [{name: a, shape: [2, 3]}]\nops: [{name: b, op: reshape, inputs: [a]}]\n"
                     "outputs: [b]\n", "b", "needs attribute 'shape'"),
    "no_broadcast": ("inputs: [{name: a, shape: [2, 3]}, {name: c, shape: [4]}]\n"
                     "ops: [{name: b, op: add, inputs: [a, c]}]\noutputs: [b]\n", "b", "do not broadcast"),
    "matmul_inner": ("inputs: [{name: a, shape: [2, 3]}, {name: c, shape: [4, 5]}]\n"
                     "ops: [{name: b, op: matmul, inputs: [a, c]}]\noutputs: [b]\n", "b", "inner dimensions"),
    "reshape_size": ("inputs: [{name: a, shape: [2, 3]}]\n"
                     "ops: [{name: b, op: reshape, inputs: [a], attrs: {shape: [4, 2]}}]\noutputs: [b]\n",
                     "b", "cannot reshape"),
    "axis_range": ("inputs: [{name: a, shape: [2, 3]}]\n"
                   "ops: [{name: b, op: reduce_max, inputs: [a], attrs: {axes: [2]}}]\noutputs: [b]\n",
                   "b", "out of range"),
    "cycle": ("inputs: [{name: a, shape: [2]}]\nops:\n  - {name: b, op: add, inputs: [a, d]}\n"
              "  - {name: c, op: exp, inputs: [b]}\n  - {name: d, op: neg, inputs: [c]}\noutputs: [d]\n",
              "b", "cycle through ops b -> c -> d -> b"),
    "empty_outputs": ("inputs: [{name: a, shape: [2]}]\nops: [{name: b, op: exp, inputs: [a]}]\noutputs: []\n",
                      None, "'outputs' is empty"),
    "output_names_nothing": ("inputs: [{name: a, shape: [2]}]\nops: []\noutputs: [q]\n", None,
                             "output 'q' names nothing"),
    "stated_shape": ("inputs: [{name: a, shape: [2, 3]}]\n"
                     "ops: [{name: b, op: exp, inputs: [a], shape: [3, 2]}]\noutputs: [b]\n", "b",
                     "stated shape [3, 2] disagrees with the inferred shape [2, 3]"),
    "unknown_dtype": ("inputs: [{name: a, shape: [2], dtype: float8}]\nops: []\noutputs: [a]\n", None,
                      "unknown dtype 'float8'"),
    "unknown_op_dtype": ("inputs: [{name: a, shape: [2]}]\nops: [{name: b, op: exp, inputs: [a], dtype: half}]\n"
                         "outputs: [b]\n", "b", "unknown dtype 'half'"),
    "format_too_new": ("format: 2\ninputs: []\nops: []\noutputs: [a]\n", None, "format 2 is newer"),
    "custom_without_shape": ("inputs: [{name: a, shape: [2]}]\n"
                             "ops: [{name: b, op: custom, inputs: [a], attrs: {kind: x}}]\noutputs: [b]\n",
                             "b", "must state their shape and dtype"),
    "bool_operand": ("inputs: [{name: a, shape: [2]}]\nops: [{name: b, op: add, inputs: [a, true]}]\n"
                     "outputs: [b]\n", "b", "must be a tensor name or a number"),
    "literal_where_tensor_needed": ("inputs: [{name: a, shape: [2]}]\nops: [{name: b, op: exp, inputs: [1.0]}]\n"
                                    "outputs: [b]\n", "b", "must be a tensor"),
    "arity": ("inputs: [{name: a, shape: [2]}]\nops: [{name: b, op: add, inputs: [a]}]\noutputs: [b]\n",
              "b", "add takes 2 operands"),
    "duplicate_key": ("inputs: [{name: a, shape: [2], shape: [3]}]\nops: []\noutputs: [a]\n", None,
                      "appears twice"),
    "negative_shape": ("inputs: [{name: a, shape: [-2]}]\nops: []\noutputs: [a]\n", None, "minimum"),
    "composite_bad_axis": ("inputs: [{name: a, shape: [2, 3]}]\n"
                           "ops: [{name: b, op: softmax, inputs: [a], attrs: {axis: 5}}]\noutputs: [b]\n",
                           "b", "axis 5 is out of range"),
    # each of these was an internal error (exit 1)
    "list_as_key": ("inputs: [{name: x, shape: [4]}]\nops: []\noutputs: [x]\n? [1, 2]\n: 3\n", None,
                    "a mapping's key must be a scalar"),
    "arange_to_infinity": ("format: 1.1\ninputs: []\nops: [{name: r, op: arange, inputs: [], "
                           "attrs: {start: 0, limit: .inf}}]\noutputs: [r]\n", "r", "limit must be a finite number"),
    "arange_of_nan": ("format: 1.1\ninputs: []\nops: [{name: r, op: arange, inputs: [], "
                      "attrs: {start: .nan, limit: 4}}]\noutputs: [r]\n", "r", "start must be a finite number"),
    # accepted: a [1, 4, 9, 6] result from an [8, 8] image (PyTorch refuses an empty kernel)
    "conv_empty_kernel": ("inputs: [{name: x, shape: [1, 3, 8, 8]}, {name: w, shape: [4, 3, 0, 3]}]\n"
                          "ops: [{name: c, op: conv2d, inputs: [x, w]}]\noutputs: [c]\n", "c", "the kernel 0x3 is empty"),
    # int8 padded with 1 for 1.5, with 0 for NaN, without a word
    "pad_fraction_on_int": ("inputs: [{name: x, shape: [2], dtype: int8}]\nops: [{name: p, op: pad, inputs: [x], "
                            "attrs: {pads: [1, 1], value: 1.5}}]\noutputs: [p]\n", "p", "value 1.5 is no int8 value"),
    "pad_nan_on_int": ("inputs: [{name: x, shape: [2], dtype: int32}]\nops: [{name: p, op: pad, inputs: [x], "
                       "attrs: {pads: [1, 1], value: .nan}}]\noutputs: [p]\n", "p", "value nan is no int32 value"),
    # nine aliases of nine: 387 million values, read for minutes and gigabytes
    "alias_bomb": ("a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]\n" for k in range(1, 9)) + "inputs: *a8\nops: []\noutputs: []\n",
        None, "expands to more than 10,000,000 values"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_rejections_name_file_op_and_problem_in_one_line(tmp_path, case):
    text, op_name, problem = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(GraphError) as info:
        load_graph(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert problem in message, message
    if op_name is not None:
        assert f"op '{op_name}'" in message


def test_malformed_json_names_line(tmp_path):
    with pytest.raises(GraphError, match=r"malformed JSON at line 1"):
        load_graph(write(tmp_path, '{"inputs": [,]}', "g.json"))


def test_unreadable_and_unknown_suffix(tmp_path):
    with pytest.raises(GraphError, match="cannot read"):
        load_graph(tmp_path / "missing.yaml")
    with pytest.raises(GraphError, match="unknown file type"):
        load_graph(write(tmp_path, GOOD, "g.txt"))
    (tmp_path / "graphs.yaml").mkdir()
    for folder in (tmp_path, tmp_path / "graphs.yaml"):  # a folder, named like a graph or not
        with pytest.raises(GraphError, match="is a directory"):
            load_graph(folder)


def test_cli_bad_graph_prints_one_line_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, BAD["matmul_inner"][0])
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "op 'b'" in err and "Traceback" not in err


def test_cli_subprocess_has_no_traceback(tmp_path):
    path = write(tmp_path, BAD["cycle"][0])
    result = subprocess.run([sys.executable, "-m", "partitioner.cli", str(path)], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 2
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]


# ---------------------------------------------------------------- regressions from a new-user pass


def test_an_op_named_like_a_later_composites_part_is_rejected(tmp_path):
    text = ("inputs: [{name: x, shape: [4, 8]}]\nops:\n  - {name: ln, op: layer_norm, inputs: [x]}\n"
            "  - {name: 'ln:inv', op: mul, inputs: [x, 0.0]}\noutputs: [ln]\n")
    with pytest.raises(GraphError, match="op 'ln': its expansion names an op 'ln:inv'"):
        load_graph(write(tmp_path, text))


def test_outputs_cannot_name_a_composites_part(tmp_path):
    text = "inputs: [{name: x, shape: [4, 8]}]\nops: [{name: s, op: softmax, inputs: [x]}]\noutputs: [s, 's:max']\n"
    with pytest.raises(GraphError, match="output 's:max' names nothing"):
        load_graph(write(tmp_path, text))


def test_integer_literals_must_fit_their_dtype(tmp_path):
    for kind, literal in (("lt", 1000), ("add", -129)):
        text = (f"inputs: [{{name: x, shape: [4], dtype: int8}}]\nops: [{{name: y, op: {kind}, inputs: [x, {literal}]}}]\n"
                "outputs: [y]\n")
        with pytest.raises(GraphError, match=f"literal {literal} does not fit int8"):
            load_graph(write(tmp_path, text))
    text = "inputs: [{name: x, shape: [4], dtype: int8}]\nops: [{name: y, op: clamp, inputs: [x], attrs: {min: -1000}}]\noutputs: [y]\n"
    with pytest.raises(GraphError, match="does not fit int8"):
        load_graph(write(tmp_path, text))


def test_yaml_1_2_scalars(tmp_path):
    g = load_graph(write(tmp_path, "inputs: [{name: x, shape: [010], dtype: int32}]\n"
                                   "ops: [{name: y, op: add, inputs: [x, 0x10]}]\noutputs: [y]\n"))
    assert g.inputs["x"].shape == (10,) and g.ops["y"].inputs[1] == 16
    with pytest.raises(GraphError, match="input '2001-12-14' names nothing"):
        load_graph(write(tmp_path, "inputs: [{name: x, shape: [2]}]\nops: [{name: y, op: add, inputs: [x, 2001-12-14]}]\n"
                                   "outputs: [y]\n"))


def test_float_shapes_are_not_sizes(tmp_path):
    with pytest.raises(GraphError, match=r"'shape.0' must be an integer, got 4.0"):
        load_graph(write(tmp_path, '{"inputs": [{"name": "x", "shape": [4.0, 8]}], "ops": [], "outputs": ["x"]}',
                         "g.json"))


def test_numpy_scalars_in_a_dict_graph_keep_their_kind():
    import numpy as np

    g = load_graph({"inputs": [{"name": "x", "shape": [np.int64(3)], "dtype": "int32"}],
                    "ops": [{"name": "y", "op": "add", "inputs": ["x", np.float32(0.5)]}], "outputs": ["y"]})
    assert g.ops["y"].out.dtype == "float32" and g.inputs["x"].shape == (3,)


def test_libyamls_parser_and_pyyamls_read_the_same_values():
    """The graph loader parses with libyaml where PyYAML has it; the YAML 1.2 scalar
    rules live in the Python resolvers and constructor, so PyYAML's own parser reads
    every file the same (a corpus graph, and the scalars YAML 1.1 reads otherwise)."""
    import yaml

    from partitioner.yamlio import yaml_loader

    if not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML was built without libyaml")
    tricky = "a: [010, 1e-5, 1.5, .5, -3, 0x1F, 0o17, on, no, yes, true, False, 2001-12-14, 1:30, .inf, -.Inf, .nan, ~]"
    for text in (tricky, (ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml").read_text()):
        fast, slow = (yaml.load(text, Loader=yaml_loader(base)) for base in (yaml.CSafeLoader, yaml.SafeLoader))
        assert repr(fast) == repr(slow)  # repr: NaN equals itself there
    assert yaml.load(tricky, Loader=yaml_loader(yaml.CSafeLoader))["a"][:4] == [10, 1e-5, 1.5, 0.5]
    for base in (yaml.CSafeLoader, yaml.SafeLoader):
        with pytest.raises(yaml.constructor.ConstructorError, match="appears twice"):
            yaml.load("a: 1\na: 2", Loader=yaml_loader(base))


# (libyaml's parser says "exceeded maximum nesting depth"; PyYAML's runs out of recursion)
@pytest.mark.parametrize("content,problem", [(b"\xff\xfe\x00bad", "not UTF-8"), (b"[" * 100_000, "nest")])
def test_unreadable_content_exits_2_in_one_line(tmp_path, capsys, content, problem):
    path = tmp_path / "g.yaml"
    path.write_bytes(content)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err


def test_argument_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main([str(GRAPHS[0]), "--time-limit", "nan"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--time-limit" in err
