#!/usr/bin/env python3
"""Regenerate the real-model corpus in graphs/ from HuggingFace ``transformers`` configs.

Each network is built from its config class on PyTorch's ``meta`` device (no weight
is allocated and nothing is downloaded: ``HF_HUB_OFFLINE=1``), in the precision it
is served in, exported with ``torch.export`` at serving shapes, lowered to core
ATen and imported with ``partitioner.importers.torch``. Only weights' values are
dropped: parameters and buffers stay graph inputs under their qualified names.

    pip install -e '.[corpus]'
    python graphs/export_models.py                  # rewrite every corpus file in graphs/
    python graphs/export_models.py gpt2_2l_b8_s1024_f16 --out /tmp/g
    python graphs/export_models.py --check          # exit 1 if a file in graphs/ differs
    python graphs/export_models.py --ladder --out /tmp/ladder   # benchmarks/plan_times.py's size ladder

Attention runs HuggingFace's ``eager`` implementation (its matmul, mask and softmax
are ops of the graph rather than one fused SDPA call) and the KV cache is off
(``use_cache=False``): a prefill of the whole sequence, as in a batch forward pass.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach the hub

import torch  # noqa: E402
import transformers  # noqa: E402

from partitioner.importers import report, to_yaml  # noqa: E402
from partitioner.importers.torch import convert  # noqa: E402

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Model:
    """One corpus graph: a transformers model class, its config, its input and precision.

    ``config`` holds only the settings that differ from the config class' defaults
    (the defaults of GPT2Config, BertConfig, LlamaConfig and ResNetConfig are GPT-2
    small, BERT-base, LLaMA-7B and ResNet-50).
    """

    name: str
    model_class: str
    config_class: str
    config: dict
    input_shape: tuple[int, ...]
    input_dtype: str  # "int64" token ids or the model's own dtype for images
    dtype: str
    model_kwargs: dict = field(default_factory=dict)


_DECODER = {"use_cache": False}
MODELS = [
    Model("gpt2_2l_b8_s1024_f16", "GPT2Model", "GPT2Config", {"n_layer": 2, **_DECODER}, (8, 1024), "int64", "float16"),
    Model("gpt2_12l_b8_s1024_f16", "GPT2Model", "GPT2Config", {"n_layer": 12, **_DECODER}, (8, 1024), "int64",
          "float16"),
    Model("bert_base_2l_b32_s128_f16", "BertModel", "BertConfig", {"num_hidden_layers": 2}, (32, 128), "int64",
          "float16", {"add_pooling_layer": False}),
    Model("llama7b_2l_b4_s2048_bf16", "LlamaModel", "LlamaConfig",
          {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
           "num_hidden_layers": 2, **_DECODER}, (4, 2048), "int64", "bfloat16"),
    Model("resnet50_b32_f16", "ResNetModel", "ResNetConfig", {}, (32, 3, 224, 224), "float16", "float16"),
]


def _gpt2(layers: int) -> Model:
    return Model(f"gpt2_{layers}l_b8_s1024_f16", "GPT2Model", "GPT2Config", {"n_layer": layers, **_DECODER}, (8, 1024),
                 "int64", "float16")


# The size ladder of benchmarks/plan_times.py: too large to commit, so written only when
# named (or with --ladder), by default to the benchmark's cache rather than to graphs/.
LADDER = [
    *(_gpt2(n) for n in (1, 2, 4, 8, 12, 24, 48)),
    Model("llama7b_32l_b4_s2048_bf16", "LlamaModel", "LlamaConfig",
          {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
           "num_hidden_layers": 32, **_DECODER}, (4, 2048), "int64", "bfloat16"),
    Model("bert_large_24l_b32_s128_f16", "BertModel", "BertConfig",
          {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
          (32, 128), "int64", "float16", {"add_pooling_layer": False}),
    Model("resnet101_b32_f16", "ResNetModel", "ResNetConfig", {"depths": [3, 4, 23, 3]}, (32, 3, 224, 224),
          "float16", "float16"),
    Model("resnet152_b32_f16", "ResNetModel", "ResNetConfig", {"depths": [3, 8, 36, 3]}, (32, 3, 224, 224),
          "float16", "float16"),
    # models a new user brings (the defaults of PhiConfig, Phi3Config and SwinConfig are
    # Phi-2, Phi-3-mini and Swin-T), at 2 layers
    Model("phi2_2l_b4_s2048_f16", "PhiModel", "PhiConfig", {"num_hidden_layers": 2, **_DECODER}, (4, 2048), "int64",
          "float16"),
    Model("phi3_2l_b4_s2048_bf16", "Phi3Model", "Phi3Config", {"num_hidden_layers": 2, **_DECODER}, (4, 2048),
          "int64", "bfloat16"),
    Model("swin_2l_b32_f16", "SwinModel", "SwinConfig", {"depths": [1, 1], "num_heads": [3, 6]}, (32, 3, 224, 224),
          "float16", "float16"),
]


def build(spec: Model, device: str = "meta") -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The model in ``spec.dtype`` (eval mode) and an input of its shape and dtype, on
    ``device``: on ``meta`` (the export's) nothing is allocated and the input is zeros;
    elsewhere the weights take their config's random initialisation, and the input is
    random token ids below the vocabulary size, or standard normal pixels (seed 0)."""
    config = getattr(transformers, spec.config_class)(**spec.config)
    model_class = getattr(transformers, spec.model_class)
    dtype = getattr(torch, spec.dtype)
    input_dtype = getattr(torch, spec.input_dtype)
    torch.manual_seed(0)
    with torch.device(device):
        # from_config's dtype is how served checkpoints load: parameters in half
        # precision, float32 buffers (RoPE's inv_freq) left as they are.
        model = model_class._from_config(config, dtype=dtype, attn_implementation="eager", **spec.model_kwargs)
        if device == "meta":
            example = torch.zeros(spec.input_shape, dtype=input_dtype)
        elif input_dtype == torch.int64:
            example = torch.randint(0, config.vocab_size, spec.input_shape)
        else:
            example = torch.randn(spec.input_shape).to(input_dtype)
    return model.eval(), (example,)


def source_text(spec: Model) -> str:
    """The ``source`` header: model, config, precision, shapes and versions."""
    settings = ", ".join(f"{k}={v!r}" for k, v in spec.config.items())
    extra = "".join(f", {k}={v!r}" for k, v in spec.model_kwargs.items())
    return (f"transformers {transformers.__version__} {spec.model_class}({spec.config_class}({settings}){extra}), "
            f"{spec.dtype}, eager attention, meta-device weights (values dropped); "
            f"input_0 {list(spec.input_shape)} {spec.input_dtype}; torch.export core ATen (torch {torch.__version__})")


def export(spec: Model) -> str:
    """The YAML text of one corpus graph (its import summary goes to stderr)."""
    model, example = build(spec)
    program = torch.export.export(model, example)
    result = convert(program, spec.name, source_text(spec))
    report(result)
    result.load()  # every rule of the loader, before anything is written
    return to_yaml(result.graph, [f"Generated by graphs/export_models.py ({spec.name}); do not edit by hand."])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"graphs to export (default all: {', '.join(m.name for m in MODELS)})")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write to (default graphs/)")
    parser.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    parser.add_argument("--ladder", action="store_true",
                        help=f"export the size ladder of benchmarks/plan_times.py ({', '.join(m.name for m in LADDER)})")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MODELS + LADDER}
    unknown = set(args.names) - set(known)
    if unknown:
        parser.error(f"unknown graph {', '.join(sorted(unknown))}")
    stale = []
    specs = [known[n] for n in args.names] if args.names else LADDER if args.ladder else MODELS
    for spec in specs:
        text = export(spec)
        path = args.out / f"{spec.name}.yaml"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path} ({len(text) / 1e3:.0f} kB)", file=sys.stderr)
    if stale:
        print(f"differs from a fresh export: {', '.join(stale)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
