"""One block rule: a dual encoder's gallery scores are the same bits however they are reached.

BLAS rounds a dot product by the shape of the product it is part of (measured here: splitting 4,500 query rows
into other blocks changes the last bit of dozens of scores). So `run` (the metric scores the embeddings), `run
--save-scores` (the blocks are written, then ranked), `score` on the saved file and the Space on an upload must
all use the blocks of :func:`rococo_recall.embedding_score_blocks`.
"""

from __future__ import annotations

import numpy as np

from rococo_eval.catalog import TEXT_TO_IMAGE
from rococo_eval.io.savedscores import ScoreMatrixWriter
from rococo_eval.io.scorefiles import read_scores
from rococo_eval.layout import gallery_layout
from rococo_eval.scoring.galleries import _embedding_blocks, block_metric, score_gallery
from rococo_recall import embedding_score_blocks, rococo_recall, score_block_rows


def _embeddings(captions_per_image, num_images, width, seed=0):
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((captions_per_image * num_images, width)).astype(np.float32)
    images = rng.standard_normal((num_images, width)).astype(np.float32)
    return gallery_layout("clean", TEXT_TO_IMAGE, [captions_per_image] * num_images), queries, images


def test_the_blocks_follow_the_metric_rule():
    layout, queries, images = _embeddings(450, 10, 64)
    assert [start for start, _ in _embedding_blocks(layout, queries, [images])] == [0, score_block_rows(10)]
    assert [start for start, _ in embedding_score_blocks(queries, images)] == [0, 4096]


def test_scores_from_embeddings_saved_and_reread_are_the_same_bits(tmp_path):
    # 4,500 queries over 10 images: more than one block of the metric's rule (4,096 rows), so a product of other
    # shape rounds some scores differently (34 top-1 scores differed on the code before this rule)
    layout, queries, images = _embeddings(450, 10, 512)
    from_embeddings = score_gallery(layout, queries, images, k=1, per_query=True)

    path = tmp_path / "clean_text_to_image_official.npy"
    with ScoreMatrixWriter(path, (layout.num_queries, layout.num_gallery)) as writer:
        saved = block_metric(_embedding_blocks(layout, queries, [images]), layout, writer, k=1, per_query=True)
    reread = rococo_recall(read_scores(path), **layout.metric_inputs(), k=1, per_query=True)

    made = np.concatenate([block for _, block in embedding_score_blocks(queries, images)])
    assert np.array_equal(np.load(path), made)  # same bits, not just close
    for name in ("top_score", "best_correct_score", "top_index", "rank"):
        assert np.array_equal(from_embeddings.per_query[name], saved.per_query[name]), name
        assert np.array_equal(from_embeddings.per_query[name], reread[name]), name
