"""Reports of RoCOCO results: summary rows, tables, a JSON file and a chart, shared by the Space and the CLI.

A report is a :class:`~rococo_eval.results.Report` (:func:`~rococo_eval.results.build_report`); its rows
(:class:`~rococo_eval.results.SummaryRow`) are one gallery's numbers (percentages as the metric gives them) with its
``attack`` and ``direction``, and for each image attack method the mean over its seeds (the paper's, or a generated
benchmark's). The tables also take rows as dicts (``report.json``'s, published numbers): :func:`summary_rows`.

Example:
    >>> from rococo_eval.catalog import gallery_key
    >>> results = {gallery_key("rand_voca", "image_to_text"): {"recall@1": 37.0, "clean_recall@1": 50.12}}
    >>> print(to_markdown(summary_rows(results)))
    | attack | direction | clean R@1 | R@1 |
    |---|---|---:|---:|
    | rand_voca | image-to-text | 50.12 | 37.00 |
    <BLANKLINE>
    - Numbers are percentages (0 to 100), with 2 decimals.
    - n/a: not defined (a clean gallery has no adversarial item: no false rate, no attack success).
    - clean R@K: R@K of the gallery without its adversarial items (the clean gallery's R@K)
    - R@K: share of the queries with a correct item among the K top-scored items of the gallery
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from rococo_eval.attacks.replacements import highlight
from rococo_eval.catalog import CLEAN, DIRECTIONS, direction_text
from rococo_eval.data.annotations import OFFICIAL_COMMIT, OFFICIAL_REPOSITORY
from rococo_eval.data.facts import GalleryFacts
from rococo_eval.data.source import ROCOCO_CARD_DATASET
from rococo_eval.io.atomic import write_atomic
from rococo_eval.reporting.analysis import (
    DEFAULT_MIN_COUNT,
    analyse,
    flipped_csv,
    most_damaging,
    write_per_query_parquet,
)
from rococo_eval.results import (
    DECIMALS,
    NOT_DEFINED,
    GalleryResult,
    GalleryResults,
    Report,
    SummaryRow,
    percent_text,
    summary_of,
)

logger = logging.getLogger(__name__)

_TEXT_COLUMNS = ("model", "file", "attack", "direction")
_TRAILING_COLUMNS = ("num_queries", "num_gallery", "num_adversarial", "source")
# Each column of the tables, by its name in a row (R@K: one column per K): its label and what it means, the one legend
# of every table (:func:`legend`). A clean gallery has no adversarial item, so no false rate and no attack success.
_COLUMNS = {
    "clean_recall@K": ("clean R@K", "R@K of the gallery without its adversarial items (the clean gallery's R@K)"),
    "clean_r_mean": ("clean r_mean", "r_mean of the gallery without its adversarial items"),
    "recall@K": ("R@K", "share of the queries with a correct item among the K top-scored items of the gallery"),
    "r_mean": ("r_mean", "the mean of the R@K shown (R@1, R@5 and R@10 by default)"),
    "false_rate": ("false rate", "share of the queries whose top-1 item is adversarial"),
    "attack_success_rate": ("attack success", "share of the queries right at rank 1 without the adversarial items "
                                              "that are wrong with them"),
    "num_queries": ("queries", "how many queries (a count)"),
    "num_gallery": ("gallery", "how many gallery items (a count)"),
    "num_adversarial": ("adversarial", "how many of them are adversarial (a count)"),
}
_NEEDS_ATTACK = ("false_rate", "attack_success_rate")  # not defined on a clean gallery
# What the brackets beside a number mean, by the suffix of the row's name that carries them
_INTERVALS = {
    "_ci": ("[a, b]", "95% bootstrap confidence interval"),
    "_range": ("(a–b)", "lowest and highest over the seeds"),
    "_bounds": ("{a to b}", "what the order of a re-ranker's -100 block decides, the lowest and highest over every "
                            "order (the number is the tie policy's)"),
}
_OFFICIAL_CODE = f"{OFFICIAL_REPOSITORY.removeprefix('https://')} @ {OFFICIAL_COMMIT[:7]}"
_OFFICIAL_LOG = "official log clip/ViT-B_32log.txt"


def _log_source(line: int, clean_line=None) -> str:
    """Where a reference row comes from: a line of the official CLIP log (and the clean R@1's line)."""
    clean = f"; clean R@1 from line {clean_line}" if clean_line else ""
    return f"{_OFFICIAL_LOG}, line {line}{clean} ({_OFFICIAL_CODE})"


REPORT_FLIPPED = 50  # flipped queries per gallery in report.json (all of them are in flipped.csv)

# The RoCOCO paper's VSE infinity variant, which its abstract does not name: its clean image-to-text R@1, 66.1, sits beside
# the VSE infinity paper's COCO 5K number for WSL grid + BERT (coco_wsl_grid_bert), 66.4 (docs/reproduce.md)
VSE_INFINITY = "VSE infinity, WSL grid + BERT"

REFERENCE_RESULTS: list[dict] = [
    {"model": "CLIP ViT-B/32", "attack": CLEAN, "direction": "image_to_text", "recall@1": 50.12,
     "recall@5": 74.66, "recall@10": 83.04, "r_mean": 69.27333333333333, "false_rate": 0.0,
     "source": _log_source(2)},
    {"model": "CLIP ViT-B/32", "attack": "text attack, unnamed (probably rand_voca)", "direction": "image_to_text",
     "clean_recall@1": 50.12, "recall@1": 37.0, "recall@5": 66.72, "recall@10": 76.5, "r_mean": 60.07333333333333,
     "false_rate": 33.48,
     "source": _log_source(1, clean_line=2)},
    {"model": "CLIP ViT-B/32", "attack": "text attack, unnamed", "direction": "image_to_text",
     "clean_recall@1": 50.12, "recall@1": 36.88, "recall@5": 66.68, "recall@10": 76.52, "r_mean": 60.026666666666664,
     "false_rate": 34.34,
     "source": _log_source(3, clean_line=2)},
    {"model": "CLIP ViT-B/32", "attack": "mix_seed1", "direction": "text_to_image", "recall@1": 19.83606557377049,
     "recall@5": 46.27748900439824, "recall@10": 57.33706517393043, "r_mean": 41.15020658403305,
     "false_rate": 37.02119152339064,
     "source": _log_source(4)},
    {"model": "BLIP", "attack": "text attacks (not named in the abstract)", "direction": "image_to_text",
     "clean_recall@1": 81.9, "recall@1": 48.4,
     "source": "Park et al., RoCOCO, arXiv:2304.10727v5, abstract"},
    {"model": VSE_INFINITY, "attack": "text attacks (not named in the abstract)",
     "direction": "image_to_text",
     "clean_recall@1": 66.1, "recall@1": 37.6,
     "source": "Park et al., RoCOCO, arXiv:2304.10727v5, abstract"},
]


def write_report(report: Report, out: Path, analysis=None) -> dict[str, Path]:
    """Write ``report.json``, ``report.md``, ``recall.png`` and ``model-card.md`` (:func:`model_card_metadata`) of
    ``report`` (:func:`~rococo_eval.results.build_report`) into ``out``: the one report of ``rococo-eval run``,
    ``rococo-eval score`` and the Space.

    ``report.json`` (:meth:`~rococo_eval.results.Report.to_json`) holds ``meta`` (this package's version, Python's,
    and what the caller records: the model, or the score files of :func:`rococo_eval.scoring.plan.report_meta`),
    ``results`` (the metric's scalar outputs by gallery key), ``summary`` (:func:`~rococo_eval.results.summary_of`)
    and, with per-query arrays, ``analysis``. The validity warnings of the evaluation (``meta["warnings"]``,
    :mod:`rococo_eval.validity`: files whose clean numbers disagree, an order scored against its scores, a check that
    could not run ...) get a "Warnings" section of ``report.md``, under its title.

    Results that carry the metric's per-query arrays and a layout (:attr:`GalleryResult.analysable`) also get the
    failure analysis (:func:`rococo_eval.reporting.analysis.analyse`, with captions and partners from the report's
    ``source``): ``per_query.parquet`` (every query's ranks and top-1 item), ``flipped.csv`` (every flipped
    query), ``words.png`` (by-word chart, text attacks), its tables in ``report.md`` and, with the
    :data:`REPORT_FLIPPED` largest margins per gallery, in ``report.json``'s ``analysis``.

    ``analysis``: :func:`~rococo_eval.reporting.analysis.analyse` of these results when the caller made it
    already (the Space shows it too); None: made here.

    Returns:
        the paths written, by kind (``json``, ``markdown``, ``model_card``, ``chart``, and ``per_query``, ``flipped``,
        ``words`` with the analysis).
    """
    results, meta, rows = report.results, report.meta, report.summary
    facts, paths = GalleryFacts.of(report.source), {}  # the report's source, or NO_SOURCE
    if analysis is None and report.results.analysable():
        analysis = analyse(results, facts)
    if analysis is not None:
        paths["per_query"] = write_per_query_parquet(results, out / "per_query.parquet")
        every_flip = [row for gallery in analysis["galleries"].values() for row in gallery["flipped_queries"]]
        text = flipped_csv(every_flip).encode("utf-8")
        paths["flipped"] = write_atomic(out / "flipped.csv", lambda handle: handle.write(text))
        shortened = {key: {**gallery, "flipped_queries": gallery["flipped_queries"][:REPORT_FLIPPED]}
                     for key, gallery in analysis["galleries"].items()}
        report = report.with_analysis({**analysis, "galleries": shortened, "per_query_file": paths["per_query"].name,
                                       "flipped_file": paths["flipped"].name})
    document = report.to_json().encode("utf-8")
    paths["json"] = write_atomic(out / "report.json", lambda handle: handle.write(document))
    title = f"# RoCOCO report: {meta['model']}\n\n" if "model" in meta else "# RoCOCO report\n\n"
    warned = "".join(f"- {warning}\n" for warning in meta.get("warnings", ()))
    markdown = title + (f"## Warnings\n\n{warned}\n" if warned else "") + to_markdown(rows) + "\n"
    if analysis is not None:
        markdown += "\n" + analysis_markdown(analysis) + "\n"
    paths["markdown"] = write_atomic(out / "report.md", lambda handle: handle.write(markdown.encode("utf-8")))
    card = model_card_metadata(rows, meta.get("model"), facts.card_dataset).encode("utf-8")
    paths["model_card"] = write_atomic(out / "model-card.md", lambda handle: handle.write(card))
    try:
        paths["chart"] = plot_recall(rows, out / "recall.png")
        if analysis is not None and analysis["by_word"]:
            paths["words"] = plot_word_rates(analysis, out / "words.png")
    except ImportError:
        logger.warning("matplotlib is not installed: no recall.png (pip install matplotlib)")
    return paths


def model_card_metadata(rows, model_name=None, dataset: tuple[str, str] | None = None) -> str:
    """The results as Hugging Face model-card metadata (``model-index``, made by huggingface_hub's
    ``ModelCardData``), a YAML block for an author to paste at the top of a model's README.

    Each gallery row gives its R@1 (``recall@1``), and an attacked one its false rate (``false_rate``), under the
    task ``image-text-retrieval`` and the dataset ``rococo`` with the attack as its config; a mean over seeds has
    the method (``mix``, ``patch``) as its config. ``dataset`` is the dataset's ``(type, name)`` as the results'
    source gives it (:attr:`~rococo_eval.data.source.Source.card_dataset`: a generated benchmark is named as such,
    ``rococo-generated`` with its folder's name, not as RoCOCO); None: RoCOCO. A number with bounds (what a compact
    file's ties decide) is left out: a model card gives decided numbers only.

    Example:
        >>> rows = [{"attack": "rand_voca", "direction": "image_to_text", "recall@1": 37.5, "false_rate": 60.0}]
        >>> print(model_card_metadata(rows, "my-model").splitlines()[2])
        - name: my-model
    """
    from huggingface_hub import EvalResult, ModelCardData

    dataset_type, dataset_name = ROCOCO_CARD_DATASET if dataset is None else dataset
    results = []
    for row in _summary_rows(rows):
        if row.get("recall@1") is None:
            continue
        label = f"{row.attack}{' (mean of seeds)' if row.is_seed_mean else ''} {direction_text(row.direction)}"
        metrics = [("recall@1", "R@1")] + ([("false_rate", "false rate")] if row.attack != CLEAN else [])
        for metric, name in metrics:
            value = row.get(metric)
            if value is None or (isinstance(value, float) and math.isnan(value)) or \
                    row.get(f"{metric}_bounds") is not None:
                continue
            results.append(EvalResult(task_type="image-text-retrieval", task_name="Image-text retrieval (RoCOCO)",
                                      dataset_type=dataset_type, dataset_name=dataset_name,
                                      dataset_config=row.attack,
                                      dataset_split="test", metric_type=metric, metric_name=f"{label} {name}",
                                      metric_value=round(float(value), DECIMALS)))
    card = ModelCardData(model_name=str(model_name or "your-model"), eval_results=results or None)
    return "---\n" + card.to_yaml() + "\n---\n"


def summary_rows(results: Mapping[str, Mapping]) -> list[dict]:
    """The summary (:func:`~rococo_eval.results.summary_of`) of the metric's outputs ``results`` (by gallery key), as
    ``report.json`` holds it: one dict per row.

    Example:
        >>> from rococo_eval.catalog import gallery_key
        >>> results = {gallery_key(f"mix_seed{s}", "text_to_image"): {"recall@1": r, "clean_recall@1": 30.0}
        ...            for s, r in [(1, 19.0), (10, 20.0), (100, 24.0)]}
        >>> mean = summary_rows(results)[-1]
        >>> mean["attack"], mean["seeds"], mean["recall@1"], mean["recall@1_range"]
        ('mix', (1, 10, 100), 21.0, (19.0, 24.0))
    """
    typed = GalleryResults({key: GalleryResult(dict(metrics)) for key, metrics in results.items()})
    return [row.to_dict() for row in summary_of(typed)]


def format_rows(rows) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of a table of ``rows``: only columns some row has, as every table shows them: numbers with
    :data:`~rococo_eval.results.DECIMALS` decimals (:func:`~rococo_eval.results.percent_text`), directions hyphenated
    (:func:`~rococo_eval.catalog.direction_text`), ``n/a`` where a number is not defined (the false rate and attack
    success of a clean gallery, which has no adversarial item).
    :func:`legend` says what the columns mean.

    A value with an interval shows it beside it: ``37.00 [35.61, 38.42]`` (95% CI), ``21.00 (19.00–24.00)`` (range
    over seeds) or ``81.90 {81.90 to 82.10}`` (the bounds of what the order of a re-ranker's -100 block decides).

    Example:
        >>> format_rows([{"attack": "danger", "recall@1": 40.0, "recall@1_ci": (38.5, 41.25)}])
        (['attack', 'R@1'], [['danger', '40.00 [38.50, 41.25]']])
        >>> format_rows([{"attack": "clean", "direction": "image_to_text", "recall@1": 50.0, "false_rate": 0.0}])
        (['attack', 'direction', 'R@1', 'false rate'], [['clean', 'image-to-text', '50.00', 'n/a']])
    """
    return _format_rows(_summary_rows(rows))


def legend(rows=None) -> str:
    """What the numbers of a table of ``rows`` (:func:`format_rows`) mean, as a Markdown list that also reads as plain
    text: that they are percentages, what ``n/a`` is, each column some row has, and each kind of interval shown;
    ``rows`` None: every column and interval, for a table not made yet.

    Example:
        >>> print(legend([{"attack": "clean", "recall@1": 50.0, "false_rate": 0.0}]))
        - Numbers are percentages (0 to 100), with 2 decimals.
        - n/a: not defined (a clean gallery has no adversarial item: no false rate, no attack success).
        - R@K: share of the queries with a correct item among the K top-scored items of the gallery
        - false rate: share of the queries whose top-1 item is adversarial
        >>> legend([{"attack": "clean", "recall@1": 50.0, "num_queries": 30}]).splitlines()[0]
        '- Numbers are percentages (0 to 100), with 2 decimals, but the counts (queries).'
    """
    return _legend(None if rows is None else _summary_rows(rows))


def to_markdown(rows) -> str:
    """A Markdown table of ``rows`` (see :func:`format_rows`), then its :func:`legend`.

    Example:
        >>> print(to_markdown([{"attack": "clean", "direction": "image_to_text", "recall@1": 50.12}]))
        | attack | direction | R@1 |
        |---|---|---:|
        | clean | image-to-text | 50.12 |
        <BLANKLINE>
        - Numbers are percentages (0 to 100), with 2 decimals.
        - n/a: not defined (a clean gallery has no adversarial item: no false rate, no attack success).
        - R@K: share of the queries with a correct item among the K top-scored items of the gallery
    """
    rows = _summary_rows(rows)
    headers, cells = _format_rows(rows)
    align = ["---" if header in _TEXT_COLUMNS + ("source",) else "---:" for header in headers]
    lines = ["| " + " | ".join(line) + " |" for line in [headers] + cells]
    lines.insert(1, "|" + "|".join(align) + "|")
    return "\n".join(lines) + "\n\n" + _legend(rows)


def to_text_table(rows) -> str:
    """A plain-text table of ``rows`` for terminals: padded columns, numbers right-aligned; then its :func:`legend`.

    Example:
        >>> print(to_text_table([{"attack": "danger", "recall@1": 40.0}, {"attack": "rand_voca", "recall@1": 37.5}]))
        attack       R@1
        ---------  -----
        danger     40.00
        rand_voca  37.50
        <BLANKLINE>
        - Numbers are percentages (0 to 100), with 2 decimals.
        - n/a: not defined (a clean gallery has no adversarial item: no false rate, no attack success).
        - R@K: share of the queries with a correct item among the K top-scored items of the gallery
    """
    rows = _summary_rows(rows)
    headers, cells = _format_rows(rows)
    widths = [max(len(text) for text in column) for column in zip(headers, *cells)]
    numeric = [header not in _TEXT_COLUMNS + ("source",) for header in headers]

    def line(values):
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()

    lines = [line(headers), "  ".join("-" * w for w in widths)] + [line(values) for values in cells]
    return "\n".join(lines) + "\n\n" + _legend(rows)


def plot_recall(rows, path) -> Path:
    """Draw clean vs attacked R@1 for each attacked row as a PNG (matplotlib Agg, no global state), atomically.

    Error bars show the attacked R@1's 95% CI, or its range over seeds for a mean row. Clean galleries are
    left out (their two bars are equal).

    Example:
        >>> import tempfile
        >>> rows = [{"attack": "danger", "direction": "image_to_text", "clean_recall@1": 50.0, "recall@1": 40.0}]
        >>> plot_recall(rows, Path(tempfile.mkdtemp()) / "recall.png").read_bytes()[:4]
        b'\\x89PNG'
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    attacked = [row for row in _summary_rows(rows) if row.attack != CLEAN and "recall@1" in row.values]
    figure = Figure(figsize=(max(5.0, 1.1 * len(attacked) + 2), 3.8), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = np.arange(len(attacked))
    clean = [_number(row.get("clean_recall@1")) for row in attacked]
    hit = [_number(row.values["recall@1"]) for row in attacked]
    axes.bar(positions - 0.2, clean, 0.4, label="clean R@1", color="#9db4d6")
    axes.bar(positions + 0.2, hit, 0.4, yerr=_error_bars(attacked), capsize=3, label="attacked R@1", color="#c0504d")
    axes.set_xticks(positions, [_short_label(row) for row in attacked], rotation=30, ha="right", fontsize=8)
    axes.set_ylabel("R@1 (%)")
    axes.set_ylim(0, 100)
    axes.set_title("Clean vs attacked R@1 per attack")
    if attacked:
        axes.legend(loc="upper right", fontsize=8)
    else:
        axes.text(0.5, 0.5, "no attacked gallery in these results", ha="center", va="center", transform=axes.transAxes)
    return write_atomic(path, lambda handle: figure.savefig(handle, format="png"))


def analysis_markdown(analysis: dict, top: int = 10, min_count: int = DEFAULT_MIN_COUNT) -> str:
    """The failure analysis (:func:`rococo_eval.reporting.analysis.analyse`) as Markdown: for each attacked gallery its
    ``top`` flipped queries by margin, then the most damaging replaced words and replacements (at least
    ``min_count`` images each), then the image attacks by method and by seed.

    Example:
        >>> analysis = {"galleries": {"danger/image_to_text": {"attack": "danger", "direction": "image_to_text",
        ...     "clean_correct": 4, "flipped": 1, "flipped_queries": [{"query": 7, "margin": 0.25,
        ...     "winner_score": 0.5, "correct_score": 0.25, "winner_caption": "a criminal on a bike",
        ...     "correct_caption": "A man on a bike.", "replaced": "man", "replacement": "criminal"}]}},
        ...     "by_word": {}, "image_attacks": []}
        >>> print(analysis_markdown(analysis))  # doctest: +NORMALIZE_WHITESPACE
        ## What fooled the model
        <BLANKLINE>
        ### danger (image-to-text): 1 of 4 queries flipped
        <BLANKLINE>
        | query | margin | winner score | correct score | best correct caption | winning caption | replaced |
        |---:|---:|---:|---:|---|---|---|
        | 7 | 0.2500 | 0.5000 | 0.2500 | A man on a bike. | a **criminal** on a bike | man → criminal |
    """
    lines = ["## What fooled the model"]
    for key, gallery in analysis["galleries"].items():
        shown = gallery["flipped_queries"][:top]
        lines += ["", f"### {gallery['attack']} ({direction_text(gallery['direction'])}): {gallery['flipped']} of "
                      f"{gallery['clean_correct']} queries flipped" + (f", the {len(shown)} largest margins" if
                                                                      gallery["flipped"] > len(shown) else "")]
        if shown:
            lines += ["", _markdown_table(*_flipped_cells(shown, gallery["direction"]))]
    for attack, table in analysis["by_word"].items():
        lines += ["", f"### {attack}: attack success by word (at least {min_count} images; "
                      f"{table['other_image_wins']} of {table['flipped']} flips won by another image's caption)"]
        for kind, label in (("replaced", "replaced word"), ("replacement", "replacement")):
            rows = most_damaging(table[kind], min_count)
            lines += ["", _markdown_table([label, "images", "successes", "success rate (%)"],
                                          [[row["word"], str(row["images"]), str(row["successes"]),
                                            percent_text(row["success_rate"])] for row in rows]) if rows
                      else f"No {label} has {min_count} images or more."]
    if analysis["image_attacks"]:
        lines += ["", "### Image attacks: attack success by method and by seed", "", _markdown_table(
            ["group", "galleries", "clean-correct queries", "flipped", "success rate (%)", "won by own altered image"],
            [[row["group"], row["galleries"], str(row["clean_correct"]), str(row["flipped"]),
              percent_text(row["success_rate"]), str(row["own_image_wins"])]
             for row in analysis["image_attacks"]])]
    return "\n".join(lines)


def plot_word_rates(analysis: dict, path, min_count: int = DEFAULT_MIN_COUNT, limit: int = 12) -> Path:
    """Bar chart of the most damaging replaced words and replacements of each text attack, as a PNG, atomically.

    One column of panels per text attack in ``analysis["by_word"]``: replaced words on top, replacements
    below, each the ``limit`` highest success rates among words with at least ``min_count`` images (stated in
    the title), bars labelled with their count.

    Example:
        >>> import tempfile
        >>> table = {"replaced": [{"word": "man", "images": 30, "successes": 9, "success_rate": 30.0}],
        ...          "replacement": [], "clean_correct": 30, "flipped": 9, "other_image_wins": 0}
        >>> plot_word_rates({"by_word": {"danger": table}}, Path(tempfile.mkdtemp()) / "words.png").read_bytes()[:4]
        b'\\x89PNG'
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    attacks = list(analysis["by_word"])
    figure = Figure(figsize=(max(5.0, 4.2 * len(attacks)), 7.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(f"Attack success rate by word\n(words with at least {min_count} clean-correct images)", fontsize=10)
    grid = figure.subplots(2, max(1, len(attacks)), squeeze=False)
    if not attacks:
        grid[0][0].text(0.5, 0.5, "no text attack in these results", ha="center", va="center")
    for column, attack in enumerate(attacks):
        for line, kind in enumerate(("replaced", "replacement")):
            axes, rows = grid[line][column], most_damaging(analysis["by_word"][attack][kind], min_count, limit)
            positions = np.arange(len(rows))
            bars = axes.barh(positions, [row["success_rate"] for row in rows], height=0.6, color="#c0504d")
            axes.bar_label(bars, [f"n={row['images']}" for row in rows], fontsize=7, padding=2)
            axes.set_yticks(positions, [row["word"] for row in rows], fontsize=8)
            axes.invert_yaxis()
            axes.set_xlim(0, 115)
            axes.set_xlabel("attack success rate (%)", fontsize=8)
            axes.set_title(f"{attack}: {kind}", fontsize=9)
            if not rows:
                axes.text(57, 0, f"no word with {min_count}+ images", ha="center", va="center", fontsize=8)
    for axes in grid[:, len(attacks):].flat:
        axes.set_visible(False)
    return write_atomic(path, lambda handle: figure.savefig(handle, format="png"))


def _flipped_cells(rows, direction: str) -> tuple[list[str], list[list[str]]]:
    def number(value):
        return f"{value:.4f}"

    if direction == "image_to_text":
        headers = ["query", "margin", "winner score", "correct score", "best correct caption", "winning caption",
                   "replaced"]
        cells = [[str(row["query"]), number(row["margin"]), number(row["winner_score"]), number(row["correct_score"]),
                  _escape(row.get("correct_caption")), _escape(_bold_replacement(row)), _escape(_change(row))]
                 for row in rows]
    else:
        headers = ["query", "margin", "winner score", "correct score", "query caption", "image",
                   "winning altered image", "its partner"]
        cells = [[str(row["query"]), number(row["margin"]), number(row["winner_score"]), number(row["correct_score"]),
                  _escape(row.get("query_caption")), _optional(row.get("image")), _optional(row.get("winner_image")),
                  _optional(row.get("partner_image"))] for row in rows]
    return headers, cells


def _bold_replacement(row: dict) -> str | None:
    caption = row.get("winner_caption")
    if caption is None:
        return None
    for word in filter(None, (row.get("replacement") or "").split("; ")):
        caption = highlight(caption, word)
    return caption


def _change(row: dict) -> str | None:
    if row.get("replaced") is None:
        return None
    change = "; ".join(f"{a} → {b or '∅'}" for a, b in zip(row["replaced"].split("; "),
                                                            (row.get("replacement") or "").split("; ")))
    return change if row.get("own_image", True) else f"{change} (a caption of image {row['winner_image']})"


def _escape(text) -> str:
    return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def _optional(value) -> str:
    return "" if value is None else str(value)


def _markdown_table(headers, cells) -> str:
    numeric = [all(re.fullmatch(r"-?[\d.]+|n/a|", row[i]) for row in cells) and bool(cells)
               for i in range(len(headers))]
    lines = ["| " + " | ".join(line) + " |" for line in [headers] + cells]
    lines.insert(1, "|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    return "\n".join(lines)


def _summary_rows(rows) -> list[SummaryRow]:
    """The rows of a table as :class:`~rococo_eval.results.SummaryRow` s: a report's ``summary`` as it is, a dict
    (``report.json``'s, published numbers) read by :meth:`~rococo_eval.results.SummaryRow.from_dict`."""
    return [row if isinstance(row, SummaryRow) else SummaryRow.from_dict(row) for row in rows]


def _format_rows(rows: list[SummaryRow]) -> tuple[list[str], list[list[str]]]:
    """:func:`format_rows` of rows already read (a table reads its rows once, for its cells and its legend)."""
    columns = _columns(rows)
    return [_label(name) for name in columns], [[_cell(row, name) for name in columns] for row in rows]


def _legend(rows: Optional[list[SummaryRow]]) -> str:
    """:func:`legend` of rows already read."""
    names = _COLUMNS if rows is None else dict.fromkeys(_generic(name) for name in _columns(rows))
    suffixes = _INTERVALS if rows is None else [suffix for suffix in _INTERVALS
                                                if any(name.endswith(suffix) for row in rows for name in row.values)]
    entries = [(_COLUMNS[name][0], _COLUMNS[name][1]) for name in names if name in _COLUMNS]
    entries += [_INTERVALS[suffix] for suffix in suffixes]
    counts = [_COLUMNS[name][0] for name in names if name.startswith("num_")]
    but = f", but the counts ({', '.join(counts)})" if counts else ""
    return "\n".join([f"- Numbers are percentages (0 to 100), with {DECIMALS} decimals{but}.",
                      f"- {NOT_DEFINED}: not defined (a clean gallery has no adversarial item: no false rate, no "
                      "attack success)."] + [f"- {term}: {meaning}" for term, meaning in entries])


def _columns(rows) -> list[str]:
    present = {"attack", *("direction" for row in rows if row.direction is not None)}
    present.update(name for row in rows for name in row.values)

    def recall_columns(prefix):
        ks = sorted(int(m.group(1)) for name in present if (m := re.fullmatch(prefix + r"recall@(\d+)", name)))
        return [f"{prefix}recall@{k}" for k in ks] + [f"{prefix}r_mean"]

    ordered = ([name for name in _TEXT_COLUMNS if name in present] + recall_columns("clean_") + recall_columns("")
               + ["false_rate", "attack_success_rate"] + list(_TRAILING_COLUMNS))
    return [name for name in ordered if name in present]


def _generic(name: str) -> str:
    """The key of a column in :data:`_COLUMNS`: ``recall@5`` is ``recall@K``."""
    return re.sub(r"recall@\d+$", "recall@K", name)


def _label(name: str) -> str:
    label = _COLUMNS.get(_generic(name), (name,))[0]
    return label.replace("@K", "@" + name.rpartition("@")[2]) if "@K" in label else label


def _cell(row: SummaryRow, name: str) -> str:
    value = {"attack": row.attack, "direction": row.direction}.get(name, row.values.get(name))
    if name == "attack" and row.seeds is not None:
        return f"{value} (mean of seeds {', '.join(map(str, row.seeds))})"
    if name in _NEEDS_ATTACK and row.attack == CLEAN:
        return NOT_DEFINED
    if value is None:
        return ""
    if name == "direction":
        return direction_text(value)
    if isinstance(value, str):
        return value
    if name.startswith("num_"):
        return str(int(value))
    text = percent_text(value)
    for suffix, form in (("_ci", " [{}, {}]"), ("_range", " ({}–{})"), ("_bounds", " {{{} to {}}}")):
        if row.values.get(name + suffix) is not None:
            text += form.format(*map(percent_text, row.values[name + suffix]))
    return text


def _number(value) -> float:
    return math.nan if value is None else float(value)


def _error_bars(rows):
    bars = np.full((2, len(rows)), np.nan)
    for i, row in enumerate(rows):
        interval, value = row.get("recall@1_ci") or row.get("recall@1_range"), row.values["recall@1"]
        if interval is not None:
            bars[:, i] = np.clip([value - interval[0], interval[1] - value], 0, None)
    return bars


def _short_label(row: SummaryRow) -> str:
    label = row.attack + (" (mean)" if row.is_seed_mean else "")
    return label if row.direction in DIRECTIONS else f"{label}\n{row.direction or ''}"
