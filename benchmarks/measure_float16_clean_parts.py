"""Does float16 rounding keep one model's clean numbers equal across its files? The evidence for the rule of
:mod:`rococo_eval.scoring.consistency`.

    python benchmarks/measure_float16_clean_parts.py [--images 1000] [--seed 0]

One model's cosine-like scores (unit noise scaled to cosine similarities around 0.2, ground truth +0.06, each image's
own adversarial captions +0.05) for the clean image-to-text gallery and rand_voca's, for ``--images`` images of 5
captions (6 for one image in 200, as in RoCOCO). Each matrix is saved (cast) as float32 and as
float16 and scored with both tie policies; the script prints the clean gallery's R@1 beside the attacked gallery's
clean R@1 for each pair of dtypes, and how many distinct values a row keeps in each dtype.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rococo_eval.layout import gallery_layout  # noqa: E402
from rococo_recall import rococo_recall  # noqa: E402


def model_scores(images: int, seed: int) -> tuple[dict, dict]:
    """The clean and the rand_voca (official order) gallery of one model, as float32 matrices, with their layouts."""
    captions = [6 if image % 200 == 83 else 5 for image in range(images)]
    layouts = {"clean": gallery_layout("clean", "image_to_text", captions),
               "rand_voca": gallery_layout("rand_voca", "image_to_text", captions, "official")}
    rng = np.random.default_rng(seed)
    clean = rng.normal(0.2, 0.03, (images, sum(captions))).astype(np.float32)
    for query, references in enumerate(layouts["clean"].references):
        clean[query, list(references)] += 0.06
    adversarial = rng.normal(0.2, 0.03, (images, 5 * images)).astype(np.float32)
    for query in range(images):
        adversarial[query, 5 * query:5 * query + 5] += 0.05
    attacked = np.empty((images, layouts["rand_voca"].num_gallery), np.float32)
    attacked[:, ~layouts["rand_voca"].adversarial] = clean  # the same scores for the same pairs
    attacked[:, layouts["rand_voca"].adversarial] = adversarial
    return {"clean": clean, "rand_voca": attacked}, layouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scores, layouts = model_scores(args.images, args.seed)
    row = scores["clean"][0]
    print(f"{args.images} images, {row.size} captions; distinct values in a row: float32 {len(np.unique(row))}, "
          f"float16 {len(np.unique(row.astype(np.float16)))}")
    print("ties         clean file  attacked file  clean R@1  attacked clean R@1  equal")
    for ties in ("pessimistic", "optimistic"):
        clean = {dtype: rococo_recall(scores["clean"].astype(dtype), **layouts["clean"].metric_inputs(), k=1,
                                      ties=ties)["recall@1"] for dtype in (np.float32, np.float16)}
        attacked = {dtype: rococo_recall(scores["rand_voca"].astype(dtype), **layouts["rand_voca"].metric_inputs(),
                                         k=1, ties=ties)["clean_recall@1"] for dtype in (np.float32, np.float16)}
        for clean_dtype in (np.float32, np.float16):
            for attacked_dtype in (np.float32, np.float16):
                first, second = clean[clean_dtype], attacked[attacked_dtype]
                print(f"{ties:<12} {clean_dtype.__name__:<11} {attacked_dtype.__name__:<14} {first:9.2f}  "
                      f"{second:18.2f}  {'yes' if first == second else 'no'}")


if __name__ == "__main__":
    main()
