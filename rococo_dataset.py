"""RoCOCO as a Hugging Face dataset: a ``datasets`` builder, and a command that exports and uploads it.

Configs (see :mod:`rococo_eval.data.configs`): the text attacks ``same_concept``, ``diff_concept``, ``rand_voca``,
``danger`` (splits ``original``: the 25,010 ground-truth captions, ``adversarial``: the 25,000 altered ones);
the image attacks ``mix_seed1``, ``mix_seed10``, ``mix_seed100``, ``patch_seed1``, ``patch_seed10``,
``patch_seed100`` (``original``: the 5,000 test images, ``adversarial``: their altered copies); and the query
sets ``captions`` and ``images`` (split ``test``).

Since ``datasets`` 4.0 a loading script cannot be used through ``load_dataset``; use the builder class
directly, or export Parquet files that ``load_dataset`` reads::

    python rococo_dataset.py export --out DIR [--configs NAME ...] [--annotations-dir DIR] [--images-dir COCO_ROOT]
    python rococo_dataset.py push DIR --repo-id OWNER/NAME [--private]
    python rococo_dataset.py mteb-stats DIR [--out FOLDER]    # MTEB's statistics of each task (docs/mteb.md)
    python rococo_dataset.py mteb-push DIR --owner OWNER --out FOLDER [--pin] [--private]

Builder keyword arguments (each also a :class:`RococoConfig` field):
    ``annotations_dir`` (or ``data_dir``): folder of the official annotation files; default
    ``$ROCOCO_ANNOTATIONS_DIR``, else the pinned files are downloaded (sha256-checked) into ``download_dir``.
    ``images_dir``: the COCO root holding ``val2014/``; default: the 5,000 test images are downloaded into
    ``<download_dir>/coco`` (resumable) when the config has images.
    ``download_dir``: where downloads go (default ``$ROCOCO_CACHE_DIR`` or ``~/.cache/rococo-eval``).
    ``image_base_url``: a mirror of COCO's image server laid out the same; default ``$ROCOCO_IMAGE_BASE_URL``,
    else COCO's server.
    ``workers``: threads making altered images (default: one per CPU, at most ``MAX_DEFAULT_IMAGE_WORKERS``).

Example:
    >>> import shutil, tempfile
    >>> cache = tempfile.mkdtemp()
    >>> builder = RococoDataset(config_name="rand_voca", cache_dir=cache)  # annotations: $ROCOCO_ANNOTATIONS_DIR
    >>> builder.download_and_prepare()
    >>> adversarial = builder.as_dataset(split="adversarial")
    >>> adversarial.num_rows, adversarial[0]["source_caption_index"], adversarial[0]["is_adversarial"]
    (25000, 0, True)
    >>> shutil.rmtree(cache)
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Optional

import datasets

from rococo_eval.version import __version__
from rococo_eval.data.annotations import OFFICIAL_REPOSITORY
from rococo_eval.data.configs import CONFIGS, config_features, config_splits
from rococo_eval.data.export import DATASET_CITATION, export_dataset, push_to_hub, source_for_configs, table_rows
from rococo_eval.io.download import COCO_IMAGE_BASE_URL, MAX_DEFAULT_IMAGE_WORKERS

_DESCRIPTION = """\
RoCOCO (Park et al., arXiv:2304.10727) adds slightly altered captions (one word replaced) or images (mixed
with or patched from another image) to the MS-COCO 5K retrieval gallery to stress-test image-text matching.
"""
_LICENSE = "annotations: MIT; captions: COCO annotations, CC BY 4.0; images: COCO terms of use (Flickr)"


@dataclass
class RococoConfig(datasets.BuilderConfig):
    """A RoCOCO config: the name says which; the fields say where the inputs are (see the module docstring)."""

    annotations_dir: Optional[str] = None
    images_dir: Optional[str] = None
    download_dir: Optional[str] = None
    image_base_url: Optional[str] = None
    workers: Optional[int] = None


class RococoDataset(datasets.GeneratorBasedBuilder):
    """The RoCOCO builder: one config per attack, plus the query sets ``captions`` and ``images``."""

    VERSION = datasets.Version(__version__)
    BUILDER_CONFIG_CLASS = RococoConfig
    BUILDER_CONFIGS = [RococoConfig(name=name, version=datasets.Version(__version__)) for name in CONFIGS]

    def _info(self):
        return datasets.DatasetInfo(description=_DESCRIPTION, features=config_features(self.config.name),
                                    homepage=OFFICIAL_REPOSITORY, license=_LICENSE, citation=DATASET_CITATION)

    def _split_generators(self, dl_manager):
        config = self.config
        source = source_for_configs([config.name], config.annotations_dir or config.data_dir, config.images_dir,
                                    config.download_dir, image_base_url=config.image_base_url)
        return [datasets.SplitGenerator(name=split, gen_kwargs={"source": source, "table": table})
                for split, table in config_splits(config.name).items()]

    def _generate_examples(self, source, table):
        yield from enumerate(table_rows(source, table, workers=self.config.workers))


def _mteb_command(args) -> str:
    """``mteb-stats`` and ``mteb-push`` (:mod:`rococo_eval.harness.mteb_upload`, the ``mteb`` extra): the files
    written, or each task's repository and revision, one a line."""
    from rococo_eval.harness import mteb_upload

    if args.command == "mteb-stats":
        folder = {"folder": args.out} if args.out else {}
        return "\n".join(str(path) for path in mteb_upload.write_statistics(args.folder, **folder))
    pinned = mteb_upload.push_tasks(args.folder, args.owner, args.out, token=args.token, private=args.private,
                                    endpoint=args.endpoint)
    if args.pin:
        mteb_upload.pin_revisions(pinned)
    return "\n".join(f"{name} {dataset['path']}@{dataset['revision']}" for name, dataset in pinned.items())


def main(argv=None) -> int:
    """The command line: ``export`` a Parquet folder, ``push`` it to the Hub. Prints the result's location."""
    parser = argparse.ArgumentParser(prog="rococo_dataset.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="write the configs as Parquet files plus a dataset card")
    export.add_argument("--out", required=True, help="folder to create")
    export.add_argument("--configs", nargs="+", metavar="NAME", choices=CONFIGS,
                        help=f"configs to export (default: all): {', '.join(CONFIGS)}")
    export.add_argument("--annotations-dir", help="official annotation files (default: "
                        "$ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
    export.add_argument("--images-dir", help="COCO root holding val2014/ (default: download the test images)")
    export.add_argument("--cache-dir", help="download cache (default: $ROCOCO_CACHE_DIR or ~/.cache/rococo-eval)")
    export.add_argument("--image-base-url", help="a mirror of COCO's image server (default: $ROCOCO_IMAGE_BASE_URL, "
                        f"else {COCO_IMAGE_BASE_URL})")
    export.add_argument("--workers", type=int,
                        help=f"threads making altered images (default: up to {MAX_DEFAULT_IMAGE_WORKERS})")
    export.add_argument("--no-queries", action="store_true",
                        help="do not add the query configs (images, captions) the chosen configs are scored with")
    export.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    push = commands.add_parser("push", help="upload an exported folder to a Hub dataset repository")
    push.add_argument("folder")
    push.add_argument("--repo-id", required=True, help="OWNER/NAME")
    push.add_argument("--private", action="store_true", help="create the repository as private")
    stats = commands.add_parser("mteb-stats", help="MTEB's descriptive statistics of each RoCOCO task of an export")
    stats.add_argument("folder", help="an exported folder")
    stats.add_argument("--out", help="folder of the <task>.json files (default: the upstream folder, "
                       "rococo_eval/harness/mteb_upstream/descriptive_stats/Image/Any2AnyRetrieval)")
    mteb_push = commands.add_parser("mteb-push", help="write each RoCOCO task of an export in MTEB's retrieval "
                                    "format and upload it to <owner>/<task>")
    mteb_push.add_argument("folder", help="an exported folder")
    mteb_push.add_argument("--owner", required=True, help="Hub user or organisation")
    mteb_push.add_argument("--out", required=True, help="folder for the tasks' MTEB-format folders")
    mteb_push.add_argument("--pin", action="store_true", help="write the repositories and revisions pushed into "
                           "the upstream task file (rococo_eval/harness/mteb_upstream/rococo_retrieval.py)")
    mteb_push.add_argument("--private", action="store_true", help="create the repositories as private")
    for command in (push, mteb_push):
        command.add_argument("--token", help="Hub token (default: the saved login or $HF_TOKEN)")
        command.add_argument("--endpoint", help="Hub endpoint (default: $HF_ENDPOINT or huggingface.co)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "export":
            result = export_dataset(args.out, args.configs, annotations_dir=args.annotations_dir,
                                    images_dir=args.images_dir, cache_dir=args.cache_dir,
                                    image_base_url=args.image_base_url, include_queries=not args.no_queries,
                                    workers=args.workers, overwrite=args.overwrite, progress=sys.stderr.isatty())
        elif args.command == "push":
            result = push_to_hub(args.folder, args.repo_id, token=args.token, private=args.private,
                                 endpoint=args.endpoint)
        else:
            result = _mteb_command(args)
    except (ValueError, OSError) as error:
        parser.exit(1, f"error: {error}\n")
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
