"""rococo_eval.data.dataset: the metric's inputs for either gallery order, and the queries and gallery loaded from
the export, which a toy model scores exactly as it scores the official JSON files."""

import functools
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

import rococo_recall
from rococo_eval.attacks.replacements import tokens
from rococo_eval.data.dataset import load_queries_and_gallery, metric_inputs_for
from rococo_eval.layout import reorder_gallery


@pytest.mark.parametrize("attack, direction", [
    ("rand_voca", None), ("same_concept", None), ("patch_seed10", None),
    ("clean", "image_to_text"), ("clean", "text_to_image"),
])
def test_metric_is_the_same_in_both_orders(source, annotations_dir, attack, direction):
    official = metric_inputs_for(attack, direction, "official", annotations_dir)
    in_dataset_order = metric_inputs_for(attack, direction, "dataset", annotations_dir)
    num_queries, num_gallery = len(official["references"]), len(official["adversarial"])
    rng = np.random.default_rng(7)
    queries = rng.choice(num_queries, 300, replace=False)
    scores = rng.standard_normal((300, num_gallery)).astype(np.float32)
    for row, query in enumerate(queries):
        scores[row, rng.choice(official["references"][query])] += 2.5
    reordered = reorder_gallery(scores, source.gallery(attack, direction, "official"),
                                source.gallery(attack, direction, "dataset"))
    results = [rococo_recall.rococo_recall(matrix, references=[inputs["references"][q] for q in queries],
                                           adversarial=inputs["adversarial"], per_query=True)
               for matrix, inputs in ((scores, official), (reordered, in_dataset_order))]
    assert np.array_equal(results[0].pop("rank"), results[1].pop("rank"))
    for result in results:  # the per-query arrays (the columns of the two orders differ)
        for key in ("clean_rank", "top1_adversarial", "top_index", "top_score", "best_correct_index",
                    "best_correct_score"):
            result.pop(key)
    assert results[0] == results[1]
    assert 0 < results[0]["recall@1"] < 100


@functools.lru_cache(maxsize=None)
def _word_vector(word: str):
    return np.random.default_rng(zlib.crc32(word.encode())).standard_normal(64)


def _exact(vector):
    """``vector`` normalised and rounded to multiples of 1/256: every dot product of two such vectors of 64 entries is
    exact in float32, so a score does not depend on the order BLAS sums it in (the two orders' ranks are then equal
    whatever the BLAS library, its kernel and its threads)."""
    return np.round(vector / (np.linalg.norm(vector) or 1.0) * 256) / 256


@functools.lru_cache(maxsize=None)
def _caption_vector(caption: str):
    """A toy text encoder: the sum of random vectors of the caption's longer words, made :func:`_exact`."""
    return _exact(sum((_word_vector(word) for word in set(tokens(caption)) if len(word) > 3), np.zeros(64)))


def test_end_to_end_toy_model_scores_the_same_from_the_export(export_folder, hf_cache, annotations_dir):
    # a bag-of-words "model" that knows each image's captions; the official gallery comes from the JSON files
    clean = json.loads((annotations_dir / "coco_karpathy_test.json").read_text())
    attack = json.loads((annotations_dir / "rand_voca.json").read_text())
    image_vectors = {Path(r["image"]).name: _exact(sum(map(_caption_vector, r["caption"]))) for r in clean}
    official_gallery = [caption for record in attack for caption in record["caption"]]
    official_queries = [Path(record["image"]).name for record in clean]

    queries, gallery = load_queries_and_gallery(str(export_folder), "rand_voca", cache_dir=hf_cache)
    assert gallery.num_rows == 50010 and queries.num_rows == 5000
    every_fifth = slice(None, None, 5)  # 1,000 queries keep the test quick; the gallery is whole
    results = []
    for names, captions, order in ((official_queries, official_gallery, "official"),
                                   (queries["file_name"][:], gallery["caption"][:], "dataset")):
        inputs = metric_inputs_for("rand_voca", order=order, annotations_dir=annotations_dir)
        results.append(rococo_recall.rococo_recall(
            query_embeddings=np.stack([image_vectors[name] for name in names[every_fifth]]).astype(np.float32),
            gallery_embeddings=np.stack([_caption_vector(c) for c in captions]).astype(np.float32),
            references=inputs["references"][every_fifth], adversarial=inputs["adversarial"], per_query=True))
    official, from_export = results
    for key in ("rank", "clean_rank", "top1_adversarial"):
        assert np.array_equal(official.pop(key), from_export.pop(key)), key
    for key in ("top_score", "best_correct_score"):  # exact products: equal whatever the order
        np.testing.assert_array_equal(official.pop(key), from_export.pop(key), err_msg=key)
    for key in ("top_index", "best_correct_index"):  # gallery columns: the two orders differ
        official.pop(key), from_export.pop(key)
    assert official == from_export
    assert official["clean_recall@1"] > 50 and official["false_rate"] > 1
