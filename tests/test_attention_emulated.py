"""The attention template on the CPU emulator, against the NumPy reference of the
unfused graph: sequence lengths, head dims, dtypes, masks and biases, fully masked
rows, grouped-query heads and probabilities needed outside the kernel.

Online softmax sums the keys in another order and rounds the unnormalised
probabilities to the operand dtype, so outputs are not bit-identical to the
unfused plan; they are checked with the dtype tolerances of ``backends/check.py``
and, tighter, with the attention bound of ``docs/backends.md``.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from backends.check import accumulated_terms, compare, output_value, run_and_check, storage_values
from backends.cuda import CudaBackend
from partitioner import partition, run_reference
from partitioner.reference import input_values

from .attention_graphs import attention

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
EMULATOR = CudaBackend(emulate=True)
#: Largest error of an attention output, as a fraction of the largest |V| (docs/backends.md):
#: a few units in the last place of the operand dtype, from rounding the unnormalised
#: probabilities to it before the product (the unfused plan rounds the normalised ones).
ATTENTION_BOUND = {"float16": 2**-9, "bfloat16": 2**-6, "float32": 2**-16}


def run(graph, inputs=None):
    """Plan with the ILP (one attention kernel), emulate, and check every output."""
    plan = partition(graph, "ilp")
    assert [c.kind for c in plan.cost.groups if c.kind != "view"] == ["attention"]
    values = {**input_values(graph, 0), **(inputs or {})}
    checks = run_and_check(plan, EMULATOR, inputs=values)
    assert all(c.ok for c in checks), checks
    reference = run_reference(graph, values)
    got = {**storage_values(graph, values), **EMULATOR.run(EMULATOR.build(EMULATOR.render(plan)), values)}
    v = np.abs(values["v"].astype(np.float64)).max()
    for out in graph.outputs:
        dtype = graph.tensor(out).dtype
        if dtype not in ATTENTION_BOUND:  # integers and booleans: exact
            np.testing.assert_array_equal(output_value(graph, got, out), reference[out])
        elif out != "probs":
            error = _error(output_value(graph, got, out), reference[out])
            assert error <= ATTENTION_BOUND[dtype] * v, (out, error)
    return got, reference


def _error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    return float(np.abs(got[finite] - want[finite]).max(initial=0.0))


@pytest.mark.parametrize("sq,sk", [(1, 1), (31, 33), (33, 31), (127, 127), (1000, 1000)])
def test_sequence_lengths(sq, sk):
    run(attention(sq=sq, sk=sk, d=64, heads=1, mask="causal" if sq == sk else None))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("d", [32, 64, 80, 128, 256])
def test_head_dims_and_dtypes(d, dtype):
    run(attention(d=d, dtype=dtype, sq=33, sk=47))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_causal_mask_in_the_primitive_chain(dtype):
    run(attention(sq=70, sk=70, dtype=dtype, mask="causal", softmax="primitives"))


def test_padding_mask_with_fully_masked_rows_gives_nan_like_the_reference():
    g = attention(batch=3, sq=17, sk=40, mask="padding")
    keep = np.ones((3, 1, 1, 40), bool)
    keep[0, ..., 25:] = False
    keep[2] = False  # every key of batch 2 is masked: softmax over all -inf is NaN
    got, reference = run(g, {"keep": keep})
    assert np.isnan(reference["out"][2]).all() and np.isnan(got["out"][2]).all()
    assert np.isfinite(got["out"][:2]).all()


def test_t5_additive_bias_without_scale():
    run(attention(heads=4, sq=45, sk=45, scale=False, mask="bias", dtype="bfloat16"))


def test_additive_mask_as_gpt2_writes_it_and_a_residual_epilogue():
    run(attention(batch=2, sq=40, sk=40, mask="additive", epilogue=True))


def test_grouped_query_heads_share_kv_without_materialising_the_expand():
    g = attention(batch=1, heads=8, kv_heads=2, sq=33, sk=50, d=64)
    plan = partition(g, "ilp")
    group = next(c for c in plan.cost.groups if c.kind == "attention")
    # K and V are read once at their own size: 2 heads, not 8
    assert group.bytes_read == sum(g.tensor(t).nbytes for t in ("q", "k", "v"))
    run(g)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_probabilities_needed_outside_are_written_in_a_second_pass(dtype):
    g = attention(sq=37, sk=70, probs_output=True, mask="causal", dtype=dtype)
    plan = partition(g, "ilp")
    group = next(c for c in plan.cost.groups if c.kind == "attention")
    assert group.bytes_written == g.tensor("out").nbytes + g.tensor("probs").nbytes
    got, reference = run(g)
    check = compare("probs", dtype, got["probs"], reference["probs"], accumulated_terms(g, "probs"))
    assert check.ok, check


def test_check_passes_cancellation_normwise_and_fails_a_wrong_element():
    want = np.array([150.0, -149.98, 0.02, 3.0], np.float16).astype(np.float64)
    # a different summation order leaves the near-zero element 0.06 off: 3x its size, 4e-4 of the tensor's scale
    reordered = want + np.array([0.0, 0.0, 0.06, 0.0])
    assert compare("y", "float16", reordered, want).ok
    wrong = want + np.array([0.0, 0.0, 0.0, 2.0])  # one element off by its own size
    assert not compare("y", "float16", wrong, want).ok
    assert not compare("y", "float16", np.where(np.arange(4) == 1, np.nan, want), want).ok


def test_row_values_broadcast_along_the_keys_and_the_row_sum_as_an_output():
    from .conftest import make_graph, op

    g = make_graph({"q": [2, 40, 16], "k": [2, 16, 70], "v": [2, 70, 24]}, [
        op("s", "matmul", ["q", "k"]), op("m", "reduce_max", ["s"], axes=[2], keepdims=True),
        op("mb", "broadcast_to", ["m"], shape=[2, 40, 70]), op("d", "sub", ["s", "mb"]), op("e", "exp", ["d"]),
        op("l", "reduce_sum", ["e"], axes=[2]), op("l1", "reshape", ["l"], shape=[2, 40, 1]),
        op("lb", "broadcast_to", ["l1"], shape=[2, 40, 70]), op("p", "div", ["e", "lb"]),
        op("out", "matmul", ["p", "v"])], ["out", "l"])
    run(g)


@pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean", "ignore::DeprecationWarning")
def test_an_onnx_exported_distilbert_fuses_its_attention_and_runs(tmp_path):
    """Another exporter's spelling: torch.onnx scales Q and K by a square root each and
    uses ONNX Softmax; the layout chains of its operands regroup batch and heads."""
    torch = pytest.importorskip("torch", reason="the torch extra is not installed")
    pytest.importorskip("onnx", reason="the onnx extra is not installed")
    transformers = pytest.importorskip("transformers", reason="the corpus extra is not installed")
    from partitioner import from_onnx

    config = transformers.DistilBertConfig(n_layers=2, dim=64, n_heads=2, hidden_dim=128, vocab_size=100,
                                           max_position_embeddings=40)
    torch.manual_seed(0)
    model = transformers.DistilBertModel(config).eval()
    path = tmp_path / "distilbert.onnx"
    torch.onnx.export(model, (torch.randint(0, 100, (2, 33)),), str(path), dynamo=False, opset_version=17)
    g = from_onnx(str(path), verbose=False)
    plan = partition(g, "ilp")
    assert [c.kind for c in plan.cost.groups].count("attention") == 2
    ids = next(name for name, t in g.inputs.items() if t.dtype == "int64")  # token ids: in range
    checks = run_and_check(plan, EMULATOR, inputs={ids: np.random.default_rng(0).integers(0, 100, (2, 33))})
    assert all(c.ok for c in checks), checks


def _softmax_chain(x):
    """max, sub, exp, sum, div over the last axis of ``x`` (named mx, sh, ex, sm, p)."""
    from .conftest import op

    return [op("mx", "reduce_max", [x], axes=[-1], keepdims=True), op("sh", "sub", [x, "mx"]),
            op("ex", "exp", ["sh"]), op("sm", "reduce_sum", ["ex"], axes=[-1], keepdims=True),
            op("p", "div", ["ex", "sm"])]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_written_row_values_of_a_row_masked_everywhere_are_nan_like_the_reference(dtype):
    """A layer that saves its row maximum, sum and log-sum (as for the backward pass):
    a row of -inf only has E = exp(-inf - -inf) = NaN at every key, so a NaN sum; rows
    masked in their first key tiles only are finite."""
    from .conftest import make_graph, op

    g = make_graph({"q": [3, 2, 8, 16], "k": [3, 2, 70, 16], "v": [3, 2, 70, 16], "keep": ([3, 1, 1, 70], "bool")}, [
        op("kt", "transpose", ["k"], perm=[0, 1, 3, 2]), op("s", "matmul", ["q", "kt"]),
        op("x", "where", ["keep", "s", -math.inf]), *_softmax_chain("x"),
        op("inv", "reciprocal", ["sm"]), op("lse", "log", ["sm"]), op("o", "matmul", ["p", "v"])],
        ["o", "mx", "sm", "inv", "lse"], dtype=dtype)
    keep = np.ones((3, 1, 1, 70), bool)
    keep[0] = False          # every key
    keep[1, ..., :40] = False  # the first key tile and more: the running maximum starts at -inf
    got, reference = run(g, {"keep": keep})
    for out in ("sm", "inv", "lse", "o"):
        assert np.isnan(reference[out][0]).all() and np.isnan(got[out][0]).all(), out
        assert np.isfinite(got[out][1:]).all(), out
    assert (got["mx"][0] == -np.inf).all()


def test_a_row_maximum_stated_in_a_wider_dtype_rescales_with_the_stated_maximum():
    """E is exp(x - max) with the maximum stated float32 over float16 scores: the
    online rescale between key tiles converts the running maxima as the stated
    dtype does (scores scaled by 8 so that the maximum grows across tiles). A
    narrower stated dtype is no attention group (``test_attention.py``)."""
    from .conftest import make_graph, op

    chain = _softmax_chain("s")
    chain[0]["dtype"] = "float32"
    g = make_graph({"q": [1, 2, 40, 32], "k": [1, 2, 200, 32], "v": [1, 2, 200, 32]}, [
        op("qs", "mul", ["q", 8.0]), op("kt", "transpose", ["k"], perm=[0, 1, 3, 2]),
        op("s", "matmul", ["qs", "kt"]), *chain, op("ph", "cast", ["p"], dtype="float16"),
        op("o", "matmul", ["ph", "v"])], ["o"], dtype="float16")
    run(g)  # within the float16 attention bound


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_safe_softmax_gives_rows_of_minus_inf_only_zero_probabilities_and_outputs(dtype):
    """PyTorch's _safe_softmax: the reference's dead rows are 0, not NaN, in the output
    and in the written probabilities; the guard itself is written as a row value."""
    g = attention(batch=3, sq=17, sk=70, mask="padding", softmax="safe", probs_output=True, dtype=dtype,
                  extra_outputs=["live"])
    keep = np.ones((3, 1, 1, 70), bool)
    keep[0, ..., 30:] = False
    keep[1] = False           # every key of batch 1
    keep[2, ..., :40] = False  # the first key tile and more
    got, reference = run(g, {"keep": keep})
    assert (reference["out"][1] == 0).all() and (got["out"][1] == 0).all()
    assert (got["probs"][1] == 0).all() and np.isfinite(got["out"]).all()
    assert not got["live"][1].any() and got["live"][[0, 2]].all()


def test_scaled_dot_product_attention_exported_by_torch_fuses_and_runs():
    """torch.export lowers F.scaled_dot_product_attention to the math path with
    _safe_softmax; it is one attention kernel, with a float additive mask."""
    torch = pytest.importorskip("torch", reason="the torch extra is not installed")
    from partitioner import from_torch

    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q, k, v = (torch.randn(2, 3, n, 32, dtype=torch.float16) for n in (33, 47, 47))
    g = from_torch(Sdpa(), (q, k, v, torch.randn(2, 1, 33, 47, dtype=torch.float16)), verbose=False)
    plan = partition(g, "ilp")
    assert [c.kind for c in plan.cost.groups].count("attention") == 1
    mask = np.zeros((2, 1, 33, 47), np.float16)
    mask[0, :, 5] = -np.inf  # one query row of batch 0 sees no key: 0 where the plain softmax gives NaN
    mask_name = next(name for name, t in g.inputs.items() if t.shape == (2, 1, 33, 47))
    checks = run_and_check(plan, EMULATOR, inputs={mask_name: mask})
    assert all(c.ok for c in checks), checks
