"""Whether the score files of one evaluation agree: the clean numbers each gallery of a direction gives.

An attacked gallery is its direction's clean gallery plus adversarial items, and the queries stay clean (see
:mod:`rococo_eval.layout`). The metric's ``clean_recall@K`` of an attacked gallery ranks each query's correct
items among the gallery's clean items only, so, for one model, it ranks the same queries over the same clean items
with the same scores as the clean gallery does. These numbers must therefore be equal:

- image-to-text: ``recall@K`` of ``clean/image_to_text`` and ``clean_recall@K`` of every text attack's gallery;
- text-to-image: ``recall@K`` of ``clean/text_to_image`` and ``clean_recall@K`` of every image attack's gallery
  (every seed);

at each K that the galleries share, and among the attacked galleries also when no clean file is given.
:func:`disagreements` lists the directions where they are not, naming the files and the numbers.

The rule is exact, with no tolerance:

- the metric's tie policy is one per evaluation, and the clean items tied with a query's best correct one are the same
  items in every gallery of the direction, so ties count alike;
- a matrix saved in float16 rounds each score on its own, so the files of one model saved in one dtype still hold
  equal clean scores; files saved in different dtypes do not (rounding to float16 ties and reorders close scores), and
  a disagreement among them says so (:attr:`Disagreement.mixed_dtypes`) instead of being tolerated;
- a re-ranker's scores (BLIP's: only each query's top candidates are re-scored, every other item gets one fill score)
  are not compared: in an attacked gallery the adversarial items take some of those candidate places, so fewer clean
  items are re-scored and its clean part is another ranking, whose clean numbers may differ from the clean gallery's
  by right. A gallery is a re-ranker's when the caller says so (a compact file, or a full matrix that
  :func:`has_fill_block`), or when its clean numbers have ``_bounds`` (only a compact file's do).

Example:
    >>> clean, attacked = "clean/image_to_text", "rand_voca/image_to_text"
    >>> results = {clean: GalleryResult({"recall@1": 80.0, "num_queries": 30}),
    ...            attacked: GalleryResult({"clean_recall@1": 90.0,
    ...                                     "recall@1": 60.0, "num_queries": 30})}
    >>> [found] = disagreements(results, {clean: "clean.npy", attacked: "rv.npy"})
    >>> print(found.message)  # doctest: +NORMALIZE_WHITESPACE
    image-to-text: the clean R@1 differs between files: 80.00 (24 of 30 queries)
    from clean.npy (the clean gallery); 90.00 (27 of 30 queries) from rv.npy (the
    clean part of rand_voca). One model's files give equal clean numbers: each
    ranks the same queries over the same clean items with the same scores
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Optional

import numpy as np

from rococo_eval.catalog import CLEAN, direction_text
from rococo_eval.results import GalleryKey, GalleryResult, percent_text

FILL_SAMPLE_ROWS = 8
FILL_MIN_SHARE = 0.1


@dataclass(frozen=True)
class CleanNumbers:
    """The clean numbers that one gallery gives for its direction.

    Attributes:
        gallery: the gallery's key (``"rand_voca/image_to_text"``).
        file: the file that gave it (``""`` when unknown).
        recalls: clean R@K in percent by K: the clean gallery's ``recall@K``, an attacked one's ``clean_recall@K``.
        queries: the gallery's number of queries, when known.
        dtype: the file's dtype, when known.
    """

    gallery: str
    file: str
    recalls: Mapping[int, float]
    queries: Optional[int] = None
    dtype: str = ""

    @property
    def label(self) -> str:
        """The file and what of its gallery the numbers are."""
        attack = GalleryKey.parse(self.gallery).attack
        what = "the clean gallery" if attack == CLEAN else f"the clean part of {attack}"
        return f"{self.file} ({what})" if self.file else f"{self.gallery} ({what})"

    def shown(self, cutoff: int) -> str:
        """Its clean R@``cutoff`` with the number of queries it counts, which shows a difference of one query."""
        value = self.recalls[cutoff]
        if not self.queries:
            return percent_text(value)
        return f"{percent_text(value)} ({round(value * self.queries / 100)} of {self.queries} queries)"


@dataclass(frozen=True)
class Disagreement:
    """The galleries of one direction whose clean numbers differ.

    Attributes:
        direction: ``"image_to_text"`` or ``"text_to_image"``.
        cutoffs: the K at which the clean R@K differ, smallest first.
        galleries: the clean numbers of every gallery of the direction that was compared.
    """

    direction: str
    cutoffs: tuple[int, ...]
    galleries: tuple[CleanNumbers, ...]

    @property
    def mixed_dtypes(self) -> dict[str, list[str]]:
        """The files by dtype, when the files were saved in more than one dtype; else empty."""
        by_dtype: dict[str, list[str]] = {}
        for numbers in self.galleries:
            if numbers.dtype:
                by_dtype.setdefault(numbers.dtype, []).append(numbers.file or numbers.gallery)
        return by_dtype if len(by_dtype) > 1 else {}

    @property
    def message(self) -> str:
        """What differs, naming the files and the numbers, and what it means."""
        cutoff = self.cutoffs[0]
        groups: dict[float, list[CleanNumbers]] = {}
        for numbers in self.galleries:
            groups.setdefault(numbers.recalls[cutoff], []).append(numbers)
        values = "; ".join(f"{group[0].shown(cutoff)} from {', '.join(numbers.label for numbers in group)}"
                           for group in groups.values())
        text = (f"{direction_text(self.direction)}: the clean R@{cutoff} differs between files: {values}"
                + (f" (R@{', R@'.join(map(str, self.cutoffs[1:]))} differ too)" if self.cutoffs[1:] else "")
                + ". One model's files give equal clean numbers: each ranks the same queries over the same clean "
                  "items with the same scores")
        mixed = self.mixed_dtypes
        if mixed:
            saved = " and ".join(f"{dtype} ({', '.join(files)})" for dtype, files in mixed.items())
            text += (f". The files were saved as {saved}: rounding to float16 ties and reorders close scores, so one "
                     "model's files agree only when saved in one dtype")
        return text

    def as_dict(self) -> dict[str, Any]:
        """What a report's ``meta`` records of it (:func:`report_entries`)."""
        return {"direction": self.direction, "cutoffs": list(self.cutoffs),
                "galleries": {numbers.gallery: {"file": numbers.file,
                                                **({"dtype": numbers.dtype} if numbers.dtype else {}),
                                                **{f"clean_recall@{k}": value for k, value in numbers.recalls.items()}}
                              for numbers in self.galleries},
                "message": self.message}


def disagreements(results: Mapping[str, GalleryResult], files: Optional[Mapping[str, str]] = None, *,
                  dtypes: Optional[Mapping[str, str]] = None,
                  reranked: Collection[str] = ()) -> list[Disagreement]:
    """The directions whose galleries give different clean numbers (see the module docstring), in the order met.

    Args:
        results: each gallery's :class:`~rococo_eval.results.GalleryResult` by gallery key (a
            :class:`~rococo_eval.results.GalleryKey`, or its text ``"attack/direction"``): its ``metrics`` are
            read.
        files: the file that gave each gallery, by key, to name it.
        dtypes: each file's dtype, by gallery key: a disagreement among files of several dtypes says so.
        reranked: the keys of a re-ranker's galleries, which are not compared (nor are galleries whose clean numbers
            have ``_bounds``).

    Returns:
        one :class:`Disagreement` per direction whose compared galleries differ at some K they share; empty when
        they all agree (a direction with one gallery agrees).

    Example:
        >>> agreeing = {"clean/text_to_image": GalleryResult({"recall@1": 30.0}),
        ...             "mix_seed1/text_to_image": GalleryResult({"clean_recall@1": 30.0})}
        >>> disagreements(agreeing)
        []
        >>> disagreements({**agreeing, "patch_seed1/text_to_image": GalleryResult({"clean_recall@1": 31.0})})[0].cutoffs
        (1,)
    """
    files, dtypes = files or {}, dtypes or {}
    by_direction: dict[str, list[CleanNumbers]] = {}
    for key, result in results.items():
        key = GalleryKey.parse(key)
        if key in reranked:
            continue
        numbers = _clean_numbers(key, key.attack == CLEAN, result.metrics, files.get(key, ""), dtypes.get(key, ""))
        if numbers is not None:
            by_direction.setdefault(key.direction, []).append(numbers)
    found = []
    for direction, galleries in by_direction.items():
        shared = set.intersection(*(set(numbers.recalls) for numbers in galleries))
        differing = tuple(k for k in sorted(shared) if len({numbers.recalls[k] for numbers in galleries}) > 1)
        if differing:
            found.append(Disagreement(direction, differing, tuple(galleries)))
    return found


def not_compared(files: Mapping[str, str], reranked: Collection[str]) -> str:
    """What to say of the re-ranker's galleries (``reranked``, gallery keys) that :func:`disagreements` leaves out
    although other galleries of their direction are there (``files``: the name of every gallery evaluated, by its
    key): their check did not run; ``""`` when there is none. The command, the Space and the leaderboard say it in
    these words.

    Example:
        >>> files = {"clean/text_to_image": "t2i.npz", "mix_seed1/text_to_image": "mix.npz",
        ...          "clean/image_to_text": "i2t.npz"}
        >>> print(not_compared(files, reranked=files))  # doctest: +NORMALIZE_WHITESPACE
        the clean numbers of mix.npz, t2i.npz were not checked against the other files of their direction: a
        re-ranker's scores (compact files, or a fill block), whose attacked galleries re-rank other candidates than
        the clean one, so their clean parts may differ by right
        >>> not_compared(files, reranked=["clean/image_to_text"])  # alone in its direction: nothing to compare with
        ''
    """
    directions = [GalleryKey.parse(key).direction for key in files]
    names = sorted(files[key] for key, direction in zip(files, directions)
                   if key in reranked and directions.count(direction) > 1)
    if not names:
        return ""
    return (f"the clean numbers of {', '.join(names)} were not checked against the other files of their direction: a "
            "re-ranker's scores (compact files, or a fill block), whose attacked galleries re-rank other candidates "
            "than the clean one, so their clean parts may differ by right")


def report_entries(found: Collection[Disagreement]) -> dict[str, Any]:
    """What a report's ``meta`` records of the disagreements: ``consistency``, only when there are some (a report of
    files that agree is the same as before this check).

    Example:
        >>> report_entries([])
        {}
    """
    return {"consistency": [disagreement.as_dict() for disagreement in found]} if found else {}


def has_fill_block(scores) -> bool:
    """Whether a full score matrix holds a re-ranker's scores: one fill score, the lowest of every row, given to at
    least a tenth of each row's items (``FILL_MIN_SHARE``; BLIP's -100 for all but each query's top 256 of 25,010 to
    50,010 captions, or of 10,000 images). Up to ``FILL_SAMPLE_ROWS`` evenly spaced rows are read, so a memory-mapped
    matrix stays on disk. A model that scores every item itself ties its lowest score with hardly any other item.

    Example:
        >>> reranked = np.full((3, 40), -100.0, dtype=np.float32)
        >>> reranked[:, :4] = np.arange(12).reshape(3, 4)
        >>> has_fill_block(reranked), has_fill_block(np.random.default_rng(0).standard_normal((3, 40)))
        (True, False)
    """
    queries, gallery = scores.shape
    if not queries or gallery < 2:
        return False
    lowest = set()
    for row in np.unique(np.linspace(0, queries - 1, min(queries, FILL_SAMPLE_ROWS)).round().astype(np.int64)):
        values = np.asarray(scores[int(row)])
        low = values.min()
        if np.count_nonzero(values == low) < max(2, FILL_MIN_SHARE * gallery):
            return False
        lowest.add(float(low))
    return len(lowest) == 1


def _clean_numbers(key: str, clean: bool, metrics: Mapping[str, Any], file: str, dtype: str) -> Optional[CleanNumbers]:
    """The clean numbers a gallery gives: its ``recall@K`` when it is a clean gallery, else its ``clean_recall@K``;
    None when a number has bounds (a re-ranker's) or none is a number."""
    prefix = "recall@" if clean else "clean_recall@"
    recalls = {}
    for name, value in metrics.items():
        match = re.fullmatch(re.escape(prefix) + r"(\d+)", name)
        if match is None:
            continue
        if metrics.get(f"{name}_bounds"):
            return None
        if isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and not math.isnan(value):
            recalls[int(match.group(1))] = float(value)
    queries = metrics.get("num_queries")
    queries = int(queries) if isinstance(queries, (int, np.integer)) and not isinstance(queries, bool) else None
    return CleanNumbers(key, file, recalls, queries, dtype) if recalls else None
