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
import logging
import random
import shutil
import tempfile
import time
from pathlib import Path

import gradio as gr
import pandas as pd

from rococo_eval import report, scorefiles
from rococo_eval.layout import CLEAN, gallery_shape
from rococo_eval.space import (K, LAYOUT_HEADERS, MAX_BOOTSTRAP, TIES, compare_rows, detect_layouts, evaluate_files,
                               explore, open_source, write_outputs)

logger = logging.getLogger("rococo_app")

OUTPUT_MAX_AGE_S = 3600
_COMPARE_WIDTHS = ["11%", "17%", "10%", "6%", "6%", "6%", "6%", "6%", "6%", "26%"]
_NO_ANNOTATIONS = (
    "**The RoCOCO annotation files are not available here**, so standard layouts and the Explore tab are off; "
    "custom layouts and the Compare tab still work. To get them, set `ROCOCO_ANNOTATIONS_DIR` to a folder "
    "holding the official files (github.com/pseulki/rococo, commit d8ba2a6, `annotations/`), or let the app "
    "download them from that pinned commit (they are checked by sha256).\n\nWhat went wrong: {problem}"
)


def table(rows) -> pd.DataFrame:
    """The rows as the page shows them (see :func:`rococo_eval.report.format_rows`)."""
    headers, cells = report.format_rows(rows)
    return pd.DataFrame(cells, columns=headers)


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
            chart = gr.Image(label="chart", type="filepath", interactive=False, elem_id="recall-chart")
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
                "altered captions). Both orders have the same shape, so the order is read from the scores only "
                "when they clearly show it (the note says so); otherwise it stays blank and Evaluate refuses "
                "the file until you choose it.")
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
                   "(`clip_rand_voca.npy`) and its layout is found for you; a text attack's order is read from "
                   "the scores when they clearly show it, else you choose it.")


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


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


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
