"""The official BLIP evaluation of RoCOCO on a small set, run in the reference environment ``.venv-reference``.

The official code is read in place (``../shared/reference/rococo-official``, pseulki/rococo at d8ba2a6), never copied:
``eval_blip_i2t.py`` and ``eval_blip_t2i.py`` are imported as modules, their ``evaluation()`` and ``itm_eval`` run
unchanged, on a model of the official ``BLIP_Retrieval`` class built small. ``tests/models/test_blip_official.py``
runs this script twice, as ``python blip_official_run.py COMMAND TASK.json``:

- ``evaluate``: build the model with seeded random weights, save it as BLIP saves its checkpoints
  (``torch.save({"model": state_dict})``), and run both official evaluations for each ``k_test`` of the task, on the
  official ``coco_karpathy_retrieval_eval`` dataset over the task's annotation files and images; write the score
  matrices, the official ``itm_eval`` of each, what the official code fed its model (pixels, token ids), the
  official ``pre_caption`` of every real caption, and the library versions.
- ``itm-eval``: the official ``itm_eval`` of both scripts on score matrices made elsewhere (the project's).

Where the official code cannot run as written, this script says so and does the least that lets it run:

- ``create_vit`` builds only BLIP's ``base`` and ``large`` ViTs (768 and 1024 wide); while ``BLIP_Retrieval`` is
  built, ``blip_retrieval.create_vit`` is one that builds the same ``VisionTransformer`` at the task's smaller size.
  Every other line of ``BLIP_Retrieval.__init__`` runs as written, ``init_tokenizer`` included: its
  ``BertTokenizer.from_pretrained('bert-base-uncased')`` reads the folder of that name in the working directory,
  where the test wrote its vocabulary (no hub here).
- The evaluation functions read a module global ``args`` (``args.distributed``) that only their ``__main__`` sets:
  it is set to ``distributed=False``.
- The official test transform (``Resize((384, 384), BICUBIC)``, ``ToTensor``, ``Normalize`` in
  ``blip/data/__init__.py``) needs torchvision, which does not load beside this torch; for a PIL image it is PIL's
  bicubic resize, a division by 255 and the normalisation, which :func:`official_test_transform` does with the same
  torch operations as torchvision.
- ``coco_karpathy_retrieval_eval.__getitem__`` (and ``eval_blip_t2i.itm_eval``) hard-code the 5,000 test images as
  the boundary between original and altered images: :class:`SmallRetrievalEval` replaces only that number by the
  set's own; the text-to-image matrices go through the official ``itm_eval`` with their altered columns moved to
  5,000 + k (:func:`t2i_itm_eval`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

import numpy as np

logger = logging.getLogger("blip_official_run")

BLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # blip/data/__init__.py's Normalize
BLIP_STD = (0.26862954, 0.26130258, 0.27577711)
OFFICIAL_ALTERED_BOUNDARY = 5000  # eval_blip_t2i.itm_eval: gallery columns >= 5000 are altered images
_BELOW_EVERYTHING = -1e9  # the padding columns between a small set's images and column 5000


def official_test_transform(image_size: int):
    """The official test transform of a PIL image, as torchvision computes it: ``Resize((size, size), BICUBIC)``
    (PIL's ``resize`` with ``Image.BICUBIC``), ``ToTensor`` (HWC uint8 to CHW float32, divided by 255) and
    ``Normalize(BLIP_MEAN, BLIP_STD)`` (``tensor.sub_(mean).div_(std)`` in float32)."""
    import torch
    from PIL import Image

    mean = torch.as_tensor(BLIP_MEAN, dtype=torch.float32)[:, None, None]
    std = torch.as_tensor(BLIP_STD, dtype=torch.float32)[:, None, None]

    def transform(image):
        resized = image.resize((image_size, image_size), Image.BICUBIC)
        pixels = torch.from_numpy(np.array(resized, dtype=np.uint8)).permute(2, 0, 1).contiguous()
        return pixels.to(dtype=torch.float32).div(255).sub_(mean).div_(std)

    return transform


def import_official(reference: Path):
    """The official modules, imported from the reference folder (and ``args`` set as their ``__main__`` would)."""
    sys.path.insert(0, str(reference))
    import eval_blip_i2t
    import eval_blip_t2i
    from blip.data import coco_karpathy_dataset
    from blip.data import utils as data_utils
    from blip.models import blip_retrieval, vit

    for module in (eval_blip_i2t, eval_blip_t2i):
        module.args = argparse.Namespace(distributed=False)
    return argparse.Namespace(i2t=eval_blip_i2t, t2i=eval_blip_t2i, dataset=coco_karpathy_dataset,
                              data_utils=data_utils, blip_retrieval=blip_retrieval, vit=vit)


@contextlib.contextmanager
def small_create_vit(official, vision: dict):
    """``blip_retrieval.create_vit`` building ``vit.VisionTransformer`` at ``vision``'s size, as ``create_vit``
    builds BLIP's (patch 16, MLP ratio 4, qkv bias), while ``BLIP_Retrieval`` is constructed."""
    module = official.blip_retrieval
    original = module.create_vit

    def create_vit(vit, image_size, use_grad_checkpointing=False, ckpt_layer=0, drop_path_rate=0):
        encoder = official.vit.VisionTransformer(img_size=image_size, patch_size=vision["patch_size"],
                                                 embed_dim=vision["width"], depth=vision["depth"],
                                                 num_heads=vision["heads"], use_grad_checkpointing=False,
                                                 ckpt_layer=0, drop_path_rate=0)
        return encoder, vision["width"]

    module.create_vit = create_vit
    try:
        yield
    finally:
        module.create_vit = original


def build_model(official, task: dict, work: Path):
    """A ``BLIP_Retrieval`` at the task's sizes, every parameter drawn from a seeded generator.

    BLIP's own initialisation (std 0.02, zero biases, unit LayerNorms) makes all images and captions nearly equal
    for a random model, and would hide a bias or a norm mapped to the wrong place: here every weight, bias and norm
    is random (weights ``N(0, 1.5 / sqrt(fan_in))``, embeddings ``N(0, 0.5)``, biases ``N(0, 0.1)``, norm scales
    ``1 + N(0, 0.1)``), and the momentum encoders are copied from them with the official ``copy_params``.
    """
    import torch

    spec = task["model"]
    text = spec["text"]
    med_config = json.loads((Path(task["reference"]) / "blip/configs/med_config.json").read_text())
    med_config.update(hidden_size=text["width"], num_hidden_layers=text["depth"], num_attention_heads=text["heads"],
                      intermediate_size=4 * text["width"], max_position_embeddings=text["max_positions"],
                      vocab_size=text["vocab_size"], encoder_width=spec["vision"]["width"])
    config_path = work / "med_config.json"
    config_path.write_text(json.dumps(med_config, indent=2))
    torch.manual_seed(spec["seed"])
    with small_create_vit(official, spec["vision"]):
        model = official.blip_retrieval.BLIP_Retrieval(med_config=str(config_path), image_size=spec["image_size"],
                                                       vit="base", embed_dim=spec["embed_dim"],
                                                       queue_size=spec["queue_size"])
    generator = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "_m." in name:  # the momentum encoders: copied below
                continue
            noise = torch.randn(parameter.shape, generator=generator)
            if parameter.ndim >= 2 and name.endswith("weight") and "embeddings" not in name:  # linear, conv
                parameter.copy_(noise * (1.5 / np.prod(parameter.shape[1:]) ** 0.5))
            elif parameter.ndim >= 2:  # embedding tables, pos_embed, cls_token
                parameter.copy_(0.5 * noise)
            elif "norm" in name.lower() and name.endswith("weight"):
                parameter.copy_(1 + 0.1 * noise)
            else:
                parameter.copy_(0.1 * noise)
    model.copy_params()
    if len(model.tokenizer) != text["vocab_size"]:
        raise ValueError(f"the tokenizer has {len(model.tokenizer)} tokens, the task's vocab_size is "
                         f"{text['vocab_size']}")
    return model.eval()


class _Recorder:
    """What the official evaluation feeds the model: images into the ViT, token ids into the text encoder."""

    def __init__(self, model):
        self.pixels, self.text_ids, self.itm_ids = [], [], []
        self.handles = [model.visual_encoder.register_forward_pre_hook(self._image),
                        model.text_encoder.register_forward_pre_hook(self._text, with_kwargs=True)]

    def _image(self, module, args):
        self.pixels.append(args[0].detach().clone())

    def _text(self, module, args, kwargs):
        ids = (args[0] if args else kwargs["input_ids"]).detach().clone()
        (self.itm_ids if kwargs.get("encoder_hidden_states") is not None else self.text_ids).append(ids)

    def close(self):
        for handle in self.handles:
            handle.remove()


def small_dataset_class(official):
    """The official ``coco_karpathy_retrieval_eval`` with its one hard-coded count replaced."""

    class SmallRetrievalEval(official.dataset.coco_karpathy_retrieval_eval):
        """``__getitem__`` as the official one, with the set's number of images where it has ``5000``."""

        def __getitem__(self, index):
            from PIL import Image

            count = len(self.annotation)
            if self.miximage is not None and index >= count:
                file_name = self.annotation[index - count]["image"].split("/")[1]
                image_path = os.path.join(self.image_root, self.miximage, file_name)
            else:
                image_path = os.path.join(self.image_root, self.annotation[index]["image"])
            image = Image.open(image_path).convert("RGB")
            return self.transform(image), index, image_path

    return SmallRetrievalEval


def datasets(official, task: dict):
    """The official retrieval datasets of both directions: the text attack's file for image-to-text, the clean
    file with the altered images for text-to-image."""
    transform = official_test_transform(task["model"]["image_size"])
    dataset_class = small_dataset_class(official)
    common = dict(transform=transform, image_root=task["image_root"], ann_root=task["ann_root"], split="test")
    with contextlib.redirect_stdout(sys.stderr):  # the constructor prints its file names
        i2t = dataset_class(**common, filenames={"test": task["i2t_file"]})
        t2i = dataset_class(**common, filenames={"test": task["t2i_file"]}, miximage=task["miximage"])
    return i2t, t2i


def t2i_itm_eval(official, matrix: np.ndarray, dataset) -> dict:
    """The official text-to-image ``itm_eval`` of a small set's matrix: the altered columns moved to 5,000 + k,
    the columns between them filled with a score below every other (ranks of the originals do not change)."""
    count = len(dataset.annotation)
    padded = np.full((matrix.shape[0], OFFICIAL_ALTERED_BOUNDARY + count), _BELOW_EVERYTHING, dtype=np.float32)
    padded[:, :count] = matrix[:, :count]
    padded[:, OFFICIAL_ALTERED_BOUNDARY:] = matrix[:, count:]
    return official.t2i.itm_eval(padded, dataset.txt2img)


def i2t_itm_eval(official, matrix: np.ndarray, dataset) -> dict:
    """The official image-to-text ``itm_eval``."""
    return official.i2t.itm_eval(matrix, dataset.img2txt, dataset.wrongtext)


def evaluate(task: dict) -> None:
    import PIL
    import timm
    import torch
    import transformers
    from torch.utils.data import DataLoader

    work, out = Path(task["work"]), Path(task["out"])
    out.mkdir(parents=True, exist_ok=True)
    official = import_official(Path(task["reference"]))
    model = build_model(official, task, work)
    checkpoint = Path(task["checkpoint"])
    torch.save({"model": model.state_dict()}, checkpoint)
    logger.info("saved the official-format checkpoint %s", checkpoint)
    i2t_data, t2i_data = datasets(official, task)
    arrays, results = {}, {"i2t": {}, "t2i": {}}
    recorder = _Recorder(model)
    device = torch.device("cpu")
    for direction, data, module, scorer in (("i2t", i2t_data, official.i2t, i2t_itm_eval),
                                            ("t2i", t2i_data, official.t2i, t2i_itm_eval)):
        for k_test in task["k_test"][direction]:
            recorder.pixels, recorder.text_ids, recorder.itm_ids = [], [], []
            loader = DataLoader(data, batch_size=8, shuffle=False, num_workers=0)
            with contextlib.redirect_stdout(sys.stderr):  # the official code prints its progress
                matrix = module.evaluation(model, loader, device, {"k_test": k_test})
                results[direction][str(k_test)] = scorer(official, matrix, data)
            arrays[f"{direction}_k{k_test}"] = matrix.astype(np.float32)
            logger.info("%s k_test=%d: %s", direction, k_test, results[direction][str(k_test)])
        arrays[f"{direction}_pixels"] = torch.cat(recorder.pixels).numpy()
        arrays[f"{direction}_text_ids"] = torch.cat(recorder.text_ids).numpy()
        arrays[f"{direction}_itm_ids"] = torch.cat(recorder.itm_ids).numpy()
    recorder.close()
    np.savez(out / "reference.npz", **arrays)
    captions = sorted({caption for path in task["caption_files"] for record in json.loads(Path(path).read_text())
                       for caption in record["caption"]})
    summary = {
        "itm_eval": results,
        "texts": {"i2t": i2t_data.text, "t2i": t2i_data.text},
        "img2txt": {str(k): v for k, v in i2t_data.img2txt.items()},
        "wrongtext": i2t_data.wrongtext,
        "txt2img": {str(k): v for k, v in t2i_data.txt2img.items()},
        "images": {"i2t": i2t_data.image, "t2i": t2i_data.image},
        "enc_token_id": int(model.tokenizer.enc_token_id),
        "bos_token_id": int(model.tokenizer.bos_token_id),
        "tokenizer_size": len(model.tokenizer),
        "pre_caption": {caption: official.data_utils.pre_caption(caption, 30) for caption in captions},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "timm": timm.__version__,
                     "PIL": PIL.__version__, "numpy": np.__version__},
    }
    (out / "reference.json").write_text(json.dumps(summary))


def itm_eval(task: dict) -> None:
    """The official ``itm_eval`` of the matrices in ``task["matrices"]`` (an .npz keyed ``i2t_*`` / ``t2i_*``)."""
    official = import_official(Path(task["reference"]))
    i2t_data, t2i_data = datasets(official, task)
    results = {}
    with np.load(task["matrices"]) as matrices:
        for key in matrices.files:
            scorer, data = (i2t_itm_eval, i2t_data) if key.startswith("i2t") else (t2i_itm_eval, t2i_data)
            results[key] = scorer(official, matrices[key], data)
    Path(task["itm_eval_out"]).write_text(json.dumps(results))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("evaluate", "itm-eval"))
    parser.add_argument("task", type=Path, help="the task: a JSON file written by the test")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="blip_official_run: %(message)s")
    task = json.loads(args.task.read_text())
    (evaluate if args.command == "evaluate" else itm_eval)(task)
    return 0


if __name__ == "__main__":
    sys.exit(main())
