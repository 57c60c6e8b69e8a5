"""Many reports in one comparison: a model per row, clean and attacked R@1 per gallery, as a paper's table.

``rococo-eval table REPORT_DIR...`` (and ``run`` with several models) reads each ``report.json`` and writes
``table.csv``, ``table.md`` and ``table.png``. A row holds the model, its report folder, and the R@1 of each
gallery in the reports' ``summary`` (its :class:`~rococo_eval.results.SummaryRow` values,
:func:`~rococo_eval.results.summary_of`): the two clean galleries, each text attack (image-to-text), each image attack
and each image method's mean over its seeds (text-to-image). A gallery that a report does not hold is left empty.
The columns are named by gallery key (``rand_voca/image_to_text``; a seed mean is ``mix/text_to_image``). The
warnings about the numbers that a report records (``meta["warnings"]``, :mod:`rococo_eval.validity`) come with its
row: ``table.md`` lists them (:func:`warnings_of`), and ``rococo-eval table`` says them on stderr.

Example:
    >>> report = Report.from_json({"meta": {"model": "toy"}, "summary": [
    ...     {"attack": "clean", "direction": "image_to_text", "recall@1": 50.0},
    ...     {"attack": "rand_voca", "direction": "image_to_text", "clean_recall@1": 50.0, "recall@1": 37.5}]})
    >>> columns, rows = comparison([("runs/toy", report)])
    >>> columns
    ['clean/image_to_text', 'rand_voca/image_to_text']
    >>> rows[0]["model"], rows[0]["rand_voca/image_to_text"]
    ('toy', 37.5)
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from rococo_eval.catalog import CLEAN, DIRECTIONS, IMAGE_ATTACK_METHODS
from rococo_eval.io.atomic import write_atomic
from rococo_eval.results import GalleryKey, Report, percent_text

REPORT_FILE = "report.json"
_SHORT = {"image_to_text": "i2t", "text_to_image": "t2i"}


def read_reports(paths: Sequence) -> list[tuple[str, Report]]:
    """``(folder, report)`` of each path: a report folder (holding ``report.json``) or the file itself, read as a
    :class:`~rococo_eval.results.Report` (:meth:`~rococo_eval.results.Report.from_json`); a report given twice
    (``runs/a`` and ``runs/a/report.json``) is read once.

    Raises:
        ValueError: a path with no report, or a file that is not a RoCOCO report (the message names it).
    """
    reports, seen = [], set()
    for given in paths:
        path = Path(given).expanduser()
        file = path / REPORT_FILE if path.is_dir() else path
        if file.resolve() in seen:
            continue
        seen.add(file.resolve())
        try:
            document = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"REPORT_DIR {str(given)!r} holds no {REPORT_FILE}: give folders that `rococo-eval run` "
                             "or `score` wrote") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"cannot read the report {str(file)!r}: {error}") from None
        if not isinstance(document, dict) or not isinstance(document.get("summary"), list):
            raise ValueError(f"{str(file)!r} is not a RoCOCO report: it has no `summary` list")
        reports.append((str(file.parent), Report.from_json(document)))
    if not reports:
        raise ValueError("no report to compare: give at least one REPORT_DIR")
    return reports


def comparison(reports: Sequence[tuple[str, Report]]) -> tuple[list[str], list[dict]]:
    """The gallery columns (in the summary's order: the paper's) and one row per report.

    Each row has ``model`` (the report's model, or its folder's name for a report of score files; a name that
    two reports share gets its folder added), ``report`` (the folder) and the R@1 of each gallery column.
    """
    columns: list[str] = []
    rows = []
    for folder, report in reports:
        row = {"model": str(report.meta.get("model") or Path(folder).name), "report": folder}
        for summary in report.summary:
            if summary.values.get("recall@1") is None:
                continue
            if summary.key not in columns:
                columns.append(summary.key)
            row[str(summary.key)] = float(summary.values["recall@1"])
        rows.append(row)
    names = [row["model"] for row in rows]
    for row in rows:
        if names.count(row["model"]) > 1:
            row["model"] = f"{row['model']} ({row['report']})"
    order = {key: number for number, key in enumerate(columns)}
    columns.sort(key=lambda key: (DIRECTIONS.index(key.direction) if key.direction in DIRECTIONS else len(DIRECTIONS),
                                  key.attack != CLEAN, order[key]))
    return [str(key) for key in columns], rows


def warnings_of(reports: Sequence[tuple[str, Report]]) -> list[str]:
    """The warnings about the numbers that the ``reports`` (:func:`read_reports`) record, each after its report's
    folder: a comparison of the numbers carries them, as each report does.

    Example:
        >>> warned = Report.from_json({"meta": {"warnings": ["the files disagree: ..."]}})
        >>> warnings_of([("runs/a", warned), ("runs/b", Report.from_json({"meta": {}}))])
        ['runs/a: the files disagree: ...']
    """
    found = []
    for folder, report in reports:
        warnings = report.meta.get("warnings") or []
        found += [f"{folder}: {warning}" for warning in (warnings if isinstance(warnings, list) else [warnings])]
    return found


def to_csv(columns: Sequence[str], rows: Sequence[dict]) -> str:
    """The comparison as CSV: ``model``, ``report``, then one column of R@1 per gallery (empty where absent).

    Example:
        >>> print(to_csv(["clean/image_to_text"], [{"model": "toy", "report": "r", "clean/image_to_text": 50.0}]))
        model,report,clean/image_to_text
        toy,r,50.0
        <BLANKLINE>
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["model", "report", *columns])
    for row in rows:
        writer.writerow([row["model"], row["report"], *("" if row.get(key) is None else row[key] for key in columns)])
    return buffer.getvalue()


def to_markdown(columns: Sequence[str], rows: Sequence[dict]) -> str:
    """The comparison as a Markdown table of R@1 (as every table shows a percentage:
    :func:`rococo_eval.results.percent_text`); the seed means are marked.

    Example:
        >>> print(to_markdown(["rand_voca/image_to_text"], [{"model": "a|b", "rand_voca/image_to_text": 37.5}]))
        | model | rand_voca (i2t) |
        |---|---:|
        | a\\|b | 37.50 |
    """
    headers = ["model", *map(column_label, columns)]
    lines = ["| " + " | ".join(headers) + " |", "|---|" + "---:|" * len(columns)]
    for row in rows:
        cells = [row["model"].replace("|", "\\|")]
        cells += ["" if row.get(key) is None else percent_text(row[key]) for key in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def column_label(key: str) -> str:
    """``"rand_voca (i2t)"``; a seed mean is ``"mix (t2i, seed mean)"``.

    Example:
        >>> column_label("clean/text_to_image"), column_label("patch/text_to_image")
        ('clean (t2i)', 'patch (t2i, seed mean)')
    """
    gallery = GalleryKey.parse(key)
    short = _SHORT.get(gallery.direction, gallery.direction)
    mean = ", seed mean" if gallery.attack in IMAGE_ATTACK_METHODS else ""
    return f"{gallery.attack} ({short}{mean})"


def plot_comparison(columns: Sequence[str], rows: Sequence[dict], path) -> Path:
    """Grouped bars of R@1: a group per gallery column, a bar per model (matplotlib Agg), written atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(max(6.0, 0.6 * len(columns) * max(1, len(rows)) ** 0.5 + 3), 4.2), dpi=100,
                    layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = np.arange(len(columns))
    width = 0.8 / max(1, len(rows))
    for number, row in enumerate(rows):
        values = [math.nan if row.get(key) is None else row[key] for key in columns]
        axes.bar(positions - 0.4 + width * (number + 0.5), values, width, label=row["model"])
    axes.set_xticks(positions, [column_label(key) for key in columns], rotation=35, ha="right", fontsize=8)
    axes.set_ylabel("R@1 (%)")
    axes.set_ylim(0, 100)
    axes.set_title("R@1 per gallery: clean and attacked")
    axes.legend(loc="upper right", fontsize=7)
    return write_atomic(path, lambda handle: figure.savefig(handle, format="png"))


def write_table(report_paths: Sequence, out) -> dict[str, Path]:
    """Compare the reports at ``report_paths`` into ``out``: ``table.csv``, ``table.md`` (under a "Warnings" section
    when a report records some: :func:`warnings_of`) and ``table.png``.

    Returns:
        the paths written, by kind (``csv``, ``markdown``, ``chart``; no chart without matplotlib).
    """
    reports = read_reports(report_paths)
    columns, rows = comparison(reports)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text = to_csv(columns, rows).encode("utf-8")
    warned = "".join(f"- {warning}\n" for warning in warnings_of(reports))
    markdown = ("# RoCOCO comparison: R@1 (%)\n\n" + (f"## Warnings\n\n{warned}\n" if warned else "")
                + to_markdown(columns, rows) + "\n").encode("utf-8")
    paths = {"csv": write_atomic(out / "table.csv", lambda handle: handle.write(text)),
             "markdown": write_atomic(out / "table.md", lambda handle: handle.write(markdown))}
    try:
        paths["chart"] = plot_comparison(columns, rows, out / "table.png")
    except ImportError:
        pass
    return paths
