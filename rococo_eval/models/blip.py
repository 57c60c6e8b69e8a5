"""Re-ranking image-text models: BLIP and BLIP-2 retrieval checkpoints of ``transformers``, as their official
evaluations score them.

BLIP (``BlipForImageTextRetrieval``, e.g. ``hf:Salesforce/blip-itm-base-coco``) and BLIP-2
(``Blip2ForImageTextRetrieval``, e.g. ``hf:Salesforce/blip2-itm-vit-g``) are not dual encoders: their
evaluation ranks the whole gallery by a contrastive (ITC) similarity, then re-scores each query's top
candidates with an image-text matching (ITM) head that reads the image and the caption together
(:mod:`rococo_eval.scoring.rerank` does that part). This module gives each model the three pieces:

- ``encode_images`` (``preprocess_image`` then ``encode_preprocessed``) / ``encode_texts``: L2-normalised ITC
  embeddings, exactly as BLIP's ``evaluation()``
  (salesforce/BLIP ``train_retrieval.py``, copied by RoCOCO's ``eval_blip_i2t.py``) makes them:
  ``vision_proj(image_embeds[:, 0])`` and ``text_proj`` of the text encoder's first token without the image;
  for BLIP-2 as LAVIS's ``compute_sim_matrix`` does: the Q-Former's query outputs projected (one vector per
  query token, flattened into one row) and the text's first token projected.
- ``similarity``: ITC scores of image rows against text rows: the dot product (BLIP), the maximum over the
  query tokens (BLIP-2).
- ``tokenize``, ``image_features`` / ``match``: captions as token rows (once per caption set), the vision
  encoder's output for a batch of images, then the ITM logit of class 1 (``itm_head(...)[:, 1]``, BLIP; the mean
  over the query tokens, BLIP-2) for (image, caption) pairs.

ITM with the image side computed once: in every layer with cross-attention, a caption's tokens attend to the
image's tokens, projected to keys and values; that projection is the same for every caption the image is paired
with, and it is most of a pair's work (BLIP-base: 577 image tokens against 35 caption tokens). :meth:`match`
therefore runs the text encoder (BLIP) or the Q-Former (BLIP-2) layer by layer with the loaded weights, projects
each image of a call once per layer, lets the query tokens of all of the image's pairs attend to those keys and
values in one ``torch.nn.functional.scaled_dot_product_attention`` call (without copying them per pair: a copy
per pair took longer than the attention itself), and masks padding as ``transformers`` does (BLIP: its additive
``finfo.min`` mask; BLIP-2: its boolean mask). :class:`ImageFeatures` keeps the keys and values of a call's
last image for the next call, so pairs sorted by image (as :class:`~rococo_eval.scoring.rerank.Reranker` sends
them) project each image once per group of pairs. Scores equal ``transformers``' own forward within rounding
(``tests/models/test_blip_itm.py``); ``reuse_image_keys_values = False`` runs that forward instead.

Captions go through BLIP's ``pre_caption`` (lower case, ``.!"()*#:;~`` to spaces, at most 30 words for BLIP as
the retrieval dataset does, LAVIS's default of 50 for BLIP-2), then the tokenizer with
``padding="max_length", max_length=35``. For BLIP's ITM pass the first token is replaced by ``[ENC]``
(``text_ids[:, 0] = tokenizer.enc_token_id`` in the official code; ``transformers``' own forward keeps
``[CLS]``): the tokenizer's ``[ENC]`` when it has one, else the id BLIP's tokenizer gives it (added right after
``[DEC]``, the last row of the text embeddings). Images go through the checkpoint's image processor (BLIP:
384 x 384 bicubic, CLIP's mean and std, as the official test transform).

Example:
    >>> pre_caption("A man riding a wave on top of a surfboard.", max_words=30)
    'a man riding a wave on top of a surfboard'
"""

from __future__ import annotations

import logging
import re
from typing import Sequence

import numpy as np

from rococo_eval.models.similarity import COSINE

logger = logging.getLogger(__name__)

MAX_LENGTH = 35  # tokens, as both official evaluations tokenize the captions
BLIP_MAX_WORDS = 30  # salesforce/BLIP's coco_karpathy_retrieval_eval (and RoCOCO's copy of it)
BLIP2_MAX_WORDS = 50  # LAVIS's BlipCaptionProcessor default
_PUNCTUATION = re.compile(r"([.!\"()*#:;~])")
_SPACES = re.compile(r"\s{2,}")


def pre_caption(caption: str, max_words: int) -> str:
    """BLIP's caption cleaning: lower case, ``.!"()*#:;~`` to spaces, runs of spaces to one, at most ``max_words``.

    Example:
        >>> pre_caption('Two dogs;  "playing" in the  snow!', max_words=4)
        'two dogs playing in'
    """
    caption = _SPACES.sub(" ", _PUNCTUATION.sub(" ", caption.lower())).rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else caption


def load_reranking_model(name: str, path: str, base):
    """Load a BLIP or BLIP-2 retrieval checkpoint from ``path`` (a Hub id or a folder).

    Args:
        name: the model name as given (``"hf:Salesforce/blip-itm-base-coco"``).
        path: what ``from_pretrained`` reads.
        base: the device, dtype and fingerprint helper of :mod:`rococo_eval.models.adapters` (its ``TorchModel``).

    Raises:
        OSError, ValueError: as ``transformers`` raises them for a checkpoint it cannot load.
    """
    transformers = __import__("transformers")
    config = transformers.AutoConfig.from_pretrained(path)
    blip2 = "Blip2ForImageTextRetrieval" in (config.architectures or ())
    model_class = transformers.Blip2ForImageTextRetrieval if blip2 else transformers.BlipForImageTextRetrieval
    model = model_class.from_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    processor = transformers.AutoImageProcessor.from_pretrained(path)
    return (Blip2Reranker if blip2 else BlipReranker)(name, base, model, tokenizer, processor)


class ImageFeatures:
    """The vision encoder's output for a group of images (``hidden``: images x tokens x width), as
    :meth:`BlipReranker.image_features` gives it to :meth:`~BlipReranker.match`.

    It also holds the cross-attention keys and values of one image: the image of highest position in the last
    :meth:`~BlipReranker.match` call, whose pairs may go on in the next call when pairs come sorted by image.
    Holding them is an optimisation only: any order of pairs gives the same scores.

    Example:
        >>> import torch
        >>> features = ImageFeatures(torch.zeros(2, 577, 768))
        >>> len(features), features.held_position
        (2, None)
    """

    def __init__(self, hidden):
        self.hidden = hidden
        self.held_position: int | None = None
        self.held: dict[int, tuple] = {}  # layer number -> (keys, values) of the held image, (heads, tokens, head)

    def __len__(self):
        return len(self.hidden)


class _ImageKeysValues:
    """Cross-attention to the images of one :meth:`~BlipReranker.match` call, layer by layer: each image projected
    to keys and values once per layer (not at all for the image that ``features`` holds), then the query tokens of
    all of its pairs attend to them in one ``scaled_dot_product_attention`` call (a query token's attention does
    not depend on the other query rows, so the pairs' rows go in as one sequence, and the keys and values are
    neither recomputed nor copied per pair). :meth:`hold` leaves the call's last image in ``features``."""

    def __init__(self, features: ImageFeatures, positions, dtype):
        import torch

        self.features = features
        images, pairs, counts = torch.unique(positions, return_inverse=True, return_counts=True)  # sorted images
        self.images, self.counts = images, counts.tolist()
        self.order = None if bool((pairs[1:] >= pairs[:-1]).all()) else torch.argsort(pairs, stable=True)
        self.restore = None if self.order is None else torch.argsort(self.order)
        reused = images == features.held_position if features.held_position is not None else None
        self.reused_at = int(reused.nonzero()[0, 0]) if reused is not None and bool(reused.any()) else None
        fresh = images if self.reused_at is None else images[~reused]
        self.fresh = features.hidden[fresh].to(dtype) if len(fresh) else None
        self.held: dict[int, tuple] = {}

    def attend(self, layer: int, attention, rows, scale=None):
        """The context (pairs x tokens x width) of cross-attention ``attention`` of layer ``layer`` (with ``query``,
        ``key``, ``value`` and ``attention_head_size``) for the pairs' ``rows`` (pairs x tokens x width)."""
        import torch
        from torch.nn import functional

        head = attention.attention_head_size
        keys, values = self._keys_values(layer, attention)
        queries = attention.query(rows)
        if self.order is not None:  # the pairs of an image together
            queries = queries[self.order]
        pairs, tokens, width = queries.shape
        contexts, first = [], 0
        for image, count in enumerate(self.counts):
            run = queries[first:first + count].reshape(1, count * tokens, width // head, head).transpose(1, 2)
            context = functional.scaled_dot_product_attention(run, keys[image:image + 1], values[image:image + 1],
                                                              scale=scale)
            contexts.append(context.transpose(1, 2).reshape(count, tokens, width))
            first += count
        context = torch.cat(contexts) if len(contexts) > 1 else contexts[0]
        return context if self.restore is None else context[self.restore]

    def _keys_values(self, layer: int, attention):
        """Keys and values (images x heads x image tokens x head size) of the call's images, in ``images`` order."""
        import torch

        projected = [None if self.fresh is None else _heads(projection(self.fresh), attention.attention_head_size)
                     for projection in (attention.key, attention.value)]
        if self.reused_at is not None:
            at = self.reused_at
            projected = [held[None] if states is None else torch.cat([states[:at], held[None], states[at:]])
                         for states, held in zip(projected, self.features.held[layer])]
        keys, values = projected
        self.held[layer] = (keys[-1].clone(), values[-1].clone())
        return keys, values

    def hold(self) -> None:
        """Leave the keys and values of this call's last image in ``features``, for the next call."""
        self.features.held_position, self.features.held = int(self.images[-1]), self.held


def _heads(states, head_size: int):
    """(batch, tokens, width) as (batch, heads, tokens, head size), as ``transformers``' attention views it."""
    return states.view(*states.shape[:-1], -1, head_size).transpose(1, 2)


def _attend(attention, rows, keys, values, mask=None, scale=None):
    """The context of ``attention``'s query of ``rows`` (batch x tokens x width) against ``keys`` and ``values``
    (batch x heads x tokens x head size), by ``scaled_dot_product_attention``; batch x tokens x width."""
    from torch.nn import functional

    queries = _heads(attention.query(rows), attention.attention_head_size)
    context = functional.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=scale)
    return context.transpose(1, 2).flatten(2)


def _self_keys_values(attention, states):
    """Self-attention ``attention``'s keys and values of ``states`` (batch x tokens x width), per head."""
    return (_heads(attention.key(states), attention.attention_head_size),
            _heads(attention.value(states), attention.attention_head_size))


class _Reranker:
    """What the BLIP and BLIP-2 adapters share: tokenizing, image preprocessing, the fingerprint, batching.

    Attributes:
        reuse_image_keys_values: :meth:`match` projects each image's tokens to cross-attention keys and values
            once for all of its pairs (the default); ``False`` runs ``transformers``' own forward for every pair.
    """

    max_words = BLIP_MAX_WORDS
    reuse_image_keys_values = True
    similarity = COSINE  # the ITC rows are normalised; itc_scores scores them (the first stage)

    def __init__(self, name: str, base, model, tokenizer, processor):
        self.base = base
        self.torch = base.torch
        self.name = name
        self.device = base.device
        self.precision = base.precision
        self.tokenizer = tokenizer
        self.processor = processor
        self.enc_token_id = self._enc_token_id(model)
        self.fingerprint = base.weights_fingerprint(model, processor=processor.to_dict(), kind=type(model).__name__,
                                             vocabulary=sorted(tokenizer.get_vocab().items()), max_length=MAX_LENGTH,
                                             max_words=self.max_words, enc_token_id=self.enc_token_id)
        self.model = base.place(model)
        logger.info("loaded %s (%s, two-stage scoring) on %s (%s)", name, type(model).__name__, self.device,
                    self.precision)

    def _enc_token_id(self, model):
        return None

    def tokenize(self, texts: Sequence[str]) -> np.ndarray:
        """Token ids and attention masks of ``texts`` after :func:`pre_caption`: int64 ``(texts, 2, 35)``."""
        batch = self.tokenizer([pre_caption(text, self.max_words) for text in texts], padding="max_length",
                               truncation=True, max_length=MAX_LENGTH, return_tensors="np")
        return np.stack([batch["input_ids"], batch["attention_mask"]], axis=1).astype(np.int64)

    def tokenize_texts(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`tokenize`, run by the embedding loop in a thread ahead of :meth:`encode_tokenized`."""
        return self.tokenize(texts)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised text embeddings (ITC), float32, one row per text: :meth:`encode_tokenized` of
        :meth:`tokenize`."""
        return self.encode_tokenized(self.tokenize(texts))

    def _tokens(self, tokens: np.ndarray):
        tokens = self.torch.from_numpy(np.ascontiguousarray(tokens)).to(self.device)
        return tokens[:, 0], tokens[:, 1]

    def preprocess_image(self, image) -> np.ndarray:
        """The image processor's ``pixel_values`` of one image (float32, ``(3, H, W)``); thread-safe, so the
        embedding loop runs it in its workers."""
        return np.asarray(self.processor(images=[image.convert("RGB")], return_tensors="np")["pixel_values"][0],
                          dtype=np.float32)

    def encode_images(self, images) -> np.ndarray:
        """:meth:`encode_preprocessed` of the images' :meth:`preprocess_image` outputs."""
        return self.encode_preprocessed(np.stack([self.preprocess_image(image) for image in images]))

    def _vision(self, batch: np.ndarray):
        pixels = self.torch.from_numpy(batch).to(device=self.device, dtype=self.base.dtype)
        return self.model.vision_model(pixel_values=pixels).last_hidden_state

    def image_features(self, images) -> ImageFeatures:
        """The vision encoder's output for ``images`` (on the model's device), for :meth:`match`."""
        with self.torch.inference_mode():
            return ImageFeatures(self._vision(np.stack([self.preprocess_image(image) for image in images])))

    def _pairs(self, features, image_positions):
        """``features`` as :class:`ImageFeatures`, and the image positions of the pairs as a tensor beside them."""
        features = features if isinstance(features, ImageFeatures) else ImageFeatures(features)
        return features, self.torch.as_tensor(np.asarray(image_positions), device=features.hidden.device)

    def _on_device(self, vectors: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(self.device)

    def itc_scores(self, image_vectors: np.ndarray, text_vectors: np.ndarray) -> np.ndarray:
        """ITC scores, float32 (images x texts), of rows of :meth:`encode_images` and :meth:`encode_texts`,
        computed in float32 on the model's device."""
        with self.torch.inference_mode():
            return (self._on_device(image_vectors) @ self._on_device(text_vectors).T).cpu().numpy()


class BlipReranker(_Reranker):
    """A ``BlipForImageTextRetrieval`` checkpoint, scored as BLIP's ``evaluation()`` does."""

    def _enc_token_id(self, model):
        vocabulary = self.tokenizer.get_vocab()
        if "[ENC]" in vocabulary:
            return int(vocabulary["[ENC]"])
        bos = self.tokenizer.bos_token_id
        if self.tokenizer.bos_token == "[DEC]" and model.config.text_config.vocab_size == bos + 2:
            return bos + 1  # BLIP's tokenizer adds [DEC], then [ENC]: the last row of the text embeddings
        logger.warning("%s: the tokenizer has no [ENC] token; the ITM pass keeps the first token as the official "
                       "evaluation does not", self.name)
        return None

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """L2-normalised ``vision_proj`` of the first image token, float32, one row per image of ``batch``."""
        with self.torch.inference_mode():
            return self.base.finish(self.model.vision_proj(self._vision(batch)[:, 0, :]))

    def encode_tokenized(self, tokens: np.ndarray) -> np.ndarray:
        """L2-normalised ``text_proj`` of the text encoder's first token (text only), float32, one row per text of
        ``tokens`` (rows of :meth:`tokenize`)."""
        ids, mask = self._tokens(tokens)
        with self.torch.inference_mode():
            hidden = self.model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
            return self.base.finish(self.model.text_proj(hidden[:, 0, :]))

    def match(self, features, image_positions, tokens: np.ndarray) -> np.ndarray:
        """ITM logits of class 1, float32: pair ``i`` is image ``features[image_positions[i]]`` (an
        :class:`ImageFeatures` or the vision encoder's output) with the text of ``tokens[i]`` (rows of
        :meth:`tokenize`)."""
        ids, mask = self._tokens(tokens)
        if self.enc_token_id is not None:
            ids[:, 0] = self.enc_token_id
        features, positions = self._pairs(features, image_positions)
        with self.torch.inference_mode():
            if self.reuse_image_keys_values:
                first = self._first_token(_ImageKeysValues(features, positions, features.hidden.dtype), ids, mask)
            else:
                first = self._first_token_plain(features.hidden[positions], ids, mask)
            return self.model.itm_head(first)[:, 1].float().cpu().numpy()

    def _first_token_plain(self, image, ids, mask):
        """The text encoder's output at the first token, cross-attending to ``image`` (pairs x tokens x width):
        ``transformers``' own forward."""
        image_mask = self.torch.ones(image.shape[:-1], dtype=self.torch.long, device=image.device)
        return self.model.text_encoder(input_ids=ids, attention_mask=mask, encoder_hidden_states=image,
                                       encoder_attention_mask=image_mask).last_hidden_state[:, 0, :]

    def _first_token(self, image: _ImageKeysValues, ids, mask):
        """What :meth:`_first_token_plain` gives, layer by layer with the image's keys and values computed once.

        Each layer of ``transformers``' ``BlipTextLayer`` (in eval mode: no dropout): self-attention over the
        caption, padding masked with ``finfo.min`` added to the scores as ``transformers`` adds it; dense, residual
        and LayerNorm; the same with cross-attention to the image; the feed-forward block. The last layer computes
        only the first token, the one the ITM head reads.
        """
        encoder = self.model.text_encoder
        states = encoder.embeddings(input_ids=ids)
        padding = (1.0 - mask[:, None, None, :].to(states.dtype)) * self.torch.finfo(states.dtype).min
        layers = encoder.encoder.layer
        for number, layer in enumerate(layers):
            rows = states[:, :1] if number == len(layers) - 1 else states
            rows = layer.attention.output(_attend(layer.attention.self, rows,
                                                  *_self_keys_values(layer.attention.self, states), mask=padding),
                                          rows)
            cross = layer.crossattention.self
            rows = layer.crossattention.output(image.attend(number, cross, rows), rows)
            states = layer.output(layer.intermediate(rows), rows)
        image.hold()
        return states[:, 0, :]


class Blip2Reranker(_Reranker):
    """A ``Blip2ForImageTextRetrieval`` checkpoint, scored as LAVIS's BLIP-2 ``compute_sim_matrix`` does.

    The Q-Former and the query tokens stay in float32 at every precision, as ``transformers`` keeps them.
    """

    max_words = BLIP2_MAX_WORDS

    def __init__(self, name: str, base, model, tokenizer, processor):
        super().__init__(name, base, model, tokenizer, processor)
        self.model.qformer.float()
        self.model.query_tokens.data = self.model.query_tokens.data.float()
        self.num_query_tokens = self.model.query_tokens.shape[1]

    def _queries(self, features):
        torch = self.torch
        queries = self.model.query_tokens.expand(features.shape[0], -1, -1)
        mask = torch.ones(features.shape[:-1], dtype=torch.long, device=features.device)
        return queries, features.float(), mask

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """L2-normalised projections of the Q-Former's query outputs, float32, one row of (queries x width)
        per image of ``batch``."""
        with self.torch.inference_mode():
            queries, features, mask = self._queries(self._vision(batch))
            output = self.model.qformer(query_embeds=queries, encoder_hidden_states=features,
                                        encoder_attention_mask=mask).last_hidden_state
            projected = self.model.vision_projection(output.to(self.model.vision_projection.weight.dtype)).float()
            projected = projected / projected.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            return projected.reshape(len(projected), -1).cpu().numpy()

    def encode_tokenized(self, tokens: np.ndarray) -> np.ndarray:
        """L2-normalised ``text_projection`` of the Q-Former's first text token, float32, one row per text of
        ``tokens`` (rows of :meth:`tokenize`)."""
        ids, mask = self._tokens(tokens)
        with self.torch.inference_mode():
            output = self.model.qformer(query_embeds=self.model.embeddings(input_ids=ids), query_length=0,
                                        attention_mask=mask).last_hidden_state
            return self.base.finish(self.model.text_projection(
                output[:, 0, :].to(self.model.text_projection.weight.dtype)))

    def itc_scores(self, image_vectors: np.ndarray, text_vectors: np.ndarray) -> np.ndarray:
        """ITC scores, float32 (images x texts): for each pair, the best of the image's query tokens, computed on
        the model's device."""
        torch = self.torch
        with torch.inference_mode():
            texts = self._on_device(text_vectors).T
            queries = self._on_device(image_vectors).reshape(len(image_vectors), -1, texts.shape[0])
            scores = queries[:, 0] @ texts
            for token in range(1, queries.shape[1]):
                torch.maximum(scores, queries[:, token] @ texts, out=scores)
            return scores.cpu().numpy()

    def match(self, features, image_positions, tokens: np.ndarray) -> np.ndarray:
        """ITM logits of class 1 averaged over the query tokens, float32, one per (image, text) pair: pair ``i`` is
        image ``features[image_positions[i]]`` (an :class:`ImageFeatures` or the vision encoder's output) with the
        text of ``tokens[i]`` (rows of :meth:`tokenize`)."""
        ids, mask = self._tokens(tokens)
        features, positions = self._pairs(features, image_positions)
        torch = self.torch
        with torch.inference_mode():
            queries = self.model.query_tokens.expand(len(ids), -1, -1)
            embeddings = self.model.embeddings(input_ids=ids, query_embeds=queries)
            mask = torch.cat([torch.ones(queries.shape[:-1], dtype=mask.dtype, device=mask.device), mask], dim=1)
            if self.reuse_image_keys_values:
                image = _ImageKeysValues(features, positions, self.model.qformer.layernorm.weight.dtype)
                output = self._query_outputs(image, embeddings, mask)
            else:
                output = self._query_outputs_plain(features.hidden[positions], embeddings, mask)
            logits = self.model.itm_head(output.to(self.model.itm_head.weight.dtype))
            return logits[:, :, 1].float().mean(dim=1).cpu().numpy()

    def _query_outputs_plain(self, image, embeddings, mask):
        """The Q-Former's output at the query tokens for the query and text ``embeddings``, cross-attending to
        ``image`` (pairs x tokens x width): ``transformers``' own forward."""
        image_mask = self.torch.ones(image.shape[:-1], dtype=self.torch.long, device=image.device)
        return self.model.qformer(query_embeds=embeddings, query_length=self.num_query_tokens, attention_mask=mask,
                                  encoder_hidden_states=image.float(), encoder_attention_mask=image_mask
                                  ).last_hidden_state[:, :self.num_query_tokens, :]

    def _query_outputs(self, image: _ImageKeysValues, embeddings, mask):
        """What :meth:`_query_outputs_plain` gives, layer by layer with the image's keys and values computed once.

        Each layer of ``transformers``' ``Blip2QFormerLayer`` (in eval mode: no dropout): self-attention over the
        query and text tokens, padding masked by a boolean mask as ``transformers``' SDPA path masks it; dense,
        residual and LayerNorm; in the layers that have it, cross-attention of the query tokens to the image; the
        query tokens' and the text tokens' own feed-forward blocks. The last layer computes only the query tokens,
        the ones the ITM head reads.
        """
        qformer, count = self.model.qformer, self.num_query_tokens
        states = qformer.layernorm(embeddings.to(qformer.layernorm.weight.dtype))
        allowed = mask.bool()[:, None, None, :]
        layers = qformer.encoder.layer
        for number, layer in enumerate(layers):
            last = number == len(layers) - 1
            attention = layer.attention.attention
            rows = states[:, :count] if last else states
            rows = layer.attention.output(_attend(attention, rows, *_self_keys_values(attention, states), mask=allowed,
                                                  scale=attention.scaling), rows)
            queries = rows[:, :count]
            if layer.has_cross_attention:
                cross = layer.crossattention.attention
                queries = layer.crossattention.output(image.attend(number, cross, queries, scale=cross.scaling),
                                                      queries)
            queries = layer.output_query(layer.intermediate_query(queries), queries)
            if last:
                states = queries
            else:
                text = rows[:, count:]
                states = self.torch.cat([queries, layer.output(layer.intermediate(text), text)], dim=1)
        image.hold()
        return states
