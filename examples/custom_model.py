"""Your own model on RoCOCO in one file: two methods, then ``rococo_eval.evaluate_model``.

    python examples/custom_model.py --images-dir /data/coco --out my-report        # RoCOCO (COCO's test images)
    python examples/custom_model.py --benchmark my-benchmark --out my-report       # made by `rococo-eval attack`
    rococo-eval run --model custom_model:load_model --images-dir /data/coco        # the same, from examples/

``TinyColourModel`` is a stand-in that needs no weights: an image is its colours on a 4 x 4 grid, a caption its
hashed words, both projected into one space by a fixed random matrix. A real model is wrapped the same way, for
example an open_clip one::

    class OpenClip:
        def __init__(self):
            self.model, _, self.preprocess = open_clip.create_model_and_transforms("ViT-B-32", "openai")
            self.model.eval()                                       # and .to(device) for a GPU, with the inputs
            self.tokenizer = open_clip.get_tokenizer("ViT-B-32")
            self.fingerprint = "open_clip ViT-B-32 openai"       # optional: keys the embedding cache

        @torch.inference_mode()
        def encode_images(self, images):
            return self.model.encode_image(torch.stack([self.preprocess(image) for image in images]))

        @torch.inference_mode()
        def encode_texts(self, texts):
            return self.model.encode_text(self.tokenizer(texts))

The optional hooks (``preprocess_image``/``encode_preprocessed``, ``tokenize_texts``/``encode_tokenized``) are in
``rococo_eval.models.custom``; this model has the first pair, so its images are prepared in worker threads.
"""

import argparse
import hashlib
import json
import re

import numpy as np

import rococo_eval

DIMENSION = 64


class TinyColourModel:
    """Images: the mean colour of each cell of a 4 x 4 grid; captions: hashed words. Both projected to 64 dims."""

    name = "tiny-colour-model"

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.image_projection = rng.normal(size=(4 * 4 * 3, DIMENSION)).astype(np.float32)
        self.word_projection = rng.normal(size=(256, DIMENSION)).astype(np.float32)
        self.fingerprint = f"tiny-colour-model seed {seed}"

    def preprocess_image(self, image) -> np.ndarray:
        return np.asarray(image.convert("RGB").resize((4, 4)), dtype=np.float32).reshape(-1) / 255

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        return (batch - 0.5) @ self.image_projection

    def encode_images(self, images) -> np.ndarray:
        return self.encode_preprocessed(np.stack([self.preprocess_image(image) for image in images]))

    def encode_texts(self, texts) -> np.ndarray:
        counts = np.zeros((len(texts), 256), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                counts[row, hashlib.sha256(word.encode()).digest()[0]] += 1
        return counts @ self.word_projection + 1e-3


def load_model(device=None):
    """What ``--model custom_model:load_model`` calls (``device`` is passed, and unused by this model)."""
    return TinyColourModel()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images-dir", help="COCO root holding val2014/ (RoCOCO)")
    parser.add_argument("--benchmark", help="a benchmark folder made by `rococo-eval attack`")
    parser.add_argument("--attacks", default="all")
    parser.add_argument("--cache-dir", help="embedding cache (default ~/.cache/rococo-eval)")
    parser.add_argument("--out", default="custom-model-report")
    args = parser.parse_args(argv)
    report = rococo_eval.evaluate_model(TinyColourModel(), images_dir=args.images_dir, benchmark=args.benchmark,
                                        attacks=args.attacks, cache_dir=args.cache_dir, out=args.out)
    rows = [{"gallery": str(row.key), "clean R@1": row.values.get("clean_recall@1"), "R@1": row.values["recall@1"]}
            for row in report.summary]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
