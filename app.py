"""The RoCOCO Space: score a model's uploaded score matrices, browse the attacks, compare with published numbers.

``python app.py`` (or ``make run``) serves it on ``$GRADIO_SERVER_NAME:$GRADIO_SERVER_PORT`` (default
127.0.0.1:7860). The RoCOCO captions come from ``$ROCOCO_ANNOTATIONS_DIR`` or the pinned download; COCO
images, for the Explore tab, from ``$ROCOCO_IMAGES_DIR`` (the folder holding ``val2014/``) when set.
``$ROCOCO_BENCHMARK_DIR`` serves a benchmark made by ``rococo-eval attack`` instead of RoCOCO.
Every action is an API endpoint (``/detect``, ``/evaluate``, ``/flipped``, ``/explore``, ``/explore_random``,
``/compare``, ``/submit``, ``/leaderboard``), so ``gradio_client`` can do what the page does. This file only builds
the page and wires each button to a handler (:mod:`rococo_eval.space.handlers`), each handler's outputs listed by the
names of its result's fields (:func:`_outputs`); what the handlers call lives in
:mod:`rococo_eval.space`. The leaderboard lives in the SQLite database at ``$ROCOCO_LEADERBOARD_DB``
(:mod:`rococo_eval.board.leaderboard`). Each request carries its own data: nothing a user uploads or gets back is
kept in this process beyond the request and the user's session.
"""

from __future__ import annotations

import atexit
import functools
import logging
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from rococo_eval.catalog import CLEAN, DIRECTIONS, IMAGE_ATTACK_METHODS
from rococo_eval.data.annotations import OFFICIAL_COMMIT, OFFICIAL_REPOSITORY, PAPER_URL
from rococo_eval.data.facts import GalleryFacts
from rococo_eval.detection import CUSTOM
from rococo_eval.io import scorefiles
from rococo_eval.layout import ORDERS, describe_orders, gallery_shape
from rococo_eval.reporting.analysis import DEFAULT_MIN_COUNT
from rococo_eval.reporting.report import legend
from rococo_eval.board import leaderboard
from rococo_eval.space.example import SYNTHETIC_MODEL
from rococo_eval.space.handlers import (
    Evaluated,
    FirstFlipped,
    FlippedPage,
    Handlers,
    Shown,
    ShownAt,
    Submitted,
    open_board,
)
from rococo_eval.space.hub_requests import HubRequests, Requested
from rococo_eval.space.logic import (
    ALL_GALLERIES,
    IMAGE_ATTACK_HEADERS,
    LAYOUT_HEADERS,
    MAX_BOOTSTRAP,
    TRUST_ORDER_LABEL,
    WORD_HEADERS,
    compare_rows,
    facts_and_problem,
    flipped_view,
)
from rococo_eval.space.outputs import MAX_AGE_S
from rococo_eval.space.views import BOARD_DATATYPES, BOARD_LEGEND, BOARD_VIEWS, BOARD_WIDTHS, board_shown, table
from rococo_recall import TIE_POLICIES

# Requests other than evaluations (detect, explore, compare) that run at once: each reads a file header, a few
# images or a small table, so 4 keep the page responsive for several users in little memory. Evaluations have
# their own limit, `concurrency`.
LIGHT_REQUEST_CONCURRENCY = 4
# The results table's columns (file, attack, direction, clean R@1, 3 recalls, r_mean, false rate, attack success),
# wide enough for their numbers and for their headers to wrap between words, 1,112 px in all: the table fits a
# 1280 px page (a wider one, with intervals, scrolls inside its frame).
_RESULTS_WIDTHS = ["260px", "140px", "110px"] + ["86px"] * 7
BOARD_VIEW = "means"  # the leaderboard's columns when a page opens
# At 1280 x 900 the results begin about 1,100 px below the example's button: once shown, the page scrolls to the
# message above them, or to the results themselves when the message would push them below the middle of the window.
_SCROLL_TO_RESULTS = """() => {
    const scroll = (tries) => {
        const results = document.querySelector("#results-table");
        const message = document.querySelector("#evaluate-message");
        if (!results || results.offsetParent === null || !message) {
            if (tries > 0) setTimeout(() => scroll(tries - 1), 100);
            return;
        }
        const top = message.getBoundingClientRect().top, resultsTop = results.getBoundingClientRect().top;
        window.scrollBy(0, (resultsTop - top < window.innerHeight / 2 ? top : resultsTop) - 16);
    };
    scroll(50);
}"""
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
            None opens one (see :func:`rococo_eval.space.logic.facts_and_problem`) unless ``captions_per_image``
            is given. The page reads it only through its :class:`~rococo_eval.data.facts.GalleryFacts`.
        captions_per_image: caption counts of the standard layouts; default the source's.
        concurrency: how many evaluations run at once (each holds at most one score matrix in memory).
        output_dir: where per-request result files go (default a fresh temporary folder, removed when the process
            exits), kept by content within ``$ROCOCO_SPACE_OUTPUT_MB``
            (:class:`rococo_eval.space.outputs.OutputFolders`); the synthetic example's files are written there once.
        leaderboard_db: the leaderboard's SQLite file (default ``$ROCOCO_LEADERBOARD_DB``, else
            ``/data/leaderboard.sqlite3`` on a Space's persistent storage, else ``leaderboard.sqlite3`` in
            ``output_dir``, which a restart loses); see :func:`~rococo_eval.space.handlers.open_board`.

    Raises:
        ValueError: ``$ROCOCO_SPACE_OUTPUT_MB`` or a leaderboard variable is not valid.
    """
    facts, problem = GalleryFacts.of(source, captions_per_image), ""  # the arguments' facts, read once
    if facts.captions_per_image is None:  # neither argument given: the Space's own set
        facts, problem = facts_and_problem()
    output_root = Path(output_dir or _temporary_output_dir())
    reopen = functools.partial(open_board, leaderboard_db, output_root, facts)
    board, board_problem = reopen()
    handlers = Handlers(facts, output_root, board, board_problem, reopen)
    hub_requests = HubRequests.from_environment()
    with gr.Blocks(title=f"{facts.served} — robustness evaluation",
                   delete_cache=(MAX_AGE_S, MAX_AGE_S)) as demo:
        gr.Markdown(_intro(facts))
        note = _availability_note(facts, problem)
        if note:
            gr.Markdown(note, elem_id="annotations-note")
        # what a session keeps between requests: its evaluated rows, the rows the board may take, the failures
        session = SimpleNamespace(user_rows=gr.State([]), board_rows=gr.State([]), failures=gr.State(None))
        with gr.Tab("Evaluate"):
            evaluate_tab = _evaluate_tab(facts)
        with gr.Tab("What fooled the model"):
            flipped_tab = _flipped_tab()
        with gr.Tab("Explore"):
            explore_tab = _explore_tab()
        with gr.Tab("Compare"):
            compare_tab = _compare_tab()
        with gr.Tab("Leaderboard"):
            board_tab = _leaderboard_tab(board_problem, facts)
            requests_form = _requests_form(hub_requests)
        _wire(handlers, evaluate_tab, flipped_tab, explore_tab, compare_tab, session, concurrency)
        _wire_leaderboard(demo, handlers, evaluate_tab, board_tab, session)
        _wire_requests(demo, hub_requests, requests_form)
        if facts.has_annotations:
            demo.load(handlers.show, explore_tab.index, _outputs(Shown, explore_tab), api_visibility="private")
    demo.queue(default_concurrency_limit=LIGHT_REQUEST_CONCURRENCY)
    return demo


def _availability_note(facts: GalleryFacts, problem: str) -> str:
    """What the page cannot do here, and why (empty when everything is available)."""
    if facts.captions_per_image is None:
        return _NO_ANNOTATIONS.format(problem=_shorten(problem))
    if problem or not facts.has_annotations:
        return f"Note: {_shorten(problem) or 'no RoCOCO source was given, so the Explore tab is off.'}"
    return ""


def _evaluate_tab(facts: GalleryFacts) -> SimpleNamespace:
    """The Evaluate tab's components: the synthetic example, uploads, layout table (with an order list per text
    attack), options, and the results (shown once there are some)."""
    tab = SimpleNamespace()
    with gr.Row(equal_height=True):
        tab.example = gr.Button("Try the synthetic example", variant="secondary", scale=1, elem_id="example-button")
        gr.Markdown(_EXAMPLE_HELP)
    tab.files = gr.File(label="Score files (.npy, .npz, .safetensors), one per gallery", file_count="multiple",
                        file_types=list(scorefiles.SCORE_SUFFIXES), type="filepath")
    gr.Markdown(_layout_help(facts))
    tab.layouts = gr.Dataframe(headers=LAYOUT_HEADERS, type="array", interactive=True, wrap=True,
                               column_count=len(LAYOUT_HEADERS), label="layouts",
                               column_widths=["18%", "13%", "13%", "9%", "47%"])
    with gr.Row():  # each shown when the table has a file of that text attack
        tab.orders = {attack: gr.Dropdown(list(ORDERS), value=None, label=f"order ({attack})", visible=False,
                                          elem_id=f"order-{attack}") for attack in facts.text_attacks}
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
    tab.trust_order = gr.Checkbox(value=False, label=TRUST_ORDER_LABEL, elem_id="trust-order")
    tab.run = gr.Button("Evaluate", variant="primary")
    tab.message = gr.Markdown(label="message", elem_id="evaluate-message")
    # hidden until an evaluation fills them: an empty table would show placeholder headers
    tab.results = gr.Dataframe(label="results", interactive=False, wrap=True, elem_id="results-table",
                               column_widths=_RESULTS_WIDTHS, visible=False)
    tab.legend = gr.Markdown(legend(), elem_id="results-legend", visible=False)
    tab.chart = gr.Image(label="chart", type="filepath", interactive=False, elem_id="recall-chart", visible=False)
    tab.download = gr.File(label="json", interactive=False, visible=False)
    tab.precision = gr.State(None)  # the precision the evaluated files were saved in, for the submit form
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
    before = flipped_view(None)  # what the tab says before an evaluation
    tab.note = gr.Markdown(before.note, elem_id="flipped-note")
    tab.queries = gr.HTML(elem_id="flipped-queries")
    tab.csv = gr.File(label="every flipped query of this filter (CSV)", interactive=False)
    tab.words_note = gr.Markdown(before.words_note, elem_id="word-note")
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
                "session.\n\n" + legend())
    tab.refresh = gr.Button("Refresh")
    tab.table = gr.Dataframe(value=table(compare_rows([])), label="comparison", interactive=False, wrap=True,
                             column_widths=_COMPARE_WIDTHS, max_height=1200,  # the published rows and yours, unscrolled
                             elem_id="compare-table")
    return tab


def _leaderboard_tab(problem: str, facts: GalleryFacts) -> SimpleNamespace:
    """The Leaderboard tab: the board (sortable from each header's menu, filled when a page loads), a search, a filter
    by kind and the group of columns shown; ``problem`` says why the board is unavailable, and the ``facts`` of a
    generated benchmark that its results do not go on it."""
    tab = SimpleNamespace()
    gr.Markdown("Clean and attacked R@1 (%) of every submitted evaluation, and the published numbers, each row with "
                "its source. " + _board_takes(facts))
    if problem:
        gr.Markdown(f"**The leaderboard is unavailable**: {_shorten(problem)}. Scoring works as usual.",
                    elem_id="leaderboard-note")
    with gr.Row():
        tab.search = gr.Textbox(label="model name holds", scale=2)
        tab.kind = gr.Radio(["all", leaderboard.PUBLISHED, leaderboard.SUBMITTED, ("evaluated", leaderboard.EVALUATED)],
                            value="all", label="rows", scale=2)
        tab.view = gr.Radio(list(BOARD_VIEWS), value=BOARD_VIEW, label="columns", scale=3,
                            elem_id="leaderboard-view")
        tab.page = gr.Number(value=1, precision=0, minimum=1, label=f"page ({leaderboard.PAGE_ROWS} rows)",
                             scale=1, elem_id="leaderboard-page")
        tab.refresh = gr.Button("Refresh", scale=1)
    gr.Markdown(BOARD_LEGEND, elem_id="leaderboard-legend")
    tab.table = gr.Dataframe(value=board_shown([], BOARD_VIEW), label="leaderboard", interactive=False, wrap=True,
                             datatype=BOARD_DATATYPES[BOARD_VIEW], column_widths=BOARD_WIDTHS[BOARD_VIEW],
                             max_height=1200,
                             elem_id="leaderboard-table")
    tab.note = gr.Markdown("", elem_id="leaderboard-status")  # which rows of how many; where the board is kept
    return tab


def _requests_form(hub_requests: HubRequests) -> SimpleNamespace:
    """The Leaderboard tab's form that asks the board's worker to evaluate a model from the Hub, and the requests'
    states (:class:`~rococo_eval.space.hub_requests.HubRequests`)."""
    form = SimpleNamespace()
    with gr.Accordion("Evaluate a model from the Hub", open=False):
        gr.Markdown(hub_requests.intro())
        with gr.Row():
            form.model = gr.Textbox(label="model (a --model name of a Hub repository, in a form named above)",
                                    max_length=leaderboard.LIMITS["model"], elem_id="request-model", scale=3)
            form.revision = gr.Textbox(label="revision (default main)", max_length=200, scale=1)
            form.link = gr.Textbox(label="link (https://...)", max_length=leaderboard.LIMITS["link"], scale=2)
            form.precision = gr.Dropdown(list(leaderboard.PRECISIONS[:-1]), value="fp32", label="precision", scale=1)
        form.submit = gr.Button("Request an evaluation")
        form.message = gr.Textbox(label="request", interactive=False, elem_id="request-message")
        form.states = gr.Dataframe(value=HubRequests().states(), label="requests (filled when the page loads)",
                                   interactive=False, wrap=True, elem_id="request-states")
    form.times = gr.State([])
    return form


def _wire_requests(demo, hub_requests: HubRequests, form) -> None:
    demo.load(hub_requests.states, None, form.states, api_visibility="private")
    form.submit.click(hub_requests.submit, [form.model, form.revision, form.link, form.precision, form.times],
                      _outputs(Requested, form), api_name="request_evaluation",
                      show_progress_on=form.message)


def _board_takes(facts: GalleryFacts) -> str:
    """What the board takes from this Space: RoCOCO's galleries, or nothing from a generated benchmark."""
    if not facts.is_rococo:
        return (f"This Space serves a generated benchmark ({facts.served}), not RoCOCO: its results are "
                "not RoCOCO's and do not go on this board.")
    return ("Submit your own from the Evaluate tab: an evaluation of RoCOCO's galleries (custom layouts and the "
            "synthetic example are not taken).")


def _submit_form() -> SimpleNamespace:
    """The Evaluate tab's form that submits the last evaluation to the leaderboard."""
    form = SimpleNamespace()
    with gr.Accordion("Submit this evaluation to the leaderboard", open=False):
        with gr.Row():
            form.model = gr.Textbox(label="model name", max_length=leaderboard.LIMITS["model"], elem_id="submit-model")
            form.link = gr.Textbox(label="link (https://...)", max_length=leaderboard.LIMITS["link"])
            form.precision = gr.Dropdown(list(leaderboard.PRECISIONS), value="fp32", label="precision",
                                         elem_id="submit-precision")
        form.note = gr.Textbox(label="note (optional)", max_length=leaderboard.LIMITS["note"])
        form.submit = gr.Button("Submit")
        form.message = gr.Textbox(label="submission", interactive=False, elem_id="submit-message")  # plain text
    form.times = gr.State([])
    return form


def _outputs(result: type, *namespaces: SimpleNamespace) -> list:
    """The components that a handler's ``result`` (a named tuple of :mod:`rococo_eval.space.handlers`) fills, in the
    order of its fields: for each field, the one component of ``namespaces`` of its name. So a value reaches its
    component by name, and the API returns the values in the order of the fields.

    Raises:
        ValueError: a field names no component of ``namespaces``, or several.
    """
    components = []
    for field in result._fields:
        found = [vars(namespace)[field] for namespace in namespaces if field in vars(namespace)]
        if len(found) != 1:
            raise ValueError(f"{result.__name__}.{field} names {len(found)} components of the page, not one")
        components.append(found[0])
    return components


def _wire_leaderboard(demo, handlers: Handlers, evaluate_tab, board_tab, session: SimpleNamespace) -> None:
    filters = [board_tab.search, board_tab.kind, board_tab.view, board_tab.page]
    noted = [board_tab.search, board_tab.kind, board_tab.page]

    def with_note(event):  # the line under the board follows every change of the board
        event.then(handlers.board_note, noted, board_tab.note, api_visibility="private")

    with_note(demo.load(handlers.fresh_board, filters, board_tab.table, api_visibility="private"))  # the board of now
    with_note(board_tab.refresh.click(handlers.leaderboard, filters, board_tab.table, api_name="leaderboard"))
    for control in (board_tab.kind, board_tab.view, board_tab.page):  # each view has its columns' widths
        with_note(control.change(handlers.board_view, filters, board_tab.table, api_visibility="private"))
    with_note(board_tab.search.submit(handlers.board_view, filters, board_tab.table, api_visibility="private"))
    form = evaluate_tab.form
    with_note(form.submit.click(handlers.submit, [session.board_rows, form.model, form.link, form.precision,
                                                  form.note, form.times, *filters[:3], session.user_rows,
                                                  session.failures, board_tab.page],
                                _outputs(Submitted, form, board_tab), api_name="submit",
                                show_progress_on=form.message))  # a refusal marks the form, not the board


def _wire(handlers: Handlers, evaluate_tab, flipped_tab, explore_tab, compare_tab, session: SimpleNamespace,
          concurrency: int) -> None:
    """Connect the components to the handlers; each connection is also the named API endpoint."""
    evaluate_tab.files.change(handlers.detect, evaluate_tab.files, evaluate_tab.layouts, api_name="detect")
    _wire_orders(handlers, evaluate_tab)
    outputs = _outputs(Evaluated, evaluate_tab, session)
    evaluated = evaluate_tab.run.click(
        handlers.evaluate,
        [evaluate_tab.files, evaluate_tab.layouts, evaluate_tab.references, evaluate_tab.adversarial,
         evaluate_tab.ties, evaluate_tab.bootstrap, evaluate_tab.trust_order], outputs, api_name="evaluate",
        concurrency_limit=concurrency)
    example = evaluate_tab.example.click(handlers.example, None, outputs, api_name="example",
                                         concurrency_limit=concurrency)
    # the submit form's precision: the one the evaluated files were saved in (the example is not submitted)
    evaluated.success(handlers.precision, [evaluate_tab.precision, evaluate_tab.form.precision],
                      evaluate_tab.form.precision, api_name="upload_precision")
    shown = [evaluate_tab.results, evaluate_tab.legend, evaluate_tab.chart, evaluate_tab.download]
    for done, name in ((evaluated, "evaluation"), (example, "example")):  # private: named apart from the public
        done.success(functools.partial(_shown, shown), None, shown, api_name=f"show_{name}",
                     api_visibility="private").then(None, js=_SCROLL_TO_RESULTS)
        done.success(handlers.compare, session.user_rows, compare_tab.table, api_name=f"compare_{name}",
                     api_visibility="private")
        done.success(handlers.first_flipped, [session.failures, flipped_tab.min_count],
                     _outputs(FirstFlipped, flipped_tab), api_name=f"flipped_{name}", api_visibility="private")
    flipped_tab.show.click(handlers.flipped, [session.failures, flipped_tab.gallery, flipped_tab.page,
                                              flipped_tab.min_count],
                           _outputs(FlippedPage, flipped_tab), api_name="flipped")
    explore_tab.show.click(handlers.show, explore_tab.index, _outputs(Shown, explore_tab), api_name="explore")
    explore_tab.random.click(handlers.show_random, None, _outputs(ShownAt, explore_tab), api_name="explore_random")
    compare_tab.refresh.click(handlers.compare, session.user_rows, compare_tab.table, api_name="compare")


def _wire_orders(handlers: Handlers, evaluate_tab) -> None:
    """The order lists follow the layout table; choosing an order in one writes it, and a new note, into the table."""
    orders = evaluate_tab.orders  # by text attack
    evaluate_tab.layouts.change(functools.partial(_by_component, orders, handlers.order_lists), evaluate_tab.layouts,
                                list(orders.values()), api_visibility="private")
    for attack, order in orders.items():
        order.input(functools.partial(handlers.choose_order, attack),
                    [evaluate_tab.files, evaluate_tab.layouts, order], evaluate_tab.layouts,
                    api_visibility="private")


def _by_component(components: dict, handler, *values) -> dict:
    """What ``handler`` returns for ``values``, a value for each name of ``components`` (a dict of them by name), keyed
    by the component itself: Gradio gives each component the value under its key."""
    return {components[name]: value for name, value in handler(*values).items()}


def _shown(components: list) -> dict:
    """Show ``components`` (the results, their legend, the chart and the report) once an evaluation has filled them:
    each made visible, keyed by the component."""
    return {component: gr.update(visible=True) for component in components}


def _layout_help(facts: GalleryFacts) -> str:
    """The layout table's help: the attacks a file may be of (RoCOCO's, or a generated benchmark's), and the orders
    of a text attack's altered captions per image."""
    seeds = {method: [attack.rsplit("_seed", 1)[1] for attack in facts.attacks if attack.startswith(f"{method}_seed")]
             for method in IMAGE_ATTACK_METHODS}
    names = ", ".join([CLEAN, *facts.text_attacks, *(f"{method}_seed" + "/".join(numbers)
                                                 for method, numbers in seeds.items() if numbers)])
    return ("**Layout of each file**, detected from its shape and name when you upload; edit a cell to change it, "
            "and choose a text attack's order from its list under the table. "
            f"`attack`: {names}, or {CUSTOM}. `direction`: {' or '.join(DIRECTIONS)}. `order` of an attacked "
            f"image-to-text gallery: {describe_orders(facts.adversarial_per_image)}. Both orders have the same shape, "
            "so the "
            "order is read from the scores only when they clearly show it (the note says so); otherwise it stays blank "
            "and Evaluate refuses the file until you choose it.")


_EXAMPLE_HELP = (f"New here? The example scores a **{SYNTHETIC_MODEL}** on this Space's galleries (both clean ones, "
                 "two text attacks, two image attacks) in seconds and fills every output: results, chart, "
                 "*What fooled the model*, *Compare*. Nothing to upload.")
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


def _intro(facts: GalleryFacts) -> str:
    """What a newcomer reads first: what the Space serves (:attr:`~rococo_eval.data.facts.GalleryFacts.served`) and
    measures, how to try it, what to upload, where the answers are."""
    served = facts.served
    made = (served if facts.is_rococo else
            f"{served} is a benchmark made by `rococo-eval attack` in RoCOCO's way (its results are not RoCOCO's): it")
    text = (f"# {served} — how robust is an image-text matching model?\n"
            f"{made} adds adversarial items to the galleries of an image-text test set: altered captions (one word "
            "replaced) to the image-to-text gallery, altered images to the text-to-image gallery. This Space ranks "
            "a model's scores on those galleries with RoCOCO's official metric ([paper]"
            f"({PAPER_URL}), [code]({OFFICIAL_REPOSITORY})) and shows how much recall falls and what fooled it.\n\n"
            "1. **Try it**: press *Try the synthetic example* on the Evaluate tab (a made-up model, scored in "
            "seconds).\n"
            "2. **Your model**: upload its score matrices (queries x gallery, higher = more similar), one per "
            "gallery, and press *Evaluate*.\n"
            "3. **Read**: the results and chart under *Evaluate*; flipped queries and damaging words in *What "
            "fooled the model*; published numbers in *Compare* and the *Leaderboard*.")
    if facts.captions_per_image is None:
        return text
    shape = functools.partial(gallery_shape, captions_per_image=list(facts.captions_per_image),
                              adversarial_per_image=facts.adversarial_per_image)
    return text + (f"\n\nShapes here: image-to-text clean {shape(CLEAN, 'image_to_text')}, text attack "
                   f"{shape('rand_voca', 'image_to_text')}; text-to-image clean {shape(CLEAN, 'text_to_image')}, "
                   f"image attack {shape('mix_seed1', 'text_to_image')}. Put the attack's name in a file's name "
                   "(`clip_rand_voca.npy`) and its layout is found for you.")


def _temporary_output_dir() -> str:
    """A fresh folder for this process's result files, removed at its exit: nothing else knows its name, and a
    restart makes another (without it, every start left one in the temporary folder)."""
    folder = tempfile.mkdtemp(prefix="rococo-app-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


demo = build_app()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    demo.launch(max_file_size=scorefiles.max_upload_bytes())
