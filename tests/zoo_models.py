"""A zoo of Hugging Face ``transformers`` models, built from configs (random weights, nothing
downloaded), captured eager and ``torch.compile``d by ``traceprof.capture.profile``.

Each family is the model class users compile, at a size where the kernels and not Dynamo's
per-call overhead make up a step on a CPU (text: hidden 256, sequence 256, batch 8, two
layers, :data:`SIZE`, one encoder and one decoder layer for T5 and Whisper; images
8x3x224x224; audio 8x80x256 frames), so that the share of the
root's time that lands in its submodules can be compared between eager and compiled traces.
:func:`capture_family` writes a training step (forward, loss, backward, SGD step) and an
inference step (``eval()``, ``torch.no_grad()``), eager and ``torch.compile(model)``;
:func:`capture_variant` a training step compiled another way (:data:`VARIANTS`: dynamic
shapes, ``fullgraph``, ``max-autotune-no-cudagraphs``, regional compilation).

Run as a script to capture one task (``python tests/zoo_models.py family gpt2 out/``): the
tests capture the tasks in two worker processes.

Importing this module imports torch and transformers.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers as hf

import traceprof.capture as tp_capture

#: hidden size, sequence length, batch size, layers of every text model
SIZE = {"hidden": 256, "seq": 256, "batch": 8, "layers": 2}
VOCAB = 512


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # what it stands for in the zoo: decoder, moe, encoder, encoder-decoder, vision, audio
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], dict[str, Any]]
    #: the modules whose FLOPs per pass the tests compare (blocks of the model)
    blocks: tuple[str, ...] = field(default=())
    #: mode -> (least share of the root's time below it, compiled / eager, why) where a case
    #: cannot reach COVERAGE_RATIO by the attribution's rules
    coverage: dict[str, tuple[float, str]] = field(default_factory=dict)


def _text_inputs(gen: torch.Generator) -> dict[str, Any]:
    ids = torch.randint(0, VOCAB, (SIZE["batch"], SIZE["seq"]), generator=gen)
    return {"input_ids": ids, "labels": ids}


def _masked_text_inputs(gen: torch.Generator) -> dict[str, Any]:
    ids = torch.randint(0, VOCAB, (SIZE["batch"], SIZE["seq"]), generator=gen)
    mask = torch.ones_like(ids)
    mask[:, -SIZE["seq"] // 4 :] = 0  # padding: the mask is filled with finfo.min
    return {"input_ids": ids, "attention_mask": mask, "labels": ids}


def _seq2seq_inputs(gen: torch.Generator) -> dict[str, Any]:
    ids = torch.randint(0, VOCAB, (SIZE["batch"], SIZE["seq"]), generator=gen)
    return {"input_ids": ids, "labels": ids[:, : SIZE["seq"] // 2].contiguous()}


def _image_inputs(gen: torch.Generator) -> dict[str, Any]:
    return {
        "pixel_values": torch.randn(SIZE["batch"], 3, 224, 224, generator=gen),
        "labels": torch.randint(0, 10, (SIZE["batch"],), generator=gen),
    }


def _audio_inputs(gen: torch.Generator) -> dict[str, Any]:
    labels = torch.randint(0, VOCAB, (SIZE["batch"], 32), generator=gen)
    return {"input_features": torch.randn(SIZE["batch"], 80, 256, generator=gen), "labels": labels}


def _decoder(config_class: Any, model_class: Any, **extra: Any) -> Callable[[], torch.nn.Module]:
    h = SIZE["hidden"]

    def build() -> torch.nn.Module:
        config = config_class(
            vocab_size=VOCAB,
            hidden_size=h,
            intermediate_size=2 * h,
            num_hidden_layers=SIZE["layers"],
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2 * SIZE["seq"],
            **extra,
        )
        return model_class(config)

    return build


def _gpt2() -> torch.nn.Module:
    h = SIZE["hidden"]
    config = hf.GPT2Config(
        vocab_size=VOCAB,
        n_embd=h,
        n_layer=SIZE["layers"],
        n_head=4,
        n_positions=2 * SIZE["seq"],
        bos_token_id=0,
        eos_token_id=0,
    )
    return hf.GPT2LMHeadModel(config)


def _bert() -> torch.nn.Module:
    h = SIZE["hidden"]
    config = hf.BertConfig(
        vocab_size=VOCAB,
        hidden_size=h,
        intermediate_size=2 * h,
        num_hidden_layers=SIZE["layers"],
        num_attention_heads=4,
        max_position_embeddings=2 * SIZE["seq"],
    )
    return hf.BertForMaskedLM(config)


def _t5() -> torch.nn.Module:
    h = SIZE["hidden"]
    config = hf.T5Config(
        vocab_size=VOCAB,
        d_model=h,
        d_ff=2 * h,
        d_kv=h // 4,
        num_layers=1,  # an encoder and a decoder: one layer each keeps the compile short
        num_decoder_layers=1,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    return hf.T5ForConditionalGeneration(config)


def _vit() -> torch.nn.Module:
    h = SIZE["hidden"]
    config = hf.ViTConfig(
        image_size=224,
        patch_size=16,
        hidden_size=h,
        intermediate_size=2 * h,
        num_hidden_layers=SIZE["layers"],
        num_attention_heads=4,
        num_labels=10,
    )
    return hf.ViTForImageClassification(config)


def _convnext() -> torch.nn.Module:
    config = hf.ConvNextConfig(
        hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], num_labels=10, image_size=224
    )
    return hf.ConvNextForImageClassification(config)


def _whisper() -> torch.nn.Module:
    h = SIZE["hidden"]
    config = hf.WhisperConfig(
        vocab_size=VOCAB,
        d_model=h,
        encoder_layers=1,  # as T5's
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * h,
        decoder_ffn_dim=2 * h,
        num_mel_bins=80,
        max_source_positions=128,
        max_target_positions=64,
        decoder_start_token_id=1,
        pad_token_id=0,
    )
    return hf.WhisperForConditionalGeneration(config)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("gpt2", "decoder", _gpt2, _text_inputs, ("transformer.h.0", "transformer.h.1")),
        Family(
            "llama",
            "decoder",
            _decoder(hf.LlamaConfig, hf.LlamaForCausalLM),
            _text_inputs,
            ("model.layers.0", "model.layers.1"),
        ),
        Family(
            "qwen2",
            "decoder",
            _decoder(hf.Qwen2Config, hf.Qwen2ForCausalLM),
            _text_inputs,
            ("model.layers.0", "model.layers.1"),
        ),
        Family(
            "gemma",
            "decoder",
            _decoder(hf.GemmaConfig, hf.GemmaForCausalLM, head_dim=32),
            _text_inputs,
            ("model.layers.0", "model.layers.1"),
        ),
        Family(
            "mixtral",
            "moe",
            _decoder(hf.MixtralConfig, hf.MixtralForCausalLM, num_local_experts=4, num_experts_per_tok=2),
            _text_inputs,
            ("model.layers.0", "model.layers.1"),
        ),
        Family(
            "bert", "encoder", _bert, _masked_text_inputs, ("bert.encoder.layer.0", "bert.encoder.layer.1")
        ),
        Family(
            "t5",
            "encoder-decoder",
            _t5,
            _seq2seq_inputs,
            ("encoder.block.0", "decoder.block.0"),
            # Inductor generates every dropout mask of the training graph (the attention
            # probabilities' of the encoder and the decoder) in one kernel at the graph's start:
            # a kernel fused across modules whose common ancestor is the root (about a fifth of
            # the step on a CPU), shown there as fused work, not split by estimate
            {"train": (0.7, "dropout masks of encoder and decoder in one kernel, on the root")},
        ),
        Family("vit", "vision", _vit, _image_inputs, ("vit.layers.0", "vit.layers.1")),
        Family(
            "convnext",
            "vision",
            _convnext,
            _image_inputs,
            ("convnext.encoder.stages.1", "convnext.encoder.stages.2"),
        ),
        Family(
            "whisper", "audio", _whisper, _audio_inputs, ("model.encoder.layers.0", "model.decoder.layers.0")
        ),
    )
}


def build(name: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model of family ``name`` (seeded) and its inputs."""
    torch.manual_seed(0)
    family = FAMILIES[name]
    return family.build(), family.inputs(torch.Generator().manual_seed(0))


#: ways of compiling beyond ``torch.compile(model)``: variant -> (family, how)
VARIANTS: dict[str, tuple[str, Any]] = {
    "dynamic": ("llama", {"dynamic": True}),
    "fullgraph": ("llama", {"fullgraph": True}),
    "max_autotune": ("gpt2", {"mode": "max-autotune-no-cudagraphs"}),
    "regional": ("llama", "regional"),  # for layer in model.model.layers: layer.compile()
}


def _inference_inputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """Inputs of an inference step: no labels, except where the decoder's inputs come from them."""
    return {k: v for k, v in inputs.items() if k != "labels" or name in ("t5", "whisper")}


#: families whose compiled training step compiles again on its second call: HF's
#: classification loss sets ``config.problem_type`` on its first, which Dynamo guards on
RECOMPILE_ONCE = frozenset({"vit", "convnext"})


def _run(
    net: torch.nn.Module, name: str, inputs: dict[str, Any], mode: str, path: Path, compiled: bool = True
) -> str:
    """One trace of ``mode`` (``"train"``: forward, loss, backward, SGD step; ``"infer"``:
    ``eval()`` under ``no_grad``): a warmup step (a compiled model compiles in it; two for the
    families of :data:`RECOMPILE_ONCE`), then the active step."""
    warmup = 2 if compiled and mode == "train" and name in RECOMPILE_ONCE else 1
    steps = {"wait": 0, "warmup": warmup, "active": 1}
    if mode == "train":
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        with tp_capture.profile(net, **steps, _trace_file=path) as prof:
            for _ in range(warmup + 1):
                net(**inputs).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                prof.step()
    else:
        net.eval()
        inputs = _inference_inputs(name, inputs)
        with torch.no_grad(), tp_capture.profile(net, **steps, _trace_file=path) as prof:
            for _ in range(warmup + 1):
                net(**inputs)
                prof.step()
    if prof.trace_paths != [str(path)]:
        raise RuntimeError(f"{path.name}: expected one trace, got {prof.trace_paths}")
    return str(path)


def capture_family(name: str, out_dir: str) -> dict[str, str]:
    """Traces of family ``name``: ``train_eager``, ``train_compiled``, ``infer_eager``,
    ``infer_compiled`` (one ``torch.compile(model)`` copy runs the training steps, then the
    inference steps, which compile its inference graph)."""
    model, inputs = build(name)
    compiled = torch.compile(copy.deepcopy(model))
    out = Path(out_dir)
    paths = {}
    for mode in ("train", "infer"):
        paths[f"{mode}_eager"] = _run(
            model, name, inputs, mode, out / f"{name}_{mode}_eager.pt.trace.json.gz", compiled=False
        )
        paths[f"{mode}_compiled"] = _run(
            compiled, name, inputs, mode, out / f"{name}_{mode}_compiled.pt.trace.json.gz"
        )
    return paths


def capture_variant(variant: str, out_dir: str) -> dict[str, str]:
    """The training trace of :data:`VARIANTS` ``variant``: its family's model compiled that way."""
    name, how = VARIANTS[variant]
    model, inputs = build(name)
    net: torch.nn.Module
    if how == "regional":
        net = model
        for layer in model.model.layers:  # type: ignore[union-attr]
            layer.compile()
    else:
        net = torch.compile(model, **how)  # type: ignore[assignment]
    path = Path(out_dir) / f"{name}_train_{variant}.pt.trace.json.gz"
    return {variant: _run(net, name, inputs, "train", path)}


def capture_task(task: tuple[str, str], out_dir: str) -> dict[str, str]:
    """``("family", name)`` or ``("variant", name)`` captured in this process (a worker's)."""
    kind, name = task
    torch.set_num_threads(1)  # two workers share two cores
    # Dynamo keeps compiled code per code object, and transformers' decorated forwards share one
    # (its wrapper's): past torch._dynamo.config.recompile_limit entries, later models of the
    # worker would run eagerly
    torch._dynamo.reset()
    # scalar C++ kernels, compiled in this process: Inductor's vectorized kernels (its at::vec
    # templates) took half of a family's time to compile, and its compile pool competes with the
    # other worker; the graphs, their kernels' names, call sites and modules are the same
    torch._inductor.config.cpp.simdlen = 1
    torch._inductor.config.compile_threads = 1
    start = time.perf_counter()
    paths = capture_family(name, out_dir) if kind == "family" else capture_variant(name, out_dir)
    return {**paths, "seconds": f"{time.perf_counter() - start:.0f}"}


# -- comparing a compiled trace with the eager one (imports traceprof only) --------------------

#: tolerances: matrix FLOPs per module, all FLOPs per block, the root's share below it
MATRIX_TOLERANCE, BLOCK_TOLERANCE, COVERAGE_RATIO = 0.01, 0.05, 0.9


def share_below_root(profile: Any) -> float:
    """The share of the model root's time (GPU busy time; CPU time on CPU-only traces) that
    lands in its submodules, less the compiled code's own time on the root (Dynamo's cache
    lookups, the graphs' wrappers: Python that is no module's work, and the part of a step that
    a busy machine stretches most: with it, one CI run measured 0.86 where a quiet one measures
    0.96 on ConvNeXt's inference)."""
    from traceprof.result.model import NodeKind
    from traceprof.trace import schema

    def compiled_code(name: str) -> bool:
        return (
            name.startswith(schema.COMPILED_REGION_PREFIX)
            or name == schema.COMPILED_CACHE_LOOKUP_NAME
            or name.endswith(schema.COMPILED_BACKWARD_NAME)
        )

    root = next(profile.nodes[r] for r in profile.roots if profile.nodes[r].kind is NodeKind.MODULE)
    field = "gpu_busy_us" if profile.has_gpu else "cpu_us"
    total, own = getattr(root.total, field), getattr(root.own, field)
    overhead = sum(getattr(op, field) for op in root.ops if compiled_code(op.name))
    return (total - own) / (total - overhead) if total > overhead else 0.0


def compare(
    eager: Any, compiled: Any, blocks: tuple[str, ...], coverage: float = COVERAGE_RATIO
) -> list[str]:
    """What differs between the compiled and the eager profile of one model and step, beyond
    the tolerances above (``coverage``: the least ratio of the root's shares below it): an
    empty list when the compiled attribution holds."""
    from traceprof.result.model import NodeKind

    findings: list[str] = []
    table = compiled.metadata.compiled_table
    if table is None or not table.graphs:
        findings.append("no compiled-kernel table in the trace")
    elif table.omitted:
        findings.append(f"the table left out {len(table.omitted)} item(s): {table.omitted[0]}")
    summary = compiled.compiled
    if summary is None or summary.events == 0 or summary.matched != summary.events:
        findings.append(f"kernel calls not all joined: {summary}")
    mods = {n.qualified_name: n for n in eager.walk() if n.kind is NodeKind.MODULE}
    cmods = {n.qualified_name: n for n in compiled.walk() if n.kind is NodeKind.MODULE}
    if set(mods) != set(cmods):
        missing, extra = sorted(set(mods) - set(cmods)), sorted(set(cmods) - set(mods))
        findings.append(f"module names differ: missing {missing[:5]}, extra {extra[:5]}")
    for name, node in mods.items():
        other = cmods.get(name)
        if other is None:
            continue
        for phase in ("forward", "backward"):
            a, b = node.phase(phase).own.macs, other.phase(phase).own.macs
            if abs(a - b) > MATRIX_TOLERANCE * max(a, b):
                findings.append(f"{name or '(root)'} {phase}: {a:.0f} MACs eager, {b:.0f} compiled")
    for name in blocks:
        if name not in mods or name not in cmods:
            findings.append(f"block {name} missing")
            continue
        for phase in ("forward", "backward"):
            a, b = mods[name].phase(phase).total.flops, cmods[name].phase(phase).total.flops
            if abs(a - b) > BLOCK_TOLERANCE * max(a, b):
                findings.append(f"block {name} {phase}: {a:.0f} FLOPs eager, {b:.0f} compiled ({b / a:.3f}x)")
    # the table view (torchinfo's totals) as eager's: parameters of the modules that ran,
    # mult-adds and sizes from their outputs
    from traceprof.render.table import torchinfo_stats

    stats, eager_stats = torchinfo_stats(compiled), torchinfo_stats(eager)
    for total in ("total_params", "total_mult_adds", "total_param_bytes"):
        a, b = getattr(eager_stats, total, None), getattr(stats, total, None)
        if a != b:
            findings.append(f"table view {total}: {a} eager, {b} compiled")
    below, eager_below = share_below_root(compiled), share_below_root(eager)
    if below < coverage * eager_below:
        findings.append(
            f"{below:.1%} of the root's time below it compiled, {eager_below:.1%} eager "
            f"(ratio {below / eager_below:.2f} < {coverage})"
        )
    return findings


if __name__ == "__main__":
    kind, name, out = sys.argv[1:4]
    print(capture_task((kind, name), out))
