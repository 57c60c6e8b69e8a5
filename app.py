"""The RoCOCO Space: score a model's uploaded score matrices, browse the attacks, compare with published numbers.

``python app.py`` (or ``make run``) serves it on ``$GRADIO_SERVER_NAME:$GRADIO_SERVER_PORT`` (default
127.0.0.1:7860). The RoCOCO captions come from ``$ROCOCO_ANNOTATIONS_DIR`` or the pinned download; COCO
images, for the Explore tab, from ``$ROCOCO_IMAGES_DIR`` (the folder holding ``val2014/``) when set.
``$ROCOCO_BENCHMARK_DIR`` serves a benchmark made by ``rococo-eval attack`` instead of RoCOCO.
Every action is an API endpoint (``/detect``, ``/evaluate``, ``/flipped``, ``/explore``, ``/explore_random``,
``/compare``, ``/submit``, ``/leaderboard``), so ``gradio_client`` can do what the page does. This file only builds
the page and wires each button to a handler (:mod:`rococo_eval.space.handlers`); what the handlers call lives in
:mod:`rococo_eval.space`. The leaderboard lives in the SQLite database at ``$ROCOCO_LEADERBOARD_DB``
(:mod:`rococo_eval.space.leaderboard`). Each request carries its own data: nothing a user uploads or gets back is
kept in this process beyond the request and the user's session.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from rococo_eval.catalog import CLEAN, DIRECTIONS, IMAGE_ATTACK_METHODS, TEXT_ATTACKS
from rococo_eval.data.annotations import OFFICIAL_COMMIT, OFFICIAL_REPOSITORY, PAPER_URL
from rococo_eval.detection import CUSTOM
from rococo_eval.io import scorefiles
from rococo_eval.layout import describe_orders, gallery_shape
from rococo_eval.reporting.analysis import DEFAULT_MIN_COUNT
from rococo_eval.scoring.plan import attacks_of
from rococo_eval.space import leaderboard
from rococo_eval.space.handlers import OUTPUT_MAX_AGE_S, Handlers, open_board
from rococo_eval.space.logic import (
    ALL_GALLERIES,
    IMAGE_ATTACK_HEADERS,
    LAYOUT_HEADERS,
    MAX_BOOTSTRAP,
    WORD_HEADERS,
    compare_rows,
    source_and_problem,
)
from rococo_eval.space.views import board_table, table
from rococo_recall import TIE_POLICIES

# Requests other than evaluations (detect, explore, compare) that run at once: each reads a file header, a few
# images or a small table, so 4 keep the page responsive for several users in little memory. Evaluations have
# their own limit, `concurrency`.
LIGHT_REQUEST_CONCURRENCY = 4
# The results table's columns (file, attack, direction, 4 clean recalls, 4 recalls, false rate, attack success,
# 3 counts), wide enough for their numbers and for their headers to wrap between words; a table wider than the
# page scrolls inside its frame.
_RESULTS_WIDTHS = ["170px", "110px", "140px"] + ["84px"] * 12 + ["108px"]
_COMPARE_WIDTHS = ["11%", "17%", "10%", "6%", "6%", "6%", "6%", "6%", "6%", "26%"]
_NO_ANNOTATIONS = (
    "**The RoCOCO annotation files are not available here**, so standard layouts and the Explore tab are off; "
    "custom layouts and the Compare tab still work. To get them, set `ROCOCO_ANNOTATIONS_DIR` to a folder "
    f"holding the official files ({OFFICIAL_REPOSITORY.removeprefix('https://')}, commit {OFFICIAL_COMMIT[:7]}, "
    "`annotations/`), or let the app download them from that pinned commit (they are checked by sha256)."
    "\n\nWhat went wrong: {problem}"
)


def build_app(source=None, captions_per_image=None, *, concurrency: int = 2, output_dir=None,
              leaderboard_db=None) -> gr.Blocks:
    """Build the Space's page: five tabs whose buttons call :class:`~rococo_eval.space.handlers.Handlers`, each
    also an API endpoint.

    Args:
        source: a :class:`rococo_eval.data.source.Source` (RoCOCO's or a generated benchmark's, or anything with
            the members of it that the page uses);
            None opens one (see :func:`rococo_eval.space.logic.source_and_problem`) unless ``captions_per_image``
            is given.
        captions_per_image: caption counts of the standard layouts; default the source's.
        concurrency: how many evaluations run at once (each holds at most one score matrix in memory).
        output_dir: where per-request result files go (default a fresh temporary folder); files older than an
            hour are removed as new requests come.
        leaderboard_db: the leaderboard's SQLite file (default ``$ROCOCO_LEADERBOARD_DB``, else
            ``/data/leaderboard.sqlite3`` on a Space's persistent storage, else ``leaderboard.sqlite3`` in
            ``output_dir``, which a restart loses); see :func:`~rococo_eval.space.handlers.open_board`.
    """
    problem = ""
    if source is None and captions_per_image is None:
        source, problem = source_and_problem()
    if captions_per_image is None and source is not None:
        captions_per_image = list(source.captions_per_image)
    output_root = Path(output_dir or tempfile.mkdtemp(prefix="rococo-app-"))
    reopen = functools.partial(open_board, leaderboard_db, output_root, source, captions_per_image)
    board, board_problem = reopen()
    handlers = Handlers(source, captions_per_image, output_root, board, board_problem, reopen)
    with gr.Blocks(title="RoCOCO robustness evaluation", delete_cache=(OUTPUT_MAX_AGE_S, OUTPUT_MAX_AGE_S)) as demo:
        gr.Markdown(_intro(captions_per_image))
        note = _availability_note(source, captions_per_image, problem)
        if note:
            gr.Markdown(note, elem_id="annotations-note")
        user_rows, board_rows, failures = gr.State([]), gr.State([]), gr.State(None)
        with gr.Tab("Evaluate"):
            evaluate_tab = _evaluate_tab(attacks_of(source))
        with gr.Tab("What fooled the model"):
            flipped_tab = _flipped_tab()
        with gr.Tab("Explore"):
            explore_tab = _explore_tab()
        with gr.Tab("Compare"):
            compare_tab = _compare_tab()
        with gr.Tab("Leaderboard"):
            board_tab = _leaderboard_tab(board_problem)
        _wire(handlers, evaluate_tab, flipped_tab, explore_tab, compare_tab, user_rows, board_rows, failures,
              concurrency)
        _wire_leaderboard(demo, handlers, evaluate_tab, board_tab, board_rows)
        if source is not None:
            demo.load(handlers.show, explore_tab.index, [explore_tab.captions, explore_tab.images, explore_tab.note],
                      api_visibility="private")
    demo.queue(default_concurrency_limit=LIGHT_REQUEST_CONCURRENCY)
    return demo


def _availability_note(source, captions_per_image, problem: str) -> str:
    """What the page cannot do here, and why (empty when everything is available)."""
    if captions_per_image is None:
        return _NO_ANNOTATIONS.format(problem=_shorten(problem))
    if problem or source is None:
        return f"Note: {_shorten(problem) or 'no RoCOCO source was given, so the Explore tab is off.'}"
    return ""


def _evaluate_tab(attacks) -> SimpleNamespace:
    """The Evaluate tab's components: uploads, layout table, options, and the results."""
    tab = SimpleNamespace()
    tab.files = gr.File(label="Score files (.npy, .npz, .safetensors), one per gallery", file_count="multiple",
                        file_types=list(scorefiles.SCORE_SUFFIXES), type="filepath")
    gr.Markdown(_layout_help(attacks))
    tab.layouts = gr.Dataframe(headers=LAYOUT_HEADERS, type="array", interactive=True, wrap=True,
                               column_count=len(LAYOUT_HEADERS), label="layouts",
                               column_widths=["18%", "13%", "13%", "9%", "47%"])
    with gr.Accordion("Custom layout (references and adversarial items)", open=False):
        gr.Markdown(_CUSTOM_HELP)
        with gr.Row():
            tab.references = gr.File(label="references (.json or .npy)", file_types=[".json", ".npy"])
            tab.adversarial = gr.File(label="adversarial (.json or .npy)", file_types=[".json", ".npy"])
    with gr.Row():
        tab.ties = gr.Dropdown(list(TIE_POLICIES), value="pessimistic", label="ties (a wrong item with the same "
                               "score as the best correct one ranks above it, or below)")
        tab.bootstrap = gr.Number(value=0, precision=0, minimum=0, maximum=MAX_BOOTSTRAP,
                                  label=f"bootstrap resamples for 95% CIs (0 = none, at most {MAX_BOOTSTRAP})")
    tab.run = gr.Button("Evaluate", variant="primary")
    tab.message = gr.Markdown(label="message", elem_id="evaluate-message")
    tab.results = gr.Dataframe(label="results", interactive=False, wrap=True, elem_id="results-table",
                               column_widths=_RESULTS_WIDTHS)
    tab.chart = gr.Image(label="chart", type="filepath", interactive=False, elem_id="recall-chart")
    tab.download = gr.File(label="json", interactive=False)
    tab.form = _submit_form()
    return tab


def _flipped_tab() -> SimpleNamespace:
    """The failure analysis tab: flipped queries (paged, filtered by gallery, CSV), by word, by method."""
    tab = SimpleNamespace()
    gr.Markdown(_FLIPPED_HELP)
    with gr.Row():
        # the choices are each session's galleries, set after its evaluation: the handler checks the value
        tab.gallery = gr.Dropdown([ALL_GALLERIES], value=ALL_GALLERIES, label="gallery", allow_custom_value=True)
        tab.page = gr.Number(value=1, precision=0, minimum=1, label="page")
        tab.min_count = gr.Number(value=DEFAULT_MIN_COUNT, precision=0, minimum=1,
                                  label="fewest images a word needs to be listed")
        tab.show = gr.Button("Show")
    tab.note = gr.Markdown(elem_id="flipped-note")
    tab.queries = gr.HTML(elem_id="flipped-queries")
    tab.csv = gr.File(label="every flipped query of this filter (CSV)", interactive=False)
    tab.words = gr.Dataframe(headers=WORD_HEADERS, label="attack success by word (text attacks)", interactive=False,
                             wrap=True, elem_id="word-table")
    tab.chart = gr.Image(label="most damaging words", type="filepath", interactive=False, elem_id="word-chart")
    tab.image_attacks = gr.Dataframe(headers=IMAGE_ATTACK_HEADERS, label="image attacks by method and by seed",
                                     interactive=False, wrap=True, elem_id="image-attack-table")
    return tab


def _explore_tab() -> SimpleNamespace:
    """The Explore tab's components: an image index, its captions beside each attack's, and its images."""
    tab = SimpleNamespace()
    with gr.Row():
        tab.index = gr.Number(value=0, precision=0, minimum=0, label="image index")
        tab.show = gr.Button("Show")
        tab.random = gr.Button("Random image")
    tab.captions = gr.HTML(label="captions")
    tab.note = gr.Markdown(label="note")
    tab.images = gr.Gallery(label="images", columns=7, height="auto")
    return tab


def _compare_tab() -> SimpleNamespace:
    """The Compare tab's components: published results beside this session's."""
    tab = SimpleNamespace()
    gr.Markdown("Published results (each with its source) and the results of your last evaluation in this "
                "session. Numbers in percent.")
    tab.refresh = gr.Button("Refresh")
    tab.table = gr.Dataframe(value=table(compare_rows([])), label="comparison", interactive=False, wrap=True,
                             column_widths=_COMPARE_WIDTHS, max_height=1200)  # the published rows and yours, unscrolled
    return tab


def _leaderboard_tab(problem: str = "") -> SimpleNamespace:
    """The Leaderboard tab: the board (sortable by clicking a header, filled when a page loads), a search and a
    filter by kind; ``problem`` says why the board is unavailable."""
    tab = SimpleNamespace()
    gr.Markdown("Clean and attacked R@1 (%) of every submitted evaluation, and the published numbers, each row with "
                "its source. Click a column's header to sort by it. Submit your own from the Evaluate tab: an "
                "evaluation of RoCOCO's galleries (custom layouts are not taken).")
    if problem:
        gr.Markdown(f"**The leaderboard is unavailable**: {_shorten(problem)}. Scoring works as usual.",
                    elem_id="leaderboard-note")
    with gr.Row():
        tab.search = gr.Textbox(label="model name holds", scale=3)
        tab.kind = gr.Radio(["all", leaderboard.PUBLISHED, leaderboard.SUBMITTED], value="all", label="rows")
        tab.refresh = gr.Button("Refresh", scale=1)
    tab.table = gr.Dataframe(value=board_table([]), label="leaderboard", interactive=False, wrap=True,
                             datatype="str", max_height=1200, elem_id="leaderboard-table")
    return tab


def _submit_form() -> SimpleNamespace:
    """The Evaluate tab's form that submits the last evaluation to the leaderboard."""
    form = SimpleNamespace()
    with gr.Accordion("Submit this evaluation to the leaderboard", open=False):
        with gr.Row():
            form.model = gr.Textbox(label="model name", max_length=leaderboard.LIMITS["model"], elem_id="submit-model")
            form.link = gr.Textbox(label="link (https://...)", max_length=leaderboard.LIMITS["link"])
            form.precision = gr.Dropdown(list(leaderboard.PRECISIONS), value="fp32", label="precision")
        form.note = gr.Textbox(label="note (optional)", max_length=leaderboard.LIMITS["note"])
        form.submit = gr.Button("Submit")
        form.message = gr.Textbox(label="submission", interactive=False, elem_id="submit-message")  # plain text
    form.times = gr.State([])
    return form


def _wire_leaderboard(demo, handlers: Handlers, evaluate_tab, board_tab, board_rows) -> None:
    filters = [board_tab.search, board_tab.kind]
    demo.load(handlers.fresh_board, filters, board_tab.table, api_visibility="private")  # the board of now
    board_tab.refresh.click(handlers.leaderboard, filters, board_tab.table, api_name="leaderboard")
    board_tab.kind.change(handlers.leaderboard, filters, board_tab.table, api_visibility="private")
    board_tab.search.submit(handlers.leaderboard, filters, board_tab.table, api_visibility="private")
    form = evaluate_tab.form
    form.submit.click(handlers.submit, [board_rows, form.model, form.link, form.precision, form.note, form.times,
                                        *filters], [form.message, board_tab.table, form.times], api_name="submit")


def _wire(handlers: Handlers, evaluate_tab, flipped_tab, explore_tab, compare_tab, user_rows, board_rows, failures,
          concurrency: int) -> None:
    """Connect the components to the handlers; each connection is also the named API endpoint."""
    evaluate_tab.files.change(handlers.detect, evaluate_tab.files, evaluate_tab.layouts, api_name="detect")
    evaluated = evaluate_tab.run.click(
        handlers.evaluate,
        [evaluate_tab.files, evaluate_tab.layouts, evaluate_tab.references, evaluate_tab.adversarial,
         evaluate_tab.ties, evaluate_tab.bootstrap],
        [evaluate_tab.message, evaluate_tab.results, evaluate_tab.chart, evaluate_tab.download, user_rows, board_rows,
         failures],
        api_name="evaluate", concurrency_limit=concurrency)
    evaluated.success(handlers.compare, user_rows, compare_tab.table, api_name="show_comparison",
                      api_visibility="private")
    flipped_outputs = [flipped_tab.note, flipped_tab.queries, flipped_tab.csv, flipped_tab.words, flipped_tab.chart,
                       flipped_tab.image_attacks]
    evaluated.success(handlers.first_flipped, [failures, flipped_tab.min_count],
                      [flipped_tab.gallery, flipped_tab.page, *flipped_outputs], api_name="show_flipped",
                      api_visibility="private")
    flipped_tab.show.click(handlers.flipped, [failures, flipped_tab.gallery, flipped_tab.page, flipped_tab.min_count],
                           flipped_outputs, api_name="flipped")
    explore_outputs = [explore_tab.captions, explore_tab.images, explore_tab.note]
    explore_tab.show.click(handlers.show, explore_tab.index, explore_outputs, api_name="explore")
    explore_tab.random.click(handlers.show_random, None, [explore_tab.index, *explore_outputs],
                             api_name="explore_random")
    compare_tab.refresh.click(handlers.compare, user_rows, compare_tab.table, api_name="compare")


def _layout_help(attacks) -> str:
    """The layout table's help: the ``attacks`` a file may be of (RoCOCO's, or a generated benchmark's)."""
    text_attacks = [attack for attack in attacks if attack in TEXT_ATTACKS]
    seeds = {method: [attack.rsplit("_seed", 1)[1] for attack in attacks if attack.startswith(f"{method}_seed")]
             for method in IMAGE_ATTACK_METHODS}
    names = ", ".join([CLEAN, *text_attacks, *(f"{method}_seed" + "/".join(numbers)
                                                 for method, numbers in seeds.items() if numbers)])
    return ("**Layout of each file**, detected from its shape and name when you upload; edit a cell to choose. "
            f"`attack`: {names}, or {CUSTOM}. `direction`: {' or '.join(DIRECTIONS)}. `order` of an attacked "
            f"image-to-text gallery: {describe_orders()}. Both orders have the same shape, so the order is read "
            "from the scores only when they clearly show it (the note says so); otherwise it stays blank and "
            "Evaluate refuses the file until you choose it.")


_FLIPPED_HELP = ("**Queries the attacks flipped**: correct at rank 1 on the clean gallery, wrong once the adversarial "
                 "items are added, largest margin (winning adversarial score minus best correct score) first. "
                 "**By word** (text attacks): among the images correct on the clean gallery with an adversarial "
                 "caption that replaced the word, the share whose top-1 is such a caption of their own; flips won by "
                 "another image's caption count for no word. **Image attacks**: success rate by method (pooled over "
                 "seeds) and by seed (pooled over methods).")
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
            f"([paper]({PAPER_URL}), [code]({OFFICIAL_REPOSITORY})).")
    if captions_per_image is None:
        return text
    shape = functools.partial(gallery_shape, captions_per_image=captions_per_image)
    return text + (f"\n\nStandard shapes: image-to-text clean {shape(CLEAN, 'image_to_text')}, text attack "
                   f"{shape('rand_voca', 'image_to_text')}; text-to-image clean {shape(CLEAN, 'text_to_image')}, "
                   f"image attack {shape('mix_seed1', 'text_to_image')}. Put the attack's name in a file's name "
                   "(`clip_rand_voca.npy`) and its layout is found for you; a text attack's order is read from "
                   "the scores when they clearly show it, else you choose it.")


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


demo = build_app()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    demo.launch(max_file_size=scorefiles.max_upload_bytes())
