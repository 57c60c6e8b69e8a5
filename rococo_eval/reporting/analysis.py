"""What fooled the model: the queries an attack flipped, and which word swaps or image mixes hurt most.

Everything here reads the metric's per-query output (``rococo_recall(..., per_query=True)``: ``rank``,
``clean_rank``, ``top_index``, ``top_score``, ``best_correct_index``, ``best_correct_score``) and the
gallery's :class:`~rococo_eval.layout.GalleryLayout`; it never looks at the score matrix again.

Definitions (one attacked gallery; "clean-correct" = correct at rank 1 on the gallery without its
adversarial items, ``clean_rank == 0``):

- A query is **flipped** when it is clean-correct and not correct at rank 1 on the whole gallery
  (``rank > 0``): the metric's ``attack_success_rate`` is the share of clean-correct queries that are
  flipped. The item that won is the metric's ``top_index``, always an adversarial item for a flipped query;
  the **margin** ``top_score - best_correct_score`` (>= 0; 0 only on a tie under the pessimistic policy) is
  how far it beat the best correct item. Flipped queries are listed by margin, largest first (then by query).
- **By replaced word** (text attacks, image-to-text): each image's own adversarial captions each replace
  a word of one of its ground-truth captions (:func:`rococo_eval.attacks.replacements.find_replacements`; an insertion
  counts as ``"(inserted)"``). For a word ``w``, the **images** are the clean-correct query images with at
  least one own adversarial caption that replaced ``w`` (each image counted once), and the **successes**
  those of them whose winning item is one of their own adversarial captions that replaced ``w``. The
  success rate is successes / images, so it never exceeds 100%. Flips won by another image's adversarial
  caption are attributed to no word; their number is reported beside the table (``other_image_wins``).
  **By replacement** is the same, grouped by the word put in (``criminal``, ``weapon``, ...).
- **By method and by seed** (image attacks, text-to-image): the attack success rate of the mix and patch
  galleries pooled over their seeds, and of each seed pooled over the methods (flipped / clean-correct
  queries, summed over the galleries of the group), with the share of flips won by the altered copy of
  the query's own image.

Example:
    >>> from rococo_eval.layout import gallery_layout
    >>> # 2 captions; images 0 and 1, their altered copies 2 and 3
    >>> layout = gallery_layout("mix_seed1", "text_to_image", [1, 1])
    >>> result = {"rank": np.array([1, 0]), "clean_rank": np.array([0, 0]),
    ...           "top_index": np.array([2, 1]), "top_score": np.array([0.9, 0.8]),
    ...           "best_correct_index": np.array([0, 1]),
    ...           "best_correct_score": np.array([0.7, 0.8])}
    >>> [(row["query"], row["winner_image"], round(row["margin"], 2))
    ...  for row in flipped_queries(result, layout)]
    [(0, 0, 0.2)]
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Mapping

import numpy as np

from rococo_eval.attacks.replacements import find_replacements
from rococo_eval.catalog import IMAGE_ATTACK_METHODS, IMAGE_TO_TEXT, TEXT_TO_IMAGE, is_image_attack, parse_image_attack
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.layout import GalleryLayout
from rococo_eval.results import GalleryKey, GalleryResult

logger = logging.getLogger(__name__)

INSERTED = "(inserted)"
DEFAULT_MIN_COUNT = 20
FLIPPED_COLUMNS = ("attack", "direction", "query", "margin", "winner_score", "correct_score", "winner_column",
                   "winner_row", "correct_column", "correct_row", "image", "query_caption", "correct_caption",
                   "winner_caption", "winner_source_caption", "replaced", "replacement", "winner_image",
                   "partner_image", "own_image")
PER_QUERY_COLUMNS = ("gallery", "query", "rank", "clean_rank", "top1_adversarial", "top_column", "top_row",
                     "top_score", "best_correct_column", "best_correct_row", "best_correct_score")


def analyse(results: Mapping[str, GalleryResult], facts: GalleryFacts = NO_SOURCE) -> dict:
    """The whole analysis of one evaluation: flipped queries of every attacked gallery, by word, by method.

    Args:
        results: the evaluation's results by gallery key (``"<attack>/<direction>"``); those with a layout and
            per-query arrays (:attr:`GalleryResult.analysable`) are analysed.
        facts: the image-text set's :class:`~rococo_eval.data.facts.GalleryFacts` (its captions, partners); without
            annotations (:data:`~rococo_eval.data.facts.NO_SOURCE`) flipped queries carry indices only and the
            by-word tables are left out.

    Returns:
        ``{"galleries": {key: {"attack", "direction", "clean_correct", "flipped", "flipped_queries"}}}`` and
        the two tables of :func:`vulnerability`; clean galleries (no adversarial item) are left out.

    Example:
        >>> from rococo_eval.layout import gallery_layout
        >>> per_query = {"rank": np.array([1, 0]), "clean_rank": np.array([0, 0]), "top_index": np.array([2, 1]),
        ...              "top_score": np.array([0.9, 0.8]), "best_correct_index": np.array([0, 1]),
        ...              "best_correct_score": np.array([0.7, 0.8])}
        >>> key = "patch_seed10/text_to_image"
        >>> layout = gallery_layout("patch_seed10", "text_to_image", [1, 1])
        >>> result = analyse({key: GalleryResult({}, per_query, layout)})
        >>> result["galleries"][key]["flipped"], [row["group"] for row in result["image_attacks"]]
        (1, ['patch', 'seed 10'])
    """
    galleries = {}
    for key, (per_query, layout) in _analysable(results).items():
        if layout.num_adversarial:
            attack = GalleryKey.parse(key).attack
            rows = flipped_queries(per_query, layout, attack, facts)
            galleries[key] = {"attack": attack, "direction": layout.direction,
                              "clean_correct": int((np.asarray(per_query["clean_rank"]) == 0).sum()),
                              "flipped": len(rows), "flipped_queries": rows}
    return {"galleries": galleries, **vulnerability(results, facts)}


def vulnerability(results: Mapping[str, GalleryResult], facts: GalleryFacts = NO_SOURCE) -> dict:
    """The by-word tables of the text attacks (when ``facts`` has the set's annotations) and the by-method table of
    the image attacks.

    Returns:
        ``{"by_word": {text attack: word_vulnerability(...)}, "image_attacks": image_attack_vulnerability(...)}``
        for the galleries ``"<attack>/<direction>"`` of standard attacks among the keys.

    Example:
        >>> vulnerability({})
        {'by_word': {}, 'image_attacks': []}
    """
    by_word, image_attacks, layouts = {}, {}, {}
    for key, (per_query, layout) in _analysable(results).items():
        attack = GalleryKey.parse(key).attack
        if layout.num_adversarial and layout.direction == IMAGE_TO_TEXT and facts.has_annotations:
            by_word[attack] = word_vulnerability(per_query, layout, attack, facts)
        if layout.direction == TEXT_TO_IMAGE and is_image_attack(attack):
            image_attacks[attack], layouts[attack] = per_query, layout
    return {"by_word": by_word, "image_attacks": image_attack_vulnerability(image_attacks, layouts)}


def _analysable(results: Mapping[str, GalleryResult]) -> dict[str, tuple[dict, GalleryLayout]]:
    """The per-query arrays and layout of each result the analysis can read, by key."""
    return {key: (result.per_query, result.layout) for key, result in results.items() if result.analysable}


def flipped_mask(per_query: dict) -> np.ndarray:
    """Which queries the attack flipped: correct at rank 1 on the clean gallery, not on the whole one.

    Example:
        >>> flipped_mask({"rank": np.array([0, 2, 1]), "clean_rank": np.array([0, 0, 1])}).tolist()
        [False, True, False]
    """
    _require(per_query, ("rank", "clean_rank"))
    return (np.asarray(per_query["clean_rank"]) == 0) & (np.asarray(per_query["rank"]) > 0)


def flipped_queries(per_query: dict, layout: GalleryLayout, attack: str = "",
                    facts: GalleryFacts = NO_SOURCE) -> list[dict]:
    """The queries ``attack`` flipped on one gallery, largest margin first (see the module docstring).

    Args:
        per_query: the metric's per-query arrays for this gallery (extra keys are ignored).
        layout: the gallery's layout, in the order the scores were given.
        attack: the attack's name (a text attack's captions, an image attack's partners come from it).
        facts: the :class:`~rococo_eval.data.facts.GalleryFacts` of a :class:`~rococo_eval.data.source.Source` (or
            of anything with its caption methods and ``alteration``) whose captions the rows quote;
            :data:`~rococo_eval.data.facts.NO_SOURCE` gives indices only.

    Returns:
        one dict per flipped query with the keys :data:`FLIPPED_COLUMNS` (None where a key does not apply):
        ``query`` (query index), ``margin``, ``winner_score``/``correct_score``, the winning and the best
        correct item's gallery ``..._column`` and dataset ``..._row`` (:attr:`GalleryLayout.gallery_rows`),
        ``image`` (the query image, or the caption's image for text-to-image). Image-to-text adds the best
        correct caption, the winning adversarial caption, the ground-truth caption it was made from and its
        ``replaced``/``replacement`` words ("; "-joined when several), and ``winner_image`` (the image whose
        adversarial caption won); text-to-image adds ``query_caption``, ``winner_image`` (the image whose
        altered copy won) and its ``partner_image``. ``own_image`` says whether the winner was made from the
        query's own image.

    Raises:
        ValueError: ``per_query`` lacks a key, or its arrays do not match ``layout``.

    Example:
        >>> from rococo_eval.layout import gallery_layout
        >>> layout = gallery_layout("rand_voca", "image_to_text", [1, 1], "dataset", adversarial_per_image=1)
        >>> per_query = {"rank": np.array([1, 0]), "clean_rank": np.array([0, 0]), "top_index": np.array([3, 1]),
        ...              "top_score": np.array([0.9, 0.5]), "best_correct_index": np.array([0, 1]),
        ...              "best_correct_score": np.array([0.4, 0.5])}
        >>> [(row["query"], row["winner_row"], row["winner_image"], row["own_image"])
        ...  for row in flipped_queries(per_query, layout, "rand_voca")]
        [(0, 3, 1, False)]
    """
    _check(per_query, layout)
    flipped = np.flatnonzero(flipped_mask(per_query))
    top, best = np.asarray(per_query["top_index"]), np.asarray(per_query["best_correct_index"])
    top_score = np.asarray(per_query["top_score"], dtype=np.float64)
    best_score = np.asarray(per_query["best_correct_score"], dtype=np.float64)
    margins = top_score[flipped] - best_score[flipped]
    flipped = flipped[np.lexsort((flipped, -margins))]
    items = _GalleryItems(layout, attack, facts)
    rows = []
    for query in flipped.tolist():
        row = dict.fromkeys(FLIPPED_COLUMNS)
        winner, correct = int(top[query]), int(best[query])
        row.update(attack=attack, direction=layout.direction, query=query,
                   margin=float(top_score[query] - best_score[query]), winner_score=float(top_score[query]),
                   correct_score=float(best_score[query]), winner_column=winner,
                   winner_row=int(layout.gallery_rows[winner]), correct_column=correct,
                   correct_row=int(layout.gallery_rows[correct]))
        row.update(items.describe(query, row["winner_row"], row["correct_row"]))
        rows.append(row)
    return rows


def word_vulnerability(per_query: dict, layout: GalleryLayout, attack: str, facts: GalleryFacts) -> dict:
    """Attack success by replaced word and by replacement for a text attack's gallery (module docstring), from the
    captions of the set of ``facts`` (:class:`~rococo_eval.data.facts.GalleryFacts`, as :func:`flipped_queries`).

    Returns:
        ``{"replaced": rows, "replacement": rows, "clean_correct": n, "flipped": n, "other_image_wins": n}``,
        each row ``{"word", "images", "successes", "success_rate"}`` (rate in percent), sorted by rate, then
        successes, then word.

    Raises:
        ValueError: ``layout`` is not an attacked image-to-text gallery, ``facts`` has no captions
            (:data:`~rococo_eval.data.facts.NO_SOURCE`), or ``per_query`` lacks a key.

    Example:
        >>> from rococo_eval.layout import gallery_layout
        >>> class Two:  # 2 images, 1 caption each, 1 adversarial caption each
        ...     captions_per_image, adversarial_per_image, text_attacks, image_attacks = [1, 1], 1, ["same_concept"], []
        ...     def ground_truth_captions(self): return ["a man on a bike", "a dog on a table"]
        ...     def adversarial_captions(self, attack): return ["a lady on a bike", "a dog on a couch"]
        ...     def adversarial_sources(self, attack): return [0, 1]  # made from ground-truth captions 0 and 1
        >>> layout = gallery_layout("same_concept", "image_to_text", [1, 1], "dataset", adversarial_per_image=1)
        >>> per_query = {"rank": np.array([1, 0]), "clean_rank": np.array([0, 0]), "top_index": np.array([2, 1]),
        ...              "top_score": np.array([0.9, 0.5]), "best_correct_index": np.array([0, 1]),
        ...              "best_correct_score": np.array([0.4, 0.5])}
        >>> table = word_vulnerability(per_query, layout, "same_concept", GalleryFacts.of(Two()))
        >>> [(row["word"], row["images"], row["successes"], row["success_rate"]) for row in table["replaced"]]
        [('man', 1, 1, 100.0), ('table', 1, 0, 0.0)]
    """
    if not layout.num_adversarial or layout.direction != IMAGE_TO_TEXT:
        raise ValueError(f"`layout` must be a text attack's image-to-text gallery, got a {layout.direction} gallery "
                         f"with {layout.num_adversarial} adversarial items ({attack!r})")
    if not facts.has_annotations:
        raise ValueError("`facts` must be a set's, with its captions: the by-word tables read the replaced words, got "
                         "facts without annotations (NO_SOURCE)")
    _check(per_query, layout)
    items = _GalleryItems(layout, attack, facts)
    clean_correct = np.flatnonzero(np.asarray(per_query["clean_rank"]) == 0)
    flipped = flipped_mask(per_query)
    top = np.asarray(per_query["top_index"])
    counts = {kind: defaultdict(lambda: [0, 0]) for kind in ("replaced", "replacement")}
    other_wins = 0
    for image in clean_correct.tolist():
        own = {j: items.caption_change(image, j) for j in range(items.per_image)}
        winner_words = {"replaced": set(), "replacement": set()}
        if flipped[image]:
            winner_image, j = items.adversarial_owner(int(layout.gallery_rows[top[image]]))
            if winner_image == image:
                winner_words = own[j]
            else:
                other_wins += 1
        for kind, table in counts.items():
            for word in set().union(*(change[kind] for change in own.values())):
                table[word][0] += 1
                table[word][1] += word in winner_words[kind]
    return {kind: _rate_rows(table) for kind, table in counts.items()} | {
        "clean_correct": int(len(clean_correct)), "flipped": int(flipped.sum()), "other_image_wins": other_wins}


def image_attack_vulnerability(per_query_by_attack: dict, layouts: dict) -> list[dict]:
    """Attack success of the image attacks by method (pooled over seeds) and by seed (pooled over methods).

    Args:
        per_query_by_attack: ``{image attack: per-query arrays}`` of the text-to-image galleries scored.
        layouts: ``{image attack: GalleryLayout}``.

    Returns:
        one row per method present, then per seed present: ``{"group", "galleries", "clean_correct",
        "flipped", "success_rate", "own_image_wins"}`` (rate in percent; ``nan`` without a clean-correct
        query); ``own_image_wins`` counts flips won by the altered copy of the query's own image.

    Example:
        >>> from rococo_eval.layout import gallery_layout
        >>> layout = gallery_layout("mix_seed1", "text_to_image", [1, 1])
        >>> per_query = {"rank": np.array([1, 0]), "clean_rank": np.array([0, 0]), "top_index": np.array([2, 1]),
        ...              "top_score": np.array([0.9, 0.5]), "best_correct_index": np.array([0, 1]),
        ...              "best_correct_score": np.array([0.4, 0.5])}
        >>> [(row["group"], row["flipped"], row["success_rate"], row["own_image_wins"])
        ...  for row in image_attack_vulnerability({"mix_seed1": per_query}, {"mix_seed1": layout})]
        [('mix', 1, 50.0, 1), ('seed 1', 1, 50.0, 1)]
    """
    parsed = {attack: parse_image_attack(attack) for attack in per_query_by_attack}
    unknown = [attack for attack, match in parsed.items() if match is None]
    if unknown:
        raise ValueError(f"`per_query_by_attack` keys must be image attacks named METHOD_seedN with METHOD one of "
                         f"{IMAGE_ATTACK_METHODS}, got {unknown[0]!r}")
    seeds = sorted({seed for _, seed in parsed.values()})
    groups = [(method, lambda attack, m=method: parsed[attack][0] == m) for method in IMAGE_ATTACK_METHODS]
    groups += [(f"seed {seed}", lambda attack, s=seed: parsed[attack][1] == s) for seed in seeds]
    rows = []
    for name, member in groups:
        attacks = [attack for attack in per_query_by_attack if member(attack)]
        if not attacks:
            continue
        clean_correct = flipped = own = 0
        for attack in attacks:
            per_query, layout = per_query_by_attack[attack], layouts[attack]
            _check(per_query, layout)
            mask = flipped_mask(per_query)
            clean_correct += int((np.asarray(per_query["clean_rank"]) == 0).sum())
            flipped += int(mask.sum())
            num_images = int((~layout.adversarial).sum())
            winners = layout.gallery_rows[np.asarray(per_query["top_index"])[mask]] - num_images
            own += int((winners == _image_of_caption(layout)[mask]).sum())
        rows.append({"group": name, "galleries": ", ".join(attacks), "clean_correct": clean_correct,
                     "flipped": flipped, "success_rate": 100.0 * flipped / clean_correct if clean_correct else math.nan,
                     "own_image_wins": own})
    return rows


def per_query_columns(results: Mapping[str, GalleryResult]) -> dict[str, np.ndarray]:
    """The per-query export: one row per query of every gallery, as columns (:data:`PER_QUERY_COLUMNS`).

    ``gallery`` is the gallery's key (``"rand_voca/image_to_text"``), ``query`` the query index; the top-1
    and best correct items are given by gallery column and by dataset row (the order-independent
    :attr:`GalleryLayout.gallery_rows`), with their scores, so other tools can join them with the dataset.

    Example:
        >>> from rococo_eval.layout import gallery_layout
        >>> per_query = {"rank": np.array([1]), "clean_rank": np.array([0]), "top1_adversarial": np.array([True]),
        ...              "top_index": np.array([1]), "top_score": np.array([0.9]),
        ...              "best_correct_index": np.array([0]), "best_correct_score": np.array([0.4])}
        >>> layout = gallery_layout("mix_seed1", "text_to_image", 1)
        >>> columns = per_query_columns({"mix_seed1/text_to_image": GalleryResult({}, per_query, layout)})
        >>> columns["gallery"].tolist(), columns["top_row"].tolist(), columns["best_correct_row"].tolist()
        (['mix_seed1/text_to_image'], [1], [0])
    """
    parts = defaultdict(list)
    for key, (per_query, layout) in _analysable(results).items():
        _check(per_query, layout, ("top1_adversarial",))
        count = layout.num_queries
        top, best = np.asarray(per_query["top_index"]), np.asarray(per_query["best_correct_index"])
        parts["gallery"].append(np.full(count, key, dtype=object))
        parts["query"].append(np.arange(count, dtype=np.int64))
        parts["rank"].append(np.asarray(per_query["rank"], dtype=np.int64))
        parts["clean_rank"].append(np.asarray(per_query["clean_rank"], dtype=np.int64))
        parts["top1_adversarial"].append(np.asarray(per_query["top1_adversarial"], dtype=bool))
        parts["top_column"].append(top.astype(np.int64))
        parts["top_row"].append(layout.gallery_rows[top])
        parts["top_score"].append(np.asarray(per_query["top_score"], dtype=np.float64))
        parts["best_correct_column"].append(best.astype(np.int64))
        parts["best_correct_row"].append(layout.gallery_rows[best])
        parts["best_correct_score"].append(np.asarray(per_query["best_correct_score"], dtype=np.float64))
    return {name: np.concatenate(parts[name]) if parts[name] else np.array([]) for name in PER_QUERY_COLUMNS}


def write_per_query_parquet(results: Mapping[str, GalleryResult], path) -> Path:
    """Write :func:`per_query_columns` as a Parquet file, atomically.

    Example:
        >>> import tempfile, pyarrow.parquet as pq
        >>> from rococo_eval.layout import gallery_layout
        >>> per_query = {"rank": np.array([0]), "clean_rank": np.array([0]), "top1_adversarial": np.array([False]),
        ...              "top_index": np.array([0]), "top_score": np.array([0.9]),
        ...              "best_correct_index": np.array([0]), "best_correct_score": np.array([0.9])}
        >>> key = "clean/text_to_image"
        >>> result = GalleryResult({}, per_query, gallery_layout("clean", "text_to_image", 1))
        >>> path = write_per_query_parquet({key: result}, Path(tempfile.mkdtemp()) / "per_query.parquet")
        >>> pq.read_table(path).to_pydict()["gallery"]
        ['clean/text_to_image']
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rococo_eval.io.atomic import write_atomic

    columns = per_query_columns(results)
    table = pa.table({name: _arrow_array(values.astype(object) if name == "gallery" else values)
                      for name, values in columns.items()})
    return write_atomic(path, lambda handle: pq.write_table(table, handle))


def read_outcomes(path) -> dict[str, dict[str, np.ndarray]]:
    """Each gallery's per-query outcomes in a per-query file (:func:`write_per_query_parquet`), by gallery key, in
    query order: ``hit``, the R@1 hits (``rank`` 0: R@1 counts the queries whose first correct item ranks below 1),
    and ``clean_hit``, the clean R@1 hits (``clean_rank`` 0), as ``bool`` arrays.

    Example:
        >>> import tempfile
        >>> from rococo_eval.layout import gallery_layout
        >>> per_query = {"rank": np.array([1, 0]), "clean_rank": np.array([0, 0]),
        ...              "top1_adversarial": np.array([True, False]), "top_index": np.array([2, 1]),
        ...              "top_score": np.array([0.9, 0.8]), "best_correct_index": np.array([0, 1]),
        ...              "best_correct_score": np.array([0.7, 0.8])}
        >>> result = GalleryResult({}, per_query, gallery_layout("mix_seed1", "text_to_image", [1, 1]))
        >>> path = write_per_query_parquet({"mix_seed1/text_to_image": result}, Path(tempfile.mkdtemp()) / "q.parquet")
        >>> {key: {name: hits.tolist() for name, hits in found.items()} for key, found in read_outcomes(path).items()}
        {'mix_seed1/text_to_image': {'hit': [False, True], 'clean_hit': [True, True]}}
    """
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["gallery", "query", "rank", "clean_rank"])
    galleries = np.asarray(table.column("gallery").to_pylist(), dtype=object)
    queries, rank, clean_rank = (table.column(column).to_numpy() for column in ("query", "rank", "clean_rank"))
    outcomes = {}
    for key in dict.fromkeys(galleries.tolist()):
        rows = np.flatnonzero(galleries == key)
        rows = rows[np.argsort(queries[rows], kind="stable")]
        outcomes[key] = {"hit": rank[rows] == 0, "clean_hit": clean_rank[rows] == 0}
    return outcomes


def _arrow_array(values: np.ndarray):
    """``values`` (numbers, booleans or strings) as a pyarrow array, built from its buffers: ``pyarrow.array``
    imports pandas to look for pandas types, about a second of a run.

    Example:
        >>> _arrow_array(np.array(["a", "bc"], dtype=object)).to_pylist(), _arrow_array(np.array([True])).type
        (['a', 'bc'], DataType(bool))
        >>> _arrow_array(np.array([1, 2], dtype=">i8")).to_pylist()  # big-endian values, read as values
        [1, 2]
    """
    import pyarrow as pa

    if values.dtype == object or values.dtype.kind == "U":
        encoded = [str(value).encode("utf-8") for value in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(item) for item in encoded], out=offsets[1:])
        small = offsets[-1] < 2**31  # Arrow's string has int32 offsets
        buffers = [None, pa.py_buffer(offsets.astype(np.int32) if small else offsets), pa.py_buffer(b"".join(encoded))]
        array = pa.Array.from_buffers(pa.string() if small else pa.large_string(), len(encoded), buffers)
    elif values.dtype == bool:
        bits = np.packbits(values, bitorder="little")
        array = pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    else:
        values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("="))  # Arrow's buffers: native order
        array = pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])
    array.validate(full=True)
    return array


def flipped_csv(rows) -> str:
    """The flipped queries as CSV text, columns :data:`FLIPPED_COLUMNS` (empty cells for None).

    Example:
        >>> print(flipped_csv([{"attack": "danger", "query": 3}]).splitlines()[1][:12])
        danger,,3,,,
    """
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, FLIPPED_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def most_damaging(rows, min_count: int = DEFAULT_MIN_COUNT, limit: int = 15) -> list[dict]:
    """The ``limit`` by-word rows with at least ``min_count`` images, highest success rate first.

    Example:
        >>> rows = [{"word": "man", "images": 30, "successes": 9, "success_rate": 30.0},
        ...         {"word": "kite", "images": 2, "successes": 2, "success_rate": 100.0}]
        >>> [row["word"] for row in most_damaging(rows, min_count=20)]
        ['man']
    """
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"`min_count` must be a positive int, got {min_count!r}")
    return [row for row in rows if row["images"] >= min_count][:limit]


def _rate_rows(table: dict) -> list[dict]:
    rows = [{"word": word, "images": images, "successes": successes, "success_rate": 100.0 * successes / images}
            for word, (images, successes) in table.items()]
    return sorted(rows, key=lambda row: (-row["success_rate"], -row["successes"], row["word"]))


def _require(per_query: dict, keys) -> None:
    missing = [key for key in keys if key not in per_query]
    if missing:
        raise ValueError(f"`per_query` lacks {', '.join(missing)}: score with rococo_recall(..., per_query=True)")


def _check(per_query: dict, layout: GalleryLayout, extra=()) -> None:
    keys = ("rank", "clean_rank", "top_index", "top_score", "best_correct_index", "best_correct_score") + tuple(extra)
    _require(per_query, keys)
    lengths = {key: len(per_query[key]) for key in keys}
    if set(lengths.values()) != {layout.num_queries}:
        raise ValueError(f"`per_query` arrays must have one entry per query of the layout ({layout.num_queries}), "
                         f"got lengths {lengths}")


def _image_of_caption(layout: GalleryLayout) -> np.ndarray:
    """For a text-to-image layout, the image of each caption query (its one reference)."""
    return np.fromiter((references[0] for references in layout.references), dtype=np.int64,
                       count=layout.num_queries)


class _GalleryItems:
    """What a gallery row is: a caption or an image, ground truth or adversarial, and where it came from."""

    def __init__(self, layout: GalleryLayout, attack: str, facts: GalleryFacts):
        self.layout, self.attack, self.facts = layout, attack, facts
        self.num_originals = int((~layout.adversarial).sum())
        self.per_image = 0
        if layout.direction == IMAGE_TO_TEXT and layout.num_adversarial:
            self.per_image = layout.num_adversarial // layout.num_queries  # each query image's own
        if facts.has_annotations:
            source = facts.source
            self.ground_truth = source.ground_truth_captions()
            self.adversarial = source.adversarial_captions(attack) if self.per_image else None
            self.sources = source.adversarial_sources(attack) if self.per_image else None
        self._changes: dict[tuple[int, int], dict] = {}

    def adversarial_owner(self, row: int) -> tuple[int, int]:
        """The image and caption position of an adversarial caption's dataset row."""
        return divmod(row - self.num_originals, self.per_image)

    def caption_change(self, image: int, j: int) -> dict:
        """The replaced and replacement words of image ``image``'s adversarial caption ``j``."""
        if (image, j) not in self._changes:
            changes = find_replacements(self.source_caption(image, j), self.adversarial[self.per_image * image + j])
            self._changes[image, j] = {"replaced": {c.original or INSERTED for c in changes},
                                       "replacement": {c.replacement for c in changes if c.replacement}}
        return self._changes[image, j]

    def source_caption(self, image: int, j: int) -> str:
        """The ground-truth caption image ``image``'s adversarial caption ``j`` was made from (the source records it)."""
        return self.ground_truth[self.sources[self.per_image * image + j]]

    def describe(self, query: int, winner_row: int, correct_row: int) -> dict:
        if self.layout.direction == IMAGE_TO_TEXT:
            return self._describe_caption(query, winner_row, correct_row)
        return self._describe_image(query, winner_row)

    def _describe_caption(self, query, winner_row, correct_row) -> dict:
        row = {"image": query}
        if not self.per_image:
            return row
        winner_image, j = self.adversarial_owner(winner_row)
        row.update(winner_image=winner_image, own_image=winner_image == query)
        if not self.facts.has_annotations:
            return row
        source_caption = self.source_caption(winner_image, j)
        winner = self.adversarial[self.per_image * winner_image + j]
        changes = find_replacements(source_caption, winner)
        row.update(correct_caption=self.ground_truth[correct_row], winner_caption=winner,
                   winner_source_caption=source_caption,
                   replaced="; ".join(c.original or INSERTED for c in changes),
                   replacement="; ".join(c.replacement for c in changes))
        return row

    def _describe_image(self, query, winner_row) -> dict:
        image = int(self.layout.references[query][0])
        row = {"image": image}
        if winner_row < self.num_originals:
            return row
        winner_image = winner_row - self.num_originals
        row.update(winner_image=winner_image, own_image=winner_image == image)
        if self.facts.has_annotations:
            row["query_caption"] = self.ground_truth[query]
            if is_image_attack(self.attack):
                row["partner_image"] = int(self.facts.source.alteration(winner_image, self.attack)[0])
        return row

