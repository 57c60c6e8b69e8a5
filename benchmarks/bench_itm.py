"""ITM pairs per second of BLIP and BLIP-2, with each image's cross-attention keys and values computed once
(:mod:`rococo_eval.models.blip`), against ``transformers``' own forward, measured in one run.

    python benchmarks/bench_itm.py [--models blip blip2] [--repeat 3]
        [--batch-size 64] [--plain-pairs 64] [--threads N]
        [--blip2-vision-layers 39] [--device cpu|cuda]

The models are random (no weights can be downloaded here), at the sizes of the real checkpoints:

- BLIP: ``Salesforce/blip-itm-base-coco``'s architecture: ViT-B/16 at 384 x 384 (577 image tokens of width
  768), a BERT-base text encoder (12 layers, width 768, 12 heads) with cross-attention in every layer;
- BLIP-2: ``Salesforce/blip2-itm-vit-g``'s architecture: ViT-g/14 at 224 x 224 (257 image tokens of width 1408,
  39 layers unless ``--blip2-vision-layers`` says fewer; the ITM stage reads only their output), a BERT-base
  Q-Former with 32 query tokens and cross-attention in every second layer. That is the size of the BLIP-2 ITM
  checkpoint (1.17 billion parameters, 4.7 GB in fp32), and it fits this machine.

The captions are random sentences of 5 to 20 words, tokenized as the adapter does (padded to 35 tokens), with
BLIP's vocabulary size. The image features are the model's own vision output for random images (its time per
image is printed; it is the same on both paths). Two workloads of pairs, both sorted by image, as the Reranker
sends them, in calls of ``--batch-size`` pairs:

- image-to-text: one image with 256 captions (its top k = 256);
- text-to-image-like: 8 images with 1, 2, 4, ..., 64 and 129 pairs (256 pairs), as images that are among a few
  or many captions' top 256.

The cached path scores the whole workload; ``transformers``' forward, whose cost per pair does not depend on how
the pairs are grouped, scores its first ``--plain-pairs`` pairs in calls of the same size. After one warm-up call
of each path, the two paths alternate for ``--repeat`` runs: rates are medians over the runs, ratios the median
of each run's ratio (this machine's speed drifts over minutes, and other work shares its cores).

Printed besides: the largest difference between the two paths' scores on the pairs both scored (fp32), the bf16
scores of a few pairs against fp32, the memory of one image's keys and values (the tensors' own sizes, in fp32
and bf16), and the time of the 7.7 million ITM pairs that ``docs/reproduce.md`` counts for a full run's two clean
galleries at k = 256, at the image-to-text rate.
"""

import argparse
import copy
import os
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rococo_eval.models.adapters import TorchModel  # noqa: E402
from rococo_eval.models.blip import Blip2Reranker, BlipReranker, ImageFeatures  # noqa: E402

FULL_RUN_PAIRS = 7.7e6  # docs/reproduce.md: (5,000 + 25,010) x 256 for the clean galleries at k = 256
TEXT_TO_IMAGE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 129)
WORDS = ["a", "an", "the", "man", "woman", "dog", "cat", "on", "in", "of", "with", "riding", "sitting", "table",
         "street", "red", "blue", "two", "is", "and", "bus", "kite", "pizza", "horse", "beach", "plate", "field"]
BERT_VOCABULARY = 30522  # BLIP's tokenizer: bert-base-uncased, then [DEC] and [ENC]


def tokenizer(folder: Path):
    """A word-piece tokenizer with BERT-base's vocabulary size and BLIP's ``[DEC]`` (``[ENC]`` is the next id)."""
    import transformers

    tokens = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + list(string.ascii_lowercase)))
    tokens += [f"unused{index}" for index in range(BERT_VOCABULARY - len(tokens))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    made = transformers.BertTokenizer(str(folder / "vocab.txt"))
    made.add_special_tokens({"bos_token": "[DEC]"})
    return made


def blip_base(blip2: bool, vision_layers: int):
    """A random ``BlipForImageTextRetrieval`` (BLIP-base) or ``Blip2ForImageTextRetrieval`` (ViT-g) model."""
    import transformers

    bert = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
    if blip2:
        config = transformers.Blip2Config(
            vision_config=dict(hidden_size=1408, intermediate_size=6144, num_hidden_layers=vision_layers,
                               num_attention_heads=16, image_size=224, patch_size=14),
            qformer_config=dict(bert, vocab_size=BERT_VOCABULARY + 1, encoder_hidden_size=1408,
                                cross_attention_frequency=2, use_qformer_text_input=True),
            num_query_tokens=32, image_text_hidden_size=256)
        return transformers.Blip2ForImageTextRetrieval(config)
    config = transformers.BlipConfig(
        vision_config=dict(bert, image_size=384, patch_size=16),
        text_config=dict(bert, vocab_size=BERT_VOCABULARY + 2, encoder_hidden_size=768,
                         bos_token_id=BERT_VOCABULARY, sep_token_id=102, pad_token_id=0),
        image_text_hidden_size=256)
    return transformers.BlipForImageTextRetrieval(config)


def load(which: str, folder: Path, vision_layers: int, device: str, precision: str = "fp32"):
    import transformers

    started = time.perf_counter()
    model = blip_base(which == "blip2", vision_layers)
    size = 224 if which == "blip2" else 384
    processor = transformers.BlipImageProcessor(size={"height": size, "width": size})
    adapter = (Blip2Reranker if which == "blip2" else BlipReranker)(
        which, TorchModel(which, device, precision), model, tokenizer(folder), processor)
    return adapter, time.perf_counter() - started


def captions(count: int, rng) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(5, 21))) for _ in range(count)]


def workloads() -> dict[str, np.ndarray]:
    """Image positions of each workload's pairs (sorted by image)."""
    return {"image-to-text (1 image x 256 captions)": np.zeros(256, dtype=np.int64),
            "text-to-image-like (8 images, 1-129 pairs each)": np.repeat(np.arange(len(TEXT_TO_IMAGE_COUNTS)),
                                                                          TEXT_TO_IMAGE_COUNTS)}


def score(model, hidden, positions, tokens, batch_size: int, reuse: bool) -> tuple[float, np.ndarray]:
    """Seconds to score the pairs in calls of ``batch_size`` (a fresh :class:`ImageFeatures`: nothing held)."""
    model.reuse_image_keys_values = reuse
    features = ImageFeatures(hidden)
    started = time.perf_counter()
    scores = [model.match(features, positions[first:first + batch_size], tokens[first:first + batch_size])
              for first in range(0, len(positions), batch_size)]
    return time.perf_counter() - started, np.concatenate(scores)


def keys_values_bytes(model, hidden) -> int:
    """Bytes of one image's cross-attention keys and values, all layers: what a match call holds for its last
    image (the tensors themselves, measured after a one-pair call)."""
    features = ImageFeatures(hidden[:1])
    model.reuse_image_keys_values = True
    model.match(features, [0], model.tokenize(["a dog"]))
    return sum(tensor.numel() * tensor.element_size() for pair in features.held.values() for tensor in pair)


def bench(which: str, args, folder: Path) -> None:
    model, built = load(which, folder, args.blip2_vision_layers, args.device)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)) for _ in TEXT_TO_IMAGE_COUNTS]
    started = time.perf_counter()
    hidden = model.image_features(images).hidden
    vision = (time.perf_counter() - started) / len(images)
    text = model.model.qformer.config if which == "blip2" else model.model.text_encoder.config
    cross_layers = sum(1 for layer in (model.model.qformer.encoder.layer if which == "blip2"
                                       else model.model.text_encoder.encoder.layer)
                       if getattr(layer, "has_cross_attention", True))
    print(f"\n## {which}: image tokens {hidden.shape[1]} x width {hidden.shape[2]}; {text.num_hidden_layers} "
          f"{'Q-Former' if which == 'blip2' else 'text'} layers of width {text.hidden_size}, {cross_layers} with "
          f"cross-attention; built in {built:.0f} s; vision pass {vision:.2f} s per image (both paths)")
    print("\n| workload | path | pairs timed | pairs/s: median (range) | x transformers: median of the runs' (range) |")
    print("|---|---|---|---|---|")
    rates, notes = {}, []
    for workload, positions in workloads().items():
        tokens = model.tokenize(captions(len(positions), rng))
        plain = min(args.plain_pairs, len(positions))
        score(model, hidden, positions[:2], tokens[:2], args.batch_size, reuse=False)  # warm-up
        score(model, hidden, positions[:2], tokens[:2], args.batch_size, reuse=True)
        runs = {True: [], False: []}
        for _ in range(args.repeat):  # the two paths alternate, so that each run's ratio sees one machine speed
            for reuse, count in ((False, plain), (True, len(positions))):
                elapsed, scores = score(model, hidden, positions[:count], tokens[:count], args.batch_size, reuse)
                runs[reuse].append((count / elapsed, scores))
        ratios = [cached / plain_rate for (cached, _), (plain_rate, _) in zip(runs[True], runs[False])]
        for reuse, name in ((False, "transformers' forward"), (True, "keys and values once per image")):
            values = [rate for rate, _ in runs[reuse]]
            rates[(workload, reuse)] = statistics.median(values)
            ratio = (f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})" if reuse
                     else "1.00")
            print(f"| {workload} | {name} | {len(positions) if reuse else plain} | {rates[(workload, reuse)]:.2f} "
                  f"({min(values):.2f}-{max(values):.2f}) | {ratio} |")
        difference = np.abs(runs[True][-1][1][:plain] - runs[False][-1][1]).max()
        notes.append(f"{workload}: largest |difference| between the two paths' fp32 scores {difference:.2e}")
    print("\n" + "\n".join(notes))
    fp32_bytes = keys_values_bytes(model, hidden)
    plain_i2t, cached_i2t = (rates[(next(iter(workloads())), reuse)] for reuse in (False, True))
    print(f"keys and values of one image, all {cross_layers} cross-attention layers: {fp32_bytes / 1e6:.1f} MB in "
          f"fp32", end="")
    if which == "blip":
        bf16 = BlipReranker(which, TorchModel(which, args.device, "bf16"), copy.deepcopy(model.model), model.tokenizer,
                            model.processor)
        hidden16 = bf16.image_features(images[:2]).hidden
        print(f", {keys_values_bytes(bf16, hidden16) / 1e6:.1f} MB in bf16")
        tokens = model.tokenize(captions(8, rng))
        positions = np.repeat([0, 1], 4)
        _, reference = score(model, hidden, positions, tokens, 8, reuse=False)
        _, cached16 = score(bf16, hidden16, positions, tokens, 8, reuse=True)
        _, plain16 = score(bf16, hidden16, positions, tokens, 8, reuse=False)
        print(f"bf16 against fp32 (transformers' forward), 8 pairs: largest |difference| "
              f"{np.abs(cached16 - reference).max():.3f} (transformers' forward in bf16: "
              f"{np.abs(plain16 - reference).max():.3f}); the fp32 scores span {np.ptp(reference):.3f}")
    else:
        print(" (the Q-Former stays in fp32 at every precision)")
    print(f"{FULL_RUN_PAIRS / 1e6:.1f}M ITM pairs at the image-to-text rate: "
          f"{FULL_RUN_PAIRS / cached_i2t / 86400:.1f} days (transformers' forward: "
          f"{FULL_RUN_PAIRS / plain_i2t / 86400:.1f} days)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=("blip", "blip2"), default=["blip", "blip2"])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each path and workload (median)")
    parser.add_argument("--batch-size", type=int, default=64, help="pairs per match call")
    parser.add_argument("--plain-pairs", type=int, default=64, help="pairs of each workload timed on the plain path")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: the CPUs)")
    parser.add_argument("--blip2-vision-layers", type=int, default=39,
                        help="BLIP-2's vision layers (39, ViT-g; fewer changes only the vision pass)")
    parser.add_argument("--device", default="cpu", help="torch device of the models (cpu, cuda, cuda:1, ...)")
    args = parser.parse_args(argv)
    for name in ("repeat", "batch_size", "plain_pairs", "threads", "blip2_vision_layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}, "
          f"{args.threads} threads, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start; {args.batch_size} pairs a "
          f"call, medians of {args.repeat} runs")
    with tempfile.TemporaryDirectory() as folder:
        for which in args.models:
            bench(which, args, Path(folder))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
