"""rococo_eval.scoring.galleries: galleries scored from embeddings, the gallery built in one copy, a dual encoder's
scores saved as the files ``rococo-eval score`` reads."""

import tracemalloc

import numpy as np
import pytest

from helpers.metric_cases import assert_same_results
from rococo_eval.catalog import IMAGE_TO_TEXT
from rococo_eval.layout import gallery_layout, gallery_vectors
from rococo_eval.models.adapters import load_model
from rococo_eval.models.cache import EmbeddingCache
from rococo_eval.scoring.galleries import _embedding_blocks, score_gallery, score_model
from rococo_recall import rococo_recall

CAPTIONS = [5] * 400  # 400 images, 2,000 ground-truth captions
WIDTH = 512


@pytest.fixture(scope="module")
def embeddings():
    rng = np.random.default_rng(0)
    images = rng.standard_normal((len(CAPTIONS), WIDTH), dtype=np.float32)
    captions = rng.standard_normal((sum(CAPTIONS), WIDTH), dtype=np.float32)
    adversarial = rng.standard_normal((sum(CAPTIONS), WIDTH), dtype=np.float32)
    return images, captions, adversarial


@pytest.mark.parametrize("attack", ["clean", "rand_voca"])
def test_the_gallery_is_the_concatenated_pool_in_the_layouts_order(attack, embeddings):
    images, captions, adversarial = embeddings
    layout = gallery_layout(attack, "image_to_text", CAPTIONS, "official")
    pool = [captions] if attack == "clean" else [captions, adversarial]
    gallery = gallery_vectors(pool, layout.gallery_rows)
    assert gallery.dtype == np.float32 and np.array_equal(gallery, np.concatenate(pool)[layout.gallery_rows])
    result = score_gallery(layout, images, *pool, per_query=True)
    expected = rococo_recall(images @ gallery.T, **layout.metric_inputs(), per_query=True)
    assert [*result.metrics, *result.per_query] == list(expected) and result.layout is layout
    assert all(np.array_equal(value, expected[name]) for name, value in {**result.metrics, **result.per_query}.items())


def test_rows_outside_the_pool_are_refused(embeddings):
    with pytest.raises(IndexError, match=r"gallery rows must be in \[0, 400\), got 0\.\.400"):
        gallery_vectors([embeddings[0]], np.array([0, 400]))
    _, captions, adversarial = embeddings  # a pool of two parts is filled part by part: no row may match none
    total = len(captions) + len(adversarial)
    for row in (total, -1):
        with pytest.raises(IndexError, match=rf"gallery rows must be in \[0, {total}\)"):
            gallery_vectors([captions, adversarial], np.array([0, row]))


def test_the_gallery_is_built_in_one_copy(embeddings):
    """Peak memory while the gallery and the first block of scores are made: the gallery and a few MB, not a
    concatenated pool as well (before: 2 x 8 MB here)."""
    images, captions, adversarial = embeddings
    layout = gallery_layout("rand_voca", "image_to_text", CAPTIONS, "official")
    gallery_bytes = layout.num_gallery * WIDTH * 4
    tracemalloc.start()
    try:
        start, block = next(_embedding_blocks(layout, images[:20], [captions, adversarial]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert start == 0 and block.shape == (20, layout.num_gallery)
    assert gallery_bytes == 8_192_000 and peak < gallery_bytes + 3 * 2**20


@pytest.mark.usefixtures("one_torch_thread")
def test_dual_encoders_save_their_scores_too(hf_name, tiny_source, tmp_path):
    """``--save-scores`` for a dual encoder: each file is the dot products of the cached embeddings in the official
    order, and the results are those of the usual embedding path."""
    from rococo_eval.scoring.galleries import adversarial_captions, ground_truth_captions, original_images

    model = load_model(hf_name, device="cpu")
    cache = EmbeddingCache(tmp_path / "cache", batch_size=16)
    usual = score_model(model, tiny_source, ["rand_voca"], cache)
    (tmp_path / "scores").mkdir()
    saved = score_model(model, tiny_source, ["rand_voca"], cache, save_scores=tmp_path / "scores")
    for key, output in usual.items():
        for name in ("recall@1", "recall@5", "recall@10", "false_rate", "clean_recall@1"):
            assert saved[key].metrics[name] == pytest.approx(output.metrics[name]), (key, name)
    images = cache.embeddings(model, original_images(tiny_source))
    captions = np.concatenate([cache.embeddings(model, ground_truth_captions(tiny_source)),
                               cache.embeddings(model, adversarial_captions(tiny_source, "rand_voca"))])
    layout = tiny_source.gallery("rand_voca", IMAGE_TO_TEXT)
    scores = np.load(tmp_path / "scores" / "rand_voca_image_to_text_official_order.npy")
    np.testing.assert_allclose(scores, images @ captions[layout.gallery_rows].T, rtol=1e-6, atol=1e-6)
    assert_same_results({"rand_voca": rococo_recall(scores, **layout.metric_inputs(), per_query=True)},
                        {"rand_voca": saved["rand_voca/image_to_text"]})
