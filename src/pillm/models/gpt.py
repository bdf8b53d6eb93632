"""GPT-style pre-LN decoder (nanoGPT shape) with each sublayer behind one attribute.

``Block.attn`` and ``Block.mlp`` can be ``None`` (attention-only / FFN-only variants), and
``Block.mlp`` can be swapped for any module mapping (B, T, d) -> (B, T, d), e.g. a solved map.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from pillm.models.embedding import TokenEmbedding
from pillm.models.feature_shapes import FEATURES


@dataclass
class GPTConfig:
    vocab_size: int
    context: int = 128
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    ffn_mult: int = 4
    dropout: float = 0.0
    use_attn: bool = True
    use_ffn: bool = True
    ffn_activation: str = "gelu"  # "gelu" | "linear" (no activation: the linear-FFN control)

    def to_dict(self) -> dict:
        return asdict(self)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.d_model % cfg.n_head == 0, "d_model must be divisible by n_head"
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.proj(y)


ACTIVATIONS = ("gelu", "linear")


class MLP(nn.Module):
    """FFN(x) = W2 GELU(W1 x): the block a closed-form solve may replace. With
    ``ffn_activation="linear"`` it is W2 (W1 x + b1) + b2, an affine map (the linear control)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.ffn_activation not in ACTIVATIONS:
            raise ValueError(
                f"ffn_activation {cfg.ffn_activation!r}: expected one of {ACTIVATIONS}"
            )
        self.linear = cfg.ffn_activation == "linear"
        self.fc = nn.Linear(cfg.d_model, cfg.ffn_mult * cfg.d_model)
        self.proj = nn.Linear(cfg.ffn_mult * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return self.proj(h if self.linear else F.gelu(h))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg) if cfg.use_attn else None
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg) if cfg.use_ffn else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.attn is not None:
            x = x + self.attn(self.ln_1(x))
        if self.mlp is not None:
            x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = TokenEmbedding(cfg.vocab_size, cfg.d_model)  # deterministic CUDA backward
        self.wpe = nn.Embedding(cfg.context, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        self.apply(self._init_weights)
        # GPT-2: scale residual projections by 1/sqrt(2 n_layer) so the stream's variance is O(1).
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Final normalised residual stream, (B, T, d)."""
        B, T = idx.shape
        assert self.cfg.context >= T, f"sequence length {T} > context {self.cfg.context}"
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, d)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        logits = self.lm_head(self.hidden(idx))  # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        return logits, loss

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count; tied head counted once. Non-embedding excludes token+position tables."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wte.weight.numel() + self.wpe.weight.numel()
        return n


def count_params(cfg: GPTConfig) -> int:
    """Parameters of a GPT of this config (tied head once), counted without allocating."""
    with torch.device("meta"):
        return GPT(cfg).num_params()


def matched_depth(cfg: GPTConfig, reference: GPTConfig) -> GPTConfig:
    """``cfg`` with the depth whose parameter count is closest to ``reference``'s.

    Only ``n_layer`` changes (width, heads and context stay), so the embeddings are shared and
    the match is in the blocks: attention-only blocks have about a third of a baseline block's
    parameters at ``ffn_mult = 4``, hence about three times the layers.
    """
    target = count_params(reference)
    per_layer = count_params(replace(cfg, n_layer=2)) - count_params(replace(cfg, n_layer=1))
    base = count_params(replace(cfg, n_layer=1)) - per_layer
    guess = max(1, round((target - base) / per_layer))
    best = min((guess - 1, guess, guess + 1), key=lambda n: (abs(base + n * per_layer - target), n))
    return replace(cfg, n_layer=max(1, best))


# ---- PIL FFN: fixed random features, output map solved in closed form (lm/pil.py) ----


class PILFFN(nn.Module):
    """FFN(u) = φ(u) W_out with fixed random φ; only ``w_out`` is ever solved (all buffers)."""

    def __init__(self, d: int, n_proj: int, width: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("w_in", torch.randn(n_proj, d, width, generator=g) / math.sqrt(d))
        self.register_buffer("b_in", 0.5 * torch.randn(n_proj, width, generator=g))
        self.register_buffer("w_out", torch.zeros(n_proj * width + 1, d))

    @property
    def n_features(self) -> int:
        return self.w_out.shape[0]

    def features(self, u: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., m*w + 1): GELU random features plus a ones column (the bias)."""
        z = torch.einsum("...d,mdw->...mw", u, self.w_in.to(u.dtype)) + self.b_in.to(u.dtype)
        h = F.gelu(z).flatten(-2)  # (..., m*w)
        return torch.cat([h, torch.ones_like(h[..., :1])], dim=-1)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.features(u) @ self.w_out.to(u.dtype)


def freeze_ffns(model: GPT) -> int:
    """Fix every block's FFN at its current (e.g. random-init) weights; returns their count."""
    n = 0
    for block in model.blocks:
        for p in block.mlp.parameters() if block.mlp is not None else ():
            p.requires_grad_(False)
            n += p.numel()
    return n


def attach_pil(model: GPT, features: str, seed: int) -> None:
    """Replace every block's FFN by a PIL FFN with zero output map (seeded per layer)."""
    n_proj, mult = FEATURES[features]
    d = model.cfg.d_model
    device = model.wte.weight.device
    for layer, block in enumerate(model.blocks):
        block.mlp = PILFFN(d, n_proj, mult * d, seed=10_000 * seed + layer).to(device)
