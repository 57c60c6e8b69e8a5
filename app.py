"""The RoCOCO Space: score a model's uploaded score matrices, browse the attacks, compare with published numbers.

``python app.py`` (or ``make run``) serves it on ``$GRADIO_SERVER_NAME:$GRADIO_SERVER_PORT`` (default
127.0.0.1:7860). The RoCOCO captions come from ``$ROCOCO_ANNOTATIONS_DIR`` or the pinned download; COCO
images, for the Explore tab, from ``$ROCOCO_IMAGES_DIR`` (the folder holding ``val2014/``) when set.
Every action is an API endpoint (``/detect``, ``/evaluate``, ``/explore``, ``/explore_random``,
``/compare``), so ``gradio_client`` can do what the page does. Each request carries its own data: nothing
a user uploads or gets back is kept in this process beyond the request and the user's session.
"""

from __future__ import annotations

import functools
import html
import logging
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from rococo_eval import report, scorefiles
from rococo_eval.captions import find_replacements, highlight
from rococo_eval.layout import (ADVERSARIAL_PER_IMAGE, CLEAN, IMAGE_ATTACKS, TEXT_ATTACKS, caption_offsets,
                                gallery_layout, gallery_shape)
from rococo_recall import rococo_recall

logger = logging.getLogger("rococo_app")

IMAGES_DIR_ENV = "ROCOCO_IMAGES_DIR"
LAYOUT_HEADERS = ["file", "attack", "direction", "order", "note"]
TIES = ("pessimistic", "optimistic")
K = (1, 5, 10)
MAX_BOOTSTRAP = 1000
OUTPUT_MAX_AGE_S = 3600
_COMPARE_KEYS = ("model", "attack", "direction", "clean_recall@1", "recall@1", "recall@5", "recall@10",
                 "r_mean", "false_rate", "source")
_COMPARE_WIDTHS = ["11%", "17%", "10%", "6%", "6%", "6%", "6%", "6%", "6%", "26%"]
_NO_ANNOTATIONS = (
    "**The RoCOCO annotation files are not available here**, so standard layouts and the Explore tab are off; "
    "custom layouts and the Compare tab still work. To get them, set `ROCOCO_ANNOTATIONS_DIR` to a folder "
    "holding the official files (github.com/pseulki/rococo, commit d8ba2a6, `annotations/`), or let the app "
    "download them from that pinned commit (they are checked by sha256).\n\nWhat went wrong: {problem}"
)


@dataclass
class Evaluation:
    """What one evaluation request produced."""

    results: dict
    files: dict
    layouts: dict
    rows: list
    message: str


def open_source(images_dir=None):
    """Open the RoCOCO annotations (and images, when ``images_dir`` or ``$ROCOCO_IMAGES_DIR`` is set).

    Returns ``(source, problem)``: the source or None, and what went wrong, for the page.
    """
    from rococo_eval.dataset import ImageFolderError, RococoSource

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
    """One layout row (``LAYOUT_HEADERS``) per uploaded file, from its header: detected, or blank with why."""
    rows = []
    for path in paths or []:
        name = Path(path).name
        try:
            info = scorefiles.read_header(path)
            attack = scorefiles.CUSTOM if info.layout_keys else ""
            choice = scorefiles.choose_layout(info.shape, captions_per_image, name, attack=attack)
            rows.append([name, choice.attack, choice.direction, choice.order, choice.note])
        except ValueError as error:
            rows.append([name, "", "", "", str(error)])
    return rows


def evaluate_files(paths, layouts=None, references=None, adversarial=None, *, captions_per_image=None,
                   ties="pessimistic", bootstrap=0) -> Evaluation:
    """Score every uploaded file on its layout; raise one ``ValueError`` listing every file's problem.

    ``layouts`` are rows ``[file, attack, direction, order, ...]``; a file without a row, or blank cells,
    gets the detected layout. ``references`` and ``adversarial`` are files for custom layouts whose score file
    does not carry its own.
    """
    if not paths:
        raise ValueError("upload at least one score file (.npy, .npz or .safetensors)")
    if ties not in TIES:
        raise ValueError(f"`ties` must be one of {', '.join(TIES)}, got {ties!r}")
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
            results[key] = rococo_recall(scores, **inputs, k=K, ties=ties, bootstrap=bootstrap)
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


def table(rows) -> pd.DataFrame:
    """The rows as the page shows them (see :func:`rococo_eval.report.format_rows`)."""
    headers, cells = report.format_rows(rows)
    return pd.DataFrame(cells, columns=headers)


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
    start = ADVERSARIAL_PER_IMAGE * index
    altered = {attack: source.adversarial_captions(attack)[start:start + ADVERSARIAL_PER_IMAGE]
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


def build_app(source=None, captions_per_image=None, *, concurrency: int = 2, output_dir=None) -> gr.Blocks:
    """Build the Space's page.

    Args:
        source: a :class:`rococo_eval.dataset.RococoSource` (or anything with its caption and image methods);
            None opens one (see :func:`open_source`) unless ``captions_per_image`` is given.
        captions_per_image: caption counts of the standard layouts; default the source's.
        concurrency: how many evaluations run at once (each holds at most one score matrix in memory).
        output_dir: where per-request result files go (default a fresh temporary folder); files older than an
            hour are removed as new requests come.
    """
    problem = ""
    if source is None and captions_per_image is None:
        source, problem = open_source()
    if captions_per_image is None and source is not None:
        captions_per_image = list(source.captions_per_image)
    output_root = Path(output_dir or tempfile.mkdtemp(prefix="rococo-app-"))

    def detect(files):
        return detect_layouts(files, captions_per_image)

    def evaluate(files, layouts=None, references=None, adversarial=None, ties="pessimistic", bootstrap=0):
        try:
            evaluation = evaluate_files(files, layouts, references, adversarial, captions_per_image=captions_per_image,
                                        ties=ties, bootstrap=_int(bootstrap, "bootstrap"))
            settings = {"k": list(K), "ties": ties, "bootstrap": bootstrap}
            json_path, chart_path = write_outputs(evaluation, _fresh_folder(output_root), settings)
        except ValueError as error:
            logger.info("evaluation refused: %s", error)
            raise gr.Error(str(error), duration=None, title="Cannot evaluate", print_exception=False) from None
        return evaluation.message, table(evaluation.rows), str(chart_path), str(json_path), evaluation.rows

    def show(index):
        try:
            return explore(source, _int(index, "index"))
        except ValueError as error:
            raise gr.Error(str(error), title="Cannot show this image", print_exception=False) from None

    def show_random():
        index = random.randrange(len(source.captions_per_image)) if source is not None else 0
        return (index, *show(index))

    def compare(user_rows):
        return table(compare_rows(user_rows))

    with gr.Blocks(title="RoCOCO robustness evaluation", delete_cache=(OUTPUT_MAX_AGE_S, OUTPUT_MAX_AGE_S)) as demo:
        gr.Markdown(_intro(captions_per_image))
        if captions_per_image is None:
            gr.Markdown(_NO_ANNOTATIONS.format(problem=_shorten(problem)), elem_id="annotations-note")
        elif problem or source is None:
            gr.Markdown(f"Note: {_shorten(problem) or 'no RoCOCO source was given, so the Explore tab is off.'}",
                        elem_id="annotations-note")
        user_rows = gr.State([])
        with gr.Tab("Evaluate"):
            files = gr.File(label="Score files (.npy, .npz, .safetensors), one per gallery", file_count="multiple",
                            file_types=list(scorefiles.SCORE_SUFFIXES), type="filepath")
            gr.Markdown(_LAYOUT_HELP)
            layouts = gr.Dataframe(headers=LAYOUT_HEADERS, type="array", interactive=True, wrap=True,
                                   column_count=len(LAYOUT_HEADERS), label="layouts",
                                   column_widths=["18%", "13%", "13%", "9%", "47%"])
            with gr.Accordion("Custom layout (references and adversarial items)", open=False):
                gr.Markdown(_CUSTOM_HELP)
                with gr.Row():
                    references = gr.File(label="references (.json or .npy)", file_types=[".json", ".npy"])
                    adversarial = gr.File(label="adversarial (.json or .npy)", file_types=[".json", ".npy"])
            with gr.Row():
                ties = gr.Dropdown(list(TIES), value="pessimistic", label="ties (a wrong item with the same score "
                                   "as the best correct one ranks above it, or below)")
                bootstrap = gr.Number(value=0, precision=0, minimum=0, maximum=MAX_BOOTSTRAP,
                                      label=f"bootstrap resamples for 95% CIs (0 = none, at most {MAX_BOOTSTRAP})")
            run = gr.Button("Evaluate", variant="primary")
            message = gr.Markdown(label="message", elem_id="evaluate-message")
            results_table = gr.Dataframe(label="results", interactive=False, wrap=True, elem_id="results-table")
            chart = gr.Image(label="chart", type="filepath", interactive=False)
            download = gr.File(label="json", interactive=False)
        with gr.Tab("Explore"):
            with gr.Row():
                index = gr.Number(value=0, precision=0, minimum=0, label="image index")
                show_button = gr.Button("Show")
                random_button = gr.Button("Random image")
            captions = gr.HTML(label="captions")
            note = gr.Markdown(label="note")
            images = gr.Gallery(label="images", columns=7, height="auto")
        with gr.Tab("Compare"):
            gr.Markdown("Published results (each with its source) and the results of your last evaluation in this "
                        "session. Numbers in percent.")
            compare_button = gr.Button("Refresh")
            compare_table = gr.Dataframe(value=table(compare_rows([])), label="comparison", interactive=False,
                                         wrap=True, column_widths=_COMPARE_WIDTHS)

        files.change(detect, files, layouts, api_name="detect")
        evaluated = run.click(evaluate, [files, layouts, references, adversarial, ties, bootstrap],
                              [message, results_table, chart, download, user_rows], api_name="evaluate",
                              concurrency_limit=concurrency)
        evaluated.success(compare, user_rows, compare_table, api_name="show_comparison", api_visibility="private")
        show_button.click(show, index, [captions, images, note], api_name="explore")
        random_button.click(show_random, None, [index, captions, images, note], api_name="explore_random")
        compare_button.click(compare, user_rows, compare_table, api_name="compare")
    demo.queue(default_concurrency_limit=4)
    return demo


_LAYOUT_HELP = ("**Layout of each file**, detected from its shape when you upload; edit a cell to choose. `attack`: "
                "clean, same_concept, diff_concept, rand_voca, danger, mix_seed1/10/100, patch_seed1/10/100, or "
                "custom. `direction`: image_to_text or text_to_image. `order` of an attacked image-to-text gallery: "
                "official (each image's captions, then its 5 altered ones) or dataset (all originals, then all "
                "altered captions).")
_CUSTOM_HELP = ("For a gallery that is not a standard RoCOCO one, set the file's attack to `custom` and give "
                "`references` (for each query, its correct gallery index or list of indices: a JSON list, or an "
                ".npy int array with one row per query) and `adversarial` (a boolean mask over the gallery, or the "
                "indices of the adversarial items). An .npz or .safetensors score file may carry both itself, as "
                "arrays named `references` and `adversarial`.")


def _intro(captions_per_image) -> str:
    text = ("# RoCOCO: how robust is an image-text matching model?\n"
            "Upload your model's score matrices (queries x gallery, higher = more similar), one per gallery: "
            "image-to-text for the clean captions and each text attack, text-to-image for the clean images and "
            "each image attack. Galleries and metric follow the official RoCOCO evaluation "
            "([paper](https://arxiv.org/abs/2304.10727), [code](https://github.com/pseulki/rococo)).")
    if captions_per_image is None:
        return text
    shape = functools.partial(gallery_shape, captions_per_image=captions_per_image)
    return text + (f"\n\nStandard shapes: image-to-text clean {shape(CLEAN, 'image_to_text')}, text attack "
                   f"{shape('rand_voca', 'image_to_text')}; text-to-image clean {shape(CLEAN, 'text_to_image')}, "
                   f"image attack {shape('mix_seed1', 'text_to_image')}. Put the attack's name in a file's name "
                   "(`clip_rand_voca.npy`) and its layout is found for you.")


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
        attack = scorefiles.CUSTOM
    choice = scorefiles.choose_layout(info.shape, captions_per_image, name, attack, direction, order)
    if choice.attack != scorefiles.CUSTOM:
        layout = _standard_layout(choice.attack != CLEAN, choice.direction, choice.order, tuple(captions_per_image))
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
def _standard_layout(attacked, direction, order, captions_per_image):
    """Layouts are read-only and shared by all requests; all attacks of a direction have the same one."""
    attack = (TEXT_ATTACKS[0] if direction == "image_to_text" else IMAGE_ATTACKS[0]) if attacked else CLEAN
    return gallery_layout(attack, direction, list(captions_per_image), order)


def _fresh_folder(root: Path) -> Path:
    """A new folder for one request's files; folders older than ``OUTPUT_MAX_AGE_S`` are removed."""
    root.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for old in root.iterdir():
        try:
            if now - old.stat().st_mtime > OUTPUT_MAX_AGE_S:
                shutil.rmtree(old, ignore_errors=True)
        except FileNotFoundError:
            continue
    return Path(tempfile.mkdtemp(dir=root))


def _marked(original: str, altered: str) -> str:
    """``altered`` as HTML with the words that replaced ``original``'s marked, and what they replaced."""
    changes = find_replacements(original, altered)
    text = html.escape(altered, quote=False)
    for word in dict.fromkeys(change.replacement for change in changes if change.replacement):
        text = highlight(text, html.escape(word, quote=False), mark="\x00")
    text = re.sub("\x00(.*?)\x00", r"<mark>\1</mark>", text)
    summary = "; ".join(f"{c.original or '∅'} → {c.replacement or '∅'}" for c in changes) or "same as the ground truth"
    return f"{text}<br><small>{html.escape(summary, quote=False)}</small>"


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _with_name(name: str, error: Exception) -> str:
    text = str(error)
    return text if text.startswith(f"{name}:") else f"{name}: {text}"


def _int(value, name: str) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"`{name}` must be a whole number, got {value!r}")


demo = build_app()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    demo.launch(max_file_size=scorefiles.max_upload_bytes())
