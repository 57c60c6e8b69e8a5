"""The official PCME++ model and scoring on a small RoCOCO set, run in the reference environment ``.venv-reference``.

The official code is read in place (``../shared/reference/pcmepp-official``, naver-ai/pcmepp at 8829c0d), never copied:
``hf_models`` (``HfPCMEPPModel``, ``tokenize``) and ``pcmepp/evaluation.py`` (``compute_csd_sims``) run as written.
``tests/models/test_pcmepp_official.py`` runs this script twice, as ``python pcmepp_official_run.py COMMAND TASK.json``:

- ``preprocess``: what ``hf_example.py`` feeds the model: ``CLIPProcessor`` of ``openai/clip-vit-base-patch16`` (its
  image processor, built from that repository's ``preprocessor_config.json``, which the test writes: the Hub cannot be
  reached) on each image file opened with PIL, and the official ``tokenize`` of the set's captions and of every real
  caption;
- ``evaluate``: for each model of the task, a small ``HfPCMEPPModel`` with seeded random weights, saved with
  ``save_pretrained`` and read back with ``from_pretrained`` (its ``PyTorchModelHubMixin``), its ``forward`` on those
  inputs, and ``compute_csd_sims`` of the outputs for the set's clean and attacked galleries.

Where the official code cannot run as written, this script says so and does the least that lets it run:

- ``from_pretrained`` of huggingface_hub 0.23 and newer turns the config's ``vision_cfg``/``text_cfg`` dicts into the
  annotated dataclasses, which ``HfPCMEPPModel.__init__`` then indexes as dicts (``text_cfg["unc_layers"]``): a
  TypeError. ``evaluate`` runs with huggingface_hub 0.22.2 (the release of the checkpoints' time) first on its path; it
  imports no transformers (which would refuse that hub), and ``preprocess``, which needs transformers, runs apart.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

logger = logging.getLogger("pcmepp_official_run")


def preprocess(task: dict) -> None:
    import transformers
    from PIL import Image

    sys.path.insert(0, task["reference"])
    from hf_models import tokenize

    processor = transformers.CLIPImageProcessor.from_pretrained(task["processor"])
    pixels = []
    for path in task["images"]:
        with Image.open(path) as image:  # hf_example.py: Image.open(...), then the processor
            pixels.append(processor(images=image, return_tensors="np", padding=True)["pixel_values"][0])
    texts = task["captions"]
    tokens = tokenize(texts).numpy()
    captions = sorted({caption for path in task["caption_files"] for record in json.loads(Path(path).read_text())
                       for caption in record["caption"]})
    every = tokenize(captions).numpy()
    token_ids = {caption: row[:int(np.count_nonzero(row))].tolist() for caption, row in zip(captions, every)}
    out = Path(task["out"])
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "inputs.npz", pixels=np.stack(pixels), tokens=tokens)
    (out / "tokens.json").write_text(json.dumps({"token_ids": token_ids, "versions": {
        "transformers": transformers.__version__, "numpy": np.__version__}}))


def evaluate(task: dict) -> None:
    import huggingface_hub
    import torch

    from reference_weights import randomise  # this script's folder, first on its path

    sys.path.insert(0, task["reference"])
    from hf_models import HfPCMEPPModel
    from pcmepp.evaluation import compute_csd_sims

    out = Path(task["out"])
    with np.load(out / "inputs.npz") as inputs:
        pixels, tokens = torch.from_numpy(inputs["pixels"]), torch.from_numpy(inputs["tokens"])
    count = task["num_images"]
    ground_truth = list(range(task["num_ground_truth"]))
    pool = np.asarray(task["i2t_columns"])  # the attacked image-to-text gallery: rows of the captions, official order
    arrays = {}
    for spec in task["models"]:
        torch.manual_seed(spec["seed"])
        model = HfPCMEPPModel(embed_dim=spec["embed_dim"], vision_cfg=spec["vision_cfg"], text_cfg=spec["text_cfg"],
                              quick_gelu=spec.get("quick_gelu", False))
        randomise([model], spec["seed"])
        with torch.no_grad():  # log sigmas of a trained model's size (the sums of exp(sigma) stay in the tens)
            model.visual.uncertainty_proj.mul_(spec["uncertainty_scale"])
            model.uncertainty_text_projection.mul_(spec["uncertainty_scale"])
        model.save_pretrained(spec["checkpoint"])
        model = HfPCMEPPModel.from_pretrained(spec["checkpoint"]).eval()
        with torch.no_grad():
            outputs = model(images=pixels, texts=tokens)
        image_means, image_stds = outputs["image_features"], outputs["image_stds"]
        text_means, text_stds = outputs["text_features"], outputs["text_stds"]
        sims = {
            "clean_i2t": compute_csd_sims(image_means[:count], text_means[ground_truth], image_stds[:count],
                                          text_stds[ground_truth]),
            "i2t": compute_csd_sims(image_means[:count], text_means[pool], image_stds[:count], text_stds[pool]),
            # the official evaluation ranks images by the transpose of the image-by-caption matrix
            "t2i": compute_csd_sims(image_means[:2 * count], text_means[ground_truth], image_stds[:2 * count],
                                    text_stds[ground_truth]).T,  # the originals, then their altered copies
        }
        name = spec["name"]
        arrays.update({f"{name}/image_means": image_means.numpy(), f"{name}/image_stds": image_stds.numpy(),
                       f"{name}/text_means": text_means.numpy(), f"{name}/text_stds": text_stds.numpy(),
                       **{f"{name}/sims/{key}": np.ascontiguousarray(value) for key, value in sims.items()}})
    np.savez(out / "reference.npz", **arrays)
    (out / "reference.json").write_text(json.dumps({"versions": {
        "torch": torch.__version__, "huggingface_hub": huggingface_hub.__version__, "numpy": np.__version__}}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("preprocess", "evaluate"))
    parser.add_argument("task", type=Path, help="the task: a JSON file written by the test")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="pcmepp_official_run: %(message)s")
    task = json.loads(args.task.read_text())
    (preprocess if args.command == "preprocess" else evaluate)(task)
    return 0


if __name__ == "__main__":
    sys.exit(main())
