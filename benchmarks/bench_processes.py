"""What N processes cost against one: wall time of ``rococo-eval run`` in one process and under
``torchrun --nproc-per-node N`` (gloo on CPU, or NCCL with ``--device cuda``), measured in one run.

    python benchmarks/bench_processes.py [--processes 2] [--images 120] [--repeat 2] [--device cpu]

``--processes 1 --device cuda`` compares plain ``run`` with ``torchrun --nproc-per-node 1`` on one GPU.

The data is a benchmark generated here (``rococo-eval attack``'s API): ``--images`` random images with 5
captions each, every text and image attack. Two models with random weights, built here:

- a dual encoder, ``transformers``' CLIP at a small size (4 layers of width 256, 64 x 64 images);
- a two-stage model, ``transformers``' BLIP retrieval at a small size (4 text layers of width 256), k = 16.

Each run starts from an empty cache, so it embeds everything and computes every ITM pair; the times include
starting the processes and loading the model, as a user's run does. The one-process and N-process runs alternate
``--repeat`` times; the table gives the median seconds and the ratio (N processes / one), and checks that the
reports are identical. On a machine with fewer cores than processes no speed-up is expected: the processes share
the cores (each gets ``cores / N`` threads).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
NOUNS = ["dog", "horse", "woman", "bicycle", "table", "boat", "tree", "car", "pizza", "child", "kite", "bench"]
PLACES = ["beach", "street", "kitchen", "field", "park", "river"]


def image_text_set(folder: Path, images: int) -> Path:
    """A Karpathy-style JSON of ``images`` random images with 5 captions each."""
    rng = np.random.default_rng(0)
    (folder / "images").mkdir(parents=True)
    records = []
    for index in range(images):
        pixels = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        Image.fromarray(pixels).resize((96, 72), Image.Resampling.BILINEAR).save(folder / "images" / f"{index}.png")
        captions = [f"A {NOUNS[(index + k) % 12]} standing near the {PLACES[(index * 7 + k) % 6]} with a "
                    f"{NOUNS[(index * 5 + k + 3) % 12]}." for k in range(5)]
        records.append({"image": f"images/{index}.png", "caption": captions})
    (folder / "set.json").write_text(json.dumps(records))
    return folder / "set.json"


def models(folder: Path) -> dict[str, list[str]]:
    """The two random models, saved; ``{label: run arguments}``."""
    import torch
    import transformers

    letters = string.ascii_lowercase
    tokens = ["<|startoftext|>", "<|endoftext|>"] + list(letters) + [c + "</w>" for c in letters]
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(tokens)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    layers = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4)
    torch.manual_seed(0)
    clip = transformers.CLIPModel(transformers.CLIPConfig(
        text_config=dict(layers, vocab_size=len(tokens), max_position_embeddings=77, bos_token_id=0, eos_token_id=1,
                         pad_token_id=1),
        vision_config=dict(layers, image_size=64, patch_size=8), projection_dim=128))
    clip.save_pretrained(folder / "clip")
    transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt")).save_pretrained(folder / "clip")
    transformers.CLIPImageProcessor(size={"shortest_edge": 64}, crop_size={"height": 64, "width": 64}).save_pretrained(
        folder / "clip")
    words = sorted({word.strip(".").lower() for noun in NOUNS + PLACES for word in [noun]} |
                   {"a", "standing", "near", "the", "with"})
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + list(letters)
    (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    tokenizer = transformers.BertTokenizer(str(folder / "vocab.txt"))
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    blip = transformers.BlipForImageTextRetrieval(transformers.BlipConfig(
        vision_config=dict(layers, image_size=64, patch_size=8), image_text_hidden_size=128,
        text_config=dict(layers, vocab_size=len(tokenizer) + 1, max_position_embeddings=64, pad_token_id=0,
                         bos_token_id=tokenizer.bos_token_id, sep_token_id=3, encoder_hidden_size=256)))
    blip.save_pretrained(folder / "blip")
    tokenizer.save_pretrained(folder / "blip")
    transformers.BlipImageProcessor(size={"height": 64, "width": 64}).save_pretrained(folder / "blip")
    return {"CLIP (dual encoder)": ["--model", f"hf:{folder / 'clip'}"],
            "BLIP (two stages, k = 16)": ["--model", f"hf:{folder / 'blip'}", "--rerank-k", "16"]}


def timed(command: list[str], environment: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    if done.returncode:
        raise SystemExit(f"{' '.join(command[:6])} ... failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--images", type=int, default=120)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from rococo_eval.data.benchmark import make_benchmark

    cores = os.cpu_count()
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"{cores} CPUs, load average {os.getloadavg()[0]:.2f} at the start; {args.images} images x 5 captions, every "
          f"attack; {args.processes} processes against one, medians of {args.repeat} runs from an empty cache")
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        benchmark = make_benchmark(image_text_set(folder / "set", args.images), folder / "bench", seeds=[1],
                                   cache_dir=folder / "encodings")
        print("\n| model | one process (s) | torchrun, {n} processes (s) | {n} / one | reports |".format(
            n=args.processes))
        print("|---|---:|---:|---:|---|")
        for label, model in models(folder).items():
            times = {"plain": [], "torchrun": []}  # plain `run`, one process; torchrun of --processes
            for attempt in range(args.repeat):
                for launch in times:
                    name = f"{launch}-{attempt}"
                    arguments = ["run", *model, "--benchmark", str(benchmark), "--device", args.device, "--quiet",
                                 "--cache-dir", str(folder / f"cache-{name}"), "--out", str(folder / f"out-{name}")]
                    if launch == "plain":
                        command = [sys.executable, "-m", "rococo_eval", *arguments]
                        threads = {"OMP_NUM_THREADS": str(cores)}
                    else:
                        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   f"--nproc-per-node={args.processes}", "-m", "rococo_eval", *arguments]
                        threads = {"OMP_NUM_THREADS": str(max(1, cores // args.processes))}
                    times[launch].append(timed(command, {**environment, **threads}))
                    shutil.rmtree(folder / f"cache-{name}")
            reports = {(folder / f"out-{launch}-{attempt}" / "report.json").read_bytes()
                       for launch in times for attempt in range(args.repeat)}
            one, many = statistics.median(times["plain"]), statistics.median(times["torchrun"])
            print(f"| {label} | {one:.1f} | {many:.1f} | {many / one:.2f} | "
                  f"{'identical' if len(reports) == 1 else 'DIFFERENT'} |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
