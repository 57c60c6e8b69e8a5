"""PCME++'s ``HfPCMEPPModel`` (Chun, "Improved Probabilistic Image-Text Representations", ICLR 2024; the official
``hf_models/``), module names as the official class's, for :mod:`rococo_eval.models.pcmepp` to assemble from a
checkpoint's config and load strictly.

Example:
    >>> import torch
    >>> block = Transformer(8, layers=2, heads=2, quick_gelu=True)
    >>> block(torch.zeros(3, 1, 8), blocks=range(1)).shape
    torch.Size([3, 1, 8])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.LayerNorm):
    """hf_models/transformer.py's LayerNorm: the result cast back to the input's dtype."""

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps).to(x.dtype)


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class LayerScale(nn.Module):
    def __init__(self, dim, init_values):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Block(nn.Module):
    """ResidualAttentionBlock: pre-norm attention and MLP (QuickGELU's or GELU's), optional layer scales."""

    def __init__(self, width, heads, mlp_ratio, ls_init_value, quick_gelu: bool):
        super().__init__()
        self.ln_1 = LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads)
        self.ls_1 = LayerScale(width, ls_init_value) if ls_init_value is not None else nn.Identity()
        self.ln_2 = LayerNorm(width)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(width, hidden))
        self.mlp.add_module("gelu", QuickGELU() if quick_gelu else nn.GELU())
        self.mlp.add_module("c_proj", nn.Linear(hidden, width))
        self.ls_2 = LayerScale(width, ls_init_value) if ls_init_value is not None else nn.Identity()

    def forward(self, x, attn_mask=None):
        normed = self.ln_1(x)
        mask = attn_mask.to(normed.dtype) if attn_mask is not None else None
        x = x + self.ls_1(self.attn(normed, normed, normed, need_weights=False, attn_mask=mask)[0])
        return x + self.ls_2(self.mlp(self.ln_2(x)))


class Transformer(nn.Module):
    """Residual attention blocks; ``forward(x, blocks=...)`` runs some of them (the shared and the separate layers of
    the mean and uncertainty branches)."""

    def __init__(self, width, layers, heads, mlp_ratio=4.0, ls_init_value=None, quick_gelu: bool = False):
        super().__init__()
        self.resblocks = nn.ModuleList([Block(width, heads, mlp_ratio, ls_init_value, quick_gelu)
                                        for _ in range(layers)])

    def forward(self, x, attn_mask=None, blocks=None):
        for block in self.resblocks if blocks is None else [self.resblocks[index] for index in blocks]:
            x = block(x, attn_mask=attn_mask)
        return x


class Visual(nn.Module):
    """The official VisionTransformer (no attentional pool, no patch norm), with its uncertainty branch, of the
    ``vision`` settings (:class:`~rococo_eval.models.pcmepp.PcmeppConfig`'s) into ``embed_dim``."""

    def __init__(self, vision: dict, embed_dim: int, quick_gelu: bool):
        super().__init__()
        self.settings = dict(vision)
        width, patch = vision["width"], vision["patch_size"]
        size = vision["image_size"]
        height, width_px = (size, size) if isinstance(size, int) else tuple(size)
        self.grid = (height // patch, width_px // patch)
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(width))
        self.positional_embedding = nn.Parameter(torch.zeros(self.grid[0] * self.grid[1] + 1, width))
        self.ln_pre = LayerNorm(width)
        heads = width // vision["head_width"]
        self.transformer = Transformer(width, vision["layers"], heads, vision["mlp_ratio"], vision["ls_init_value"],
                                       quick_gelu)
        self.uncertainty_transformer = Transformer(width, vision["unc_layers"], heads, vision["mlp_ratio"],
                                                   vision["ls_init_value"], quick_gelu)
        self.ln_post = LayerNorm(width)
        self.proj = nn.Parameter(torch.zeros(width, embed_dim))
        self.uncertainty_proj = nn.Parameter(torch.zeros(width, embed_dim))

    def forward(self, x):
        vision = self.settings
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        cls = self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype,
                                                             device=x.device)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x).permute(1, 0, 2)
        shared = vision["layers"] - vision["unc_layers"]
        x = self.transformer(x, blocks=range(shared))
        std = self.uncertainty_transformer(x).permute(1, 0, 2)
        mean = self.transformer(x, blocks=range(shared, vision["layers"])).permute(1, 0, 2)
        if vision["global_average_pool"]:
            pooled, pooled_std = mean.mean(dim=1), std.mean(dim=1)
        else:
            pooled, pooled_std = mean[:, 0], std[:, 0]
        return self.ln_post(pooled) @ self.proj, pooled_std @ self.uncertainty_proj


class HfPcmeppModules(nn.Module):
    """HfPCMEPPModel's modules of the ``vision`` and ``text`` settings, into ``embed_dim``; :meth:`encode_image` and
    :meth:`encode_text` return (normalised means, stds)."""

    def __init__(self, vision: dict, text: dict, embed_dim: int, quick_gelu: bool):
        super().__init__()
        self.text_settings = dict(text)
        width, length = text["width"], text["context_length"]
        self.visual = Visual(vision, embed_dim, quick_gelu)
        self.transformer = Transformer(width, text["layers"], text["heads"], 4.0, text["ls_init_value"], quick_gelu)
        self.uncertainty_transformer = Transformer(width, text["unc_layers"], text["heads"], 4.0,
                                                   text["ls_init_value"], quick_gelu)
        self.token_embedding = nn.Embedding(text["vocab_size"], width)
        self.positional_embedding = nn.Parameter(torch.zeros(length, width))
        self.ln_final = LayerNorm(width)
        self.text_projection = nn.Parameter(torch.zeros(width, embed_dim))
        self.uncertainty_text_projection = nn.Parameter(torch.zeros(width, embed_dim))
        self.register_buffer("attn_mask", torch.full((length, length), float("-inf")).triu_(1), persistent=False)
        self.logit_scale = nn.Parameter(torch.ones([]))
        self.shift = nn.Parameter(torch.ones(1))
        self.negative_scale = nn.Parameter(torch.ones(1))

    def encode_image(self, images):
        mean, std = self.visual(images)
        return F.normalize(mean, dim=-1), std

    def encode_text(self, tokens):
        text = self.text_settings
        dtype = self.transformer.resblocks[0].mlp.c_fc.weight.dtype
        x = self.token_embedding(tokens).to(dtype) + self.positional_embedding.to(dtype)
        x = x.permute(1, 0, 2)
        shared = text["layers"] - text["unc_layers"]
        x = self.transformer(x, self.attn_mask, blocks=range(shared))
        std = self.uncertainty_transformer(x, self.attn_mask).permute(1, 0, 2)
        mean = self.ln_final(self.transformer(x, self.attn_mask, blocks=range(shared, text["layers"]))
                             .permute(1, 0, 2))
        last = tokens.argmax(dim=-1)  # the end-of-text token: the highest id of each row
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        mean = mean[rows, last] @ self.text_projection
        return F.normalize(mean, dim=-1), std[rows, last] @ self.uncertainty_text_projection
