"""VSE infinity's encoders (Chen et al., "Learning the Best Pooling Strategy for Visual Semantic Embedding", CVPR
2021; the official ``lib/encoders.py`` and ``lib/modules/``), module names as the official ones, for
:mod:`rococo_eval.models.vse_infty` to assemble from a checkpoint's options and load strictly.

Example:
    >>> import torch
    >>> pool = GPO(GPO_SIZE, GPO_SIZE)
    >>> pool(torch.ones(2, 3, 4), torch.tensor([3, 2])).shape
    torch.Size([2, 4])
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rococo_eval.models.nets.resnet import ResNet

GPO_SIZE = 32  # GPO(32, 32): positional encodings and GRU width


def l2norm(x, dim, eps=1e-8):
    """lib/encoders.py l2norm."""
    norm = torch.pow(x, 2).sum(dim=dim, keepdim=True).sqrt() + eps
    return torch.div(x, norm)


def positional_encoding_1d(d_model: int, length: int):
    """lib/modules/aggr/gpo.py positional_encoding_1d: the sine and cosine encodings of ``length`` positions."""
    pe = torch.zeros(length, d_model)
    position = torch.arange(0, length).unsqueeze(1)
    div_term = torch.exp((torch.arange(0, d_model, 2, dtype=torch.float) * -(math.log(10000.0) / d_model)))
    pe[:, 0::2] = torch.sin(position.float() * div_term)
    pe[:, 1::2] = torch.cos(position.float() * div_term)
    return pe


class GPO(nn.Module):
    """lib/modules/aggr/gpo.py: the generalised pooling operator."""

    def __init__(self, d_pe, d_hidden):
        super().__init__()
        self.d_pe, self.d_hidden = d_pe, d_hidden
        self.gru = nn.GRU(d_pe, d_hidden, 1, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(d_hidden, 1, bias=False)

    def compute_pool_weights(self, lengths, features):
        max_len = int(lengths.max())
        pes = positional_encoding_1d(self.d_pe, max_len).unsqueeze(0).repeat(lengths.size(0), 1, 1)
        pes = pes.to(device=lengths.device, dtype=self.linear.weight.dtype)
        mask = torch.arange(max_len).expand(lengths.size(0), max_len).to(lengths.device)
        mask = (mask < lengths.long().unsqueeze(1)).unsqueeze(-1)
        pes = pes.masked_fill(mask == 0, 0)
        packed = pack_padded_sequence(pes, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out_emb, _ = pad_packed_sequence(out, batch_first=True)
        out_emb = (out_emb[:, :, :out_emb.size(2) // 2] + out_emb[:, :, out_emb.size(2) // 2:]) / 2
        scores = self.linear(out_emb)
        scores[torch.where(mask == 0)] = -10000
        return torch.softmax(scores / 0.1, 1), mask

    def forward(self, features, lengths):
        pool_weights, mask = self.compute_pool_weights(lengths, features)
        features = features[:, :int(lengths.max()), :]
        sorted_features = features.masked_fill(mask == 0, -10000)
        sorted_features = sorted_features.sort(dim=1, descending=True)[0]
        sorted_features = sorted_features.masked_fill(mask == 0, 0)
        return (sorted_features * pool_weights).sum(1)


class MLP(nn.Module):
    """lib/modules/mlp.py MLP: linear layers with batch norms, ReLU between them."""

    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.output_dim, self.num_layers = output_dim, num_layers
        hidden = [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + hidden, hidden + [output_dim]))
        self.bns = nn.ModuleList(nn.BatchNorm1d(k) for k in hidden + [output_dim])

    def forward(self, x):
        batch, count, width = x.size()
        x = x.reshape(batch * count, width)
        for index, (bn, layer) in enumerate(zip(self.bns, self.layers)):
            x = torch.relu(bn(layer(x))) if index < self.num_layers - 1 else layer(x)
        return x.view(batch, count, self.output_dim)


class EncoderImageAggr(nn.Module):
    """lib/encoders.py EncoderImageAggr: features of width ``img_dim`` to the joint space of ``embed_size`` (an MLP
    beside for ``regions``), GPO, then l2norm unless ``no_imgnorm``."""

    def __init__(self, img_dim: int, embed_size: int, regions: bool, no_imgnorm: bool):
        super().__init__()
        self.regions, self.no_imgnorm = regions, no_imgnorm
        self.fc = nn.Linear(img_dim, embed_size)
        if regions:
            self.mlp = MLP(img_dim, embed_size // 2, embed_size, 2)
        self.gpool = GPO(GPO_SIZE, GPO_SIZE)

    def forward(self, images, image_lengths):
        features = self.fc(images)
        if self.regions:
            features = self.mlp(images) + features
        features = self.gpool(features, image_lengths)
        return features if self.no_imgnorm else l2norm(features, dim=-1)


class ResnetFeatureExtractor(nn.Module):
    """lib/modules/resnet.py ResnetFeatureExtractor: the ResNet of ``shape``
    (:class:`~rococo_eval.models.resnet.ResnetShape`), its stages 1-3 (``base``) and 4 (``top``)."""

    def __init__(self, shape):
        super().__init__()
        self.resnet = ResNet(shape)
        self.base = nn.Sequential(self.resnet.conv1, self.resnet.bn1, self.resnet.relu, self.resnet.maxpool,
                                  self.resnet.layer1, self.resnet.layer2, self.resnet.layer3)
        self.top = nn.Sequential(self.resnet.layer4)

    def forward(self, im_data):
        top_feat = self.top(self.base(im_data))
        return top_feat.view(im_data.size(0), top_feat.size(1), -1).permute(0, 2, 1)


class EncoderImageFull(nn.Module):
    """lib/encoders.py EncoderImageFull in eval mode: the backbone's grid (a ResNet of ``shape``), every cell kept,
    pooled by an :class:`EncoderImageAggr`."""

    def __init__(self, shape, img_dim: int, embed_size: int, no_imgnorm: bool):
        super().__init__()
        self.backbone = ResnetFeatureExtractor(shape)
        self.image_encoder = EncoderImageAggr(img_dim, embed_size, False, no_imgnorm)

    def forward(self, images):
        base_features = self.backbone(images)
        feat_lengths = torch.zeros(base_features.size(0)).to(base_features.device)
        feat_lengths[:] = base_features.size(1)
        return self.image_encoder(base_features, feat_lengths)


class EncoderText(nn.Module):
    """lib/encoders.py EncoderText: BERT of ``bert_config`` (a ``transformers.BertConfig``), a linear layer to
    ``embed_size``, GPO over the tokens, then l2norm unless ``no_txtnorm``."""

    def __init__(self, bert_config, embed_size: int, no_txtnorm: bool):
        import transformers

        super().__init__()
        self.no_txtnorm = no_txtnorm
        self.bert = transformers.BertModel(bert_config)
        self.linear = nn.Linear(self.bert.config.hidden_size, embed_size)
        self.gpool = GPO(GPO_SIZE, GPO_SIZE)

    def forward(self, x, lengths):
        bert_attention_mask = (x != 0).float()
        bert_emb = self.bert(input_ids=x, attention_mask=bert_attention_mask)[0]
        pooled = self.gpool(self.linear(bert_emb), lengths.to(bert_emb.device))
        return pooled if self.no_txtnorm else l2norm(pooled, dim=-1)
