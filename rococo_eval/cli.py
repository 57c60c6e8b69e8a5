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
import contextlib
import errno
import logging
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import rococo_eval.validity as validity
from rococo_eval.catalog import ATTACKS, CLEAN, DIRECTIONS, SEEDS, select_attacks
from rococo_eval.detection import CUSTOM, ORDER_CONTRADICTION_LEVEL
from rococo_eval.io.download import DEFAULT_IMAGE_WORKERS, MAX_DEFAULT_IMAGE_WORKERS, default_cache_dir
from rococo_eval.layout import ORDERS, describe_orders
from rococo_eval.models.cache import DEFAULT_BATCH_SIZE
from rococo_eval.models.families import MODEL_FORMS, PRECISIONS
from rococo_eval.processes import DEFAULT_TIMEOUT, launched, rank_device
from rococo_eval.scoring.rerank import DEFAULT_CANDIDATES
from rococo_eval.version import __version__

logger = logging.getLogger("rococo_eval")

DEFAULT_OUT = "rococo-report"
QUIET_HELP = ("drop the progress bars, the notes (what was read, how long it took) and the model libraries' "
              f"messages; never the errors, nor the warnings about the numbers ({', '.join(validity.KINDS)}), which "
              "the report records too")
_SPEC = re.compile(r"[a-z0-9_]+(:[a-z0-9_]*){0,2}")


class CommandError(Exception):
    """A problem the user can fix; printed as ``rococo-eval: error: <message>`` with exit status 1, each argument it
    names in backticks written as the command's option (:func:`as_flags`, :func:`option_flags`)."""


def main(argv=None) -> int:
    """Run the command line; return the exit status: 0 done, 1 error, 130 interrupted.

    Errors the user can fix are printed as one line on stderr; argparse's usage errors raise
    ``SystemExit(2)`` as usual.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose, args.quiet, progress_notes=args.command == "run")
    where = ""
    try:
        launch = launched()
        where = f"rank {launch[0]} of {launch[1]}: " if launch and launch[1] > 1 else ""  # who failed, in a launch
    except ValueError as error:
        print(f"rococo-eval: error: {error}", file=sys.stderr)
        return 1
    try:
        with _quiet_libraries(args.quiet), removed_if_left_empty(output_folders(args)):
            args.handler(args)
    except KeyboardInterrupt:
        print(f"rococo-eval: {where}interrupted; the embeddings (and ITM scores) finished so far are cached: run the "
              "same command again to resume", file=sys.stderr)
        return 130
    except (CommandError, ValueError, ImportError, OSError) as error:
        logger.debug("details", exc_info=True)
        print(f"rococo-eval: {where}error: {as_flags(str(error), option_flags(parser, args))}", file=sys.stderr)
        return 1
    except Exception:
        if where:
            print(f"rococo-eval: {where}failed (the traceback follows); run the same command again to resume from the "
                  "cache", file=sys.stderr)
        raise
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
    for add in (_add_run_command, _add_score_command, _add_attack_command, _add_report_commands,
                _add_leaderboard_command, _add_worker_command):
        add(commands)
    return parser


def _add_run_command(commands) -> None:
    """``rococo-eval run``: a model in, its report out."""
    run = commands.add_parser("run", help="embed RoCOCO with a model, score every gallery, write the report",
                              description="Embed RoCOCO's captions and images with a model (cached by model and "
                                          "data; an interrupted run resumes), score both clean galleries and each "
                                          "attack, and write the report.")
    run.add_argument("--model", action="append", default=[],
                     help="the model, in one of these forms: " + "; ".join(map(str, MODEL_FORMS))
                          + ". Give it again for more models, evaluated in turn, each report in --out/<model>/ and "
                          "their comparison in --out/table.*")
    run.add_argument("--models-file", help="a file of model names, one per line (# starts a comment), after --model's")
    run.add_argument("--shard-models", action="store_true",
                     help="launched as several processes (torchrun, srun): each evaluates whole models alone (model i "
                          "on rank i mod N, on its own GPU) instead of all of them sharing each model's work")
    run.add_argument("--process-timeout", type=_positive_int, default=int(DEFAULT_TIMEOUT.total_seconds() // 60),
                     metavar="MINUTES",
                     help="launched as several processes: how long one waits for the others at the end of a stage "
                          f"(default {int(DEFAULT_TIMEOUT.total_seconds() // 60)}: a day; a process that is done "
                          "waits there for the slowest)")
    run.add_argument("--attacks", default="all",
                     help="comma-separated attacks, or 'all', 'text', 'image' (default all): "
                          + ", ".join(ATTACKS))
    run.add_argument("--images-dir", help="COCO root holding val2014/COCO_val2014_*.jpg (default: <cache>/coco)")
    run.add_argument("--download-images", action="store_true",
                     help="fetch the 5,000 COCO test images into <cache>/coco first (resumable)")
    run.add_argument("--cache-dir", help="cache of embeddings and downloads (default $ROCOCO_CACHE_DIR or "
                                         "~/.cache/rococo-eval)")
    run.add_argument("--batch-size", type=_positive_int, default=DEFAULT_BATCH_SIZE,
                     help=f"items per forward pass (default {DEFAULT_BATCH_SIZE})")
    run.add_argument("--precision", choices=PRECISIONS, default=PRECISIONS[0],
                     help=f"model dtype (default {PRECISIONS[0]})")
    run.add_argument("--workers", type=_non_negative_int, default=DEFAULT_IMAGE_WORKERS,
                     help="threads that read, alter and preprocess images ahead of the model, plus one tokenizing the "
                          f"captions (0: none; default: CPUs, at most {MAX_DEFAULT_IMAGE_WORKERS})")
    run.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    run.add_argument("--rerank-k", type=_positive_int, default=DEFAULT_CANDIDATES,
                     help="for BLIP/BLIP-2 retrieval models: candidates per query re-scored by the ITM head "
                          f"(k_test; default {DEFAULT_CANDIDATES}, as the official evaluation)")
    run.add_argument("--save-scores", metavar="DIR",
                     help="also write each gallery's score matrix (float32 .npy, official order, named for "
                          "`rococo-eval score DIR/*.npy`) into DIR")
    run.add_argument("--compact-scores", action="store_true",
                     help="with --save-scores, for BLIP/BLIP-2: write each gallery as a compact .npz instead (each "
                          "query's --rerank-k re-ranked candidates and their scores, the rest at -100: the same "
                          "numbers from 20 to 100 times fewer bytes)")
    run.add_argument("--save-embeddings", metavar="FILE.safetensors",
                     help="also write every item set's embeddings into one .safetensors file (about 33 times smaller "
                          "than the score matrices), which `rococo-eval score FILE` and the Space score as `run` does")
    run.set_defaults(handler=run_command)
    _add_source_options(run)


def _add_score_command(commands) -> None:
    """``rococo-eval score``: score files in, their report out."""
    score = commands.add_parser("score", help="write the report from score files you already have",
                                description="Score matrices (queries x gallery, higher = more similar) in .npy, "
                                            ".npz or .safetensors files. Give each as PATH, its gallery read from "
                                            "its shape and file name (rand_voca.npy, blip_mix_seed10.npy), or as "
                                            "ATTACK:DIRECTION:ORDER=PATH, any part of which may be left out "
                                            "(rand_voca:dataset=PATH). An attacked image-to-text gallery has the "
                                            f"same shape in either order, {describe_orders()}: give its ORDER, or "
                                            "it is read from the scores when they clearly show it, and refused when "
                                            "they do not. A re-ranker's compact file (run --compact-scores: "
                                            "top_columns, top_scores, fill, num_gallery) is scored as its full "
                                            "matrix; an embeddings file (run --save-embeddings) as run scores it.")
    score.add_argument("files", nargs="+", metavar="FILE", help="[ATTACK:DIRECTION:ORDER=]PATH")
    score.add_argument("--images-dir", help="COCO root holding val2014/: needed for an embeddings file, whose image "
                                            "fingerprints are checked against the images")
    score.add_argument("--model-name", metavar="NAME",
                       help="the model the files are of: the report's title, model-card.md's name and `table`'s row")
    score.add_argument("--trust-order", action="store_true",
                       help="score an attacked image-to-text gallery in the ORDER given (or named in the file name) "
                            "even when its scores are significantly against it (a one-sided sign test below "
                            f"{ORDER_CONTRADICTION_LEVEL:g}, the level the refusal names), "
                            "which is refused otherwise; the report and stderr then warn of it")
    score.set_defaults(handler=score_command)
    _add_source_options(score)


def _add_attack_command(commands) -> None:
    """``rococo-eval attack``: a benchmark folder of the user's image-text set."""
    attack = commands.add_parser(
        "attack", help="make RoCOCO attacks of your own image-text set (a benchmark folder)",
        description="Attack a captioned image set as RoCOCO attacks COCO (text attacks with Embedding-Influence word "
                    "choice, mix/patch image attacks) and write a benchmark folder: a Parquet dataset with a card, "
                    "plus the files `run`/`score --benchmark` read. INPUT: a Karpathy/BLIP-style JSON "
                    "([{\"image\": PATH, \"caption\": [...]}]), a CSV or JSONL with one row per caption, or a "
                    "folder that datasets.load_dataset reads.")
    attack.add_argument("input", metavar="INPUT", help="annotation JSON, CSV, JSONL, or Hugging Face dataset folder")
    attack.add_argument("--out", required=True, help="the benchmark folder to create")
    attack.add_argument("--image-root", help="folder the image paths are relative to (default: INPUT's folder)")
    attack.add_argument("--strategies", nargs="+", default=["all"],
                        help="any of same_concept diff_concept rand_voca danger mix patch, or text, image, all "
                             "(default all); commas work too")
    attack.add_argument("--seeds", nargs="+", type=_non_negative_int, default=list(SEEDS),
                        help="image attack seeds (default RoCOCO's 1 10 100)")
    attack.add_argument("--seed", type=_non_negative_int, default=0, help="text attack seed (default 0)")
    attack.add_argument("--per-image", type=_positive_int,
                        help="adversarial captions per image (default: the smallest number of captions of an image)")
    attack.add_argument("--encoder", help="text encoder of the Embedding-Influence scores (default "
                                          "sentence:all-MiniLM-L6-v2; open_clip:... and hf:... text towers work)")
    attack.add_argument("--image-column", default="image", help="image column of a CSV, JSONL or dataset")
    attack.add_argument("--caption-column", default="caption", help="caption (or caption-list) column")
    attack.add_argument("--split", help="the split of a dataset with several")
    attack.add_argument("--batch-size", type=_positive_int, help="captions per encoder batch")
    attack.add_argument("--device", help="torch device of the encoder (default: cuda when available, else cpu)")
    attack.add_argument("--cache-dir", help="cache of the encoder's embeddings, resumable (default: encodings/ in "
                                            "$ROCOCO_CACHE_DIR or ~/.cache/rococo-eval)")
    attack.add_argument("--workers", type=_positive_int, help="threads making altered images")
    attack.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    _add_logging_options(attack)
    attack.set_defaults(handler=attack_command)


def _add_report_commands(commands) -> None:
    """``rococo-eval table``, ``compare`` and ``from-mteb``: reports in, reports out."""
    table = commands.add_parser("table", help="compare reports: one row per model, R@1 of every gallery",
                                description="Merge the reports of several models (folders that `run` or `score` "
                                            "wrote) into one comparison: table.csv, table.md and table.png, with "
                                            "the clean and attacked R@1 of every gallery and each image method's "
                                            "mean over its seeds.")
    table.add_argument("reports", nargs="+", metavar="REPORT_DIR", help="a report folder (or its report.json)")
    table.add_argument("--out", default=".", help="folder of table.csv, table.md, table.png (default: here)")
    _add_logging_options(table)
    table.set_defaults(handler=table_command)

    compare = commands.add_parser(
        "compare", help="compare two reports query by query: which R@1 differences are real",
        description="For every gallery both reports hold: both R@1, their paired difference A - B with its 95%% "
                    "interval and the exact McNemar test's p-value, and for attacked galleries whether the "
                    "robustness drop (clean R@1 - R@1) differs (docs/space.md, \"Which ranks are real\"). Reports of "
                    "different galleries or query sets are refused.")
    compare.add_argument("report_a", metavar="REPORT_A", help="a report folder (or its report.json)")
    compare.add_argument("report_b", metavar="REPORT_B", help="another report folder, of the same galleries")
    _add_logging_options(compare)
    compare.set_defaults(handler=compare_command)

    from_mteb = commands.add_parser(
        "from-mteb", help="write the report of an MTEB run of the RoCOCO tasks",
        description="Turn the results folder of `mteb.evaluate` on the RoCOCO tasks (rococo_eval.mteb_tasks: its "
                    "ResultCache folder, or one model's folder in it) into the report that `run` writes, so that "
                    "`table` and the Space's leaderboard read it as they read run's (docs/harness.md).")
    from_mteb.add_argument("results", metavar="MTEB_RESULTS_DIR", help="MTEB's results folder, for one model")
    from_mteb.add_argument("--model-name", help="the report's model name (default: MTEB's name of the model)")
    from_mteb.add_argument("--out", default=DEFAULT_OUT, help=f"report folder (default ./{DEFAULT_OUT})")
    _add_logging_options(from_mteb)
    from_mteb.set_defaults(handler=from_mteb_command)


def _add_leaderboard_command(commands) -> None:
    """``rococo-eval leaderboard migrate``: the Space's leaderboard records."""
    board = commands.add_parser("leaderboard", help="the Space's leaderboard in its dataset repo",
                                description="Work on the records of the Space's leaderboard in a dataset repo "
                                            "(docs/space.md).")
    board_commands = board.add_subparsers(dest="action", required=True)
    migrate = board_commands.add_parser(
        "migrate", help="turn a repo's old leaderboard.jsonl into records, once",
        description="Turn the old board of a dataset repo (leaderboard.jsonl, which the Space wrote before records) "
                    "into one record per submitted row, committed in one commit of new files; the published rows "
                    "are left out (the code holds them), leaderboard.jsonl stays. It prints what it does first, and "
                    "refuses when some rows are records already, unless --skip-existing. The token is $HF_TOKEN "
                    "(or the one `hf auth login` saved); $HF_ENDPOINT names a Hub other than huggingface.co.")
    migrate.add_argument("--repo", required=True, metavar="ORG/NAME", help="the dataset repo")
    migrate.add_argument("--skip-existing", action="store_true",
                         help="migrate the rows that are not records yet, leaving out those that are")
    migrate.add_argument("--dry-run", action="store_true", help="print what it would do, and commit nothing")
    migrate.add_argument("--annotations-dir", help="folder of the official annotation files, for the galleries' "
                                                   "shapes (default $ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
    _add_logging_options(migrate)
    migrate.set_defaults(handler=migrate_command)


def _add_worker_command(commands) -> None:
    """``rococo-eval worker``: the board's requests evaluated (:mod:`rococo_eval.board.worker`)."""
    from rococo_eval.board.worker import add_arguments as add_worker_arguments, worker_command

    worker = commands.add_parser(
        "worker", help="evaluate the board's requests: models from the Hub, at the commits requested",
        description="Claim the requests of the Space's requests repo one at a time (so that two workers never take "
                    "the same one), evaluate each model at its requested commit as `run` does, and commit its "
                    "result record, with its provenance, to the board's dataset repo (docs/space.md). The token is "
                    "$HF_TOKEN; $HF_ENDPOINT names a Hub other than huggingface.co.")
    add_worker_arguments(worker)
    _add_logging_options(worker)
    worker.set_defaults(handler=worker_command)


def _add_source_options(command) -> None:
    """The options of ``run`` and ``score``: which source (RoCOCO's files or a benchmark), and where the report goes."""
    command.add_argument("--annotations-dir", help="folder of the official annotation files "
                                                   "(default $ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
    command.add_argument("--benchmark", help="a benchmark folder made by `rococo-eval attack`, instead of RoCOCO "
                                             "(its images default to the folder it records)")
    command.add_argument("--out", default=DEFAULT_OUT, help=f"report folder (default ./{DEFAULT_OUT})")
    _add_logging_options(command)


def _add_logging_options(command) -> None:
    """``--quiet`` and ``--verbose``, which every subcommand takes."""
    command.add_argument("--quiet", "-q", action="store_true", help=QUIET_HELP)
    command.add_argument("--verbose", "-v", action="count", default=0, help="more log lines (-vv: debug)")


def run_command(args) -> Path:
    """``rococo-eval run``: embed, score, report, for each model. Returns the report folder (of the last model;
    ``--out`` itself with ``--shard-models``).

    Launched as several processes (torchrun, ``accelerate launch``, ``srun``), they share each model's work
    (:mod:`rococo_eval.processes`) and rank 0 writes the report; with ``--shard-models`` each evaluates whole
    models alone instead.
    """
    import datetime

    from rococo_eval.data.source import open_source
    from rococo_eval.processes import ONE, join

    models = _checked_models(args)
    benchmark = (open_source(args.annotations_dir, images_dir=args.images_dir, benchmark=args.benchmark)
                 if args.benchmark else None)
    attacks = select_attacks(args.attacks, *((benchmark.text_attacks, benchmark.image_attacks) if benchmark else ()))
    out = writable_folder(args.out)
    for option, folder in (("--save-scores", args.save_scores),
                           ("--save-embeddings", args.save_embeddings and Path(args.save_embeddings).parent)):
        if folder:
            writable_folder(folder, option)
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()
    launch = launched()
    if args.shard_models and not (launch and launch[1] > 1):
        raise CommandError("--shard-models spreads the models over the processes of a launch (torchrun, srun), but "
                           "this is one process")
    images_dir = benchmark.images_dir if benchmark is not None else _coco_images(args, cache_dir, launch)
    processes = ONE if args.shard_models else join(args.device, datetime.timedelta(minutes=args.process_timeout))
    source = benchmark if benchmark is not None else processes.main_first(  # rank 0 fetches the annotation files
        lambda: open_source(args.annotations_dir, images_dir=images_dir, cache_dir=cache_dir))
    if args.shard_models:
        return _run_shard(args, models, source, attacks, images_dir, cache_dir, out, launch)
    several = len(models) > 1
    try:
        device = rank_device(processes, args.device)
        folders = []
        for name in models:
            folder = model_folder(out, name) if several else out
            _run_model(args, name, source, attacks, images_dir, cache_dir, folder,
                       _scores_folder(args.save_scores, name, several), processes, device)
            folders.append(folder)
        if processes.is_main and several:
            from rococo_eval.reporting.table import write_table

            paths = write_table(folders, out)
            if not args.quiet:
                print(f"rococo-eval: the {len(models)} models compared in {paths['markdown']}", file=sys.stderr)
        elif not processes.is_main:
            logger.info("%s: done; rank 0 writes the report%s", processes.name, "s" if several else "")
    finally:
        processes.leave()
    return folders[-1]


def _checked_models(args) -> list[str]:
    """``run``'s models, each name's files and form checked, and what it saves beside the report: before the images
    and any work."""
    from rococo_eval.models.adapters import check_model_name
    from rococo_eval.scoring.galleries import check_saving

    models = model_names(args.model, args.models_file)
    for name in models:
        check_model_name(name)
    check_saving(save_scores=args.save_scores, compact_scores=args.compact_scores, save_embeddings=args.save_embeddings)
    if args.save_embeddings and len(models) > 1:
        raise CommandError(f"--save-embeddings {args.save_embeddings!r}: one file holds one model's embeddings; give "
                           "one model")
    return models


def _coco_images(args, cache_dir: Path, launch) -> Path:
    """The COCO root of a RoCOCO ``run``: ``--images-dir``, or ``<cache>/coco``, filled first with
    ``--download-images`` (in one process: ``launch`` is :func:`~rococo_eval.processes.launched`'s)."""
    from rococo_eval.data.source import fetch_images, open_source

    images_dir = Path(args.images_dir).expanduser() if args.images_dir else cache_dir / "coco"
    if args.download_images:
        if launch and launch[1] > 1:
            raise CommandError("--download-images in a launch of several processes: fetch the images once first "
                               "(rococo-eval run --download-images in one process), then launch with --images-dir")
        fetch_images(open_source(args.annotations_dir, cache_dir=cache_dir), images_dir,
                     workers=max(1, args.workers), progress=_progress(args))
    elif not args.images_dir and not (images_dir / "val2014").is_dir():
        raise CommandError("every RoCOCO gallery needs the 5,000 COCO test images (the image-to-text queries and the "
                           "text-to-image gallery): pass --images-dir COCO_ROOT (the folder holding val2014/), or "
                           f"--download-images to fetch them (about 800 MB) into {images_dir}")
    return images_dir


def _run_shard(args, models: list[str], source, attacks, images_dir: Path, cache_dir: Path, out: Path,
               launch) -> Path:
    """``run --shard-models``: this process evaluates the models of its rank (model i on rank i mod N, ``launch``
    being :func:`~rococo_eval.processes.launched`'s) alone, on its own GPU, with no process group. Returns ``out``."""
    from rococo_eval.processes import ONE

    rank, world, local_rank = launch
    several = len(models) > 1
    mine = [name for number, name in enumerate(models) if number % world == rank]
    device = f"cuda:{local_rank}" if args.device in (None, "cuda") and _cuda_available() else args.device
    for name in mine:
        _run_model(args, name, source, attacks, images_dir, cache_dir, model_folder(out, name),
                   _scores_folder(args.save_scores, name, several), ONE, device)
    logger.info("rank %d of %d: %d of the %d models done (%s)%s", rank, world, len(mine), len(models),
                ", ".join(mine) or "none", f"; compare them all with: rococo-eval table {out}/*/" if several else "")
    return out


def compare_command(args) -> None:
    """``rococo-eval compare``: print the paired comparison of two reports
    (:mod:`rococo_eval.reporting.compare`) on stdout."""
    from rococo_eval.reporting.compare import check_comparable, compare_outcomes, comparison_text, report_outcomes
    from rococo_eval.reporting.table import read_reports

    names = ("REPORT_A", "REPORT_B")
    reports = [read_reports([path])[0] for path in (args.report_a, args.report_b)]
    outcomes = [report_outcomes(folder, report, name) for (folder, report), name in zip(reports, names)]
    check_comparable(reports[0][1], reports[1][1], *outcomes, names=names)
    labels = [f"{report.meta.get('model') or Path(folder).name} ({folder})" for folder, report in reports]
    print(comparison_text(compare_outcomes(*outcomes), *labels), end="")


def _run_model(args, name: str, source, attacks, images_dir: Path, cache_dir: Path, out: Path, scores_dir,
               processes, device) -> None:
    """Evaluate one model (:func:`rococo_eval.evaluation.evaluate_model`) into the report folder ``out`` (and its
    score files into ``scores_dir`` when not None), written by rank 0 of ``processes``; print its table.

    Every process passes the same options (each checks them before any work); only rank 0 writes.
    """
    from rococo_eval.evaluation import evaluate_model
    from rococo_eval.models.adapters import load_model
    from rococo_eval.reporting.report import to_text_table

    model = load_model(name, device=device, precision=args.precision)
    embeddings = Path(args.save_embeddings).expanduser() if args.save_embeddings else None
    report = evaluate_model(model, source, attacks=attacks, out=out, cache_dir=cache_dir, batch_size=args.batch_size,
                            workers=args.workers, rerank_k=args.rerank_k, save_scores=scores_dir,
                            compact_scores=args.compact_scores, save_embeddings=embeddings,
                            progress=_progress(args), processes=processes,
                            meta={"precision": args.precision, "images_dir": str(images_dir)})
    if report is not None:  # rank 0 of processes
        print(to_text_table(report.summary))
        if not args.quiet:
            print(f"rococo-eval: report written to {out}", file=sys.stderr)


def model_names(given: list, models_file=None) -> list[str]:
    """The models of ``run``: each ``--model``, then the lines of ``--models-file`` (blank lines and ``#`` comments
    left out), each once.

    Example:
        >>> model_names(["hf:a", "hf:b", "hf:a"])
        ['hf:a', 'hf:b']
        >>> model_names([])
        Traceback (most recent call last):
        ...
        rococo_eval.cli.CommandError: no model: give --model NAME (again for more) or --models-file FILE
    """
    names = list(given)
    if models_file:
        try:
            text = Path(models_file).expanduser().read_text(encoding="utf-8")
        except OSError as error:
            raise CommandError(f"cannot read --models-file {str(models_file)!r}: {error.strerror or error}") from None
        names += [line.split("#", 1)[0].strip() for line in text.splitlines()]
    names = list(dict.fromkeys(name for name in names if name))
    if not names:
        raise CommandError("no model: give --model NAME (again for more) or --models-file FILE"
                           + (f" ({str(models_file)!r} names none)" if models_file else ""))
    return names


def model_folder(out: Path, name: str) -> Path:
    """The report folder of model ``name`` among several: ``out/<name, made safe for a path>``.

    Example:
        >>> model_folder(Path("reports"), "open_clip:ViT-B-32/openai")
        PosixPath('reports/open_clip-ViT-B-32-openai')
    """
    return Path(out) / (re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "model")


def _scores_folder(save_scores, name: str, several: bool):
    """Where ``--save-scores`` puts a model's score files: the folder itself, or its model folder among several."""
    if not save_scores:
        return None
    return model_folder(Path(save_scores), name) if several else Path(save_scores)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def score_command(args) -> Path:
    """``rococo-eval score``: score files in, report out. Returns the report folder.

    Every file's gallery is settled before any is scored (:func:`rococo_eval.scoring.plan.plan_score_files`), so
    a file that cannot be placed stops the command before the work.
    """
    from rococo_eval.data.source import open_source
    from rococo_eval.scoring.embeddingsfile import is_embeddings_file
    from rococo_eval.scoring.consistency import report_entries
    from rococo_eval.scoring.plan import (
        GalleryFacts,
        PlanError,
        PlanPolicy,
        ScoreRequest,
        disagreements_of,
        plan_score_files,
        report_meta,
        score_planned,
    )

    started = time.perf_counter()
    model = _model_entry(args)
    out = writable_folder(args.out)
    embeddings = any(is_embeddings_file(path) for _, path in map(split_file_argument, args.files))
    source = open_source(args.annotations_dir, benchmark=args.benchmark,
                         **({"images_dir": args.images_dir} if embeddings and args.images_dir else {}))
    attacks = source.text_attacks + source.image_attacks
    if embeddings:
        return _score_embeddings_file(args, source, out, model, started)
    requests = []
    for spec, path in map(split_file_argument, args.files):
        attack, direction, order = parse_layout_spec(spec, attacks)
        requests.append(ScoreRequest(path, attack=attack, direction=direction, order=order))
    with validity.recorded() as warnings:
        try:
            plans = plan_score_files(requests, GalleryFacts.of(source), PlanPolicy(
                ask_order=_ask_order_by_spec, trust_given_order=args.trust_order, fix_order=_fix_order_by_spec))
            results = score_planned(plans)
        except PlanError as error:
            raise CommandError(str(error)) from None
        found = disagreements_of(plans, results)
    meta = {**model, **report_meta(plans), **report_entries(found), **validity.report_entries(warnings)}
    _report(results, out, meta, args.quiet, source, time.perf_counter() - started)
    return out


def table_command(args) -> Path:
    """``rococo-eval table``: reports in, one comparison out (:mod:`rococo_eval.reporting.table`). Returns the
    Markdown table's path."""
    from rococo_eval.reporting.table import comparison, read_reports, to_markdown, warnings_of, write_table

    reports = read_reports(args.reports)
    for warning in warnings_of(reports):  # what the reports warn of their numbers, which the comparison shows
        validity.warn("%s", warning)
    paths = write_table(args.reports, writable_folder(args.out))
    print(to_markdown(*comparison(reports)))
    if not args.quiet:
        print(f"rococo-eval: {len(reports)} reports compared in {', '.join(str(path) for path in paths.values())}",
              file=sys.stderr)
    return paths["markdown"]


def from_mteb_command(args) -> Path:
    """``rococo-eval from-mteb``: MTEB's results of the RoCOCO tasks in, run's report out
    (:func:`rococo_eval.harness.mteb_results.report_from_mteb`). Returns the report folder."""
    from rococo_eval.harness.mteb_results import report_from_mteb
    from rococo_eval.reporting.report import to_text_table

    out = writable_folder(args.out)  # checked, not made: report_from_mteb reads and checks the results first
    report = report_from_mteb(args.results, out=out, model_name=args.model_name)
    print(to_text_table(report.summary))
    if not args.quiet:
        print(f"rococo-eval: the report of {report.meta['model']} is in {out}", file=sys.stderr)
    return out


def migrate_command(args) -> list[dict]:
    """``rococo-eval leaderboard migrate``: a repo's ``leaderboard.jsonl`` into records
    (:mod:`rococo_eval.board.migration`), said on stdout before it is done. Returns the records committed."""
    from rococo_eval.data.source import open_source
    from rococo_eval.board.leaderboard import rococo_galleries
    from rococo_eval.board.migration import LEGACY_BOARD, commit_migration, plan_migration
    from rococo_eval.board.records import record_path

    galleries = rococo_galleries(open_source(args.annotations_dir).captions_per_image)
    migration = plan_migration(args.repo, galleries)
    print(f"{LEGACY_BOARD} of {args.repo}: {len(migration.records)} row(s) to turn into records, "
          f"{len(migration.existing)} that are records already, {migration.published} published (left out: the "
          "code holds them)")
    for record in migration.records:
        print(f"  {record_path(record)}  {record['model']}  ({record['submitted_at']})")
    for number, model in migration.existing:
        print(f"  line {number}: {model} is a record already")
    if migration.existing and not args.skip_existing:
        raise CommandError(f"{len(migration.existing)} row(s) of {LEGACY_BOARD} are records already (was it migrated "
                           "before?): nothing was committed; pass --skip-existing to migrate the others only")
    if args.dry_run or not migration.records:
        print("nothing committed" + (" (--dry-run)" if args.dry_run else ": no row to migrate"))
        return []
    url = commit_migration(migration)
    print(f"committed {len(migration.records)} record(s): {url}")
    return migration.records


def _score_embeddings_file(args, source, out: Path, model: dict, started: float) -> Path:
    """``rococo-eval score FILE.safetensors``: every gallery that the embeddings file covers, as ``run`` scores it
    (``model``: the ``--model-name`` entry, over the file's own name; ``started``: the command's start)."""
    from rococo_eval.scoring.embeddingsfile import score_embeddings_file

    paths = [split_file_argument(argument)[1] for argument in args.files]
    results, meta, _ = score_embeddings_file(paths, source)
    _report(results, out, {**meta, **model}, args.quiet, source, time.perf_counter() - started)
    return out


def attack_command(args) -> Path:
    """``rococo-eval attack``: a benchmark folder of the user's image-text set. Returns the folder."""
    from rococo_eval.data.benchmark import make_benchmark

    from rococo_eval.processes import join

    strategies = [name.strip() for part in args.strategies for name in part.split(",") if name.strip()]
    options = {"encoder": args.encoder} if args.encoder else {}
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir() / "encodings"
    processes = join(args.device)
    try:
        out = make_benchmark(args.input, args.out, image_root=args.image_root, strategies=strategies,
                             seeds=args.seeds, seed=args.seed, per_image=args.per_image,
                             image_column=args.image_column, caption_column=args.caption_column, split=args.split,
                             batch_size=args.batch_size, device=rank_device(processes, args.device),
                             cache_dir=cache_dir, workers=args.workers, overwrite=args.overwrite,
                             progress=_progress(args) and processes.is_main, processes=processes, **options)
    finally:
        processes.leave()
    if not args.quiet and processes.is_main:
        print(f"rococo-eval: benchmark written to {out}", file=sys.stderr)
    return out


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


def parse_layout_spec(spec: str, attacks=ATTACKS) -> tuple[str, str, str]:
    """The ``(attack, direction, order)`` a ``score`` argument's ``ATTACK:DIRECTION:ORDER`` gives ("" = not given).

    Each part is known by its value, so any may be left out: ``rand_voca:dataset`` gives the attack and
    the order, ``dataset`` only the order. ``attacks`` are the attacks known: RoCOCO's, or a generated
    benchmark's (which may have other seeds, ``mix_seed7``).

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
    kinds = {"attack": (CLEAN,) + tuple(attacks) + (CUSTOM,), "direction": DIRECTIONS, "order": ORDERS}
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


def writable_folder(path, option: str = "--out") -> Path:
    """Check that files can be written in folder ``path``, or that it can be made (its nearest existing parent is a
    folder that files can be written in), without making it: the writers make it with their first file, so a command
    refused before that leaves nothing behind. Raise CommandError naming ``option`` and the folder.

    Example:
        >>> import tempfile
        >>> folder = writable_folder(Path(tempfile.mkdtemp()) / "report")
        >>> folder.name, folder.exists()
        ('report', False)
    """
    folder = Path(path).expanduser()
    nearest = next(parent for parent in (folder, *folder.parents) if parent.exists())
    try:
        if not nearest.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{str(nearest)!r} is a file")
        with tempfile.TemporaryFile(dir=nearest):  # made and removed at once (O_TMPFILE: never seen in the folder)
            pass
    except OSError as error:
        raise CommandError(f"cannot write to {option} folder {str(folder)!r}: {error.strerror or error}") from None
    return folder


def output_folders(args) -> list[Path]:
    """The folders that the command ``args`` writes into: ``--out``, ``--save-scores``, ``--save-embeddings``' folder.

    Example:
        >>> args = build_parser().parse_args(["run", "--model", "hf:m", "--save-embeddings", "e/m.safetensors"])
        >>> output_folders(args)
        [PosixPath('rococo-report'), PosixPath('e')]
    """
    embeddings = getattr(args, "save_embeddings", None)
    folders = (getattr(args, "out", None), getattr(args, "save_scores", None), embeddings and Path(embeddings).parent)
    return [Path(folder).expanduser() for folder in folders if folder]


@contextlib.contextmanager
def removed_if_left_empty(folders):
    """Remove again, when the command fails, the folders of ``folders`` that did not exist before it, with the parents
    made for them, where they hold no file: a failed command leaves no empty folder behind. A folder that existed
    before is never touched, and a file is never removed (what a command wrote before failing is kept).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> with removed_if_left_empty([root / "new" / "report"]):
        ...     (root / "new" / "report" / "scores").mkdir(parents=True)
        ...     raise OSError("disk full")
        Traceback (most recent call last):
        ...
        OSError: disk full
        >>> list(root.iterdir())
        []
    """
    new = {folder: [folder, *(parent for parent in folder.parents if not parent.exists())]
           for folder in folders if not folder.exists()}
    try:
        yield
    except BaseException:
        for folder, made in new.items():
            for path in [*sorted(folder.rglob("*"), reverse=True), *made]:  # the deepest first
                with contextlib.suppress(OSError):  # not a folder, not empty, or not there
                    path.rmdir()
        raise


def _ask_order_by_spec(choice, request) -> str:
    """How ``score`` asks for an order the file does not show: as an ``ATTACK:DIRECTION:ORDER`` spec."""
    path = request.path
    return (f"give it as ATTACK:DIRECTION:ORDER=PATH, here {choice.attack}:{choice.direction}:official={path} or "
            f"{choice.attack}:{choice.direction}:dataset={path}")


def _fix_order_by_spec(choice, request) -> str:
    """How ``score`` says to fix a stated order that the scores contradict: the other spec, or ``--trust-order``."""
    favoured = choice.order_decision.favoured
    return (f"give it as {choice.attack}:{choice.direction}:{favoured}={request.path}, or add --trust-order to score "
            f"it in the {choice.order} order all the same")


def _model_entry(args) -> dict:
    """The report's ``model`` that ``score --model-name`` gives (none without it: the report is as before)."""
    name = (args.model_name or "").strip()
    if args.model_name is not None and not name:
        raise CommandError(f"--model-name {args.model_name!r} is blank: give the model's name, or leave the option out")
    return {"model": name} if name else {}


def _report(results: dict, out: Path, meta: dict, quiet: bool, source, seconds: float) -> None:
    """Write the report (:func:`rococo_eval.reporting.report.write_report`) of ``results`` (GalleryResults by
    gallery key), print its table on stdout and, unless ``quiet``, on stderr how long reading and scoring the files took
    (``seconds``; never in the report, which stays the same for the same files)."""
    from rococo_eval.reporting.report import to_text_table, write_report
    from rococo_eval.results import build_report

    report = build_report(results, meta, source)
    write_report(report, out)
    print(to_text_table(report.summary))
    if not quiet:
        galleries = f"{len(results)} galler{'y' if len(results) == 1 else 'ies'}"
        print(f"rococo-eval: {galleries} scored in {seconds:.2f} s; report written to {out}", file=sys.stderr)


def _progress(args) -> bool:
    return not args.quiet and sys.stderr.isatty()


def option_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The flag of each option of the command ``args`` was parsed for, by the name of its argument (its ``dest``): the
    table :func:`as_flags` writes arguments with. It is read from the actions of ``parser`` and of each subcommand
    ``args`` chose, so it is the parser's own spelling; positionals, ``--help`` and ``--version`` have no argument.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--top", "-k", dest="k", type=int)
        >>> _ = parser.add_argument("files", nargs="*")
        >>> option_flags(parser, parser.parse_args([]))
        {'k': '--top'}
    """
    flags = {}
    while parser is not None:
        chosen = None
        for action in parser._actions:  # argparse lists no actions publicly
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None))
            elif action.option_strings and action.default is not argparse.SUPPRESS:
                flags[action.dest] = max(action.option_strings, key=len)
        parser = chosen
    return flags


def as_flags(message: str, flags: dict[str, str]) -> str:
    """``message`` of a check below the command, with each argument it names in backticks (```compact_scores```)
    written as the command's option (``--compact-scores``), from ``flags`` (:func:`option_flags`); the checks live
    once, in the functions the command calls. A name that is no argument of the command stays as it is.

    Example:
        >>> as_flags("`compact_scores` needs `save_scores`; `k` is fine",
        ...          {"compact_scores": "--compact-scores", "save_scores": "--save-scores"})
        '--compact-scores needs --save-scores; `k` is fine'
    """
    return re.sub(r"`([a-z_]+)`", lambda match: flags.get(match.group(1), match.group(0)), message)


def _configure_logging(verbose: int, quiet: bool, progress_notes: bool = False) -> None:
    """Notes of this package at the chosen level on stderr: errors only with ``quiet``; else warnings, or with
    ``progress_notes`` (``run``) also the INFO lines that say what is done and how fast (one per item set
    embedded, per gallery scored), which is the progress a log or CI job sees; each ``-v`` one level more.
    Validity warnings (:mod:`rococo_eval.validity`) keep their own level: ``quiet`` never drops them; each reads
    ``rococo-eval: warning: ...``, apart from the notes."""
    try:
        launch = launched()
    except ValueError:
        launch = None  # main says what is wrong
    rank = f"[rank {launch[0]}]" if launch and launch[1] > 1 else ""  # whose line, in a launch of several
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"rococo-eval{rank}: %(kind)s%(message)s"))
    handler.addFilter(_mark_warnings)
    logging.basicConfig(handlers=[handler])
    levels = (logging.WARNING, logging.INFO, logging.DEBUG)[1 if progress_notes else 0:]
    logger.setLevel(logging.ERROR if quiet else levels[min(verbose, len(levels) - 1)])


def _mark_warnings(record: logging.LogRecord) -> bool:
    """Sets a warning about the numbers (:mod:`rococo_eval.validity`) apart from the notes on stderr:
    ``rococo-eval: warning: ...``.

    Example:
        >>> record = logging.LogRecord(validity.VALIDITY_LOGGER, logging.WARNING, "", 0, "the files disagree", (), None)
        >>> _mark_warnings(record), record.kind
        (True, 'warning: ')
    """
    record.kind = "warning: " if record.name == validity.VALIDITY_LOGGER else ""
    return True


_LIBRARY_LOGGERS = ("transformers", "huggingface_hub", "datasets", "open_clip", "timm", "torch")
_QUIET_ENVIRONMENT = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
                      "TRANSFORMERS_VERBOSITY": "error", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


@contextlib.contextmanager
def _quiet_libraries(quiet: bool):
    """With ``quiet``: no progress bars, notes or warnings from the model libraries for the command's duration.

    Libraries not imported yet read the environment when they are; those already imported are switched off
    (and back on after). Python warnings are ignored inside.
    """
    if not quiet:
        yield
        return
    saved_environment = {name: os.environ.get(name) for name in _QUIET_ENVIRONMENT}
    saved_levels = {name: logging.getLogger(name).level for name in _LIBRARY_LOGGERS}
    os.environ.update(_QUIET_ENVIRONMENT)
    for name in _LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    switched_off = [switch for switch in _progress_bar_switches() if switch[0]()]
    for _, disable, _ in switched_off:
        disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for _, _, enable in switched_off:
            enable()
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        for name, value in saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _progress_bar_switches():
    """``(enabled, disable, enable)`` of the progress bars of transformers, huggingface_hub and datasets,
    for those already imported."""
    switches = []
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
        switches.append((lambda: not are_progress_bars_disabled(), disable_progress_bars, enable_progress_bars))
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging
        switches.append((transformers_logging.is_progress_bar_enabled, transformers_logging.disable_progress_bar,
                         transformers_logging.enable_progress_bar))
    if "datasets" in sys.modules:
        import datasets
        switches.append((datasets.is_progress_bar_enabled, datasets.disable_progress_bars,
                         datasets.enable_progress_bars))
    return switches


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

