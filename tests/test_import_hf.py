"""The transformers models users bring most, imported: each family built tiny from its
config class with random weights, exported with torch.export, imported (the graph keeps
the weights), planned by the ILP and run by the NumPy reference and the numpy backend
(``--run --backend numpy``), and compared with the model's own output."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach the hub
transformers = pytest.importorskip("transformers",
                                   reason="transformers is not installed (pip install -e '.[corpus]')")

from torch import nn  # noqa: E402
from transformers.models.whisper.modeling_whisper import WhisperEncoder  # noqa: E402

from backends.base import load_backend  # noqa: E402
from backends.check import accumulated_terms, compare, run_and_check  # noqa: E402
from partitioner import partition, run_reference  # noqa: E402
from partitioner.importers import torch as torch_importer  # noqa: E402

# no special token is ever fed; the defaults (50256, ...) lie outside the tiny vocabularies
TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
VOCAB = 96
SMALL = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "num_hidden_layers": 2}
# a decoder's prefill of the whole sequence, as graphs/export_models.py exports them
DECODER = {**SMALL, "vocab_size": VOCAB, "max_position_embeddings": 64, "use_cache": False, **TOKENS}


def _seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ids(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, seq), generator=_seeded())


def floats(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_seeded())


def build(model_class, config, attention: str = "eager") -> nn.Module:
    """A random-weight float32 model in eval mode; ``eager`` attention writes the
    matmul, mask and softmax as ops, ``sdpa`` (transformers' default) one call."""
    torch.manual_seed(0)
    return model_class._from_config(config, attn_implementation=attention).eval()


class Seq2Seq(nn.Module):
    """T5 given its decoder's input by keyword (its second parameter is the attention
    mask): example inputs are exported as positional arguments."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, decoder_input_ids):
        return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids)


def bert():
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0  # a padded sequence
    config = transformers.BertConfig(**SMALL, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0)
    return build(transformers.BertModel, config), (ids(2, 8), mask)


def gpt2(attention="eager"):
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=VOCAB,
                                     use_cache=False, **TOKENS)
    return build(transformers.GPT2Model, config, attention), (ids(2, 8),)


def llama():
    config = transformers.LlamaConfig(**{**DECODER, "num_attention_heads": 4, "num_key_value_heads": 4})
    return build(transformers.LlamaModel, config), (ids(2, 8),)


def mistral():
    """Grouped-query heads (4 query heads share 2 key/value heads) and a sliding window
    shorter than the sequence."""
    config = transformers.MistralConfig(**{**DECODER, "num_attention_heads": 4, "num_key_value_heads": 2,
                                           "sliding_window": 4})
    return build(transformers.MistralModel, config), (ids(2, 8),)


def t5():
    """The whole encoder-decoder, one layer each: relative position buckets both ways,
    causal self-attention and cross-attention."""
    config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                   relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                   use_cache=False, decoder_start_token_id=0, **TOKENS)
    return Seq2Seq(build(transformers.T5Model, config)), (ids(2, 8), ids(2, 6))


def vit():
    config = transformers.ViTConfig(**SMALL, image_size=16, patch_size=4)
    return build(transformers.ViTModel, config), (floats(2, 3, 16, 16),)


def whisper():
    """The encoder: two conv1d over 16 mel bins, 16 frames (2 x max_source_positions)."""
    config = transformers.WhisperConfig(d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
                                        num_mel_bins=16, max_source_positions=8, vocab_size=VOCAB,
                                        decoder_start_token_id=1, **TOKENS)
    return build(WhisperEncoder, config), (floats(2, 16, 16),)


def clip():
    config = transformers.CLIPVisionConfig(**SMALL, image_size=16, patch_size=4)
    return build(transformers.CLIPVisionModel, config), (floats(2, 3, 16, 16),)


def convnext():
    config = transformers.ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], image_size=32)
    return build(transformers.ConvNextModel, config), (floats(2, 3, 32, 32),)


def swin():
    """20-pixel images: 5 x 5 patches padded to windows of 3, a block of plain windows,
    then one of shifted windows (a roll and their attention mask)."""
    config = transformers.SwinConfig(image_size=20, patch_size=4, embed_dim=16, depths=[2], num_heads=[2],
                                     window_size=3)
    return build(transformers.SwinModel, config), (floats(2, 3, 20, 20),)


FAMILIES = {f.__name__: f for f in (bert, gpt2, llama, mistral, t5, vit, whisper, clip, convnext, swin)}


def import_and_check(module: nn.Module, inputs: tuple, name: str):
    """Import ``module``; check the custom share, the outputs of the reference against the
    module's own, and the ILP plan on the numpy backend. Returns the graph and the plan."""
    result = torch_importer.convert(torch_importer.program_of(module, inputs), name)
    graph = result.load()
    customs = [op.name for op in graph.ops.values() if op.kind == "custom"]
    assert len(customs) <= 0.01 * len(graph.ops), result.summary.text(name)
    assert set(customs) <= set(graph.hooks)  # each runs as torch's own op in the reference
    feeds = {f"input_{i}": t.numpy() for i, t in enumerate(inputs) if f"input_{i}" in graph.inputs}
    values = run_reference(graph, feeds)
    with torch.no_grad():
        want = module(*inputs).to_tuple()  # the fields torch.export flattens, in order
    assert len(want) == len(graph.outputs)
    for output, expected in zip(graph.outputs, want):
        check = compare(output, graph.tensor(output).dtype, values[output], expected.numpy(),
                        accumulated_terms(graph, output))
        assert check.ok, check
    plan = partition(graph, "ilp", time_limit=0.5)  # a small work budget: these test the import, not the ILP
    assert plan.solver.status in ("OPTIMAL", "FEASIBLE"), plan.solver
    checks = run_and_check(plan, load_backend("numpy"), inputs=feeds)
    assert all(c.ok for c in checks), checks
    return graph, plan


@pytest.mark.parametrize("family", FAMILIES)
def test_family_imports_plans_and_matches_torch(family):
    module, inputs = FAMILIES[family]()
    import_and_check(module, inputs, family)


def test_default_attention_maps_to_an_attention_kernel():
    """transformers' default ``sdpa`` attention: one scaled_dot_product_attention per
    layer, converted to ops in which the partitioner finds each attention again (torch's
    own decomposition of it made GPT-2's import fail)."""
    module, inputs = gpt2("sdpa")
    graph, plan = import_and_check(module, inputs, "gpt2")
    assert not any(op.kind == "custom" for op in graph.ops.values())
    assert [g.kind for g in plan.cost.groups].count("attention") == 2  # one per layer
