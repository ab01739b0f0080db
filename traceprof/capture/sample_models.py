"""Small reference models in plain ``torch.nn`` for sample traces, tests and benchmarks.

- :class:`LeNet5`: the classic 1x32x32 convolutional net.
- :class:`ResNet18`: torchvision's ResNet-18 layout and qualified names
  (``layer1.0.conv1`` ...), ``nn.ReLU(inplace=True)``; 11,689,512 parameters at 1000 classes.
- :class:`GPT`: a GPT-2-style decoder (nanoGPT names: ``transformer.h.0.attn.c_attn`` ...) using
  ``F.scaled_dot_product_attention(is_causal=True)``, with ``lm_head`` tied to ``wte``.
  ``GPTConfig()`` is small enough for CPU; ``GPTConfig.gpt2_small()`` has GPT-2 small's
  dimensions (124,439,808 parameters).
- :class:`BertEncoder`: a BERT-style encoder with a classification head (HF-like names:
  ``encoder.layer.0.attention.self.query`` ...).

Importing this module imports torch.
"""

from __future__ import annotations

import math
from typing import Protocol, cast

import msgspec
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GPT",
    "BasicBlock",
    "BertConfig",
    "BertEncoder",
    "GPTConfig",
    "LeNet5",
    "ResNet18",
]


# -- LeNet-5 -----------------------------------------------------------------------------------


class LeNet5(nn.Module):
    """LeNet-5 for 1x32x32 inputs (61,706 parameters at 10 classes)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5),
            nn.Tanh(),
            nn.AvgPool2d(2),
            nn.Conv2d(6, 16, kernel_size=5),
            nn.Tanh(),
            nn.AvgPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120),
            nn.Tanh(),
            nn.Linear(120, 84),
            nn.Tanh(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


# -- ResNet-18 ---------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)  # one module called twice per forward, as in torchvision


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._layer(64, 64, stride=1)
        self.layer2 = self._layer(64, 128, stride=2)
        self.layer3 = self._layer(128, 256, stride=2)
        self.layer4 = self._layer(256, 512, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    @staticmethod
    def _layer(in_planes: int, planes: int, stride: int) -> nn.Sequential:
        return nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- GPT ---------------------------------------------------------------------------------------


class GPTConfig(msgspec.Struct, frozen=True):
    vocab_size: int = 8192
    block_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 256
    dropout: float = 0.0
    bias: bool = True

    @classmethod
    def gpt2_small(cls) -> GPTConfig:
        return cls(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, d_model=768)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.d_model % config.n_head:
            raise ValueError("d_model must be divisible by n_head")
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.c_attn(x).split(dim, dim=2)
        shape = (batch, seq, self.n_head, dim // self.n_head)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(batch, seq, dim)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, 4 * config.d_model, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.d_model, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _GPTParts(Protocol):
    """The entries of ``GPT.transformer`` (an ``nn.ModuleDict``, for nanoGPT's names), typed."""

    wte: nn.Embedding
    wpe: nn.Embedding
    drop: nn.Dropout
    h: nn.ModuleList
    ln_f: nn.LayerNorm


class GPT(nn.Module):
    """GPT-2-style decoder; ``forward(idx)`` returns logits ``[batch, seq, vocab]``."""

    def __init__(self, config: GPTConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or GPTConfig()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(config.vocab_size, config.d_model),
                "wpe": nn.Embedding(config.block_size, config.d_model),
                "drop": nn.Dropout(config.dropout),
                "h": nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                "ln_f": nn.LayerNorm(config.d_model, bias=config.bias),
            }
        )
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = cast(_GPTParts, self.transformer).wte.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        seq = idx.shape[1]
        if seq > self.config.block_size:
            raise ValueError(f"sequence length {seq} > block_size {self.config.block_size}")
        pos = torch.arange(seq, dtype=torch.long, device=idx.device)
        t = cast(_GPTParts, self.transformer)
        x = t.drop(t.wte(idx) + t.wpe(pos))
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


# -- BERT-style encoder ------------------------------------------------------------------------


class BertConfig(msgspec.Struct, frozen=True):
    vocab_size: int = 8192
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    num_labels: int = 2
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12

    @classmethod
    def bert_base(cls) -> BertConfig:
        return cls(
            vocab_size=30522,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
        )


class BertEmbeddings(nn.Module):
    position_ids: torch.Tensor  # a buffer (register_buffer)

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)
        self.register_buffer(
            "position_ids", torch.arange(c.max_position_embeddings).unsqueeze(0), persistent=False
        )

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None):
        seq = input_ids.shape[1]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(self.position_ids[:, :seq])
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.num_heads = c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        self.dropout_p = c.dropout

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, seq, dim = x.shape
        shape = (batch, seq, self.num_heads, dim // self.num_heads)
        q, k, v = (lin(x).view(shape).transpose(1, 2) for lin in (self.query, self.key, self.value))
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        return y.transpose(1, 2).reshape(batch, seq, dim)


class _DenseAddNorm(nn.Module):
    """A projection back to the hidden size, dropout, the residual added, LayerNorm: how BERT
    ends its attention (``BertSelfOutput``) and its feed-forward block (``BertOutput``)."""

    def __init__(self, c: BertConfig, in_features: int) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)


class BertSelfOutput(_DenseAddNorm):
    def __init__(self, c: BertConfig) -> None:
        super().__init__(c, c.hidden_size)


class BertAttention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.output(self.self(x, attn_mask=attn_mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class BertOutput(_DenseAddNorm):
    def __init__(self, c: BertConfig) -> None:
        super().__init__(c, c.intermediate_size)


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertOutput(c)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        attended = self.attention(x, attn_mask=attn_mask)
        return self.output(self.intermediate(attended), attended)


class BertEncoderStack(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c.num_hidden_layers))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, attn_mask=attn_mask)
        return x


class BertPooler(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x[:, 0]))


class BertEncoder(nn.Module):
    """BERT-style encoder + sequence classifier.

    ``forward(input_ids, attention_mask=None, token_type_ids=None)`` returns
    ``{"logits": [batch, num_labels], "last_hidden_state": [batch, seq, hidden]}``;
    ``attention_mask`` is 1 for tokens to attend to, 0 for padding.
    """

    def __init__(self, config: BertConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or BertConfig()
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoderStack(c)
        self.pooler = BertPooler(c)
        self.dropout = nn.Dropout(c.dropout)
        self.classifier = nn.Linear(c.hidden_size, c.num_labels)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        x = self.embeddings(input_ids, token_type_ids)
        attn_mask = None
        if attention_mask is not None:  # [batch, 1, 1, seq] boolean: True = attend
            attn_mask = attention_mask[:, None, None, :].to(torch.bool)
        hidden = self.encoder(x, attn_mask=attn_mask)
        logits = self.classifier(self.dropout(self.pooler(hidden)))
        return {"logits": logits, "last_hidden_state": hidden}
