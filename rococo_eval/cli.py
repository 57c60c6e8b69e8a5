"""The ``rococo-eval`` command: from a model, or from score files, to a RoCOCO report.

``rococo-eval run --model open_clip:ViT-B-32/openai --images-dir COCO_ROOT`` embeds RoCOCO's captions and
images once (cached, resumable), scores both clean galleries and every attack, and writes the report;
``rococo-eval score rand_voca.npy mix_seed1=blip_t2i.npy ...`` reports on score matrices a user already has.
The report is ``report.json`` (every metric output), ``report.md`` (a Markdown table), ``recall.png``
(clean vs attacked R@1) in ``--out``, and the same table on the terminal.

Example:
    >>> main(["run", "--model", "clip"])  # prints "rococo-eval: error: unknown model name 'clip'; ..." to stderr
    1
"""

from __future__ import annotations

import argparse
import functools
import logging
import platform
import re
import sys
import tempfile
from pathlib import Path

from . import __version__
from .download import DEFAULT_IMAGE_WORKERS, MAX_DEFAULT_IMAGE_WORKERS, default_cache_dir
from .layout import ATTACKS, CLEAN, DIRECTIONS, IMAGE_ATTACKS, ORDERS, TEXT_ATTACKS, describe_orders
from .layout_detection import CUSTOM

logger = logging.getLogger("rococo_eval")

DEFAULT_OUT = "rococo-report"
_SPEC = re.compile(r"[a-z0-9_]+(:[a-z0-9_]*){0,2}")


class CommandError(Exception):
    """A problem the user can fix; printed as ``rococo-eval: error: <message>`` with exit status 1."""


def main(argv=None) -> int:
    """Run the command line; return the exit status: 0 done, 1 error, 130 interrupted.

    Errors the user can fix are printed as one line on stderr; argparse's usage errors raise
    ``SystemExit(2)`` as usual.
    """
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    try:
        args.handler(args)
    except KeyboardInterrupt:
        print("rococo-eval: interrupted; the embeddings finished so far are cached: run the same command again "
              "to resume", file=sys.stderr)
        return 130
    except (CommandError, ValueError, ImportError, OSError) as error:
        logger.debug("details", exc_info=True)
        print(f"rococo-eval: error: {error}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rococo-eval`` and its ``run`` and ``score`` subcommands.

    Example:
        >>> args = build_parser().parse_args(["run", "--model", "hf:openai/clip-vit-base-patch32", "--attacks", "text"])
        >>> args.attacks, args.precision, args.out
        ('text', 'fp32', 'rococo-report')
    """
    parser = argparse.ArgumentParser(prog="rococo-eval", description="RoCOCO robustness report of an image-text model.")
    parser.add_argument("--version", action="version", version=f"rococo-eval {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="embed RoCOCO with a model, score every gallery, write the report",
                              description="Embed RoCOCO's captions and images with a model (cached by model and "
                                          "data; an interrupted run resumes), score both clean galleries and each "
                                          "attack, and write the report.")
    run.add_argument("--model", required=True,
                     help="open_clip:ARCH/PRETRAINED (e.g. open_clip:ViT-B-32/openai; 'none' = random weights), "
                          "open_clip:hf-hub:ORG/REPO, open_clip:local-dir:PATH, or hf:REPO_OR_PATH")
    run.add_argument("--attacks", default="all",
                     help="comma-separated attacks, or 'all', 'text', 'image' (default all): "
                          + ", ".join(ATTACKS))
    run.add_argument("--images-dir", help="COCO root holding val2014/COCO_val2014_*.jpg (default: <cache>/coco)")
    run.add_argument("--download-images", action="store_true",
                     help="fetch the 5,000 COCO test images into <cache>/coco first (resumable)")
    run.add_argument("--cache-dir", help="cache of embeddings and downloads (default $ROCOCO_CACHE_DIR or "
                                         "~/.cache/rococo-eval)")
    run.add_argument("--batch-size", type=_positive_int, default=256, help="items per forward pass (default 256)")
    run.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32", help="model dtype (default fp32)")
    run.add_argument("--workers", type=_non_negative_int, default=DEFAULT_IMAGE_WORKERS,
                     help="threads that read and alter images ahead of the model (default: CPUs, at most "
                          f"{MAX_DEFAULT_IMAGE_WORKERS})")
    run.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    run.set_defaults(handler=run_command)

    score = commands.add_parser("score", help="write the report from score files you already have",
                                description="Score matrices (queries x gallery, higher = more similar) in .npy, "
                                            ".npz or .safetensors files. Give each as PATH, its gallery read from "
                                            "its shape and file name (rand_voca.npy, blip_mix_seed10.npy), or as "
                                            "ATTACK:DIRECTION:ORDER=PATH, any part of which may be left out "
                                            "(rand_voca:dataset=PATH). An attacked image-to-text gallery has the "
                                            f"same shape in either order, {describe_orders()}: give its ORDER, or "
                                            "it is read from the scores when they clearly show it, and refused when "
                                            "they do not.")
    score.add_argument("files", nargs="+", metavar="FILE", help="[ATTACK:DIRECTION:ORDER=]PATH")
    score.set_defaults(handler=score_command)

    for command in (run, score):
        command.add_argument("--annotations-dir", help="folder of the official annotation files "
                                                       "(default $ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
        command.add_argument("--out", default=DEFAULT_OUT, help=f"report folder (default ./{DEFAULT_OUT})")
        command.add_argument("--quiet", "-q", action="store_true", help="no progress bars and no notes")
        command.add_argument("--verbose", "-v", action="count", default=0, help="more log lines (-vv: debug)")
    return parser


def run_command(args) -> Path:
    """``rococo-eval run``: embed, score, report. Returns the report folder."""
    from .source import RococoSource, fetch_images
    from .embeddings import EmbeddingCache, score_model
    from .models import load_model, parse_model_name

    attacks = parse_attacks(args.attacks)
    parse_model_name(args.model)
    out = writable_folder(args.out)
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()
    images_dir = Path(args.images_dir).expanduser() if args.images_dir else cache_dir / "coco"
    if args.download_images:
        fetch_images(RococoSource(args.annotations_dir, cache_dir=cache_dir), images_dir,
                     workers=max(1, args.workers), progress=_progress(args))
    elif not args.images_dir and not (images_dir / "val2014").is_dir():
        raise CommandError("every RoCOCO gallery needs the 5,000 COCO test images (the image-to-text queries and the "
                           "text-to-image gallery): pass --images-dir COCO_ROOT (the folder holding val2014/), or "
                           f"--download-images to fetch them (about 800 MB) into {images_dir}")
    source = RococoSource(args.annotations_dir, images_dir=images_dir, cache_dir=cache_dir)
    model = load_model(args.model, device=args.device, precision=args.precision)
    cache = EmbeddingCache(cache_dir / "embeddings", batch_size=args.batch_size, workers=args.workers,
                           progress=_progress(args))
    results = score_model(model, source, attacks, cache)
    meta = {"model": model.name, "model_fingerprint": model.fingerprint, "precision": args.precision,
            "device": getattr(model, "device", None), "attacks": list(attacks), "images_dir": str(images_dir)}
    write_report(results, out, meta, quiet=args.quiet)
    return out


def score_command(args) -> Path:
    """``rococo-eval score``: score files in, report out. Returns the report folder.

    Every file's gallery is settled before any is scored, so a file that cannot be placed stops the command
    before the work.
    """
    import rococo_recall

    from .source import RococoSource
    from .report import gallery_key
    from .layout_detection import choose_layout
    from .scorefiles import read_header, read_scores

    out = writable_folder(args.out)
    given = [(spec, read_header(path)) for spec, path in map(split_file_argument, args.files)]
    source = RococoSource(args.annotations_dir)
    planned, files = [], {}
    for spec, info in given:
        path = info.path
        attack, direction, order = parse_layout_spec(spec)
        choice = choose_layout(info.shape, source.captions_per_image, path.name, attack, direction, order,
                               scores=functools.partial(read_scores, path, info.key))
        if choice.attack == CUSTOM:
            raise CommandError(f"{path}: custom layouts have no place in a RoCOCO report; score them with "
                               "rococo_recall directly")
        if not choice.order:
            raise CommandError(f"{path}: {choice.note}; give it as ATTACK:DIRECTION:ORDER=PATH, here "
                               f"{choice.attack}:{choice.direction}:official={path} or "
                               f"{choice.attack}:{choice.direction}:dataset={path}")
        key = gallery_key(choice.attack, choice.direction)
        if key in files:
            raise CommandError(f"{path}: gallery {key} was already given by {files[key]['path']}")
        decided = choice.order_decision.order if choice.order_decision else ""
        read_off_the_file = not spec or decided not in ("", order)  # or the scores dispute the given order
        (logger.warning if read_off_the_file else logger.info)("%s: %s", path, choice.note)
        files[key] = {"path": str(path), "order": choice.order, "note": choice.note}
        planned.append((key, info, choice))
    results = {}
    for key, info, choice in planned:
        layout = source.gallery(choice.attack, choice.direction, choice.order)
        results[key] = rococo_recall.rococo_recall(read_scores(info.path, info.key), **layout.metric_inputs())
    write_report(results, out, {"files": files}, quiet=args.quiet)
    return out


def parse_attacks(text: str) -> tuple[str, ...]:
    """The attacks named by ``--attacks``: a comma-separated list of attacks and the groups all, text, image.

    Example:
        >>> parse_attacks("rand_voca, image")
        ('rand_voca', 'mix_seed1', 'mix_seed10', 'mix_seed100', 'patch_seed1', 'patch_seed10', 'patch_seed100')
        >>> parse_attacks("rand")
        Traceback (most recent call last):
        ...
        rococo_eval.cli.CommandError: unknown attack 'rand'; choose from all, text, image, same_concept, ...
    """
    groups = {"all": ATTACKS, "text": TEXT_ATTACKS, "image": IMAGE_ATTACKS}
    chosen = []
    for name in (part.strip() for part in text.split(",")):
        if name not in groups and name not in ATTACKS:
            raise CommandError(f"unknown attack {name!r}; choose from " + ", ".join(list(groups) + list(ATTACKS)))
        chosen.extend(groups.get(name, (name,)))
    return tuple(attack for attack in ATTACKS if attack in chosen)


def split_file_argument(argument: str) -> tuple[str, Path]:
    """Split a ``score`` argument into its layout spec (may be empty) and its path.

    Example:
        >>> split_file_argument("mix_seed1:text_to_image=scores/t2i.npy")
        ('mix_seed1:text_to_image', PosixPath('scores/t2i.npy'))
        >>> split_file_argument("runs/a=b/rand_voca.npy")
        ('', PosixPath('runs/a=b/rand_voca.npy'))
    """
    spec, sep, path = argument.partition("=")
    if sep and _SPEC.fullmatch(spec):
        return spec, Path(path)
    return "", Path(argument)


def parse_layout_spec(spec: str) -> tuple[str, str, str]:
    """The ``(attack, direction, order)`` a ``score`` argument's ``ATTACK:DIRECTION:ORDER`` gives ("" = not given).

    Each part is known by its value, so any may be left out: ``rand_voca:dataset`` gives the attack and
    the order, ``dataset`` only the order.

    Example:
        >>> parse_layout_spec("rand_voca:image_to_text:dataset")
        ('rand_voca', 'image_to_text', 'dataset')
        >>> parse_layout_spec("rand_voca:dataset"), parse_layout_spec("")
        (('rand_voca', '', 'dataset'), ('', '', ''))
        >>> parse_layout_spec("rand_voca:i2t")
        Traceback (most recent call last):
        ...
        rococo_eval.cli.CommandError: 'i2t' in 'rand_voca:i2t' is not an attack, a direction or an order; ...
    """
    kinds = {"attack": (CLEAN,) + ATTACKS + (CUSTOM,), "direction": DIRECTIONS, "order": ORDERS}
    found = {kind: "" for kind in kinds}
    for part in filter(None, spec.split(":")):
        kind = next((kind for kind, values in kinds.items() if part in values), None)
        if kind is None:
            raise CommandError(f"{part!r} in {spec!r} is not an attack, a direction or an order; write "
                               f"ATTACK:DIRECTION:ORDER=PATH with ATTACK one of {', '.join(kinds['attack'])}, "
                               f"DIRECTION {' or '.join(DIRECTIONS)}, ORDER {' or '.join(ORDERS)}")
        if found[kind]:
            raise CommandError(f"{part!r} in {spec!r} gives a second {kind}")
        found[kind] = part
    return found["attack"], found["direction"], found["order"]


def writable_folder(path) -> Path:
    """Create ``path`` if needed and check that a file can be written in it; raise CommandError naming it.

    Example:
        >>> import tempfile
        >>> folder = writable_folder(Path(tempfile.mkdtemp()) / "report")
        >>> folder.is_dir()
        True
    """
    folder = Path(path).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise CommandError(f"cannot write the report to --out folder {str(folder)!r}: "
                           f"{error.strerror or error}") from None
    return folder


def write_report(results: dict, out: Path, meta: dict, quiet: bool = False) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``recall.png`` into ``out`` and print the table on stdout.

    Returns:
        the paths written, by kind (``json``, ``markdown``, ``chart``).
    """
    from .files import write_atomic
    from .report import plot_recall, summary_rows, to_markdown, to_text_table, write_json

    rows = summary_rows(results)
    meta = {"rococo_eval": __version__, "python": platform.python_version(), **meta}
    paths = {"json": write_json({"meta": meta, "results": results, "summary": rows}, out / "report.json")}
    title = f"# RoCOCO report: {meta['model']}\n\n" if "model" in meta else "# RoCOCO report\n\n"
    markdown = (title + to_markdown(rows) + "\n").encode("utf-8")
    paths["markdown"] = write_atomic(out / "report.md", lambda handle: handle.write(markdown))
    try:
        paths["chart"] = plot_recall(rows, out / "recall.png")
    except ImportError:
        logger.warning("matplotlib is not installed: no recall.png (pip install matplotlib)")
    print(to_text_table(rows))
    if not quiet:
        print(f"rococo-eval: report written to {out}", file=sys.stderr)
    return paths


def _progress(args) -> bool:
    return not args.quiet and sys.stderr.isatty()


def _configure_logging(verbose: int, quiet: bool) -> None:
    """Notes of this package at the chosen level on stderr; other libraries' warnings as usual."""
    logging.basicConfig(format="rococo-eval: %(message)s")
    logger.setLevel(logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)])


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value

