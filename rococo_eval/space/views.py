"""How the Space shows its plain values: HTML tables of flipped queries (with thumbnails) and of captions beside
their attacks, and the tables of results and of the leaderboard as the page's DataFrames.

The values come from :mod:`rococo_eval.space.logic` and :mod:`rococo_eval.board.leaderboard`; nothing here scores or
decides. Images are read from the source only to be shown, as inline JPEG thumbnails.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
import re
from typing import Mapping, Sequence

import pandas as pd
from pandas.io.formats.style import Styler

from rococo_eval.attacks.replacements import find_replacements, highlight
from rococo_eval.catalog import IMAGE_ATTACKS, TEXT_ATTACKS
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.reporting import report
from rococo_eval.results import percent_text
from rococo_eval.board.leaderboard import EVALUATED, KINDS, PUBLISHED, board_row
from rococo_eval.board.ranking import RANK, TEXT_MEAN, TEXT_UNNAMED

logger = logging.getLogger(__name__)

THUMBNAIL_PX = 128
# what the Evaluate tab's results table leaves to the report: an attacked gallery's clean R@K beyond R@1 and clean
# r_mean, and the counts
_LEFT_TO_REPORT = re.compile(r"clean_(recall@(?!1(?:_|$))\d+|r_mean)(_ci|_range|_bounds)?|num_\w+")
# The leaderboard's columns, each a short header for a column of :data:`rococo_eval.board.leaderboard.COLUMNS`: R@1
# without attacks, the means over every text attack (image-to-text) and every image attack (text-to-image), a published
# number of one text attack its source does not name, each text attack, each image attack by method and seed.
# BOARD_VIEWS groups them so that each group reads at 1280 px without sideways scrolling ("all" shows every column,
# wider than the page); BOARD_LEGEND names them above the board. The rank is a band on the mean text R@1: it stands
# beside it, in the views that show it.
_BOARD_COLUMNS = {"clean i2t": "clean R@1 (i2t)", "clean t2i": "clean R@1 (t2i)",
                  "mean text": TEXT_MEAN, "text attack, unnamed": TEXT_UNNAMED,
                  "mean image": "image attacks R@1 (t2i, mean)",
                  **{attack.replace("_", " "): f"{attack} R@1" for attack in TEXT_ATTACKS},
                  **{attack.replace("_seed", " "): f"{attack} R@1" for attack in IMAGE_ATTACKS}}
_HEADER_OF = {name: header for header, name in _BOARD_COLUMNS.items()}
_TEXT_HEADERS = [attack.replace("_", " ") for attack in TEXT_ATTACKS]
_IMAGE_HEADERS = [attack.replace("_seed", " ") for attack in IMAGE_ATTACKS]
_BOARD_LEAD = ["model", "kind", "source"]  # in every view, so the source's column (Markdown) keeps its place
BOARD_VIEWS = {
    "means": [*_BOARD_LEAD, RANK, "clean i2t", "mean text", "text attack, unnamed", "clean t2i", "mean image", "note"],
    "text attacks": [*_BOARD_LEAD, RANK, "clean i2t", "mean text", *_TEXT_HEADERS, "precision"],
    "image attacks": [*_BOARD_LEAD, "clean t2i", "mean image", *_IMAGE_HEADERS],
    "all": [*_BOARD_LEAD, RANK, "clean i2t", "mean text", "text attack, unnamed", *_TEXT_HEADERS, "clean t2i",
            "mean image", *_IMAGE_HEADERS, "precision", "note"],
}
# The width of each column of each view: at most 1,216 px, the table's width on a 1280 px page, but for "all". A number
# ("100.00") takes 82 px with the cell's padding, a header's longest word ("concept") 91 px; "text attack," 120 px.
_NUMBER_PX = 88
_TEXT_PX = {"model": 170, "kind": 110, "source": 220, RANK: 64, "text attack, unnamed": 120, "precision": 96,
            "note": 180}
BOARD_WIDTHS = {view: [f"{_TEXT_PX.get(header, _NUMBER_PX)}px" for header in headers]
                for view, headers in BOARD_VIEWS.items()}
# the page's datatype of each column of each view: the source as Markdown (its links), the R@1 as numbers (which sort
# as numbers, not as text: 100.00 above 50.12), every other as text
BOARD_DATATYPES = {view: ["markdown" if header == "source" else "number" if header in _BOARD_COLUMNS else "str"
                          for header in headers] for view, headers in BOARD_VIEWS.items()}
BOARD_LEGEND = ("R@1 in %. The rows with a mean text R@1 come first, best first, then the published numbers of a "
                "text attack their source does not name, apart: only numbers that mean the same are sorted together. "
                "Sort by any column from the ⋮ menu of its header. **rank**: the band of ranks the queries allow on "
                "mean text: from 1 + the rows significantly better to the rows not significantly worse (paired test "
                "on the same queries, Holm-corrected, 5% level), so rows that the queries cannot tell apart share "
                "ranks; n/a: no per-query outcomes (the published rows), not compared. **clean**: image-to-text "
                "(i2t) and text-to-image (t2i) without attacks. **mean**: over all four text attacks (i2t), or all "
                "six image attacks (t2i); blank unless the row has every one. **text attack, unnamed**: one "
                "published number of a text attack its source does not name: not a mean, not one of the four. "
                "**text attacks**: " + ", ".join(TEXT_ATTACKS) + ". **image attacks**: by method and seed (mix 1 = "
                "mix_seed1). **source**: the submission's link, or where a published number comes from. **kind**: "
                + "; ".join(f"{kind} ({meaning})" for kind, meaning in KINDS.items()) + ".")


def flipped_html(rows: Sequence[dict], facts: GalleryFacts = NO_SOURCE) -> str:
    """An HTML table of flipped queries (:func:`rococo_eval.reporting.analysis.flipped_queries` rows): image-to-text
    rows show the query image, its best correct caption and the winning adversarial caption with the replaced
    word marked; text-to-image rows the caption, its image, the altered image that won and that image's
    partner. Images appear when the set of ``facts`` has its images (:attr:`~rococo_eval.data.facts.GalleryFacts
    .has_images`).

    Example:
        >>> row = {"attack": "danger", "direction": "image_to_text", "query": 4, "margin": 0.1, "winner_score": 0.5,
        ...        "correct_score": 0.4, "image": 4, "correct_caption": "A man on a bike.",
        ...        "winner_source_caption": "A man on a bike.", "winner_caption": "a criminal on a bike"}
        >>> "a <mark>criminal</mark> on a bike" in flipped_html([row])
        True
    """
    body = []
    for row in rows:
        scores = (f"margin {row['margin']:.4f}<br><small>winner {row['winner_score']:.4f}<br>"
                  f"correct {row['correct_score']:.4f}</small>")
        query_image = _figure(facts, row["image"], None, f"image {row['image']}")
        cells = [f"{html.escape(row['attack'])}<br><small>query {row['query']}</small>", scores]
        if row["direction"] == "image_to_text":
            winner = (_marked(row["winner_source_caption"], row["winner_caption"]) if row.get("winner_caption")
                      else f"gallery row {row['winner_row']}")
            if not row.get("own_image", True):
                winner += f"<br><small>(a caption of image {row['winner_image']})</small>"
            correct = row.get("correct_caption") or f"gallery row {row['correct_row']}"
            cells += [query_image, "<small>best correct caption</small><br>" + html.escape(correct, quote=False),
                      "<small>winning adversarial caption</small><br>" + winner]
        else:
            winner, partner = row.get("winner_image"), row.get("partner_image")
            caption = html.escape(row.get("query_caption") or f"caption {row['query']}", quote=False)
            cells += ["<small>query caption</small><br>" + caption, query_image,
                      _figure(facts, winner, row["attack"], f"altered image {winner}"),
                      _figure(facts, partner, None, f"its partner, image {partner}")]
        body.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return f'<table class="rococo-flipped"><tbody>{"".join(body)}</tbody></table>'


def caption_table_html(ground_truth: Sequence[str], altered: Mapping[str, Sequence[str]]) -> str:
    """An HTML table: each ground-truth caption beside the captions each attack made from it, changes marked.

    Example:
        >>> table_html = caption_table_html(["A dog runs."], {"danger": ["A weapon runs."]})
        >>> table_html.split("<tbody>")[0]
        '<table class="rococo-captions"><thead><tr><th>#</th><th>ground truth</th><th>danger</th></tr></thead>'
        >>> "<td>A dog runs.</td><td>A <mark>weapon</mark> runs.<br><small>dog → weapon</small></td>" in table_html
        True
    """
    head = "".join(f"<th>{html.escape(attack)}</th>" for attack in altered)
    body = []
    for j, caption in enumerate(ground_truth):
        cells = "".join(f"<td>{_marked(caption, captions[j]) if j < len(captions) else '—'}</td>"
                        for captions in altered.values())
        body.append(f"<tr><td>{j}</td><td>{html.escape(caption, quote=False)}</td>{cells}</tr>")
    return (f'<table class="rococo-captions"><thead><tr><th>#</th><th>ground truth</th>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def table(rows: Sequence[dict]) -> pd.DataFrame:
    """The rows as the page shows them (see :func:`rococo_eval.reporting.report.format_rows`)."""
    headers, cells = report.format_rows(rows)
    return pd.DataFrame(cells, columns=headers)


def results_table(rows: Sequence[dict]) -> pd.DataFrame:
    """An evaluation's summary rows as the Evaluate tab shows them, narrow enough for a 1280 px page: the file, the
    gallery, clean R@1, the R@K, r_mean, the false rate and the attack success (:func:`table`'s cells: the direction
    hyphenated, so that it wraps, and ``n/a`` for the false rate and the attack success of a clean gallery, which has
    no attack). The clean R@5, R@10 and clean r_mean of an attacked gallery (the clean gallery's, when it is scored
    too) and the counts are left to the report.

    Example:
        >>> rows = [{"attack": "clean", "direction": "image_to_text", "recall@1": 50.0, "false_rate": 0.0,
        ...          "attack_success_rate": 0.0, "num_queries": 4},
        ...         {"attack": "danger", "direction": "image_to_text", "clean_recall@1": 50.0, "clean_recall@5": 75.0,
        ...          "recall@1": 25.0, "false_rate": 50.0, "attack_success_rate": 50.0, "num_queries": 4}]
        >>> shown = results_table(rows)
        >>> list(shown.columns)
        ['attack', 'direction', 'clean R@1', 'R@1', 'false rate', 'attack success']
        >>> shown.values.tolist()[0]
        ['clean', 'image-to-text', '', '50.00', 'n/a', 'n/a']
    """
    return table([{name: value for name, value in row.items() if not _LEFT_TO_REPORT.fullmatch(name)} for row in rows])


def rates_table(rows: Sequence[Sequence], headers: Sequence[str]) -> Styler:
    """Rows of counts and rates (``headers``; a rate's header ends in ``(%)``) as the page shows them: each rate as
    every table shows a percentage (:func:`rococo_eval.results.percent_text`), still a number, so that the
    column sorts by value.

    Example:
        >>> shown = rates_table([["dog", 49, 13, 26.53], ["cat", 20, 5, 25.0]], ["word", "images", "successes", "(%)"])
        >>> shown.to_string(delimiter=" ").splitlines()[1:]
        ['0 dog 49 13 26.53', '1 cat 20 5 25.00']
    """
    shown = pd.DataFrame(list(rows), columns=list(headers))
    rates = [header for header in shown.columns if header.endswith("(%)")]
    return shown.style.format(percent_text, subset=rates)


def board_table(rows: Sequence[Mapping], view: str = "all") -> pd.DataFrame:
    """The leaderboard's rows (:meth:`rococo_eval.board.leaderboard.Leaderboard.rows`) as a table: the columns of
    ``view`` (:data:`BOARD_VIEWS`: ``"means"``, ``"text attacks"``, ``"image attacks"`` or ``"all"``) under short
    headers, each R@1 a number (NaN where the row has none), the submission's date beside its kind, its link or
    published source as a Markdown link (:func:`source_markdown`), every other text as plain text. :func:`board_shown`
    is how the page shows it.

    Raises:
        ValueError: ``view`` is not one of :data:`BOARD_VIEWS`.

    Example:
        >>> from rococo_eval.board.leaderboard import COLUMNS
        >>> row = {name: None for name in COLUMNS}
        >>> row.update({"model": "m", "rank": "1-2", "kind": "submitted", "clean R@1 (i2t)": 81.9, "precision": "fp16",
        ...             "link": "https://example.org/m", "note": "", "source": "https://example.org/m",
        ...             "submitted": "2026-12-02T10:00:00+00:00"})
        >>> shown = board_table([row]).iloc[0]
        >>> shown["model"], shown["rank"], shown["kind"], float(shown["clean i2t"]), float(shown["mix 1"])
        ('m', '1-2', 'submitted 2026-12-02', 81.9, nan)
        >>> shown["source"]
        '[example.org/m](<https://example.org/m>)'
        >>> list(board_table([row], "means").columns)  # doctest: +NORMALIZE_WHITESPACE
        ['model', 'kind', 'source', 'rank', 'clean i2t', 'mean text', 'text attack, unnamed', 'clean t2i', 'mean image',
         'note']
    """
    if view not in BOARD_VIEWS:
        raise ValueError(f"`view` must be one of {', '.join(BOARD_VIEWS)}, got {view!r}")
    cells = []
    for row in rows:
        warnings = "".join(f"validity warning: {warning}; " for warning in row.get("warnings", []))
        kind = row["kind"] if row["kind"] == PUBLISHED else f"{row['kind']} {str(row['submitted'])[:10]}"
        shown = {"model": str(row["model"]), RANK: str(row[RANK]), "precision": str(row["precision"]),
                 "note": warnings + str(row["note"]),
                 "kind": kind + (" (pending: not yet safe in the dataset repo)" if row.get("pending") else ""),
                 "source": source_markdown(row["source"], row["link"] if row["kind"] != EVALUATED else ""),
                 **{header: math.nan if row[name] is None else float(row[name])
                    for header, name in _BOARD_COLUMNS.items()}}
        cells.append([shown[header] for header in BOARD_VIEWS[view]])
    table = pd.DataFrame(cells, columns=BOARD_VIEWS[view])
    numbers = [header for header in BOARD_VIEWS[view] if header in _BOARD_COLUMNS]
    return table.astype({header: float for header in numbers})


def board_shown(rows: Sequence[Mapping], view: str = "all") -> Styler:
    """:func:`board_table` as the page shows it: each R@1 as every table shows a percentage
    (:func:`rococo_eval.results.percent_text`), blank where the row has none (the numbers stay numbers, so
    that a column sorts by value).

    Example:
        >>> board_shown([], "image attacks").data.columns[-1]
        'patch 100'
    """
    table = board_table(rows, view)
    numbers = [header for header in table.columns if header in _BOARD_COLUMNS]
    return table.style.format(percent_text, subset=numbers, na_rep="")


def coverage_note(results: Mapping[str, float]) -> str:
    """What a submission's R@1 (``{gallery key}: R@1``, :func:`rococo_eval.board.leaderboard.recall_at_1`) fill of
    the board, and why a mean is blank, when one is (a mean is over every text attack, or every image attack);
    empty when both means are filled.

    Example:
        >>> coverage_note({"clean/image_to_text": 50.0, "rand_voca/image_to_text": 37.5})  # doctest: +ELLIPSIS
        '; on the board it fills clean i2t, rand voca; mean text is blank: a mean is over all four text attacks and ...'
    """
    row = board_row(results, **dict.fromkeys(("model", "kind", "link", "precision", "note", "source", "submitted"), ""))
    blanks = []
    for header, attacks, every in (("mean text", TEXT_ATTACKS, "all four text attacks"),
                                   ("mean image", IMAGE_ATTACKS, "all six image attacks")):
        missing = [_HEADER_OF[f"{attack} R@1"] for attack in attacks if row[f"{attack} R@1"] is None]
        if missing:
            blanks.append(f"{header} is blank: a mean is over {every} and this evaluation "
                          + (f"lacks {', '.join(missing)}" if len(missing) < len(attacks) else "has none of them"))
    if not blanks:
        return ""
    filled = [header for header, name in _BOARD_COLUMNS.items() if row[name] is not None]
    return f"; on the board it fills {', '.join(filled)}; " + "; ".join(blanks)


def source_markdown(source: str, link: str = "") -> str:
    r"""Where a board row comes from, as Markdown: its ``link`` as a link (shown without its scheme), else ``source``
    as text, with an arXiv identifier in it linked to its page and an ``https://`` address as a link (a row
    evaluated by the board: its model's commit and its record). Links were checked as ``http(s)://`` with no spaces,
    quotes or angle brackets (:meth:`~rococo_eval.board.leaderboard.Leaderboard.submit`); text is escaped.

    Example:
        >>> source_markdown("Park et al., RoCOCO, arXiv:2304.10727v5, abstract")
        'Park et al., RoCOCO, [arXiv:2304.10727v5](<https://arxiv.org/abs/2304.10727v5>), abstract'
        >>> print(source_markdown("submitted in the Space", "https://example.org/a_b"))
        [example.org/a\_b](<https://example.org/a_b>)
        >>> print(source_markdown("model https://h.co/o/m/tree/ab; record https://h.co/r.json"))
        model [h.co/o/m/tree/ab](<https://h.co/o/m/tree/ab>); record [h.co/r.json](<https://h.co/r.json>)
    """
    if link:
        return _link(link)
    parts = re.split(r"(arXiv:\d{4}\.\d{4,5}(?:v\d+)?|https://[^\s<>\"';]+)", str(source))
    return "".join(_markdown_text(part) if index % 2 == 0 else _link(part) if part.startswith("https://") else
                   f"[{part}](<https://arxiv.org/abs/{part.removeprefix('arXiv:')}>)"
                   for index, part in enumerate(parts))


def _link(url: str) -> str:
    """``url`` as a Markdown link, shown without its scheme."""
    return f"[{_markdown_text(re.sub(r'^https?://', '', url))}](<{url}>)"


def _markdown_text(text: str) -> str:
    """``text`` as Markdown that shows it as it is: HTML escaped, Markdown's punctuation backslashed."""
    return re.sub(r"([\\`*_{}\[\]()#+!|~>-])", r"\\\1", html.escape(text, quote=False))


def _figure(facts: GalleryFacts, index, attack, label) -> str:
    """A thumbnail of image ``index`` (its altered copy under ``attack``) with ``label``, or the label alone."""
    if index is None:
        return ""
    caption = f"<figcaption>{html.escape(label)}</figcaption>"
    if not facts.has_images:
        return f"<figure>{caption}</figure>"
    try:
        image = facts.source.original_image(index) if attack is None else facts.source.altered_image(index, attack)
    except (OSError, ValueError) as error:
        logger.warning("cannot show image %s: %s", index, error)
        return f"<figure>{caption}</figure>"
    thumbnail = image.convert("RGB")
    thumbnail.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
    buffer = io.BytesIO()
    thumbnail.save(buffer, format="JPEG", quality=85)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<figure><img src="data:image/jpeg;base64,{data}" alt="{html.escape(label)}">{caption}</figure>'


def _marked(original: str, altered: str) -> str:
    """``altered`` as HTML with the words that replaced ``original``'s marked, and what they replaced."""
    changes = find_replacements(original, altered)
    text = html.escape(altered, quote=False)
    for word in dict.fromkeys(change.replacement for change in changes if change.replacement):
        text = highlight(text, html.escape(word, quote=False), mark="\x00")
    text = re.sub("\x00(.*?)\x00", r"<mark>\1</mark>", text)
    summary = "; ".join(f"{c.original or '∅'} → {c.replacement or '∅'}" for c in changes)
    summary = summary or "same as the ground truth"
    return f"{text}<br><small>{html.escape(summary, quote=False)}</small>"
