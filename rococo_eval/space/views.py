"""How the Space shows its plain values: HTML tables of flipped queries (with thumbnails) and of captions beside
their attacks, and the tables of results and of the leaderboard as the page's DataFrames.

The values come from :mod:`rococo_eval.space.logic` and :mod:`rococo_eval.space.leaderboard`; nothing here scores or
decides. Images are read from the source only to be shown, as inline JPEG thumbnails.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import re
from typing import Mapping, Sequence

import pandas as pd

from rococo_eval.attacks.replacements import find_replacements, highlight
from rococo_eval.reporting import report
from rococo_eval.space.leaderboard import COLUMNS

logger = logging.getLogger(__name__)

THUMBNAIL_PX = 128


def flipped_html(rows: Sequence[dict], source=None) -> str:
    """An HTML table of flipped queries (:func:`rococo_eval.reporting.analysis.flipped_queries` rows): image-to-text
    rows show the query image, its best correct caption and the winning adversarial caption with the replaced
    word marked; text-to-image rows the caption, its image, the altered image that won and that image's
    partner. Images appear when ``source`` has an ``images_dir``.

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
        query_image = _figure(source, row["image"], None, f"image {row['image']}")
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
                      _figure(source, winner, row["attack"], f"altered image {winner}"),
                      _figure(source, partner, None, f"its partner, image {partner}")]
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


def board_table(rows: Sequence[Mapping]) -> pd.DataFrame:
    """The leaderboard's rows (:meth:`rococo_eval.space.leaderboard.Leaderboard.rows`) as the page shows them:
    numbers with two decimals, every text as plain text."""
    cells = [["" if row[name] is None else f"{row[name]:.2f}" if isinstance(row[name], float) else str(row[name])
              for name in COLUMNS] for row in rows]
    return pd.DataFrame(cells, columns=COLUMNS)


def _figure(source, index, attack, label) -> str:
    """A thumbnail of image ``index`` (its altered copy under ``attack``) with ``label``, or the label alone."""
    if index is None:
        return ""
    caption = f"<figcaption>{html.escape(label)}</figcaption>"
    if source is None or source.images_dir is None:
        return f"<figure>{caption}</figure>"
    try:
        image = source.original_image(index) if attack is None else source.altered_image(index, attack)
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
