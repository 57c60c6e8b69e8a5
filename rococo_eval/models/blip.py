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

logger = logging.getLogger(__name__)

RERANKING_ARCHITECTURES = ("BlipForImageTextRetrieval", "Blip2ForImageTextRetrieval")
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


def is_reranking_config(config) -> bool:
    """Whether a ``transformers`` config belongs to a BLIP or BLIP-2 image-text retrieval checkpoint.

    Example:
        >>> import types
        >>> is_reranking_config(types.SimpleNamespace(architectures=["BlipForImageTextRetrieval"]))
        True
        >>> is_reranking_config(types.SimpleNamespace(architectures=["CLIPModel"]))
        False
    """
    return any(name in RERANKING_ARCHITECTURES for name in getattr(config, "architectures", None) or ())


def load_reranking_model(name: str, path: str, base):
    """Load a BLIP or BLIP-2 retrieval checkpoint from ``path`` (a Hub id or a folder).

    Args:
        name: the model name as given (``"hf:Salesforce/blip-itm-base-coco"``).
        path: what ``from_pretrained`` reads.
        base: the device, dtype and fingerprint helper of :mod:`rococo_eval.models.adapters` (its ``_TorchModel``).

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


class _Reranker:
    """What the BLIP and BLIP-2 adapters share: tokenizing, image preprocessing, the fingerprint, batching."""

    max_words = BLIP_MAX_WORDS

    def __init__(self, name: str, base, model, tokenizer, processor):
        self.base = base
        self.torch = base.torch
        self.name = name
        self.device = base.device
        self.precision = base.precision
        self.tokenizer = tokenizer
        self.processor = processor
        self.enc_token_id = self._enc_token_id(model)
        self.fingerprint = base._fingerprint(model, processor=processor.to_dict(), kind=type(model).__name__,
                                             vocabulary=sorted(tokenizer.get_vocab().items()), max_length=MAX_LENGTH,
                                             max_words=self.max_words, enc_token_id=self.enc_token_id)
        self.model = base._place(model)
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

    def image_features(self, images):
        """The vision encoder's output for ``images`` (a tensor on the model's device), for :meth:`match`."""
        with self.torch.inference_mode():
            return self._vision(np.stack([self.preprocess_image(image) for image in images]))

    def _on_device(self, vectors: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(self.device)

    def similarity(self, image_vectors: np.ndarray, text_vectors: np.ndarray) -> np.ndarray:
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
            return self.base._finish(self.model.vision_proj(self._vision(batch)[:, 0, :]))

    def encode_tokenized(self, tokens: np.ndarray) -> np.ndarray:
        """L2-normalised ``text_proj`` of the text encoder's first token (text only), float32, one row per text of
        ``tokens`` (rows of :meth:`tokenize`)."""
        ids, mask = self._tokens(tokens)
        with self.torch.inference_mode():
            hidden = self.model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
            return self.base._finish(self.model.text_proj(hidden[:, 0, :]))

    def match(self, features, image_positions, tokens: np.ndarray) -> np.ndarray:
        """ITM logits of class 1, float32: pair ``i`` is image ``features[image_positions[i]]`` with the text of
        ``tokens[i]`` (rows of :meth:`tokenize`)."""
        ids, mask = self._tokens(tokens)
        if self.enc_token_id is not None:
            ids[:, 0] = self.enc_token_id
        torch = self.torch
        with torch.inference_mode():
            image = features[torch.as_tensor(np.asarray(image_positions), device=features.device)]
            image_mask = torch.ones(image.shape[:-1], dtype=torch.long, device=image.device)
            hidden = self.model.text_encoder(input_ids=ids, attention_mask=mask, encoder_hidden_states=image,
                                             encoder_attention_mask=image_mask).last_hidden_state
            return self.model.itm_head(hidden[:, 0, :])[:, 1].float().cpu().numpy()


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
            return self.base._finish(self.model.text_projection(
                output[:, 0, :].to(self.model.text_projection.weight.dtype)))

    def similarity(self, image_vectors: np.ndarray, text_vectors: np.ndarray) -> np.ndarray:
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
        """ITM logits of class 1 averaged over the query tokens, float32, one per (image, text) pair (texts as
        rows of :meth:`tokenize`)."""
        ids, mask = self._tokens(tokens)
        torch = self.torch
        with torch.inference_mode():
            image = features[torch.as_tensor(np.asarray(image_positions), device=features.device)]
            queries, image, image_mask = self._queries(image)
            query_mask = torch.ones(queries.shape[:-1], dtype=torch.long, device=image.device)
            output = self.model.qformer(query_embeds=self.model.embeddings(input_ids=ids, query_embeds=queries),
                                        query_length=self.num_query_tokens,
                                        attention_mask=torch.cat([query_mask, mask], dim=1),
                                        encoder_hidden_states=image,
                                        encoder_attention_mask=image_mask).last_hidden_state
            logits = self.model.itm_head(output[:, :self.num_query_tokens, :].to(self.model.itm_head.weight.dtype))
            return logits[:, :, 1].float().mean(dim=1).cpu().numpy()
