"""rococo_eval.models.blip: BLIP and BLIP-2 retrieval checkpoints (tiny real architectures with random weights, see
``helpers/tiny_models.py``) embed captions as their official evaluations do, and captions are cleaned as BLIP's
``pre_caption`` cleans them."""

import numpy as np
import pytest

from rococo_eval.models.adapters import load_model
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
            return model.base._finish(model.model.text_projection(
                output[:, 0, :].to(model.model.text_projection.weight.dtype)))
        hidden = model.model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return model.base._finish(model.model.text_proj(hidden[:, 0, :]))


@pytest.mark.parametrize("which", ["blip", "blip2"])
def test_text_embeddings_through_the_tokenizing_thread_are_the_committed_ones(which, request, tmp_path):
    model = load_model(request.getfixturevalue(f"{which}_name"), device="cpu")
    texts = ["a dog on a sofa", "two horses on a beach at sunset", "a cat", "snow", "an empty street, at night"]
    cache = EmbeddingCache(tmp_path, batch_size=2, workers=2)
    vectors = cache.embeddings(model, ItemSet("captions/demo", "text", texts))
    expected = np.concatenate([committed_blip_text_embeddings(model, texts[start:start + 2], which == "blip2")
                               for start in range(0, len(texts), 2)])
    assert vectors.dtype == np.float32 and np.array_equal(vectors, expected)
