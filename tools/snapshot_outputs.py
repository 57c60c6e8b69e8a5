"""Write what the front ends produce on fixed inputs, so that a refactoring can be shown to change no byte of it.

    python tools/snapshot_outputs.py OUT [--annotations DIR] [--quick] [--work DIR]

Into ``OUT`` (which must not exist) go, each in its own folder:

- ``score/``: ``rococo-eval score`` of real-layout matrices made from RoCOCO's annotations (the clean image-to-text
  gallery, ``rand_voca`` in the official order, ``mix_seed1``), seeded noise with planted signal;
- ``compact/``: ``rococo-eval score`` of a compact (top-16) file of the same ``rand_voca`` matrix;
- ``space/``: the Space's download for the same three files (:func:`rococo_eval.space.logic.evaluate_files` and
  :func:`rococo_eval.space.logic.write_outputs`);
- ``run-clip/`` and ``run-blip/``: ``rococo-eval run`` of a tiny random CLIP (with ``--save-embeddings``) and a tiny
  random BLIP (``--rerank-k 5``) on a benchmark generated from a 12-image set (the tests' helpers);
- ``embeddings/``: ``rococo-eval score`` of the CLIP run's embeddings file;

The inputs are made in ``--work`` (default ``/tmp/rococo-snapshot-inputs``, emptied first), one fixed folder, since
the reports name the files and models they read. ``SHA256SUMS`` holds the digest of every ``report.json`` and ``per_query.parquet``. Run it before and after a change
and compare: ``diff BEFORE/SHA256SUMS AFTER/SHA256SUMS``. Everything is seeded, so two runs of one commit agree.
``--quick`` leaves out the real-layout matrices (about 3 GB and a minute).
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--annotations", default=os.environ.get("ROCOCO_ANNOTATIONS_DIR"),
                        help="the RoCOCO annotations folder (default $ROCOCO_ANNOTATIONS_DIR)")
    parser.add_argument("--quick", action="store_true", help="leave out the real-layout matrices")
    parser.add_argument("--work", type=Path, default=Path("/tmp/rococo-snapshot-inputs"),
                        help="where the inputs are made (emptied first)")
    args = parser.parse_args(argv)
    if args.out.exists():
        parser.error(f"{args.out} exists: give a new folder")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    args.out.mkdir(parents=True)
    if not args.quick:
        if not args.annotations:
            parser.error("--annotations (or $ROCOCO_ANNOTATIONS_DIR) is needed for the real-layout matrices")
        _score_files(args.out, work, args.annotations)
    _run_models(args.out, work)
    sums = []
    for path in sorted(args.out.rglob("*")):
        if path.name in ("report.json", "per_query.parquet"):
            sums.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(args.out)}")
    (args.out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    print("\n".join(sums))
    return 0


def _score_files(out: Path, work: Path, annotations: str) -> None:
    from rococo_eval.cli import main as cli
    from rococo_eval.data.facts import GalleryFacts
    from rococo_eval.data.source import RococoSource
    from rococo_eval.io.savedscores import write_top_k
    from rococo_eval.layout import gallery_layout
    from rococo_eval.space.logic import evaluate_files, write_outputs

    source = RococoSource(annotations)
    captions = list(source.captions_per_image)
    paths = []
    for seed, (attack, direction) in enumerate([("clean", "image_to_text"), ("rand_voca", "image_to_text"),
                                                ("mix_seed1", "text_to_image")]):
        layout = gallery_layout(attack, direction, captions, "official")
        rng = np.random.default_rng(seed)
        scores = rng.standard_normal((layout.num_queries, layout.num_gallery), dtype=np.float32)
        for query, correct in enumerate(layout.references):
            scores[query, list(correct)] += 2.0
        scores[:, layout.adversarial] += 0.5
        path = work / f"snapshot_{attack}_{direction}.npy"
        np.save(path, scores)
        paths.append(path)
        if attack == "rand_voca":
            columns = np.argsort(-scores, axis=1, kind="stable")[:, :16]
            write_top_k(work / f"snapshot_{attack}_{direction}_official_order_top16.npz", columns,
                        np.take_along_axis(scores, columns, axis=1), -100.0, layout.num_gallery)
        del scores
    _cli(cli, ["score", *map(str, paths), "--out", str(out / "score"), "--annotations-dir", annotations])
    _cli(cli, ["score", str(work / "snapshot_rand_voca_image_to_text_official_order_top16.npz"), "--out",
               str(out / "compact"), "--annotations-dir", annotations])
    evaluation = evaluate_files([str(path) for path in paths], facts=GalleryFacts.of(source))
    (out / "space").mkdir()
    write_outputs(evaluation, out / "space")


def _run_models(out: Path, work: Path) -> None:
    from PIL import Image

    from helpers.image_text_set import captions_of
    from helpers.tiny_models import make_tiny_blip, make_tiny_hf_clip
    from rococo_eval.cli import main as cli
    from rococo_eval.data.benchmark import make_benchmark

    images = work / "image_set"
    (images / "images").mkdir(parents=True)
    records = []
    for i in range(12):
        pixels = np.random.default_rng(i).integers(0, 256, (40 + i, 56, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(images / "images" / f"{i:03d}.png")
        records.append({"image": f"images/{i:03d}.png", "caption": captions_of(i)})
    (images / "set.json").write_text(json.dumps(records))
    benchmark = make_benchmark(images / "set.json", work / "benchmark", seeds=[1, 7], cache_dir=work / "attack-cache")
    (work / "clip").mkdir()
    (work / "blip").mkdir()
    clip, blip = make_tiny_hf_clip(work / "clip"), make_tiny_blip(work / "blip")
    common = ["--benchmark", str(benchmark), "--batch-size", "4", "--quiet"]
    _cli(cli, ["run", "--model", clip, "--cache-dir", str(work / "cache-clip"), "--out", str(out / "run-clip"),
               "--save-embeddings", str(work / "clip.safetensors"), *common])
    _cli(cli, ["run", "--model", blip, "--rerank-k", "5", "--cache-dir", str(work / "cache-blip"), "--out",
               str(out / "run-blip"), *common])
    _cli(cli, ["score", str(work / "clip.safetensors"), "--benchmark", str(benchmark), "--out",
               str(out / "embeddings"), "--quiet"])


def _cli(cli, arguments) -> None:
    status = cli(arguments)
    if status != 0:
        raise SystemExit(f"rococo-eval {' '.join(arguments)} exited with {status}")


if __name__ == "__main__":
    sys.exit(main())
