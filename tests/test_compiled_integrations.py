"""Models compiled by the trainer or by the user, profiled by the training callbacks: the
Hugging Face ``Trainer`` with ``TrainingArguments(torch_compile=True)`` (accelerate wraps the
model the callback is handed in a ``torch.compile`` wrapper it never sees) and a Lightning
module compiled by the user (``trainer.fit(torch.compile(module))``: Lightning compiles its
``forward`` and ``training_step`` on the instance). In both, the trace has the model's tree,
with the compiled kernels in the model's own modules, and the callback's headline names
modules."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import traceprof  # noqa: E402
from traceprof.result.model import NodeKind  # noqa: E402

pytestmark = pytest.mark.skipif(
    not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")),
    reason="torch.compile on CPU needs a C++ compiler",
)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def check_compiled_tree(profile, prefix: str = "") -> None:
    """The model's modules, by the model's qualified names, hold the compiled kernels."""
    profile.self_check()
    assert profile.compiled is not None and profile.compiled.matched == profile.compiled.events > 0
    names = [n.qualified_name for n in profile.walk() if n.kind is NodeKind.MODULE]
    assert len(names) == len(set(names))
    for name in ("transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_fc", "lm_head"):
        node = profile.find(prefix + name)
        assert node.qualified_name == prefix + name
        assert node.forward.total.cpu_us > 0 and node.forward.total.macs > 0
    assert not any(n.startswith("0.") or ".0.model" in n for n in names)


def test_hf_trainer_with_torch_compile_profiles_the_model_tree(tmp_path):
    from transformers import Trainer, TrainingArguments

    from traceprof.integrations.transformers import TraceprofCallback

    class Tokens(torch.utils.data.Dataset):
        ids = torch.randint(0, 64, (16, 16), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    args = TrainingArguments(
        str(tmp_path / "out"),
        max_steps=4,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        torch_compile=True,
        use_cpu=True,
    )
    callback = TraceprofCallback(wait=1, warmup=1, active=1, logdir=str(tmp_path / "logs"))
    Trainer(model=tiny_gpt2(), args=args, train_dataset=Tokens(), callbacks=[callback]).train()
    assert len(callback.trace_paths) == 1
    profile = traceprof.analyze(callback.trace_paths[0])
    check_compiled_tree(profile)
    roots = [profile.nodes[r] for r in profile.roots if profile.nodes[r].kind is NodeKind.MODULE]
    assert [r.class_name for r in roots] == ["GPT2LMHeadModel"]


def test_a_lightning_module_compiled_by_the_user_profiles_the_model_tree(tmp_path):
    pytest.importorskip("lightning")
    import lightning.pytorch as L

    from traceprof.integrations.lightning import TraceprofCallback

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny_gpt2()

        def forward(self, ids):
            return self.model(input_ids=ids, labels=ids).loss

        def training_step(self, batch, batch_idx):
            return self(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    ids = torch.randint(0, 64, (16, 16), generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=2)
    callback = TraceprofCallback(wait=1, warmup=1, active=1)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=4,
        callbacks=[callback],
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=str(tmp_path),
    )
    module = Lit()
    trainer.fit(torch.compile(module), loader)
    assert len(callback.trace_paths) == 1
    profile = traceprof.analyze(callback.trace_paths[0])
    # the LightningModule is the root (its compiled training_step runs in its scope) and the
    # Hugging Face model, a frame of its own after Dynamo's graph breaks, is under it
    roots = [profile.nodes[r] for r in profile.roots if profile.nodes[r].kind is NodeKind.MODULE]
    assert [r.class_name for r in roots] == ["Lit"]
    check_compiled_tree(profile, "model.")
    assert profile.find("model").parent == roots[0].id
    # Lightning's compiled training_step is back in place after the session (not the wrapper
    # that opened the module's scope around it)
    assert getattr(vars(module)["training_step"], "_torchdynamo_orig_callable", None) is not None
