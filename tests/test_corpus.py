"""The real-model corpus in graphs/: each file records where it came from, and the
files are what graphs/export_models.py writes (checked where its pinned versions
are installed)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from partitioner.yamlio import parse_yaml

from .conftest import ROOT

CORPUS = {
    "gpt2_2l_b8_s1024_f16": ("GPT2Model(GPT2Config(n_layer=2", "input_0 [8, 1024] int64", "float16"),
    "gpt2_12l_b8_s1024_f16": ("GPT2Model(GPT2Config(n_layer=12", "input_0 [8, 1024] int64", "float16"),
    "bert_base_2l_b32_s128_f16": ("BertModel(BertConfig(num_hidden_layers=2", "input_0 [32, 128] int64", "float16"),
    "llama7b_2l_b4_s2048_bf16": ("LlamaModel(LlamaConfig(hidden_size=4096, num_attention_heads=32",
                                 "input_0 [4, 2048] int64", "bfloat16"),
    "resnet50_b32_f16": ("ResNetModel(ResNetConfig()", "input_0 [32, 3, 224, 224] float16", "float16"),
}


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_files_record_model_config_and_shapes(name):
    data = parse_yaml((ROOT / "graphs" / f"{name}.yaml").read_text())
    model, shapes, dtype = CORPUS[name]
    assert data["name"] == name
    for text in (model, shapes, dtype, "transformers 5.24.0", "torch 2.13.0"):
        assert text in data["source"], text
    names = [i["name"] for i in data["inputs"]]
    # weights, then the model's input; constants the graph creates on the way (format 1.1) follow, with values
    assert "input_0" in names and all("value" in i for i in data["inputs"][names.index("input_0") + 1:])


def _script():
    spec = importlib.util.spec_from_file_location("export_models", ROOT / "graphs" / "export_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["gpt2_2l_b8_s1024_f16", "bert_base_2l_b32_s128_f16"])
def test_corpus_files_are_what_the_script_writes(name):
    torch = pytest.importorskip("torch", reason="the corpus extra is not installed (pip install -e '.[corpus]')")
    transformers = pytest.importorskip("transformers", reason="the corpus extra is not installed")
    if (torch.__version__.split("+")[0], transformers.__version__) != ("2.13.0", "5.24.0"):
        pytest.skip("the corpus was generated with torch 2.13.0 and transformers 5.24.0")
    script = _script()
    spec = next(m for m in script.MODELS if m.name == name)
    assert script.export(spec) == (ROOT / "graphs" / f"{name}.yaml").read_text()
