"""ONNX's model test data (``onnx/backend/test/data``: the folders ``simple``,
``pytorch-converted`` and ``pytorch-operator``, 140 cases) through
``partitioner.importers.onnx.convert`` and ``run_reference``, against the stored
expected outputs (``test_data_set_N/output_*.pb``).

Every case either passes, within the dtype tolerances of ``backends/check.py``, or
is refused in one line: at import (a dtype or construct the format lacks), at run (a
``custom`` op has no semantics) or because a stored datum is no tensor (a sequence,
an optional). None may give a wrong value or crash. The judging is
``tests/onnx_judging.py``'s, shared with ``tests/test_onnx_node_suite.py``.

The other two folders are not run here: ``light`` (the nine light models) is
``tests/test_import_onnx.py``'s, and ``real`` holds only download stubs (a
``data.json`` with a URL, no model), which a test below checks.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx", reason="ONNX's model test data needs the onnx extra: pip install -e '.[onnx]'")

from onnx import numpy_helper  # noqa: E402
from onnx.backend.test.loader import DATA_DIR, load_model_tests  # noqa: E402

from partitioner.importers import onnx as onnx_importer  # noqa: E402

from .onnx_judging import UnreadableDatum, assert_none_wrong_and_refusals_one_line, judge_all  # noqa: E402

FOLDERS = {"simple": 23, "pytorch-converted": 82, "pytorch-operator": 35}  # cases in each, onnx 1.23

# Measured with onnx 1.23.2 (a floor, so that a change that refuses more cases fails):
# of the 140 cases 124 pass and 16 are refused, none wrong, none crashes:
#   simple 14 pass of 23; pytorch-converted 82 of 82; pytorch-operator 35 of 35.
#   Refused: 6 StringNormalizer models (STRING tensors, which the format has no dtype
#   for); 7 sequence models (SequenceEmpty, SequenceConstruct, SplitToSequence: no
#   static shape for a custom op); 1 with a dynamic dimension (test_sequence_model8);
#   2 Gradient models (ai.onnx.preview.training.Gradient: a custom op no runtime computes).
# No case needs a package outside the extras test, onnx, torch, corpus: the same 124
# pass with Pillow (PIL) blocked. The whole run takes about 2 s.
PASSING_AT_LEAST = 124

CONV3D = ["test_Conv3d", "test_Conv3d_dilated", "test_Conv3d_dilated_strided", "test_Conv3d_groups",
          "test_Conv3d_no_bias", "test_Conv3d_stride", "test_Conv3d_stride_padding"]
CONV1D = ["test_Conv1d", "test_Conv1d_dilated", "test_Conv1d_groups", "test_Conv1d_pad1", "test_Conv1d_pad1size1",
          "test_Conv1d_pad2", "test_Conv1d_pad2size1", "test_Conv1d_stride"]
# Cases whose ops were custom until they got converters (Expand: its shape is a graph
# input, and the model states the result's shape; Pad: reflect and edge modes).
ONCE_CUSTOM = ["test_ELU", "test_SELU", "test_Softplus", "test_PReLU_1d", "test_PReLU_1d_multiparam", "test_PReLU_2d",
               "test_PReLU_2d_multiparam", "test_PReLU_3d", "test_PReLU_3d_multiparam", "test_shrink",
               "test_sign_model", "test_expand_shape_model1", "test_expand_shape_model2", "test_expand_shape_model3",
               "test_expand_shape_model4", "test_ReflectionPad2d", "test_ReplicationPad2d", "test_operator_pad"]


class _DataSets:
    """A case folder's ``test_data_set_N`` as ``(inputs, expected outputs)`` of
    TensorProto, read when iterated; a sequence, optional or other non-tensor datum,
    a file that does not parse, or a file count other than the graph's raises
    :class:`UnreadableDatum` (the case is then refused with that reason)."""

    def __init__(self, folder: Path, model: onnx.ModelProto):
        self.folder, self.model = folder, model

    def __iter__(self):
        initializers = {t.name for t in self.model.graph.initializer}
        inputs = [v for v in self.model.graph.input if v.name not in initializers]
        outputs = list(self.model.graph.output)
        for data in sorted(self.folder.glob("test_data_set_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])):
            yield self._read(data, "input", inputs), self._read(data, "output", outputs)

    @staticmethod
    def _read(data: Path, role: str, values) -> list:
        files = list(data.glob(f"{role}_*.pb"))
        if len(files) != len(values):
            raise UnreadableDatum(f"{data.name}: {len(files)} {role} files for the graph's {len(values)} {role}s")
        tensors = []
        for i, value in enumerate(values):
            kind = value.type.WhichOneof("value")
            if kind != "tensor_type":
                raise UnreadableDatum(f"{data.name}: {role} '{value.name}' is of the {kind.removesuffix('_type')} "
                                      f"type, which is no tensor this test can feed or compare")
            tensor = onnx.TensorProto()
            try:
                tensor.ParseFromString((data / f"{role}_{i}.pb").read_bytes())
                numpy_helper.to_array(tensor)
            except Exception as exc:  # noqa: BLE001 - a datum that does not read is a refusal
                raise UnreadableDatum(f"{data.name}/{role}_{i}.pb does not read as a tensor: "
                                      f"{type(exc).__name__}: {exc}".replace("\n", " ")) from exc
            tensors.append(tensor)
        return tensors


@dataclass(frozen=True)
class _Case:
    name: str
    folder: str
    model: onnx.ModelProto
    data_sets: _DataSets
    rtol: float
    atol: float


@functools.cache
def _cases() -> dict[str, _Case]:
    """Every case of the three folders by name, with onnx's own rtol and atol (its
    loader's: 1e-3 and 1e-7 unless a ``data.json`` gives others)."""
    cases = {}
    for folder in FOLDERS:
        for test in load_model_tests(kind=folder):
            model = onnx.load(os.path.join(test.model_dir, "model.onnx"))
            cases[test.name] = _Case(test.name, folder, model, _DataSets(Path(test.model_dir), model),
                                     test.rtol, test.atol)
    return cases


@functools.cache
def _outcomes() -> dict[str, tuple[str, str]]:
    return judge_all(_cases().values())


def test_the_folders_hold_the_cases_counted():
    assert Counter(case.folder for case in _cases().values()) == FOLDERS


def test_every_model_case_passes_or_is_refused_in_one_line():
    outcomes = _outcomes()
    counts = Counter(kind for kind, _ in outcomes.values())
    assert_none_wrong_and_refusals_one_line(outcomes)
    assert counts["pass"] >= PASSING_AT_LEAST, (counts, {n: d for n, (k, d) in outcomes.items() if k != "pass"})


@pytest.mark.parametrize("prefix,names", [("test_Conv3d", CONV3D), ("test_Conv1d", CONV1D)])
def test_the_conv3d_and_conv1d_cases_are_all_named(prefix, names):
    assert sorted(name for name in _cases() if name.startswith(prefix)) == sorted(names)


@pytest.mark.parametrize("name", CONV3D + CONV1D)
def test_conv3d_and_conv1d_pass_as_one_conv2d_without_custom_ops(name):
    """A rank-5 Conv maps to one conv2d over depth windows (``partitioner.importers.conv3d``),
    a rank-3 one to one conv2d over views of height 1 (``conv1d``); none is custom."""
    kind, detail = _outcomes()[name]
    assert kind == "pass", detail
    result = onnx_importer.convert(_cases()[name].model)
    kinds = Counter(op.kind for op in result.load().ops.values())
    assert kinds["conv2d"] == 1 and kinds["custom"] == 0, dict(kinds)
    assert not result.summary.custom, result.summary.text(name)


@pytest.mark.parametrize("name", ONCE_CUSTOM)
def test_once_custom_cases_pass_without_custom_ops(name):
    kind, detail = _outcomes()[name]
    assert kind == "pass", detail
    result = onnx_importer.convert(_cases()[name].model)
    assert not result.summary.custom, result.summary.text(name)


def test_real_holds_only_download_stubs():
    """``real`` has no model to run: each case is a ``data.json`` naming a URL (the
    full-size models, to download; onnx 1.23 points them at the ``light`` files)."""
    real = Path(DATA_DIR) / "real"
    folders = sorted(p for p in real.iterdir() if p.is_dir())
    assert len(folders) == 9
    for folder in folders:
        assert [p.name for p in folder.iterdir()] == ["data.json"], folder.name
        assert json.loads((folder / "data.json").read_text())["url"], folder.name
