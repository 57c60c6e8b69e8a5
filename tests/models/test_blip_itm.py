"""BLIP's and BLIP-2's ITM with each image's cross-attention keys and values computed once
(:mod:`rococo_eval.models.blip`), against ``transformers``' own forward.

The models are tiny real ``transformers`` architectures with random weights, built here from configs: BLIP with a
two-layer text encoder, BLIP-2 with a three-layer Q-Former that cross-attends in layers 0 and 2 only, so that
the first, middle and last layers all run. The weights are spread wider than the default initialisation (as
``tests/helpers/tiny_models.py`` spreads them), so that images and captions give different scores.

Tolerances (the ITM logits here lie between -3.9 and 2.1):
- fp32: within 1e-5 absolute of ``transformers``' forward. Measured with torch 2.13 and transformers 5.24: at most
  1.6e-6 for BLIP (SDPA against the eager attention), 0 for BLIP-2 (whose Q-Former already runs SDPA).
- bf16 against ``transformers``' fp32 forward: as close as ``transformers``' own bf16 forward is (bounds in the
  test). Measured: BLIP at most 0.37 (mean 0.050) against 0.28 (0.043) for ``transformers`` in bf16; BLIP-2 (its
  Q-Former stays in fp32) 0.12 (0.040) against 0.13 (0.041). The wide weights make bf16 coarse on these models.
"""

import numpy as np
import pytest
from PIL import Image

from helpers.metric_cases import outputs
from helpers.tiny_coco import TinyCocoSource
from helpers.tiny_models import make_tiny_blip
from rococo_eval.catalog import TEXT_TO_IMAGE
from rococo_eval.models import adapters
from rococo_eval.models.blip import Blip2Reranker, ImageFeatures
from rococo_eval.models.cache import EmbeddingCache
from rococo_eval.scoring.galleries import RerankScorer, ground_truth_captions, original_images, score_model
from rococo_eval.scoring.rerank import FILL, Reranker, Side

# 3 to 32 tokens (BLIP keeps 30 words) or 35 (BLIP-2), so each caption has its own padding
CAPTIONS = ["A dog.", "a man riding a horse on the beach", "Two cats sitting on a red table in the street with a kite",
            "pizza", " ".join(["a blue bus"] * 14), "the woman and the dog"]
# (image, caption) pairs: image 0 with every caption, captions 1 and 5 with several images, image 3 with one.
PAIRS = [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 1), (1, 5), (2, 1), (2, 4), (2, 5), (3, 2), (1, 0)]
FP32_TOLERANCE = 1e-5
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_images(count, seed=0):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)).resize((40, 30)) for _ in range(count)]


@pytest.fixture(scope="module", params=["blip", "blip2"])
def name(request, tmp_path_factory):
    """BLIP with a two-layer text encoder; BLIP-2 with a three-layer Q-Former cross-attending in layers 0 and 2."""
    blip2 = request.param == "blip2"
    return make_tiny_blip(tmp_path_factory.mktemp(request.param), blip2=blip2, text_layers=3 if blip2 else 2,
                          cross_attention_frequency=2)


def load(name, precision="fp32", reuse=True):
    model = adapters.load_model(name, device="cpu", precision=precision)
    model.reuse_image_keys_values = reuse
    return model


def transformers_itm(model, images, captions) -> np.ndarray:
    """ITM logit of class 1 of each (images[i], captions[i]) from the checkpoint's own ``forward`` (BLIP: the first
    token replaced by [ENC] as the official evaluation and the adapter do)."""
    import torch

    tokens = model.tokenize(captions)
    ids, mask = torch.from_numpy(tokens[:, 0]), torch.from_numpy(tokens[:, 1])
    pixels = torch.from_numpy(np.stack([model.preprocess_image(image) for image in images])).to(model.base.dtype)
    with torch.inference_mode():
        if isinstance(model, Blip2Reranker):
            output = model.model(pixel_values=pixels, input_ids=ids, attention_mask=mask,
                                 use_image_text_matching_head=True).logits_per_image
        else:
            ids[:, 0] = model.enc_token_id
            output = model.model(input_ids=ids, pixel_values=pixels, attention_mask=mask, use_itm_head=True).itm_score
    return output[:, 1].float().numpy()


def matched(model, images, pairs, batch_size):
    """``model.match`` of ``pairs`` (image, caption) in calls of ``batch_size`` pairs, as the Reranker makes them."""
    tokens = model.tokenize(CAPTIONS)
    features = model.image_features(images)
    positions, captions = np.array(pairs).T
    return np.concatenate([model.match(features, positions[start:start + batch_size],
                                       tokens[captions[start:start + batch_size]])
                           for start in range(0, len(pairs), batch_size)])


@pytest.fixture(scope="module")
def expected(name):
    """``transformers``' forward on every pair, in fp32."""
    images = make_images(4)
    return transformers_itm(load(name), [images[i] for i, _ in PAIRS], [CAPTIONS[c] for _, c in PAIRS])


def test_padding_differs_between_the_captions(name):
    lengths = load(name).tokenize(CAPTIONS)[:, 1].sum(axis=1)
    assert len(set(lengths.tolist())) == len(CAPTIONS) and lengths.min() == 3 and lengths.max() >= 32


@pytest.mark.parametrize("order", ["sorted", "as_given"])
@pytest.mark.parametrize("batch_size", [1, 4, len(PAIRS)])
def test_scores_equal_the_transformers_forward_in_fp32(name, expected, order, batch_size):
    """Images with several captions, captions with several images, calls that split an image's pairs, unsorted pairs;
    the plain path is ``transformers``' forward on the same batches."""
    pairs = sorted(PAIRS) if order == "sorted" else PAIRS
    reference = expected[[PAIRS.index(pair) for pair in pairs]]
    images = make_images(4)
    for reuse in (True, False):
        scores = matched(load(name, reuse=reuse), images, pairs, batch_size)
        assert scores.dtype == np.float32 and scores.shape == (len(pairs),)
        np.testing.assert_allclose(scores, reference, rtol=0, atol=FP32_TOLERANCE, err_msg=f"reuse={reuse}")
    assert np.ptp(reference) > 1  # the pairs' scores differ: a wrong pairing would show


def test_bf16_is_as_close_to_fp32_as_the_transformers_forward_in_bf16(name):
    """Every image with every caption: the bf16 scores' distance to ``transformers``' fp32 forward is within 1.5x
    (largest) and 1.25x (mean) of the distance of ``transformers``' own bf16 forward, and no image's best caption
    changes."""
    images = make_images(4)
    pairs = [(image, caption) for image in range(4) for caption in range(len(CAPTIONS))]
    pair_images, pair_captions = [images[i] for i, _ in pairs], [CAPTIONS[c] for _, c in pairs]
    fp32 = transformers_itm(load(name), pair_images, pair_captions)
    own_error = np.abs(transformers_itm(load(name, "bf16"), pair_images, pair_captions) - fp32)
    scores = matched(load(name, "bf16"), images, pairs, batch_size=5)
    error = np.abs(scores - fp32)
    assert error.max() <= 1.5 * own_error.max() and error.mean() <= 1.25 * own_error.mean(), (error, own_error)
    assert np.array_equal(scores.reshape(4, -1).argmax(axis=1), fp32.reshape(4, -1).argmax(axis=1))


def test_each_image_is_projected_once_per_layer(name):
    """Pairs sorted by image, in calls that split image 0's pairs: each cross-attention layer projects each image
    to keys (and to values) once, the held image included, and the plain path once per pair."""
    images = make_images(4)
    pairs = sorted(PAIRS)
    for reuse, projected in ((True, len(images)), (False, len(pairs))):
        model = load(name, reuse=reuse)
        counts = count_projections(model)
        matched(model, images, pairs, batch_size=4)
        assert counts and counts == [[projected, projected]] * len(counts), reuse


def count_projections(model) -> list:
    """Hook every cross-attention's key and value projections: ``[keys, values]`` images projected, per layer."""
    counts = []
    for attention in _cross_attentions(model):
        counts.append([0, 0])
        for index, projection in enumerate((attention.key, attention.value)):
            projection.register_forward_hook(lambda module, inputs, output, count=counts[-1], index=index:
                                             count.__setitem__(index, count[index] + len(inputs[0])))
    return counts


def _cross_attentions(model):
    if isinstance(model, Blip2Reranker):
        return [layer.crossattention.attention for layer in model.model.qformer.encoder.layer
                if layer.has_cross_attention]
    return [layer.crossattention.self for layer in model.model.text_encoder.encoder.layer]


def test_held_keys_serve_the_next_call_only_for_their_image(name, expected):
    """The image that one call leaves held is used again only by a call that has it; others project their own."""
    model = load(name)
    tokens = model.tokenize(CAPTIONS)
    features = model.image_features(make_images(4))
    for image, caption in [(0, 1), (0, 2), (2, 1), (0, 5), (0, 5)]:
        score = model.match(features, [image], tokens[[caption]])
        assert features.held_position == image
        np.testing.assert_allclose(score, expected[[PAIRS.index((image, caption))]], rtol=0, atol=FP32_TOLERANCE)


def test_match_takes_the_vision_output_itself(name, expected):
    model = load(name)
    features = model.image_features(make_images(4))
    assert isinstance(features, ImageFeatures) and len(features) == 4
    scores = model.match(features.hidden, [1, 2], model.tokenize([CAPTIONS[5], CAPTIONS[4]]))
    np.testing.assert_allclose(scores, expected[[PAIRS.index((1, 5)), PAIRS.index((2, 4))]], rtol=0,
                               atol=FP32_TOLERANCE)


def test_recalls_are_those_of_the_transformers_forward(name, tmp_path):
    """Both clean galleries and rand_voca's, re-ranked at k = 8 in groups that split images' pairs: every result
    (recalls, false rates, per-query ranks and top-1 items) is identical; the scores (the matrices and the
    per-query scores of the top-1 and the best correct item) agree within the fp32 tolerance."""
    source = TinyCocoSource(tmp_path / "coco", num_images=10)
    results, matrices = {}, {}
    for reuse in (True, False):
        cache = EmbeddingCache(tmp_path / f"cache-{reuse}", batch_size=16)
        saved = tmp_path / f"scores-{reuse}"
        saved.mkdir()
        model = load(name, reuse=reuse)
        results[reuse] = score_model(model, source, ["rand_voca"], cache, save_scores=saved,
                                     scorer=RerankScorer(Reranker(model, cache.root, k=8, batch_size=6)))
        matrices[reuse] = {path.name: np.load(path) for path in saved.iterdir()}
    assert set(results[True]) == {"clean/image_to_text", "clean/text_to_image", "rand_voca/image_to_text"}
    for key, result in results[False].items():
        output, reused = outputs(result), outputs(results[True][key])
        assert set(reused) == set(output)
        for metric, value in output.items():
            if metric.endswith("_score"):
                np.testing.assert_allclose(reused[metric], value, rtol=0, atol=FP32_TOLERANCE)
            else:
                np.testing.assert_array_equal(reused[metric], value, err_msg=f"{key} {metric}")
        assert {"recall@1", "rank", "top_index", "top_score"} <= set(output)
    for file, plain in matrices[False].items():
        reranked = plain != FILL
        assert np.array_equal(matrices[True][file] != FILL, reranked) and reranked.sum() > 0
        np.testing.assert_allclose(matrices[True][file][reranked], plain[reranked], rtol=0, atol=FP32_TOLERANCE)


def test_the_reranker_sends_each_images_pairs_together(name, tmp_path):
    """Through the Reranker's own batching (6 pairs a call, 6 images a group, about 45 pairs an image), the clean
    text-to-image gallery projects each image with re-ranked pairs once per layer."""
    source = TinyCocoSource(tmp_path / "coco", num_images=10)
    model = load(name)
    cache = EmbeddingCache(tmp_path / "cache", batch_size=16)
    score_model(model, source, [], cache, scorer=RerankScorer(Reranker(model, cache.root, k=1)))  # the embeddings, cached
    counts = count_projections(model)
    layout = source.gallery("clean", TEXT_TO_IMAGE)
    captions, images = (Side(items.name, items.fingerprint, items.items, cache.embeddings(model, items))
                        for items in (ground_truth_captions(source), original_images(source)))
    scorer = Reranker(model, tmp_path / "fresh", k=8, batch_size=6)
    scores = scorer.scores(layout, captions, [images])
    with_pairs = len(np.unique(layout.gallery_rows[np.nonzero(scores != FILL)[1]]))
    assert scorer.computed == 8 * layout.num_queries and with_pairs > 6
    assert counts == [[with_pairs, with_pairs]] * len(counts)
