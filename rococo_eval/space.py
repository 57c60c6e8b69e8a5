"""What the Space does, without the page: detect layouts, score uploads, write outputs, explore the attacks.

``app.py`` wires these functions to gradio; they take and return plain values, so each is tested on its own.
Each request carries its own data: nothing a user uploads or gets back is kept beyond the request.
"""

from __future__ import annotations

import functools
import html
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from rococo_recall import DEFAULT_K, TIE_POLICIES, rococo_recall

from . import report, scorefiles
from .captions import find_replacements, highlight
from .layout import IMAGE_ATTACKS, TEXT_ATTACKS, caption_offsets, gallery_layout
from .layout_detection import CUSTOM, choose_layout

logger = logging.getLogger(__name__)

IMAGES_DIR_ENV = "ROCOCO_IMAGES_DIR"
LAYOUT_HEADERS = ["file", "attack", "direction", "order", "note"]
MAX_BOOTSTRAP = 1000
_COMPARE_KEYS = ("model", "attack", "direction", "clean_recall@1", "recall@1", "recall@5", "recall@10",
                 "r_mean", "false_rate", "source")


@dataclass
class Evaluation:
    """What one evaluation request produced."""

    results: dict
    files: dict
    layouts: dict
    rows: list
    message: str


def source_and_problem(images_dir=None):
    """Open the RoCOCO annotations (and images, when ``images_dir`` or ``$ROCOCO_IMAGES_DIR`` is set).

    Returns ``(source, problem)``: the source or None, and what went wrong, for the page.
    """
    from rococo_eval.source import ImageFolderError, RococoSource

    images_dir = images_dir or os.environ.get(IMAGES_DIR_ENV) or None
    try:
        return RococoSource(images_dir=images_dir), ""
    except ImageFolderError as error:
        logger.warning("images unavailable: %s", error)
        problem = f"images unavailable: {error}"
    except (OSError, ValueError) as error:
        logger.warning("RoCOCO annotations unavailable: %s", error)
        return None, str(error)
    try:
        return RococoSource(), problem
    except (OSError, ValueError) as error:
        return None, str(error)


def detect_layouts(paths, captions_per_image) -> list[list[str]]:
    """One layout row (``LAYOUT_HEADERS``) per uploaded file: detected, or blank with why.

    The shape and name come from the header; the order of an attacked image-to-text gallery comes from the
    scores when they clearly show it (:func:`rococo_eval.layout_detection.decide_order`), else it stays blank
    and the note asks for it.
    """
    rows = []
    for path in paths or []:
        name = Path(path).name
        try:
            info = scorefiles.read_header(path)
            attack = CUSTOM if info.layout_keys else ""
            choice = choose_layout(info.shape, captions_per_image, name, attack=attack,
                                   scores=functools.partial(scorefiles.read_scores, path, info.key))
            rows.append([name, choice.attack, choice.direction, choice.order, choice.note])
        except ValueError as error:
            rows.append([name, "", "", "", str(error)])
    return rows


def evaluate_files(paths, layouts=None, references=None, adversarial=None, *, captions_per_image=None,
                   ties="pessimistic", bootstrap=0) -> Evaluation:
    """Score every uploaded file on its layout; raise one ``ValueError`` listing every file's problem.

    ``layouts`` are rows ``[file, attack, direction, order, ...]``; a file without a row, or blank cells,
    gets the detected layout. An attacked image-to-text gallery whose order is blank and not clear from its
    scores is refused. ``references`` and ``adversarial`` are files for custom layouts whose score file does
    not carry its own.
    """
    if not paths:
        raise ValueError("upload at least one score file (.npy, .npz or .safetensors)")
    if ties not in TIE_POLICIES:
        raise ValueError(f"`ties` must be one of {', '.join(TIE_POLICIES)}, got {ties!r}")
    if not isinstance(bootstrap, int) or isinstance(bootstrap, bool) or not 0 <= bootstrap <= MAX_BOOTSTRAP:
        raise ValueError(f"`bootstrap` must be an int from 0 to {MAX_BOOTSTRAP}, got {bootstrap!r}")
    names = [Path(path).name for path in paths]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"several uploads are named {', '.join(repeated)}: rename them so each has its own layout")
    chosen = _layout_rows(layouts, names)
    plans, problems = [], []
    for path, name in zip(paths, names):
        try:
            plans.append(_plan(path, name, chosen.get(name, []), captions_per_image, references, adversarial))
        except ValueError as error:
            problems.append(_with_name(name, error))
    keys = [plan[0] for plan in plans]
    problems += [f"{key}: several uploads score this gallery" for key in sorted(set(keys)) if keys.count(key) > 1]
    if problems:
        raise ValueError("\n".join(problems))
    results, files, layouts_used = {}, {}, {}
    for key, path, info, choice, inputs in plans:
        started = time.perf_counter()
        try:
            scores = scorefiles.read_scores(path, info.key)
            results[key] = rococo_recall(scores, **inputs, k=DEFAULT_K, ties=ties, bootstrap=bootstrap)
        except ValueError as error:
            problems.append(_with_name(Path(path).name, error))
            continue
        files[key], layouts_used[key] = Path(path).name, asdict(choice)
        logger.info("scored %s %s as %s in %.2f s", Path(path).name, info.shape, key, time.perf_counter() - started)
    if problems:
        raise ValueError("\n".join(problems))
    rows = report.summary_rows(results)
    for row in rows:
        row["file"] = files.get(report.gallery_key(row["attack"], row["direction"]), "")
    lines = [f"- `{files[key]}` ({plan_info.shape[0]} x {plan_info.shape[1]}, {plan_info.dtype}): {choice.note}"
             for key, _, plan_info, choice, _ in plans]
    message = f"Scored {len(results)} file(s), ties {ties}, bootstrap {bootstrap}:\n" + "\n".join(lines)
    return Evaluation(results, files, layouts_used, rows, message)


def write_outputs(evaluation: Evaluation, folder: Path, settings: dict) -> tuple[Path, Path]:
    """Write the JSON download and the chart of one evaluation into ``folder``."""
    document = {"results": evaluation.results, "files": evaluation.files, "layouts": evaluation.layouts,
                "settings": settings, "summary": evaluation.rows}
    json_path = report.write_json(document, folder / "rococo_results.json")
    chart_path = report.plot_recall(evaluation.rows, folder / "rococo_recall.png")
    return json_path, chart_path


def compare_rows(user_rows) -> list[dict]:
    """The published reference results, then this session's own rows, on the columns they share."""
    mine = [{**row, "model": "your upload", "source": f"this session: {row.get('file') or 'mean over seeds'}"}
            for row in user_rows or []]
    def shown(key):
        return key == "seeds" or re.sub(r"_(ci|range)$", "", key) in _COMPARE_KEYS

    return [{key: value for key, value in row.items() if shown(key)} for row in report.REFERENCE_RESULTS + mine]


def explore(source, index):
    """The captions of test image ``index`` beside each text attack's, and its images when available.

    Returns ``(captions_html, images, note)``; ``images`` is a list of ``(PIL image, label)``.
    """
    if source is None:
        raise ValueError("the RoCOCO annotation files are not available here (see the note at the top)")
    if not 0 <= index < len(source.captions_per_image):
        last = len(source.captions_per_image) - 1
        raise ValueError(f"`index` must be an image index from 0 to {last}, got {index!r}")
    offsets = caption_offsets(source.captions_per_image)
    ground_truth = source.ground_truth_captions()[offsets[index]:offsets[index + 1]]
    per_image = source.adversarial_per_image
    altered = {attack: source.adversarial_captions(attack)[per_image * index:per_image * (index + 1)]
               for attack in TEXT_ATTACKS}
    images, note = [], f"Image {index}: `{source.image_files[index]}`."
    if getattr(source, "images_dir", "") is None:
        note += (f" The COCO images are not available here: set ${IMAGES_DIR_ENV} to a COCO root holding "
                 "`val2014/` to see the original beside its altered copies.")
        return caption_table_html(ground_truth, altered), images, note
    try:
        images.append((source.original_image(index), "original"))
        images += [(source.altered_image(index, attack), attack) for attack in IMAGE_ATTACKS]
    except (OSError, ValueError) as error:
        images, note = [], note + f" Cannot show its images: {error}"
    return caption_table_html(ground_truth, altered), images, note


def caption_table_html(ground_truth, altered) -> str:
    """An HTML table: each ground-truth caption beside the captions each attack made from it, changes marked."""
    head = "".join(f"<th>{html.escape(attack)}</th>" for attack in altered)
    body = []
    for j, caption in enumerate(ground_truth):
        cells = "".join(f"<td>{_marked(caption, captions[j]) if j < len(captions) else '—'}</td>"
                        for captions in altered.values())
        body.append(f"<tr><td>{j}</td><td>{html.escape(caption, quote=False)}</td>{cells}</tr>")
    return (f'<table class="rococo-captions"><thead><tr><th>#</th><th>ground truth</th>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _layout_rows(layouts, names) -> dict[str, list[str]]:
    """The user's layout rows by file name; rows for files not uploaded are an error."""
    if layouts is None or isinstance(layouts, pd.DataFrame) and layouts.empty:
        return {}
    rows = layouts.values.tolist() if isinstance(layouts, pd.DataFrame) else layouts
    chosen = {}
    for row in rows:
        cells = ["" if cell is None else str(cell).strip() for cell in row]
        if not any(cells):
            continue
        if cells[0] not in names:
            raise ValueError(f"the layout table names {cells[0]!r}, which is not among the uploads "
                             f"({', '.join(names)})")
        chosen[cells[0]] = cells[1:4]
    return chosen


def _plan(path, name, cells, captions_per_image, references, adversarial):
    """Check one upload from its header and layout: ``(key, path, info, choice, metric inputs)``."""
    info = scorefiles.read_header(path)
    attack, direction, order = (cells + ["", "", ""])[:3]
    if not attack and info.layout_keys:
        attack = CUSTOM
    choice = choose_layout(info.shape, captions_per_image, name, attack, direction, order,
                           scores=functools.partial(scorefiles.read_scores, path, info.key))
    if not choice.order:
        raise ValueError(f"{choice.note}; set it in the `order` column of the layout table")
    if choice.attack != CUSTOM:
        layout = _standard_layout(choice.attack, choice.direction, choice.order, tuple(captions_per_image))
        key = report.gallery_key(choice.attack, choice.direction)
        return key, path, info, choice, {"references": layout.references, "adversarial": layout.adversarial}
    inside = scorefiles.read_layout_arrays(path)
    if "references" not in inside and references is None:
        raise ValueError("a custom layout needs references: upload a references file, or put a `references` "
                         "array in an .npz or .safetensors score file")
    inputs = {"references": inside["references"] if "references" in inside else scorefiles.read_references(references),
              "adversarial": inside.get("adversarial")}
    if inputs["adversarial"] is None and adversarial is not None:
        inputs["adversarial"] = scorefiles.read_adversarial(adversarial)
    label = re.sub(r"[/\s]+", "_", Path(name).stem)
    return report.gallery_key(label, choice.direction), path, info, choice, inputs


@functools.lru_cache(maxsize=8)
def _standard_layout(attack, direction, order, captions_per_image):
    """Layouts are read-only and shared by all requests; each is built for its own attack (and checked)."""
    return gallery_layout(attack, direction, list(captions_per_image), order)


def _marked(original: str, altered: str) -> str:
    """``altered`` as HTML with the words that replaced ``original``'s marked, and what they replaced."""
    changes = find_replacements(original, altered)
    text = html.escape(altered, quote=False)
    for word in dict.fromkeys(change.replacement for change in changes if change.replacement):
        text = highlight(text, html.escape(word, quote=False), mark="\x00")
    text = re.sub("\x00(.*?)\x00", r"<mark>\1</mark>", text)
    summary = "; ".join(f"{c.original or '∅'} → {c.replacement or '∅'}" for c in changes) or "same as the ground truth"
    return f"{text}<br><small>{html.escape(summary, quote=False)}</small>"


def _with_name(name: str, error: Exception) -> str:
    text = str(error)
    return text if text.startswith(f"{name}:") else f"{name}: {text}"
