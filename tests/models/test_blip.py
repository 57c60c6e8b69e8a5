"""rococo_eval.models.blip: BLIP and BLIP-2 retrieval checkpoints (tiny real architectures with random weights, see
``helpers/tiny_models.py``) embed captions as their official evaluations do, and captions are cleaned as BLIP's
``pre_caption`` cleans them."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.data.source import RococoSource
from rococo_eval.models.adapters import load_model
from rococo_eval.models.blip import BLIP2_MAX_WORDS, BLIP_MAX_WORDS, pre_caption
from rococo_eval.models.cache import EmbeddingCache, ItemSet

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def committed_blip_text_embeddings(model, texts, blip2):
    """The BLIP and BLIP-2 adapters' ``encode_texts`` before tokenizing moved to a thread ahead of the model."""
    import torch

    ids, mask = model._tokens(model.tokenize(texts))
    with torch.inference_mode():
        if blip2:
            output = model.model.qformer(query_embeds=model.model.embeddings(input_ids=ids), query_length=0,
                                         attention_mask=mask).last_hidden_state
            return model.base.finish(model.model.text_projection(
                output[:, 0, :].to(model.model.text_projection.weight.dtype)))
        hidden = model.model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return model.base.finish(model.model.text_proj(hidden[:, 0, :]))


@pytest.mark.parametrize("which", ["blip", "blip2"])
def test_text_embeddings_through_the_tokenizing_thread_are_the_committed_ones(which, request, tmp_path):
    model = load_model(request.getfixturevalue(f"{which}_name"), device="cpu")
    texts = ["a dog on a sofa", "two horses on a beach at sunset", "a cat", "snow", "an empty street, at night"]
    cache = EmbeddingCache(tmp_path, batch_size=2, workers=2)
    vectors = cache.embeddings(model, ItemSet("captions/demo", "text", texts))
    expected = np.concatenate([committed_blip_text_embeddings(model, texts[start:start + 2], which == "blip2")
                               for start in range(0, len(texts), 2)])
    assert vectors.dtype == np.float32 and np.array_equal(vectors, expected)


def official_pre_caption(caption, max_words=50):
    """salesforce/BLIP's ``data/utils.py`` ``pre_caption``, as RoCOCO's ``eval_blip_i2t.py`` runs it."""
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption)
    caption = caption.rstrip("\n")
    caption = caption.strip(" ")
    caption_words = caption.split(" ")
    if len(caption_words) > max_words:
        caption = " ".join(caption_words[:max_words])
    return caption


@pytest.mark.parametrize("max_words", [BLIP_MAX_WORDS, BLIP2_MAX_WORDS, 3])
def test_pre_caption_is_blips_on_every_official_caption(annotations_dir, max_words):
    source = RococoSource(annotations_dir)
    captions = source.ground_truth_captions() + [caption for attack in TEXT_ATTACKS
                                                 for caption in source.adversarial_captions(attack)]
    assert len(captions) == 25010 + 4 * 25000
    assert [pre_caption(c, max_words) for c in captions] == [official_pre_caption(c, max_words) for c in captions]


@settings(max_examples=300)
@given(st.text(alphabet="aZ .!\"()*#:;~,'\t\n", max_size=40), st.integers(1, 8))
def test_pre_caption_is_blips_on_any_text(caption, max_words):
    assert pre_caption(caption, max_words) == official_pre_caption(caption, max_words)
