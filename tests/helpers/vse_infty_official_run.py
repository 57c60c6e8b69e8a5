"""The official VSE infinity evaluation path on a small RoCOCO set, run in the reference environment ``.venv-reference``.

The official code is read in place (``../shared/reference/vse-infty-official``, woodfrog/vse_infty at 29df9d6), never
copied: ``lib.vse.VSEModel``, its encoders (``EncoderImageFull``, ``EncoderImageAggr``, ``EncoderText``, ``GPO``), the
loaders of ``lib/datasets/image_caption.py`` (``RawImageDataset``, ``PrecompRegionDataset``, ``collate_fn``) and
``lib.evaluation`` (``encode_data``, ``compute_sim``, ``i2t``, ``t2i``) run as written.
``tests/models/test_vse_infty_official.py`` runs it as ``python vse_infty_official_run.py evaluate TASK.json``: for
each model of the task it builds a small ``VSEModel`` with seeded random weights, saves it as the official training
saves its checkpoints (``{'epoch', 'model': [image state, text state], 'best_rsum', 'opt', 'Eiters'}``, the encoders
wrapped in ``DataParallel`` by ``make_data_parallel``, so their keys carry ``module.``), embeds the set's images and
captions with ``encode_data`` over the official loaders, and writes the embeddings, the official ``i2t``/``t2i`` of
the clean gallery, the inputs the official loaders made of every image (under each backbone and input size), and the
official token ids of every real caption.

Where the official code cannot run as written, this script says so and does the least that lets it run:

- ``torch.hub`` and the Hub cannot be reached: while ``VSEModel`` is built, ``torch.hub.load('facebookresearch/
  WSL-Images', 'resnext101_32x8d_wsl')`` builds what that hub entry builds, torchvision's ``ResNet(Bottleneck, ...,
  groups=32, width_per_group=8)``, from the real torchvision, and ``lib.modules.resnet.resnet101()`` the official
  ``ResNet(Bottleneck, ...)``, both with fewer blocks per stage (the task's); ``BertModel.from_pretrained(
  'bert-base-uncased')`` is ``BertModel`` of bert-base-uncased's configuration, narrower in depth and
  feed-forward width (its hidden size stays 768, which ``EncoderText`` hard-codes). ``backbone_path`` is empty (the
  detector's Caffe weights are not loaded; the random ones are saved in the checkpoint instead).
- torchvision 0.28 (this torch's) loads only without its C++ operators' meta registrations
  (``torchvision._meta_registrations`` fails on ``torchvision::nms``): that module is stubbed out. ResNet needs none.
- ``VSEModel.forward_emb`` and ``ContrastiveLoss`` call ``.cuda()`` unconditionally; this machine has no GPU, and
  ``torch.Tensor.cuda`` returns the tensor itself here.
- ``encode_data`` indexes its arrays with each batch's ``ids``, which ``collate_fn`` returns as a tuple; on a GPU the
  loader's ``pin_memory`` turned it into a list, here it stays a tuple: :class:`IdsAsLists` hands it over as a list.
- ``evalrank`` reads a checkpoint with ``torch.load(path)``, which this torch refuses (``weights_only`` is on by
  default and the file holds an ``argparse.Namespace``); the models are evaluated in memory, right after they are
  saved, instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import types
from pathlib import Path

import numpy as np

logger = logging.getLogger("vse_infty_official_run")

BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_attention_heads": 12, "max_position_embeddings": 512,
             "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12}  # bert-base-uncased's config.json


def stub_torchvision_meta_registrations() -> None:
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")


def import_official(reference: Path):
    sys.path.insert(0, str(reference))
    import arguments
    from lib import encoders, evaluation
    from lib.datasets import image_caption
    from lib.modules import resnet
    from lib.vse import VSEModel

    return argparse.Namespace(arguments=arguments, encoders=encoders, evaluation=evaluation, resnet=resnet,
                              image_caption=image_caption, VSEModel=VSEModel)


@contextlib.contextmanager
def small_backbones(official, spec: dict):
    """``torch.hub.load`` (WSL) and ``lib.modules.resnet.resnet101`` (detector), and ``BertModel.from_pretrained``,
    building the task's small versions of what they build."""
    import torch
    import transformers
    from torchvision.models import resnet as torchvision_resnet

    blocks = spec["resnet_blocks"]
    saved = (torch.hub.load, official.resnet.resnet101, official.encoders.BertModel)

    def hub_load(repository, entry, *args, **kwargs):
        if (repository, entry) != ("facebookresearch/WSL-Images", "resnext101_32x8d_wsl"):
            raise RuntimeError(f"no hub here: {repository} {entry}")
        return torchvision_resnet.ResNet(torchvision_resnet.Bottleneck, blocks, groups=spec["wsl_groups"],
                                         width_per_group=spec["wsl_width_per_group"])

    def resnet101(pretrained=False, width_mult=1):
        return official.resnet.ResNet(official.resnet.Bottleneck, blocks, width_mult)

    class SmallBert(transformers.BertModel):
        @classmethod
        def from_pretrained(cls, name, *args, **kwargs):
            if name != "bert-base-uncased":
                raise RuntimeError(f"no hub here: {name}")
            return transformers.BertModel(transformers.BertConfig(**BERT_BASE, **spec["bert"]))

    torch.hub.load, official.resnet.resnet101, official.encoders.BertModel = hub_load, resnet101, SmallBert
    try:
        yield
    finally:
        torch.hub.load, official.resnet.resnet101, official.encoders.BertModel = saved


def options(official, spec: dict, data_path: str):
    """The training options of a model: the official parser's defaults, then the task's."""
    opt = official.arguments.get_argument_parser().parse_args([])
    opt.data_path, opt.data_name = data_path, "coco"
    opt.precomp_enc_type = "basic" if spec["variant"] == "region" else "backbone"
    opt.backbone_source = {"wsl": "wsl", "detector": "detector", "region": "detector"}[spec["variant"]]
    opt.backbone_path = ""
    opt.embed_size, opt.batch_size, opt.workers = spec["embed_size"], spec["batch_size"], 0
    if spec.get("input_scale_factor") is not None:
        opt.input_scale_factor = spec["input_scale_factor"]
    else:  # checkpoints from before the option: RawImageDataset then keeps 256
        del opt.input_scale_factor
    return opt


class IdsAsLists:
    """The official test loader, each batch's ``ids`` a list: ``collate_fn`` returns them as a tuple, which
    ``encode_data`` uses as a NumPy index (``img_embs[ids]``); with CUDA, the loader's ``pin_memory=True`` turned the
    tuple into a list, and without it the tuple stays one (an IndexError)."""

    def __init__(self, loader):
        self.loader, self.dataset, self.batch_size = loader, loader.dataset, loader.batch_size

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            yield (*batch[:-1], list(batch[-1]))


def embed(official, model, tokenizer, opt, split: str, backbone: bool):
    """``encode_data`` over the official test loader of ``split``: its image and caption embeddings."""
    loader = official.image_caption.get_test_loader(split, "coco", tokenizer, opt.batch_size, 0, opt)
    import torch

    with torch.no_grad():
        return official.evaluation.encode_data(model, IdsAsLists(loader), logging=logger.debug, backbone=backbone)


def evaluate(task: dict) -> None:
    from reference_weights import randomise  # this script's folder, first on its path

    stub_torchvision_meta_registrations()
    import cv2
    import imageio
    import torch
    import transformers

    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # forward_emb's .cuda(): no GPU here
    official = import_official(Path(task["reference"]))
    out = Path(task["out"])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = transformers.BertTokenizer(task["vocab"])
    arrays, summary = {}, {"models": {}}
    for spec in task["models"]:
        torch.manual_seed(spec["seed"])
        opt = options(official, spec, task["data_path"])
        with small_backbones(official, spec):
            model = official.VSEModel(opt)
        randomise([model.img_enc, model.txt_enc], spec["seed"])
        model.make_data_parallel()
        checkpoint = Path(spec["checkpoint"])
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"epoch": 1, "model": model.state_dict(), "best_rsum": 0.0, "opt": opt, "Eiters": 1},
                   checkpoint)  # train.py's save_checkpoint
        model.val_start()
        backbone = spec["variant"] != "region"
        name = spec["name"]
        images, _ = embed(official, model, tokenizer, opt, "images", backbone)
        _, ground_truth = embed(official, model, tokenizer, opt, "gt", backbone)
        _, adversarial = embed(official, model, tokenizer, opt, "adv", backbone)
        arrays.update({f"{name}/images": images, f"{name}/gt": ground_truth, f"{name}/adv": adversarial})
        five = np.array(task["five_captions"])  # the first five captions of each image: what i2t and t2i take
        originals = images[:task["num_images"]]
        sims = official.evaluation.compute_sim(originals, ground_truth[five])
        r, _ = official.evaluation.i2t(len(originals), sims, return_ranks=True)
        ri, _ = official.evaluation.t2i(len(originals), sims, return_ranks=True)
        summary["models"][name] = {"i2t": list(map(float, r)), "t2i": list(map(float, ri))}
        logger.info("%s: i2t %s, t2i %s", name, r, ri)
    for source in ("wsl", "detector"):  # what the official loader makes of every image, at every input size
        for factor in task["scale_factors"]:
            spec = {"variant": source, "embed_size": 8, "batch_size": 1, "input_scale_factor": factor}
            dataset = official.image_caption.RawImageDataset(task["data_path"], "coco", "pixels", tokenizer,
                                                              options(official, spec, task["data_path"]), False)
            arrays[f"pixels/{source}/{factor}"] = np.stack([dataset[index][0].numpy()
                                                            for index in range(len(dataset))])
    captions = sorted({caption for path in task["caption_files"] for record in json.loads(Path(path).read_text())
                       for caption in record["caption"]})
    process = official.image_caption.process_caption
    summary["token_ids"] = {caption: [int(value) for value in process(
        tokenizer, tokenizer.basic_tokenizer.tokenize(caption), train=False).tolist()] for caption in captions}
    summary["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "cv2": cv2.__version__,
                           "imageio": imageio.__version__, "numpy": np.__version__}
    np.savez(out / "reference.npz", **arrays)
    (out / "reference.json").write_text(json.dumps(summary))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("evaluate",))
    parser.add_argument("task", type=Path, help="the task: a JSON file written by the test")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="vse_infty_official_run: %(message)s")
    evaluate(json.loads(args.task.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
