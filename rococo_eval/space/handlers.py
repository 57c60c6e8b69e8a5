"""What the Space's buttons do: :class:`Handlers` call :mod:`rococo_eval.space.logic` and
:mod:`rococo_eval.space.views` with the components' values, and :func:`open_board` opens the leaderboard.

``app.py`` builds the page and wires each button to a handler (each also an API endpoint). A handler that fills
several components returns a named tuple (:class:`Evaluated`, :class:`FlippedPage`, ...) whose fields are named after
the components: ``app.py`` lists each handler's outputs from those names, so that no value is matched to its component
by position. A ``ValueError`` from the logic becomes a ``gr.Error`` the page shows. Each request's files go to the
output folder, kept by content and within its byte budget (:class:`rococo_eval.space.outputs.OutputFolders`); the
synthetic example's score files are written there once.
"""

from __future__ import annotations

import logging
import os
import random
import time
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr
import pandas as pd
from pandas.io.formats.style import Styler

from rococo_eval.catalog import IMAGE_TO_TEXT, gallery_key
from rococo_eval.data.facts import GalleryFacts
from rococo_eval.io.atomic import write_atomic
from rococo_eval.reporting import report
from rococo_eval.reporting.analysis import DEFAULT_MIN_COUNT
from rococo_eval.results import SummaryRow
from rococo_eval.scoring.plan import ORDER_OVERRIDDEN
from rococo_eval.board import hub_records, leaderboard
from rococo_eval.space.example import EXAMPLE_INTRO, SYNTHETIC_MODEL, write_example
from rococo_eval.space.logic import (
    ALL_GALLERIES,
    IMAGE_ATTACK_HEADERS,
    WORD_HEADERS,
    choose_order,
    compare_rows,
    detect_layouts,
    evaluate_files,
    explore,
    flipped_view,
    upload_precision,
    write_outputs,
)
from rococo_eval.space.outputs import OutputFolders
from rococo_eval.board.records import per_query_outcomes
from rococo_eval.space.views import (
    BOARD_DATATYPES,
    BOARD_WIDTHS,
    board_shown,
    caption_table_html,
    coverage_note,
    flipped_html,
    rates_table,
    results_table,
    table,
)

logger = logging.getLogger(__name__)

BOARD_RETRY_S = 60  # an unavailable leaderboard is opened again at most this often


class Evaluated(NamedTuple):
    """What an evaluation (or the synthetic example) fills: the message, the results table, the chart and report
    paths, the session's rows, the rows the board may take (None: the example, which is not submitted), the failure
    analysis, and the precision the files were saved in (for the submit form). The API returns the first four."""

    message: str
    results: pd.DataFrame
    chart: str
    download: str
    user_rows: list
    board_rows: list | None
    failures: Any
    precision: str | None


class FlippedPage(NamedTuple):
    """One page of flipped queries: the note above it, the page as HTML, the CSV of every flipped query of the filter,
    the by-word table and chart, the image attacks' table, and the note above the by-word table."""

    note: str
    queries: str
    csv: str
    words: Styler
    chart: str | None
    image_attacks: Styler
    words_note: str


# what the flipped-queries tab shows after an evaluation: the gallery filter's new choices, page 1, and that page
FirstFlipped = NamedTuple("FirstFlipped", [("gallery", gr.Dropdown), ("page", int),
                                           *FlippedPage.__annotations__.items()])


class Shown(NamedTuple):
    """One image of the Explore tab: its captions beside each attack's as HTML, its images and a note."""

    captions: str
    images: list
    note: str


# a random image of the Explore tab: its index, then what Shown holds
ShownAt = NamedTuple("ShownAt", [("index", int), *Shown.__annotations__.items()])


class Submitted(NamedTuple):
    """What a submission fills: the message, the board's page, and the session's submission times."""

    message: str
    table: Styler
    times: list


def open_board(path, output_root: Path, facts: GalleryFacts) -> tuple[leaderboard.Leaderboard | None, str]:
    """The leaderboard (:class:`rococo_eval.board.leaderboard.Leaderboard`) and, when it cannot be used, None
    and why: the Space still scores, and says the board is unavailable; the file is left as it is.

    The database is ``path``, else ``$ROCOCO_LEADERBOARD_DB``, else the default (:func:`_default_board_path`).
    It takes rows of RoCOCO's galleries (their shapes from the ``facts``' caption counts) when the Space serves RoCOCO
    (:attr:`~rococo_eval.data.facts.GalleryFacts.is_rococo`); serving a generated benchmark, or without annotations,
    it is shown and takes none. Everyone together may submit
    ``$ROCOCO_LEADERBOARD_HOURLY_LIMIT`` times an hour (default
    :data:`~rococo_eval.board.leaderboard.HOURLY_LIMIT`). With ``$ROCOCO_LEADERBOARD_REPO`` (and ``$HF_TOKEN``,
    ``$ROCOCO_LEADERBOARD_REFRESH_S``) the board is that dataset repo's records and the database their cache, filled
    before the board is served (:class:`~rococo_eval.board.hub_records.HubRecords`, its mirror and outbox in
    ``<database>.hub`` beside the database).

    Raises:
        ValueError: ``$ROCOCO_LEADERBOARD_HOURLY_LIMIT``, ``$ROCOCO_LEADERBOARD_REPO`` or
            ``$ROCOCO_LEADERBOARD_REFRESH_S`` is not valid.
    """
    board_path = Path(path or os.environ.get(leaderboard.DB_ENV) or _default_board_path(output_root))
    limit = os.environ.get(leaderboard.HOURLY_LIMIT_ENV, "").strip() or str(leaderboard.HOURLY_LIMIT)
    if not limit.isdigit():
        raise ValueError(f"${leaderboard.HOURLY_LIMIT_ENV} must be a whole number >= 0, got {limit!r}")
    repo = os.environ.get(hub_records.REPO_ENV)
    refresh = os.environ.get(hub_records.REFRESH_ENV, "").strip() or str(hub_records.REFRESH_S)
    if not refresh.isdigit() or int(refresh) <= 0:
        raise ValueError(f"${hub_records.REFRESH_ENV} must be a whole number of seconds > 0, got {refresh!r}")
    hub = (hub_records.HubRecords(repo, board_path.parent / f"{board_path.name}.hub", token=os.environ.get("HF_TOKEN"),
                                  refresh_s=int(refresh)) if repo else None)
    rococo = facts.captions_per_image is not None and facts.is_rococo
    galleries = leaderboard.rococo_galleries(facts.captions_per_image) if rococo else None
    try:
        board = leaderboard.Leaderboard(board_path, hub, galleries=galleries, hourly_limit=int(limit))
        if hub is not None:
            hub.start(board)
        return board, ""
    except leaderboard.BoardUnavailable as error:
        logger.error("the leaderboard is unavailable: %s", error)
        return None, str(error)


class Handlers:
    """What the page's buttons do, for one image-text set (its :class:`~rococo_eval.data.facts.GalleryFacts`,
    ``facts``): plain functions of the components' values.

    A ``ValueError`` from the functions they call becomes a ``gr.Error`` the page shows. ``board`` is the
    leaderboard, or None with ``board_problem`` saying why it is unavailable; ``reopen`` (returning ``(board,
    problem)`` as :func:`open_board`) tries again, at most every :data:`BOARD_RETRY_S` seconds, so that a board
    that was locked or unreadable at start comes back once it is fixed. The files it writes go to ``output_root``,
    within ``output_budget`` bytes (default :func:`rococo_eval.space.outputs.output_budget`).

    Raises:
        ValueError: ``$ROCOCO_SPACE_OUTPUT_MB`` is not a positive number.
    """

    def __init__(self, facts: GalleryFacts, output_root: Path, board=None, board_problem: str = "",
                 reopen=None, output_budget: int | None = None):
        self.facts = facts
        self.outputs = OutputFolders(output_root, output_budget)
        self.board = board
        self.board_problem = board_problem or ("" if board is not None else "this Space keeps no leaderboard")
        self._reopen, self._tried = reopen, time.monotonic()

    def detect(self, files) -> list[list[str]]:
        return detect_layouts(files, self.facts)

    def order_lists(self, layouts: list | None) -> dict[str, gr.Dropdown]:
        """The order list of each text attack of the set (:attr:`~rococo_eval.data.facts.GalleryFacts.text_attacks`),
        under the layout table, by attack: shown, with the table's order and the file's name, when the table has a
        row of that attack's image-to-text gallery."""
        rows = [["" if cell is None else str(cell) for cell in row] for row in (layouts or [])]
        lists = {}
        for attack in self.facts.text_attacks:
            row = next((row for row in rows if row[1:3] in ([attack, IMAGE_TO_TEXT], [attack, ""])), None)
            lists[attack] = (gr.Dropdown(visible=False) if row is None else
                             gr.Dropdown(value=row[3] or None, label=f"order of {row[0]} ({attack})", visible=True))
        return lists

    def choose_order(self, attack: str, files: list[str] | None, layouts, order: str) -> list[list[str]]:
        """The layout table with ``order`` chosen from the list for the text attack ``attack``'s file
        (:func:`rococo_eval.space.logic.choose_order`)."""
        return choose_order(files, layouts, attack, order, self.facts)

    def evaluate(self, files, layouts=None, references=None, adversarial=None, ties="pessimistic", bootstrap=0,
                 trust_order=False):
        try:
            evaluation = evaluate_files(files, layouts, references, adversarial, facts=self.facts, ties=ties,
                                        bootstrap=_int(bootstrap, "bootstrap"), trust_given_order=bool(trust_order))
            json_path, chart_path = self.outputs.write(lambda folder: write_outputs(evaluation, folder))
        except ValueError as error:
            logger.info("evaluation refused: %s", error)
            problem = str(error)
        else:
            return self._evaluated(evaluation, json_path, chart_path, files)
        # raised here, outside the handler: the error holds no context, whose frames would keep the uploads mapped
        raise gr.Error(problem, duration=None, title="Cannot evaluate", print_exception=False)

    def example(self) -> Evaluated:
        """Score the synthetic example (:func:`rococo_eval.space.example.write_example`) as :meth:`evaluate` scores an
        upload, with the same outputs; its rows name the synthetic model, and it gives nothing to submit (None). Its
        files are the same for everyone: written at the first click, and scored again from there."""
        try:
            example = self.outputs.shared("example", lambda folder: write_example(self.facts, folder))
        except ValueError as error:
            raise gr.Error(str(error), title="Cannot run the example", print_exception=False) from None
        evaluated = self.evaluate([str(path) for path in example.files], example.layouts)
        return evaluated._replace(message=f"{EXAMPLE_INTRO}\n\n{evaluated.message}", board_rows=None, precision=None,
                                  user_rows=[{**row, "model": example.model} for row in evaluated.user_rows])

    def _evaluated(self, evaluation, json_path, chart_path, files) -> Evaluated:
        """The outputs of an evaluation (:class:`Evaluated`)."""
        settings = evaluation.meta.get("settings")
        label = settings and f"ties {settings['ties']}, bootstrap {settings['bootstrap']}"
        # the leaderboard takes default settings only
        rows = [{**row, "settings": label} for row in evaluation.rows] if settings else evaluation.rows
        # the leaderboard's rows: the standard galleries only, whose references come from the annotations
        standard_keys = {key for key, result in evaluation.results.items() if result.is_standard}
        standard = [row for row in rows if gallery_key(row["attack"], row["direction"]) in standard_keys]
        notes = evaluation.meta.get("files", {})  # each gallery's file and its note (an overridden order's)
        standard = [{**row, "order_overridden": True}
                    if ORDER_OVERRIDDEN in notes.get(gallery_key(row["attack"], row["direction"]), {}).get("note", "")
                    else row for row in standard]
        return Evaluated(message=evaluation.message, results=results_table(evaluation.rows), chart=str(chart_path),
                         download=str(json_path), user_rows=rows, board_rows=standard, failures=evaluation.failures,
                         precision=upload_precision(files, evaluation.rows))

    def precision(self, evaluated: str | None, current: str = "fp32") -> str:
        """The submit form's precision after an evaluation: the one its files were saved in (``evaluated``, from
        :func:`rococo_eval.space.logic.upload_precision`), else ``current`` as it was."""
        return evaluated or current

    def flipped(self, failures, gallery=ALL_GALLERIES, page=1, min_count=DEFAULT_MIN_COUNT) -> FlippedPage:
        """One page of flipped queries as HTML (see :func:`rococo_eval.space.logic.flipped_view`), its CSV (every
        flipped query of the filter), the by-word table and chart, and the image attacks' table."""
        gallery = gallery or ALL_GALLERIES
        try:
            min_count = _int(min_count, "min_count")
            view = flipped_view(failures, self.facts, gallery, _int(page, "page"), min_count)
            page_html = "" if view.rows is None else flipped_html(view.rows, self.facts)
            by_word = {attack: words for attack, words in (failures.by_word if failures else {}).items()
                       if gallery in (ALL_GALLERIES, f"{attack}/image_to_text")}
            csv_path, chart = self.outputs.write(lambda folder: (
                write_atomic(folder / "flipped_queries.csv", lambda handle: handle.write(view.csv.encode())),
                report.plot_word_rates({"by_word": by_word}, folder / "words.png", min_count) if by_word else None))
        except ValueError as error:
            raise gr.Error(str(error), title="Cannot show flipped queries", print_exception=False) from None
        return FlippedPage(note=view.note, queries=page_html, csv=str(csv_path),
                           words=rates_table(view.words, WORD_HEADERS), chart=chart and str(chart),
                           image_attacks=rates_table(view.image_attacks, IMAGE_ATTACK_HEADERS),
                           words_note=view.words_note)

    def first_flipped(self, failures, min_count=DEFAULT_MIN_COUNT) -> FirstFlipped:
        """What the tab shows after an evaluation (:class:`FirstFlipped`): the gallery filter's new choices, and the
        first page of every gallery's flipped queries."""
        choices = [ALL_GALLERIES] + (failures.attacked() if failures is not None else [])
        return FirstFlipped(gallery=gr.Dropdown(choices=choices, value=ALL_GALLERIES), page=1,
                            **self.flipped(failures, ALL_GALLERIES, 1, min_count)._asdict())

    def show(self, index) -> Shown:
        """Image ``index`` of the Explore tab: its captions beside each attack's as HTML, its images and a note."""
        try:
            exploration = explore(self.facts, _int(index, "index"))
            captions = caption_table_html(exploration.ground_truth, exploration.altered)
        except ValueError as error:
            raise gr.Error(str(error), title="Cannot show this image", print_exception=False) from None
        return Shown(captions=captions, images=exploration.images, note=exploration.note)

    def show_random(self) -> ShownAt:
        """A random image of the Explore tab, with its index (:meth:`show`)."""
        index = random.randrange(self.facts.num_images) if self.facts.num_images else 0
        return ShownAt(index=index, **self.show(index)._asdict())

    def compare(self, user_rows) -> pd.DataFrame:
        return table(compare_rows(user_rows))

    def leaderboard(self, search="", kind="all", view="all", page=1):
        """One page of the board (:data:`rococo_eval.board.leaderboard.PAGE_ROWS` rows, page ``page``), filtered by a
        model-name search and by kind (all, published, submitted), with the columns of ``view``
        (:data:`rococo_eval.space.views.BOARD_VIEWS`); :meth:`board_note` says which rows of how many it shows."""
        try:
            return self._board_page(search, kind, view, page)
        except leaderboard.BoardUnavailable as error:
            raise gr.Error(f"the leaderboard is unavailable: {error}", title="Cannot show the leaderboard",
                           print_exception=False) from None
        except ValueError as error:
            raise gr.Error(str(error), title="Cannot show the leaderboard", print_exception=False) from None

    def board_view(self, search: str = "", kind: str = "all", view: str = "all", page=1) -> gr.Dataframe:
        """The board as :meth:`leaderboard` gives it, with the column widths and datatypes of ``view``
        (:data:`rococo_eval.space.views.BOARD_WIDTHS`): what the page shows when a filter or the columns change."""
        view = view or "all"
        return gr.Dataframe(self.leaderboard(search, kind, view, page), column_widths=BOARD_WIDTHS[view],
                            datatype=BOARD_DATATYPES[view])

    def fresh_board(self, search="", kind="all", view="all", page=1):
        """The board as the database holds it when a page loads (empty, as the tab says, when it is unavailable)."""
        try:
            return self._board_page(search, kind, view, page)
        except (leaderboard.BoardUnavailable, ValueError):
            return board_shown([], view or "all")

    def board_note(self, search="", kind="all", page=1) -> str:
        """The line under the board: which rows of how many the page shows, and what the board says of where its
        rows are kept (:meth:`rococo_eval.board.leaderboard.Leaderboard.notes`: a restart that loses them, records
        of the dataset repo left out as damaged); empty when the board is unavailable (the tab says why)."""
        try:
            board = self._board()
            rows = board.rows(search or "", kind or "all")
            _, page, pages = leaderboard.page_of(rows, page)
        except (leaderboard.BoardUnavailable, ValueError):
            return ""
        first, last = (page - 1) * leaderboard.PAGE_ROWS + 1, min(page * leaderboard.PAGE_ROWS, len(rows))
        shown = (f"Rows {first}-{last} of {len(rows)} (page {page} of {pages})." if rows else "No row.")
        return "\n\n".join([shown, *board.notes()])

    def submit(self, board_rows, model, link="", precision="fp32", note="", times=None, search="", kind="all",
               view="all", evaluated_rows=None, failures=None, page=1, request: gr.Request = None) -> Submitted:
        """Submit this session's last evaluation (``board_rows``: the rows of its RoCOCO galleries; None after the
        synthetic example, which is no model); return the message, the board and the session's submission times
        (:func:`rococo_eval.board.leaderboard.rate_allows` limits them).

        The message says which of the board's columns a partial evaluation fills and why a mean is blank
        (:func:`rococo_eval.space.views.coverage_note`), and names every gallery of the evaluation (``evaluated_rows``)
        that is not on the board (a custom layout's); a generated benchmark's evaluation is refused, naming its
        galleries: it is not RoCOCO's. The record keeps each gallery's per-query outcomes (from ``failures``, the
        evaluation's per-query arrays), which rank the row (its band); the board counts the submissions of the
        client's address (``request``) as well as everyone's. The board shown is page ``page`` of the filters.
        """
        times = list(times or [])
        now = time.time()
        if not leaderboard.rate_allows(times, now):
            raise gr.Error(f"at most {leaderboard.RATE_LIMIT} submissions every {leaderboard.RATE_WINDOW_S // 60} "
                           "minutes from one session: try again later", title="Cannot submit", print_exception=False)
        try:
            self._check_submittable(board_rows, evaluated_rows)
            outcomes = {key: per_query_outcomes(result.per_query)
                        for key, result in (failures.results if failures is not None else {}).items()}
            added, message = self._board().submit([typed for _, typed in _typed(board_rows)], model=model, link=link,
                                                  precision=precision, note=note, outcomes=outcomes,
                                                  client=client_address(request))
        except (ValueError, leaderboard.BoardUnavailable) as error:
            raise gr.Error(str(error), title="Cannot submit", print_exception=False) from None
        if added:
            times.append(now)
            message += coverage_note(leaderboard.recall_at_1(board_rows))
            on_board = _gallery_keys(board_rows)
            left_out = [f"{row.get('file') or 'a file'} ({typed.key})"
                        for row, typed in _typed(evaluated_rows) if not typed.is_seed_mean
                        and typed.key not in on_board]
            if left_out:
                message += (f"; not on the board, as custom layouts have no column there: {', '.join(left_out)} "
                            "(their numbers are in the json download)")
        return Submitted(message=message, table=self.leaderboard(search, kind, view, page), times=times)

    def _check_submittable(self, board_rows: list | None, evaluated_rows: list | None) -> None:
        """Raise the ``ValueError`` that says why the last evaluation cannot go on the board, if it cannot."""
        if not self.facts.is_rococo:
            galleries = ", ".join(sorted(_gallery_keys(evaluated_rows))) or "nothing evaluated yet"
            raise ValueError(f"this Space serves a generated benchmark ({self.facts.served}), not RoCOCO: "
                             f"its results are not RoCOCO's, so the board takes none of them (this evaluation: "
                             f"{galleries}); its numbers are in the json download")
        if board_rows is None:
            raise ValueError(f"the last evaluation is the synthetic example ({SYNTHETIC_MODEL}): the board takes "
                             "evaluations of real models; evaluate your model's score files first")
        if not board_rows:
            raise ValueError("the last evaluation scored no RoCOCO gallery: the board takes the standard "
                             "galleries, scored on the annotations' layouts (custom layouts are no row); "
                             "evaluate RoCOCO score files first")

    def _board_page(self, search: str, kind: str, view: str, page) -> Styler:
        """Page ``page`` of the board's rows that hold ``search`` and are of ``kind``, with the columns of ``view``.

        Raises:
            rococo_eval.board.leaderboard.BoardUnavailable: the board cannot be used.
            ValueError: ``page`` or ``view`` is not valid.
        """
        rows = self._board().rows(search or "", kind or "all")
        return board_shown(leaderboard.page_of(rows, page)[0], view or "all")

    def _board(self):
        if self.board is None and self._reopen is not None and time.monotonic() - self._tried >= BOARD_RETRY_S:
            self._tried = time.monotonic()
            self.board, problem = self._reopen()
            self.board_problem = problem or self.board_problem
        if self.board is None:
            raise leaderboard.BoardUnavailable(self.board_problem)
        return self.board


def _default_board_path(output_root: Path) -> Path:
    """A Space's persistent storage (``/data``) when it has one; else the output folder, which a restart loses."""
    persistent = Path("/data")
    if persistent.is_dir() and os.access(persistent, os.W_OK):
        return persistent / "leaderboard.sqlite3"
    logger.warning("the leaderboard is in %s, which does not outlive this process: set %s to keep it",
                   output_root, leaderboard.DB_ENV)
    return output_root / "leaderboard.sqlite3"


def client_address(request: gr.Request | None) -> str:
    """The address a request came from: the first of ``X-Forwarded-For`` (a Space's proxy sets it), else the
    connection's; empty without a request (a call from Python)."""
    if request is None:
        return ""
    forwarded = (request.headers.get("x-forwarded-for") or "").split(",")[0].strip()
    return forwarded or (request.client.host if request.client else "")


def _gallery_keys(rows: list | None) -> set[str]:
    """The galleries of summary ``rows`` (seed means, which the board makes itself, left out)."""
    return {typed.key for _, typed in _typed(rows) if not typed.is_seed_mean}


def _typed(rows: list | None) -> list[tuple[dict, SummaryRow]]:
    """Each of the page's summary ``rows`` (dicts, as the page keeps them) beside its :class:`SummaryRow`."""
    return [(row, SummaryRow.from_dict(row)) for row in rows or []]


def _int(value, name: str) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"`{name}` must be a whole number, got {value!r}")
