"""A probabilistic model on RoCOCO: each image and caption is a Gaussian, scored by PCME++'s closed-form sampled
distance (CSD) instead of a cosine.

    python examples/probabilistic_model.py --benchmark my-benchmark --out my-report     # made by `rococo-eval attack`
    python examples/probabilistic_model.py --images-dir /data/coco --out my-report      # RoCOCO (COCO's test images)
    rococo-eval run --model probabilistic_model:load_model --images-dir /data/coco    # the same, from examples/

A model says how it is scored with ``similarity`` (``rococo_eval.models.similarity``): ``"cosine"`` (the default:
embeddings normalised), ``"dot"`` (embeddings scored by their dot product as they are) or ``"csd"``. A ``csd`` model's
``encode_images`` and ``encode_texts`` return a pair ``(means, log_sigmas)``: the means (L2-normalised, as PCME++
normalises them) and the log of each dimension's sigma. The package scores the pair by

    csd(image, caption) = -(2 - 2 mu_image . mu_caption + sum(exp(sigma_image)) + sum(exp(sigma_caption)))

as ``pcmepp/evaluation.py::compute_csd_sims`` computes it. Each item is kept as one row (its mean, then
``sum(exp(sigma))``), so the embedding cache, ``--save-embeddings``, ``rococo-eval score``, the Space and
``--processes`` all work as for any model. A real PCME++
checkpoint needs no wrapper: ``--model pcmepp:REPO_OR_FOLDER``.

``TinyGaussianModel`` needs no weights: an image's mean is its colours on a 4 x 4 grid, projected; a caption's, its
hashed words; the uncertainty (sigma) grows for small images and for short captions, which say less.
"""

import argparse
import hashlib
import json
import re

import numpy as np

import rococo_eval

DIMENSION = 32


class TinyGaussianModel:
    """Means from colours and words (as ``custom_model.py``'s), log sigmas from how much an item shows."""

    name = "tiny-gaussian-model"
    similarity = "csd"

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.image_projection = rng.normal(size=(4 * 4 * 3, DIMENSION)).astype(np.float32)
        self.word_projection = rng.normal(size=(256, DIMENSION)).astype(np.float32)
        self.fingerprint = f"tiny-gaussian-model seed {seed}"

    def encode_images(self, images):
        colours = np.stack([np.asarray(image.convert("RGB").resize((4, 4)), dtype=np.float32).reshape(-1) / 255
                            for image in images])
        pixels = np.array([image.width * image.height for image in images], dtype=np.float32)
        log_sigmas = np.log(0.02 + 1e3 / pixels)[:, None] * np.ones((1, DIMENSION), dtype=np.float32)
        return _unit((colours - 0.5) @ self.image_projection), log_sigmas

    def encode_texts(self, texts):
        counts = np.zeros((len(texts), 256), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                counts[row, hashlib.sha256(word.encode()).digest()[0]] += 1
        words = counts.sum(axis=1, keepdims=True)
        log_sigmas = np.log(0.02 + 0.2 / np.maximum(words, 1)) * np.ones((1, DIMENSION), dtype=np.float32)
        return _unit(counts @ self.word_projection + 1e-3), log_sigmas


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def load_model(device=None):
    """What ``--model probabilistic_model:load_model`` calls (``device`` is passed, and unused by this model)."""
    return TinyGaussianModel()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images-dir", help="COCO root holding val2014/ (RoCOCO)")
    parser.add_argument("--benchmark", help="a benchmark folder made by `rococo-eval attack`")
    parser.add_argument("--attacks", default="all")
    parser.add_argument("--cache-dir", help="embedding cache (default ~/.cache/rococo-eval)")
    parser.add_argument("--out", default="probabilistic-model-report")
    args = parser.parse_args(argv)
    report = rococo_eval.evaluate_model(TinyGaussianModel(), images_dir=args.images_dir, benchmark=args.benchmark,
                                        attacks=args.attacks, cache_dir=args.cache_dir, out=args.out)
    rows = [{"gallery": str(row.key), "clean R@1": row.values.get("clean_recall@1"), "R@1": row.values["recall@1"]}
            for row in report.summary]
    print(json.dumps({"similarity": report.meta["similarity"], "galleries": rows}, indent=1))


if __name__ == "__main__":
    main()
