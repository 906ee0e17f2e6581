"""Kernel counts of the real compilers against our baselines, on CPU.

Run: python benchmarks/real_compilers.py [GRAPH ...] [--batch N] [--seq N]

Each graph (default: gpt2_2l_b8_s1024_f16 and bert_base_2l_b32_s128_f16) is built
as ``graphs/export_models.py`` builds it (the same transformers config, precision
and eager attention), with real weights on the CPU, exported with
``torch.export`` and compiled by TorchInductor (``torch.compile`` of the exported
module, default options). Its kernels are counted in the output code's ``call``:
generated C++ kernels, extern kernels (Inductor's matmul calls) and ATen
fallbacks, each call once. Ours are the launches of the ``inductor`` and ``tvm``
baselines' plans of the corpus graph in ``graphs/``. Where TVM is installed
(the ``compilers`` extra: ``pip install -e '.[compilers]'``), the model also goes through TVM Relax's CUDA fusion
passes and its ``call_tir`` launches are counted (:func:`tvm_kernels`); else the
TVM column is ``-`` and the header says why. Needs the corpus extra
(torch, transformers); GPT-2 2L takes about 3.5 CPU minutes here at its corpus
shape, most of it running the compiled model once in float16 on the CPU.

``--batch``/``--seq`` shrink the input (faster; Inductor's choices can depend on
shapes, so the corpus shape is the default). Counts are measured in this run, on
this machine's CPU backend; see docs/baselines.md for what differs on a GPU.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("gpt2_2l_b8_s1024_f16", "bert_base_2l_b32_s128_f16")
#: How a kernel call appears in Inductor's CPU output code.
KERNEL_CALLS = {"generated": r"\bcpp_fused_\w+\(", "extern": r"\bextern_kernels\.\w+\(",
                "fallback": r"\btorch\.ops\.aten\.\w+\.\w+\("}


def inductor_kernels(name: str, batch: int | None, seq: int | None) -> dict[str, int]:
    """Kernel calls per kind (:data:`KERNEL_CALLS`) of TorchInductor's code for the
    corpus model ``name``, compiled and run once on the CPU."""
    import torch
    from torch._inductor.utils import run_and_get_code

    program, example = _export(name, batch, seq)
    with torch.no_grad():
        _, codes = run_and_get_code(torch.compile(program.module()), example)
    call = "\n".join(code[code.find("def call("):] for code in codes)
    return {kind: len(re.findall(pattern, call)) for kind, pattern in KERNEL_CALLS.items()}


def _export(name: str, batch: int | None, seq: int | None, float32: bool = False):
    """The corpus model ``name`` with random weights, exported with ``torch.export``,
    and its example input (float32 weights if ``float32``)."""
    import torch

    from export_models import MODELS, build

    spec = next(m for m in MODELS if m.name == name)
    shape = list(spec.input_shape)
    shape[0] = batch or shape[0]
    if spec.input_dtype == "int64":  # token ids: (batch, sequence)
        shape[1] = seq or shape[1]
    meta, _ = build(spec)
    model = meta.to_empty(device="cpu")
    model = model.float() if float32 else model
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            tensor.normal_(0, 0.02) if tensor.is_floating_point() else tensor.zero_()
        example = torch.zeros(shape, dtype=getattr(torch, spec.input_dtype))
        return torch.export.export(model, (example,)), example


def tvm_kernels(name: str, batch: int | None, seq: int | None) -> int:
    """Kernel launches of TVM Relax's CUDA pipeline for the corpus model ``name``:
    the ``call_tir`` calls left in ``main`` after the CUDA backend's library dispatch
    and legalization passes (LegalizeOps, AnnotateTIROpPattern, FoldConstant,
    FuseOps, FuseTIR) and RewriteDataflowReshape (reshapes become views, as in our
    format). Nothing is built or run, so no GPU is needed. The model is exported in
    float32: TVM 0.27's torch frontend rejects float16 ``addmm`` (it types the
    product float32 and the bias float16). Fusion depends on the dtype only through
    casts, which are elementwise and fuse into a neighbour's kernel, so they add
    no launch."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.cuda import pipeline
    from tvm.relax.frontend.torch import from_exported_program

    program, _ = _export(name, batch, seq, float32=True)
    module = from_exported_program(program, keep_params_as_input=True)
    target = tvm.target.Target("cuda")
    passes = [*pipeline.library_dispatch_passes(target), *pipeline.legalize_passes(target),
              relax.transform.RewriteDataflowReshape()]
    with target:
        module = tvm.transform.Sequential(passes)(module)
    return len(re.findall(r"\bR\.call_tir\(", module["main"].script()))


def _tvm_column(name: str, batch: int | None, seq: int | None) -> str:
    """TVM's count for the table, or why it has none: its frontend does not cover
    every op torch exports, and one model it rejects must not lose the others' rows."""
    try:
        return str(tvm_kernels(name, batch, seq))
    except Exception as exc:  # noqa: BLE001 (any frontend or pass failure)
        return f"failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:80]}"


def our_launches(name: str, strategy: str) -> int:
    from partitioner import load_graph, partition

    return partition(load_graph(ROOT / "graphs" / f"{name}.yaml"), strategy).cost.launches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graphs", nargs="*", default=list(DEFAULT))
    parser.add_argument("--batch", type=int, help="input batch (default: the corpus graph's)")
    parser.add_argument("--seq", type=int, help="input sequence length (default: the corpus graph's)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        import transformers
    except ImportError as exc:
        print(f"real_compilers.py: {exc.name} is not installed (pip install -e '.[corpus]')", file=sys.stderr)
        sys.exit(2)
    sys.path.insert(0, str(ROOT / "graphs"))
    from export_models import MODELS

    unknown = [name for name in args.graphs if name not in {m.name for m in MODELS}]
    if unknown:
        print(f"real_compilers.py: {unknown[0]}: not a corpus model of graphs/export_models.py "
              f"(known: {', '.join(m.name for m in MODELS)})", file=sys.stderr)
        sys.exit(2)
    try:
        import tvm
        tvm_note = f"TVM {tvm.__version__} (Relax CUDA pipeline, fusion passes only)"
    except ImportError:
        tvm, tvm_note = None, "TVM not installed (pip install -e '.[compilers]')"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {tvm_note}; real kernel counts "
          "measured in this run on the CPU (Inductor's C++ backend; TVM's passes, nothing run); ours are the "
          "baselines' plan launches (modelled plans)\n")
    print("| graph | real Inductor kernels (generated + extern + fallback) | ours: inductor | ours / real "
          "| real TVM | ours: tvm |")
    print("|---|---|---|---|---|---|")
    for name in args.graphs:
        real = inductor_kernels(name, args.batch, args.seq)
        total = sum(real.values())
        ours = our_launches(name, "inductor")
        real_tvm = _tvm_column(name, args.batch, args.seq) if tvm else "-"
        print(f"| {name} | {total} ({real['generated']} + {real['extern']} + {real['fallback']}) | {ours} | "
              f"{ours / total:.2f} | {real_tvm} | {our_launches(name, 'tvm')} |", flush=True)


if __name__ == "__main__":
    main()
