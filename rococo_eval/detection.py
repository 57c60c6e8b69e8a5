"""Layout detection: which gallery a score matrix belongs to, read from its shape, its file name and its scores.

This module owns the rules that fill in what the user left blank of a layout and refuse what contradicts it.
The gallery facts it checks against are :mod:`rococo_eval.layout`'s; the shape comes from a score file's
header (:func:`rococo_eval.io.scorefiles.read_header`). The galleries are RoCOCO's (clean, or one of
:data:`~rococo_eval.catalog.ATTACKS`) on an image-text set of ``captions_per_image``, with
``adversarial_per_image`` adversarial captions per image in a text attack (RoCOCO's 5 by default).

The layout of a standard RoCOCO gallery follows from the matrix shape, the file name and, for one case, the
scores; :func:`choose_layout` fills in what the user left blank, says how, and leaves blank what nothing fixes:

- The shape fixes the direction and whether the gallery is clean or attacked (the four shapes differ, except
  that with one caption per image the clean galleries of both directions are square: then the direction must
  be given). A file name that names an attack (``clip_rand_voca.npy``) must agree with the shape: a clean
  gallery's shape under an attack's name, an attack of the other direction, or two names, are refused.
- A file name that states a direction (``image_to_text``/``text_to_image``, or ``i2t``/``t2i``, as whole words)
  must agree with the shape: a transposed matrix is refused, not scored as the other direction. With one caption
  per image, the stated direction decides between the two square clean galleries.
- The attacks of one direction share a shape, so the attack comes from the file name or the user.
- The order matters only for an attacked image-to-text gallery: clean image-to-text galleries and all
  text-to-image galleries are the same in the official and the dataset order (see
  :mod:`rococo_eval.layout`), while an attacked image-to-text gallery has the same shape in both orders and
  different ground truth. Unless the user gives the order, :func:`decide_order` reads it from the scores.

Deciding the order from the scores (:func:`decide_order`): up to ``ORDER_SAMPLE_ROWS`` (512) evenly spaced
query rows are read, and only the entries at their ground-truth positions under each order (10 to 12 numbers
per row in RoCOCO, so a memory-mapped 1 GB file is barely touched). A sampled query *favours* an order when the best
score among its ground truth in that order is higher than the best among its ground truth in the other order;
queries whose two reference sets are the same (image 0) or whose two best scores tie are uninformative. The
order is decided when at least ``ORDER_MIN_QUERIES`` (50) sampled queries are informative and at least
``ORDER_MIN_SHARE`` (90%) of them favour it; otherwise it is left undecided, and the gallery is not scored
until the user gives it. Why these numbers: the other order's ground truth of a query is always another image's
captions (ground truth or adversarial, never the query's own), which any model with signal scores lower, so
real models favour their true order in nearly every query; a model without signal favours either order by a
coin flip per query, and the chance that 50 coin flips give 45 or more one way is 4e-9. Refusing costs the
user one word (the order); a wrong order costs the whole number (a dataset-order matrix read as official gives
R@1 near 0). Measured on the real caption counts, 200 random seeds per case: a model-like matrix (ground truth
+d over unit Gaussian noise, the image's own adversarial captions +0.8 d) in either order is decided in 2% of
runs at d = 1 (R@1 0.2%), 92% at d = 1.25 (R@1 0.7%) and every run from d = 1.5 (R@1 1.5%) up, and was
never decided wrongly (3,200 runs, including d = 2 with every adversarial caption +1: 98% decided, or +2:
all refused); random, constant and image-blind (one score per caption) matrices were never decided
(``benchmarks/measure_order_rule.py`` reproduces these figures).

Refusing a stated order (:attr:`OrderDecision.contradicted`): deciding asks for near-unanimity, because a decision
fills in what nobody said; an order that the user states (or that the file name states) is refused on less, as soon
as the evidence is significantly against it: when, under a one-sided sign test, so many informative queries
favouring the other order would come from coin flips with a chance below ``ORDER_CONTRADICTION_LEVEL`` (1e-6; an
exact binomial tail). 452 of 511 queries against a stated order (88%: not decided) have a chance of 2e-76; with the
511 informative queries of RoCOCO's 512 sampled rows, 310 against (61%) are refused and 309 accepted (p = 8e-7 and
1.3e-6). Why 1e-6: a model scored in its true order favours it in nearly every query, so its true order is never
near the level, while a wrong stated order costs the whole number; queries that favour either order by a coin flip
contradict a stated order in one matrix in a million. Every decided order also contradicts the other (45 of 50
queries for one given order have a chance of 2e-9), so a stated order that the scores decide against is refused by
the same rule. Measured as above (200 seeds per case, 2026-12-05): every model-like matrix, from d = 1 (decided in
2% of runs) up and with the adversarial boosts, contradicted the other order (3,200 of 3,200 runs) and none its true
order; random, constant and image-blind matrices contradicted neither. One kind is refused in its true order:
image-blind scores that favour every adversarial caption (+1) contradicted it in every run, because their votes are
no coin flips (the other order's ground truth falls on adversarial captions in part of the rows); such a model ranks
by chance (R@1 near 0). ``--trust-order`` (the Space's checkbox) scores a refused order all the same, with a
validity warning (:mod:`rococo_eval.validity`).

Example:
    >>> scores = np.zeros((3, 31))  # constant scores cannot tell the order
    >>> choice = choose_layout((3, 31), [5, 6, 5], "m_rand_voca.npy", scores=scores)
    >>> choice.attack, choice.direction, choice.order
    ('rand_voca', 'image_to_text', '')
    >>> detect_layout((3, 16), [5, 6, 5]).attack
    'clean'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rococo_eval.catalog import (
    ATTACKS,
    CLEAN,
    DIRECTIONS,
    IMAGE_TO_TEXT,
    TEXT_TO_IMAGE,
    attack_direction,
    direction_text,
)
from rococo_eval.layout import (
    ADVERSARIAL_PER_IMAGE,
    ORDERS,
    describe_orders,
    gallery_shape,
    image_to_text_layout,
    matching_galleries,
)

CUSTOM = "custom"
# where a part of a layout came from, as a layout's note says it
GIVEN, NAMED, FROM_SHAPE, FROM_SCORES = ("given", "named in the file name", "read from the shape",
                                         "read from the scores")
ORDER_SAMPLE_ROWS = 512
ORDER_MIN_QUERIES = 50
ORDER_MIN_SHARE = 0.9
ORDER_CONTRADICTION_LEVEL = 1e-6


@dataclass(frozen=True)
class OrderDecision:
    """What the scores of an attacked image-to-text gallery say about its order (see :func:`decide_order`).

    Attributes:
        order: ``"official"`` or ``"dataset"`` when the scores decide it, else ``""``.
        official: sampled queries whose best official-order ground truth outscores their best dataset-order one.
        dataset: sampled queries where it is the other way round.
        sampled: query rows read.
    """

    order: str
    official: int
    dataset: int
    sampled: int

    @property
    def favoured(self) -> str:
        """The order that more sampled queries favour; ``""`` when as many favour each.

        Example:
            >>> OrderDecision("", 40, 60, 512).favoured, OrderDecision("", 3, 3, 512).favoured
            ('dataset', '')
        """
        if self.official == self.dataset:
            return ""
        return "official" if self.official > self.dataset else "dataset"

    @property
    def p_value(self) -> float:
        """The one-sided sign test's p-value of the favoured order: the chance that, were each informative query a
        coin flip between the orders, at least as many would favour one order (exact: a binomial tail).

        Example:
            >>> OrderDecision("", 452, 59, 512).p_value < 1e-75, OrderDecision("", 5, 5, 512).p_value
            (True, 0.623046875)
        """
        informative = self.official + self.dataset
        return sign_test(max(self.official, self.dataset), informative)

    @property
    def contradicted(self) -> str:
        """The order that the scores are significantly against (the other order has ``p_value`` below
        ``ORDER_CONTRADICTION_LEVEL``; the module docstring says why), which a stated order must not be; ``""``
        when neither is. A decided order's other order is always contradicted.

        Example:
            >>> OrderDecision("", 310, 201, 512).contradicted, OrderDecision("", 309, 202, 512).contradicted
            ('dataset', '')
        """
        if self.p_value >= ORDER_CONTRADICTION_LEVEL:
            return ""
        return "dataset" if self.favoured == "official" else "official"

    @property
    def contradiction(self) -> str:
        """Why the scores refuse the :attr:`contradicted` order, in words; ``""`` when they refuse neither.

        Example:
            >>> OrderDecision("", 452, 59, 512).contradiction
            'the scores are against the dataset order (one-sided sign test: p = 2.4e-76, below the 1e-06 level)'
        """
        if not self.contradicted:
            return ""
        if self.order:
            return f"the scores decide the {self.order} order"
        return (f"the scores are against the {self.contradicted} order (one-sided sign test: p = {self.p_value:.2g}, "
                f"below the {ORDER_CONTRADICTION_LEVEL:g} level)")

    @property
    def note(self) -> str:
        """The decision and its evidence, in words (and, when nothing is decided, the order the scores are against).

        Example:
            >>> OrderDecision("", 452, 59, 512).note  # doctest: +NORMALIZE_WHITESPACE
            'the scores do not decide the order (of 512 sampled queries, 452 score their official-order ground truth
            higher and 59 their dataset-order ground truth; deciding takes at least 50 such queries, 90% of them one
            way); the scores are against the dataset order (one-sided sign test: p = 2.4e-76, below the 1e-06 level)'
        """
        counts = (f"of {self.sampled} sampled queries, {self.official} score their official-order ground truth "
                  f"higher and {self.dataset} their dataset-order ground truth")
        if self.order:
            return f"the scores decide the {self.order} order ({counts})"
        return (f"the scores do not decide the order ({counts}; deciding takes at least {ORDER_MIN_QUERIES} such "
                f"queries, {ORDER_MIN_SHARE:.0%} of them one way)"
                + (f"; {self.contradiction}" if self.contradicted else ""))

    @property
    def evidence(self) -> str:
        """The counts behind the decision, the decided (else the favoured) order's first.

        Example:
            >>> OrderDecision("official", 458, 53, 512).evidence
            '458 of 512 sampled queries score their official-order ground truth higher, 53 their dataset-order one'
        """
        counts = {"official": self.official, "dataset": self.dataset}
        first = self.order or self.favoured or "official"
        second = "dataset" if first == "official" else "official"
        return (f"{counts[first]} of {self.sampled} sampled queries score their {first}-order ground truth higher, "
                f"{counts[second]} their {second}-order one")


@dataclass(frozen=True)
class LayoutChoice:
    """The gallery a score file is scored on, and how that was decided.

    Attributes:
        attack: ``"clean"``, one of :data:`~rococo_eval.catalog.ATTACKS`, or ``"custom"``.
        direction: ``"image_to_text"``, ``"text_to_image"``, or ``"custom"`` for a custom layout.
        order: ``"official"`` or ``"dataset"`` (``"custom"`` for a custom layout); ``""`` when neither the user
            nor the scores fix the order of an attacked image-to-text gallery: such a choice cannot be scored.
        note: what was read from the shape, the file name or the scores, and what is left to choose.
        order_decision: what the scores say about the order, when they were read for it.
    """

    attack: str
    direction: str
    order: str
    note: str = ""
    order_decision: OrderDecision | None = None


def decide_order(scores, captions_per_image, max_rows: int = ORDER_SAMPLE_ROWS, *,
                 adversarial_per_image: int = ADVERSARIAL_PER_IMAGE) -> OrderDecision:
    """Read the order of an attacked image-to-text score matrix from its scores, when they clearly show it.

    Both orders give an attacked image-to-text gallery the same shape, and different ground truth. Up to
    ``max_rows`` evenly spaced query rows are sampled; a query favours the order whose ground-truth captions
    hold its higher best score (queries with the same ground truth in both orders, or a tie, are skipped).
    The order is decided when at least ``ORDER_MIN_QUERIES`` sampled queries favour one order or the other
    and at least ``ORDER_MIN_SHARE`` of them favour the same one; the module docstring says why and what
    was measured. Only the ground-truth entries of the sampled rows are read, so a memory-mapped matrix
    stays on disk. Scores are higher = more similar, as the metric takes them.

    Args:
        scores: the (images, ground-truth captions + ``adversarial_per_image`` x images) matrix, an array or a
            memory map.
        captions_per_image: number of ground-truth captions of each image.
        max_rows: the most query rows to sample.
        adversarial_per_image: number of adversarial captions of each image.

    Raises:
        ValueError: ``scores`` does not have the attacked image-to-text shape of ``captions_per_image`` and
            ``adversarial_per_image``.

    Example:
        >>> from rococo_eval.layout import image_to_text_layout
        >>> captions = [5] * 60 + [6] * 4
        >>> layout = image_to_text_layout(captions, order="dataset")
        >>> scores = np.random.default_rng(0).standard_normal((layout.num_queries, layout.num_gallery))
        >>> for query, references in enumerate(layout.references):
        ...     scores[query, list(references)] += 3.0  # a model that finds its images' captions
        >>> decide_order(scores, captions)
        OrderDecision(order='dataset', official=1, dataset=62, sampled=64)
        >>> decide_order(np.zeros_like(scores), captions).order  # constant scores favour nothing
        ''
    """
    if not isinstance(max_rows, (int, np.integer)) or isinstance(max_rows, bool) or max_rows < 1:
        raise ValueError(f"`max_rows` must be a positive int, got {max_rows!r}")
    official, dataset = (image_to_text_layout(captions_per_image, attacked=True, order=order,
                                              adversarial_per_image=adversarial_per_image)
                         for order in ("official", "dataset"))
    if not hasattr(scores, "shape"):
        scores = np.asarray(scores)
    expected = (official.num_queries, official.num_gallery)
    if tuple(scores.shape) != expected:
        raise ValueError(f"`scores` must be the {expected} matrix of an attacked image-to-text gallery, "
                         f"got shape {tuple(scores.shape)}")
    sampled = np.unique(np.linspace(0, expected[0] - 1, min(expected[0], max_rows)).round().astype(np.int64))
    rows = np.array([q for q in sampled if official.references[q] != dataset.references[q]], dtype=np.int64)
    votes = {"official": 0, "dataset": 0}
    if len(rows):
        best_official = _best_reference_score(scores, rows, official.references)
        best_dataset = _best_reference_score(scores, rows, dataset.references)
        votes = {"official": int(np.sum(best_official > best_dataset)),
                 "dataset": int(np.sum(best_dataset > best_official))}
    informative = votes["official"] + votes["dataset"]
    leader = max(votes, key=votes.get)
    decided = informative >= ORDER_MIN_QUERIES and votes[leader] >= ORDER_MIN_SHARE * informative
    return OrderDecision(leader if decided else "", votes["official"], votes["dataset"], len(sampled))


def sign_test(successes: int, trials: int) -> float:
    """The one-sided sign test's p-value: the chance of at least ``successes`` heads in ``trials`` fair coin flips,
    exact (the binomial tail summed in integers, then divided once).

    Example:
        >>> sign_test(45, 50), sign_test(0, 0)
        (2.104926011270436e-09, 1.0)
    """
    if trials <= 0:
        return 1.0
    return sum(math.comb(trials, heads) for heads in range(max(successes, 0), trials + 1)) / 2 ** trials


def detect_layout(shape, captions_per_image, file_name: str = "", scores=None, *,
                  adversarial_per_image: int = ADVERSARIAL_PER_IMAGE, attacks=ATTACKS) -> LayoutChoice:
    """The standard RoCOCO gallery a score matrix of ``shape`` belongs to, when that is unambiguous.

    A shape fixes the direction and whether the gallery is clean or attacked. The attacks of one direction
    share a shape, so an attacked gallery's attack is read from ``file_name`` (``clip_rand_voca.npy``,
    ``blip-mix_seed10.npz``); a name that says otherwise than the shape is refused. The order of an attacked
    image-to-text gallery is read from ``scores`` by :func:`decide_order`; when they do not decide it, or
    are not given, the choice's order is ``""`` and its note asks for it.

    Args:
        shape: the (queries, gallery) shape of the scores.
        captions_per_image: number of ground-truth captions of each image.
        file_name: the score file's name.
        scores: the scores (an array or a memory map), or a function returning them, called only when the
            order has to be read from them.
        adversarial_per_image: number of adversarial captions of each image in a text attack.
        attacks: the attacks the set has (RoCOCO's, or a generated benchmark's, whose seeds may differ).

    Raises:
        ValueError: the shape fits no standard layout, or fits several galleries that the file name does not
            tell apart, or the file name contradicts the shape.

    Example:
        >>> captions = [5, 6, 5]
        >>> choice = detect_layout((3, 16), captions)
        >>> choice.attack, choice.direction, choice.order, choice.note
        ('clean', 'image_to_text', 'official', 'clean image-to-text gallery (shape (3, 16); attack and direction read \
from the shape)')
        >>> detect_layout((16, 6), captions, "vse_patch_seed100.npy").attack
        'patch_seed100'
        >>> detect_layout((3, 31), captions, "vse_danger.npy").order  # no scores: the order stays open
        ''
        >>> detect_layout((3, 31), captions)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: shape (3, 31) fits an attacked image_to_text gallery of same_concept, ...: choose the attack, ...
        >>> detect_layout((3, 16), captions, "vse_danger.npy")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: the file name names the attack danger, but shape (3, 16) is that of the clean image_to_text ...
        >>> detect_layout((16, 3), captions, "vse_clean_image_to_text.npy")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: the file name says image_to_text, but shape (16, 3) is that of the clean text_to_image gallery: ...
    """
    shape = tuple(int(n) for n in shape)
    _require_captions(captions_per_image)
    matches = matching_galleries(shape, captions_per_image, adversarial_per_image=adversarial_per_image,
                                 attacks=attacks)
    if not matches:
        expected = _expected_shapes(captions_per_image, adversarial_per_image)
        raise ValueError(f"shape {shape} fits no RoCOCO layout ({expected}); check the matrix or use a custom layout")
    named = _named_galleries(file_name, attacks)
    if len(named) > 1:
        raise ValueError(f"the file name {Path(file_name).name!r} names {' and '.join(named)}: name one gallery in "
                         "it, or choose the attack")
    attack, direction = matches[0]
    stated = _named_direction(file_name)
    if attack == CLEAN:
        direction = _clean_direction(shape, captions_per_image, stated)
    if stated and stated != direction:
        raise ValueError(f"the file name says {stated}, but shape {shape} is that of the "
                         f"{'clean' if attack == CLEAN else 'attacked'} {direction} gallery: is the matrix "
                         "transposed? Check the file, or choose the layout")
    if attack == CLEAN:
        if named and named[0] != CLEAN:
            attacked = gallery_shape(named[0], attack_direction(named[0]), captions_per_image,
                                     adversarial_per_image=adversarial_per_image)
            raise ValueError(f"the file name names the attack {named[0]}, but shape {shape} is that of the clean "
                             f"{direction} gallery (a {named[0]} gallery is {attacked}): check the file, or choose "
                             "the attack clean")
        return LayoutChoice(CLEAN, direction, "official",
                            _gallery_note(CLEAN, direction, "", shape, _parts_read(CLEAN, direction, shape, file_name,
                                                                                   captions_per_image, named)))
    return _attacked_choice(shape, direction, [a for a, _ in matches], named, file_name, captions_per_image, scores,
                            adversarial_per_image)


def _attacked_choice(shape, direction: str, attacks, named, file_name: str, captions_per_image, scores,
                     adversarial_per_image: int) -> LayoutChoice:
    """:func:`detect_layout` of an attacked gallery of ``direction``, which ``shape`` fits for each of ``attacks``:
    the one the file name names (``named``), its order read from ``scores`` when it is image-to-text."""
    if not named:
        raise ValueError(f"shape {shape} fits an attacked {direction} gallery of {', '.join(attacks)}: choose the "
                         "attack, or name it in the file name")
    if named[0] not in attacks:
        said = ("says clean" if named[0] == CLEAN
                else f"names the attack {named[0]}, scored {attack_direction(named[0])},")
        raise ValueError(f"the file name {said} but shape {shape} is that of an attacked {direction} gallery: "
                         "check the file, or choose the attack")
    parts = _parts_read(named[0], direction, shape, file_name, captions_per_image, named)
    if direction == TEXT_TO_IMAGE:
        return LayoutChoice(named[0], direction, "official", _gallery_note(named[0], direction, "", shape, parts))
    return _order_from_scores(named[0], shape, parts, captions_per_image, scores, adversarial_per_image)


def choose_layout(shape, captions_per_image, file_name: str = "", attack: str = "", direction: str = "",
                  order: str = "", scores=None, *, adversarial_per_image: int = ADVERSARIAL_PER_IMAGE,
                  attacks=ATTACKS) -> LayoutChoice:
    """Complete and check the layout a user gave for a score matrix of ``shape``; blanks are detected.

    ``attack`` ``"custom"`` takes the references and adversarial items from elsewhere, so the metric checks
    them against the shape. A standard layout must have exactly the gallery's shape. A blank ``order`` is the one
    the file name states (``..._official_order.npy``, as ``rococo-eval run --save-scores`` names files), used
    as a given one; else that of an attacked image-to-text gallery is read from ``scores`` (see
    :func:`detect_layout`), or left ``""``; a given one is used as given, and the note says whether the
    ``scores``, when given, agree. ``adversarial_per_image``
    is the set's number of adversarial captions per image in a text attack; ``attacks`` the attacks a given
    ``attack`` may name (RoCOCO's, or a generated benchmark's, whose image attacks may have other seeds).

    The note says where each part came from: named in the file name, read from the shape, read from the scores,
    or given. What the file itself states is said before what was given (and only checked against it), so one file
    gets one note whether its layout was detected or given back as detected (the Space's layout table).

    Example:
        >>> choice = choose_layout((3, 31), [5, 6, 5], attack="danger", order="dataset")
        >>> choice.direction, choice.note
        ('image_to_text', 'danger image-to-text gallery in the dataset order (shape (3, 31); attack and order given, \
direction read from the shape)')
        >>> choose_layout((3, 31), [5, 6, 5], "m_danger_i2t_dataset_order.npy").note
        'danger image-to-text gallery in the dataset order (shape (3, 31); attack, direction and order named in \
the file name)'
        >>> choose_layout((3, 31), [5, 6, 5], attack="danger").order
        ''
        >>> choose_layout((3, 16), [5, 6, 5], attack="danger")
        Traceback (most recent call last):
        ...
        ValueError: danger/image_to_text expects a (3, 31) matrix, got (3, 16), which fits clean/image_to_text
    """
    attack, direction, order = (str(value or "").strip() for value in (attack, direction, order))
    order = order or _named_order(file_name)
    shape = tuple(int(n) for n in shape)
    if attack == CUSTOM:
        if direction:
            _check_choice("direction", direction, DIRECTIONS)
        return LayoutChoice(CUSTOM, direction or CUSTOM, CUSTOM,
                            "custom layout: references and adversarial items as given")
    if direction:
        _check_choice("direction", direction, DIRECTIONS)
    if order:
        _check_choice("order", order, ORDERS)
    if not attack:
        detected = detect_layout(shape, captions_per_image, file_name, None if order else scores,
                                 adversarial_per_image=adversarial_per_image, attacks=attacks)
        if direction in ("", detected.direction) and order in ("", detected.order):
            return detected
        attack = detected.attack
    _check_choice("attack", attack, (CLEAN,) + tuple(attacks) + (CUSTOM,))
    _require_captions(captions_per_image)
    if not direction:  # the one the file name states, else the attack's (or a clean gallery's shape's)
        direction = _named_direction(file_name) or (attack_direction(attack) if attack != CLEAN
                                                    else _clean_direction(shape, captions_per_image))
    expected = gallery_shape(attack, direction, captions_per_image, adversarial_per_image=adversarial_per_image)
    if shape != expected:
        fits = ", ".join(f"{a}/{d}" for a, d in matching_galleries(shape, captions_per_image, attacks=attacks,
                                                                    adversarial_per_image=adversarial_per_image))
        raise ValueError(f"{attack}/{direction} expects a {expected} matrix, got {shape}, which fits "
                         f"{fits or 'no RoCOCO layout'}")
    parts = _parts_read(attack, direction, shape, file_name, captions_per_image, _named_galleries(file_name, attacks))
    if attack == CLEAN or direction == TEXT_TO_IMAGE:  # a clean or text-to-image gallery is the same in both orders
        return LayoutChoice(attack, direction, order or "official", _gallery_note(attack, direction, "", shape, parts))
    if not order:
        return _order_from_scores(attack, shape, parts, captions_per_image, scores, adversarial_per_image)
    if scores is None:
        where = NAMED if _named_order(file_name) == order else GIVEN
        return LayoutChoice(attack, direction, order, _gallery_note(attack, direction, order, shape,
                                                                    {**parts, "order": where}))
    decision = decide_order(scores() if callable(scores) else scores, captions_per_image,
                            adversarial_per_image=adversarial_per_image)
    where = NAMED if _named_order(file_name) == order else FROM_SCORES if decision.order == order else GIVEN
    note = _gallery_note(attack, direction, order, shape, {**parts, "order": where})
    if decision.contradicted == order:
        return LayoutChoice(attack, direction, order, f"{note}; but {decision.note}: check the order", decision)
    return LayoutChoice(attack, direction, order, f"{note}; {decision.note}", decision)


def _clean_direction(shape, captions_per_image, stated: str = "") -> str:
    """The direction of a clean gallery of ``shape``: its shape tells, unless every image has one caption (then the
    direction ``stated`` in the file name, if any)."""
    fits = [direction for attack, direction in matching_galleries(shape, captions_per_image) if attack == CLEAN]
    if len(fits) > 1 and stated in fits:
        return stated
    if len(fits) > 1:
        raise ValueError(f"shape {shape} fits both the clean image_to_text and the clean text_to_image gallery "
                         "(one caption per image): choose the direction")
    if not fits:
        expected = {d: gallery_shape(CLEAN, d, captions_per_image) for d in DIRECTIONS}
        raise ValueError(f"a clean gallery is {expected[IMAGE_TO_TEXT]} (image_to_text) or {expected[TEXT_TO_IMAGE]} "
                         f"(text_to_image), got {shape}")
    return fits[0]


def _order_from_scores(attack, shape, parts, captions_per_image, scores, adversarial_per_image) -> LayoutChoice:
    """The choice for an attacked image-to-text gallery whose order nobody gave (``parts``: where its attack and
    direction came from): from the scores, or blank."""
    orders = describe_orders(adversarial_per_image)
    note = _gallery_note(attack, IMAGE_TO_TEXT, "", shape, parts)
    if scores is None:
        return LayoutChoice(attack, IMAGE_TO_TEXT, "",
                            f"{note}; the order cannot be read from the shape: choose it, {orders}")
    decision = decide_order(scores() if callable(scores) else scores, captions_per_image,
                            adversarial_per_image=adversarial_per_image)
    if decision.order:
        note = _gallery_note(attack, IMAGE_TO_TEXT, decision.order, shape, {**parts, "order": FROM_SCORES})
        return LayoutChoice(attack, IMAGE_TO_TEXT, decision.order, f"{note}; {decision.note}", decision)
    return LayoutChoice(attack, IMAGE_TO_TEXT, "", f"{note}; {decision.note}: choose the order, {orders}",
                        decision)


def _parts_read(attack, direction, shape, file_name, captions_per_image, named) -> dict[str, str]:
    """Where a gallery's attack and direction come from, as its note says it (:func:`_gallery_note`): what the file
    states (its name ``named`` galleries, its shape) before what was given, which was then only checked."""
    clean_fits = [d for a, d in matching_galleries(shape, captions_per_image) if a == CLEAN]
    return {"attack": FROM_SHAPE if attack == CLEAN else NAMED if attack in named else GIVEN,
            "direction": (NAMED if _named_direction(file_name) == direction
                          else GIVEN if attack == CLEAN and len(clean_fits) > 1 else FROM_SHAPE)}


def _gallery_note(attack, direction, order, shape, parts) -> str:
    """A gallery in words, with where each part of its layout came from (``parts``: ``{part: where}``, parts that
    came from the same place said together).

    Example:
        >>> _gallery_note("danger", IMAGE_TO_TEXT, "dataset", (3, 31), {"attack": GIVEN, "direction": FROM_SHAPE,
        ...                                                            "order": GIVEN})
        'danger image-to-text gallery in the dataset order (shape (3, 31); attack and order given, direction read \
from the shape)'
    """
    by_source: dict[str, list[str]] = {}
    for part, where in parts.items():
        by_source.setdefault(where, []).append(part)
    sources = ", ".join(f"{', '.join(names[:-1])} and {names[-1]} {where}" if len(names) > 1 else f"{names[0]} {where}"
                        for where, names in by_source.items())
    in_order = f" in the {order} order" if order else ""
    return f"{attack} {direction_text(direction)} gallery{in_order} (shape {shape}; {sources})"


def _best_reference_score(scores, rows, references) -> np.ndarray:
    """For each of ``rows``, its best score among its ``references``; only those entries are read."""
    width = max(len(references[q]) for q in rows)
    columns = np.array([references[q] + (references[q][0],) * (width - len(references[q])) for q in rows])
    return np.asarray(scores[rows[:, None], columns]).max(axis=1)


def _require_captions(captions_per_image) -> None:
    if captions_per_image is None:
        raise ValueError("standard layouts need the RoCOCO caption counts, and the annotation files are not "
                         "available: set $ROCOCO_ANNOTATIONS_DIR or allow the pinned download, or use a custom layout")


def _check_choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _named_order(file_name: str) -> str:
    """The order a file name states as ``official_order`` or ``dataset_order`` (whole words, ``-`` counts as
    ``_``), as ``rococo-eval run --save-scores`` names its files; ``""`` when it states none, or both.

    Example:
        >>> _named_order("rand_voca_image_to_text_official_order.npy"), _named_order("my_dataset_rand_voca.npy")
        ('official', '')
    """
    name = Path(file_name).name.lower().replace("-", "_")
    named = [order for order in ORDERS if re.search(rf"(?<![a-z0-9]){order}_order(?![a-z0-9])", name)]
    return named[0] if len(named) == 1 else ""


def _named_direction(file_name: str) -> str:
    """The direction a file name states, as whole words (``-`` counts as ``_``): ``image_to_text`` or ``i2t``,
    ``text_to_image`` or ``t2i``; ``""`` when it states none, or both.

    Example:
        >>> _named_direction("clean_image_to_text_official_order.npy"), _named_direction("blip-t2i-mix.npy")
        ('image_to_text', 'text_to_image')
        >>> _named_direction("rand_voca.npy")
        ''
    """
    name = Path(file_name).name.lower().replace("-", "_")
    words = {IMAGE_TO_TEXT: (IMAGE_TO_TEXT, "i2t"), TEXT_TO_IMAGE: (TEXT_TO_IMAGE, "t2i")}
    named = [direction for direction, spellings in words.items()
             if any(re.search(rf"(?<![a-z0-9]){word}(?![a-z0-9])", name) for word in spellings)]
    return named[0] if len(named) == 1 else ""


def _named_galleries(file_name: str, attacks=ATTACKS) -> list[str]:
    """``clean`` and the ``attacks`` that ``file_name`` names as whole words (``-`` counts as ``_``), in its order."""
    name = Path(file_name).name.lower().replace("-", "_")
    found = {}
    for gallery in (CLEAN,) + tuple(attacks):
        match = re.search(rf"(?<![a-z0-9]){gallery}(?![a-z0-9])", name)
        if match:
            found[gallery] = match.start()
    return sorted(found, key=found.get)


def _expected_shapes(captions_per_image, adversarial_per_image) -> str:
    shapes = {}
    for attack, direction in ((CLEAN, "image_to_text"), ("rand_voca", "image_to_text"),
                              (CLEAN, "text_to_image"), ("mix_seed1", "text_to_image")):
        label = f"{direction} {'clean' if attack == CLEAN else 'attacked'}"
        shapes[label] = gallery_shape(attack, direction, captions_per_image,
                                      adversarial_per_image=adversarial_per_image)
    return "expected " + ", ".join(f"{shape} for {label}" for label, shape in shapes.items())
