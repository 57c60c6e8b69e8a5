"""Score matrices of one dual-encoder model for every gallery of a set: each pair's score is computed once, so the
clean part of every attacked gallery holds exactly the clean gallery's scores, as a real model's files do."""

import zlib

import numpy as np

from rococo_eval.catalog import IMAGE_TO_TEXT

DIMENSION = 16


def one_model_scores(layout, captions_per_image, attack, seed=0, dtype=np.float32):
    """The scores of the model ``seed`` for the gallery ``layout`` of ``attack`` (``"clean"`` or an attack), in the
    layout's order: image and caption embeddings (a caption is its image plus noise) and, per attack, its
    adversarial items' (an item of image i is image i plus less noise), scored by dot product, then saved as
    ``dtype``."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((len(captions_per_image), DIMENSION))
    captions = np.repeat(images, captions_per_image, axis=0) + rng.standard_normal((sum(captions_per_image), DIMENSION))
    image_to_text = layout.direction == IMAGE_TO_TEXT
    queries, originals = (images, captions) if image_to_text else (captions, images)
    clean_scores = queries @ originals.T  # the same numbers for every gallery of the direction
    adversarial = np.zeros((len(queries), 0))
    if layout.num_adversarial:
        attack_rng = np.random.default_rng([seed, zlib.crc32(attack.encode())])
        per_image = layout.num_adversarial // len(captions_per_image)
        items = np.repeat(images, per_image, axis=0)
        adversarial = queries @ (items + 0.7 * attack_rng.standard_normal(items.shape)).T
    return np.concatenate([clean_scores, adversarial], axis=1)[:, layout.gallery_rows].astype(dtype)
