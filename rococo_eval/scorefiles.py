"""Score files: a model's score matrix read from ``.npy``, ``.npz`` or ``.safetensors``, safely.

A score file holds one matrix, queries x gallery, higher = more similar, in float16, bfloat16
(``.safetensors`` only), float32 or float64. Nothing is unpickled: ``.npy`` and ``.npz`` go through
``np.load(allow_pickle=False)`` and ``.safetensors`` through its JSON header. Every file is checked
against a size limit (``$ROCOCO_MAX_UPLOAD_MB``, default 2048 MB) before a byte of it is read, and its
shape and dtype are read from the header before its data: ``.npy`` and ``.safetensors`` scores are
memory-mapped, so a large file is paged in as the metric reads it, not loaded whole.

An ``.npz`` or ``.safetensors`` file may also carry a custom layout beside its scores: a ``references``
array (one correct gallery index per query, or a table of them; rows may repeat an index as padding) and
an ``adversarial`` array (a boolean mask over the gallery, or gallery indices).

The layout of a standard RoCOCO gallery follows from the matrix shape, the file name and, for one case, the
scores; :func:`choose_layout` fills in what the user left blank, says how, and leaves blank what nothing fixes:

- The shape fixes the direction and whether the gallery is clean or attacked (the four shapes differ, except
  that with one caption per image the clean galleries of both directions are square: then the direction must
  be given). A file name that names an attack (``clip_rand_voca.npy``) must agree with the shape: a clean
  gallery's shape under an attack's name, an attack of the other direction, or two names, are refused.
- The attacks of one direction share a shape, so the attack comes from the file name or the user.
- The order matters only for an attacked image-to-text gallery: clean image-to-text galleries and all
  text-to-image galleries are the same in the official and the dataset order (see
  :mod:`rococo_eval.layout`), while an attacked image-to-text gallery has the same shape in both orders and
  different ground truth. Unless the user gives the order, :func:`decide_order` reads it from the scores.

Deciding the order from the scores (:func:`decide_order`): up to ``ORDER_SAMPLE_ROWS`` (512) evenly spaced
query rows are read, and only the entries at their ground-truth positions under each order (10 to 12 numbers
per row, so a memory-mapped 1 GB file is barely touched). A sampled query *favours* an order when the best
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
all refused); random, constant and image-blind (one score per caption) matrices were never decided.

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "clip_rand_voca.npy"
    >>> np.save(path, np.zeros((3, 31), dtype=np.float16))
    >>> info = read_header(path)
    >>> info.shape, info.dtype
    ((3, 31), 'float16')
    >>> choice = choose_layout(info.shape, [5, 6, 5], path.name, scores=read_scores(path))
    >>> choice.attack, choice.direction, choice.order  # constant scores cannot tell the order
    ('rand_voca', 'image_to_text', '')
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .layout import (ATTACKS, CLEAN, DIRECTIONS, IMAGE_TO_TEXT, ORDERS, TEXT_TO_IMAGE, attack_direction,
                     gallery_shape, image_to_text_layout, matching_galleries)

logger = logging.getLogger(__name__)

MAX_UPLOAD_MB_ENV = "ROCOCO_MAX_UPLOAD_MB"
DEFAULT_MAX_UPLOAD_MB = 2048
MAX_SIDE_FILE_BYTES = 64 << 20
SCORE_SUFFIXES = (".npy", ".npz", ".safetensors")
SCORE_KEYS = ("scores", "predictions", "similarity")
LAYOUT_KEYS = ("references", "adversarial")
CUSTOM = "custom"
ORDER_SAMPLE_ROWS = 512
ORDER_MIN_QUERIES = 50
ORDER_MIN_SHARE = 0.9
_ORDER_HELP = ("official (each image's captions, then its 5 altered ones) or dataset (all ground-truth captions, "
               "then all altered ones)")

_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
_SAFETENSORS_DTYPES = {
    "F16": "<f2", "F32": "<f4", "F64": "<f8", "BF16": "<u2", "BOOL": "|b1",
    "I8": "|i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "|u1", "U16": "<u2", "U32": "<u4", "U64": "<u8",
}
_MAX_SAFETENSORS_HEADER = 100 << 20


@dataclass(frozen=True)
class ScoreFileInfo:
    """What the header of a score file says, before its data is read.

    Attributes:
        path: the file.
        key: the array holding the scores (``None`` for ``.npy``).
        shape: the shape of the scores, ``(queries, gallery)``.
        dtype: ``"float16"``, ``"bfloat16"``, ``"float32"`` or ``"float64"``.
        layout_keys: which of ``"references"`` and ``"adversarial"`` the file also holds.
    """

    path: Path
    key: str | None
    shape: tuple[int, int]
    dtype: str
    layout_keys: tuple[str, ...] = ()


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
    def note(self) -> str:
        """The decision and its evidence, in words."""
        counts = (f"of {self.sampled} sampled queries, {self.official} score their official-order ground truth "
                  f"higher and {self.dataset} their dataset-order ground truth")
        if self.order:
            return f"the scores decide the {self.order} order ({counts})"
        return (f"the scores do not decide the order ({counts}; deciding takes at least {ORDER_MIN_QUERIES} such "
                f"queries, {ORDER_MIN_SHARE:.0%} of them one way)")


@dataclass(frozen=True)
class LayoutChoice:
    """The gallery a score file is scored on, and how that was decided.

    Attributes:
        attack: ``"clean"``, one of :data:`~rococo_eval.layout.ATTACKS`, or ``"custom"``.
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


def max_upload_bytes() -> int:
    """The largest file accepted, in bytes: ``$ROCOCO_MAX_UPLOAD_MB`` megabytes (default 2048).

    Example:
        >>> max_upload_bytes() == int(float(os.environ.get("ROCOCO_MAX_UPLOAD_MB", "2048")) * 2**20)
        True
    """
    value = os.environ.get(MAX_UPLOAD_MB_ENV, str(DEFAULT_MAX_UPLOAD_MB))
    try:
        megabytes = float(value)
    except ValueError:
        raise ValueError(f"${MAX_UPLOAD_MB_ENV} must be a number of megabytes, got {value!r}") from None
    if not megabytes > 0:
        raise ValueError(f"${MAX_UPLOAD_MB_ENV} must be positive, got {value!r}")
    return int(megabytes * 2**20)


def check_size(path, limit: int | None = None) -> int:
    """Return the size of ``path`` in bytes; raise ``ValueError`` when it exceeds ``limit`` (bytes).

    Only the file system is asked: nothing is read.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "big.npy"
        >>> _ = path.write_bytes(bytes(3000))
        >>> check_size(path, limit=4096)
        3000
        >>> check_size(path, limit=2048)
        Traceback (most recent call last):
        ...
        ValueError: big.npy: the file is 3000 bytes (2.9 KB), over the limit of 2048 bytes (2.0 KB)
    """
    limit = max_upload_bytes() if limit is None else limit
    path = Path(path)
    try:
        size = os.path.getsize(path)
    except OSError as error:
        raise ValueError(f"{path.name}: cannot read the file ({error.strerror or error})") from None
    if size > limit:
        raise ValueError(f"{path.name}: the file is {_bytes(size)}, over the limit of {_bytes(limit)}")
    return size


def read_header(path, key: str | None = None, limit: int | None = None) -> ScoreFileInfo:
    """Check a score file's size, format, shape and dtype from its header, without reading its data.

    Args:
        path: a ``.npy``, ``.npz`` or ``.safetensors`` file.
        key: the array holding the scores in an ``.npz`` or ``.safetensors`` file. Default: the one named
            ``scores`` (or ``predictions``, ``similarity``), else the only array besides ``references`` and
            ``adversarial``.
        limit: the largest file, and the largest uncompressed array, in bytes (default :func:`max_upload_bytes`).

    Raises:
        ValueError: naming the file and what is wrong with it.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "run.npz"
        >>> np.savez(path, scores=np.ones((2, 4)), references=np.arange(2), adversarial=np.arange(4) > 1)
        >>> info = read_header(path)
        >>> info.key, info.shape, info.dtype, info.layout_keys
        ('scores', (2, 4), 'float64', ('references', 'adversarial'))
        >>> np.savez(path, a=np.ones((2, 4)), b=np.ones(3))
        >>> read_header(path)
        Traceback (most recent call last):
        ...
        ValueError: run.npz: holds several arrays (a, b); name the scores array `scores` or choose one
    """
    path = Path(path)
    limit = max_upload_bytes() if limit is None else limit
    check_size(path, limit)
    members = _members(path)
    key = _score_key(path, members, key)
    dtype, shape = members[key]
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{path.name}: scores must be floats (float16, bfloat16, float32 or float64), got {dtype}")
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"{path.name}: scores must be a non-empty 2-D matrix (queries x gallery), got shape {shape}")
    _check_array_bytes(path, key, dtype, shape, limit)
    found = tuple(name for name in LAYOUT_KEYS if name in members and name != key)
    return ScoreFileInfo(path, None if path.suffix.lower() == ".npy" else key, shape, dtype, found)


def read_scores(path, key: str | None = None, limit: int | None = None) -> np.ndarray:
    """Read the score matrix of a file: read-only and memory-mapped for ``.npy`` and ``.safetensors``.

    Arguments and errors are those of :func:`read_header`, which runs first. bfloat16 becomes float32;
    other dtypes are kept. Finiteness is not checked here: the metric checks it as it reads the rows.

    Example:
        >>> import tempfile
        >>> from safetensors.numpy import save_file
        >>> path = Path(tempfile.mkdtemp()) / "run.safetensors"
        >>> save_file({"scores": np.eye(3, dtype=np.float32)}, str(path))
        >>> read_scores(path).diagonal().tolist()
        [1.0, 1.0, 1.0]
    """
    info = read_header(path, key, limit)
    logger.debug("reading %s: %s %s", info.path.name, info.dtype, info.shape)
    return _read_member(info.path, info.key)


def read_layout_arrays(path, limit: int | None = None) -> dict:
    """The ``references`` and ``adversarial`` arrays an ``.npz`` or ``.safetensors`` file holds, if any.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "run.npz"
        >>> np.savez(path, scores=np.ones((2, 4)), references=np.array([0, 1]))
        >>> {name: value.tolist() for name, value in read_layout_arrays(path).items()}
        {'references': [0, 1]}
    """
    path = Path(path)
    check_size(path, max_upload_bytes() if limit is None else limit)
    if path.suffix.lower() == ".npy":
        return {}
    members = _members(path)
    out = {}
    for name in LAYOUT_KEYS:
        if name in members:
            dtype, shape = members[name]
            _check_array_bytes(path, name, dtype, shape, MAX_SIDE_FILE_BYTES)
            out[name] = _check_layout_array(path, name, np.asarray(_read_member(path, name)))
    return out


def read_references(path, limit: int = MAX_SIDE_FILE_BYTES):
    """Read a custom layout's references: a ``.json`` list of ints or lists of ints, or an ``.npy`` int array.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "references.json"
        >>> _ = path.write_text("[0, [1, 2], 3]")
        >>> read_references(path)
        [0, [1, 2], 3]
    """
    return _read_side_file(path, "references", limit)


def read_adversarial(path, limit: int = MAX_SIDE_FILE_BYTES) -> np.ndarray:
    """Read a custom layout's adversarial items: a boolean mask or gallery indices, from ``.json`` or ``.npy``.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "adversarial.json"
        >>> _ = path.write_text("[false, true, true]")
        >>> read_adversarial(path).tolist()
        [False, True, True]
    """
    path = Path(path)
    values = _read_side_file(path, "adversarial", limit)
    if isinstance(values, list):
        if not (all(isinstance(v, bool) for v in values) or all(_is_int(v) for v in values)):
            raise ValueError(f"{path.name}: `adversarial` must be all booleans (a mask) or all ints (gallery indices)")
        values = np.array(values)
    return _check_layout_array(path, "adversarial", values)


def decide_order(scores, captions_per_image, max_rows: int = ORDER_SAMPLE_ROWS) -> OrderDecision:
    """Read the order of an attacked image-to-text score matrix from its scores, when they clearly show it.

    Both orders give an attacked image-to-text gallery the same shape, and different ground truth. Up to
    ``max_rows`` evenly spaced query rows are sampled; a query favours the order whose ground-truth captions
    hold its higher best score (queries with the same ground truth in both orders, or a tie, are skipped).
    The order is decided when at least ``ORDER_MIN_QUERIES`` sampled queries favour one order or the other
    and at least ``ORDER_MIN_SHARE`` of them favour the same one; the module docstring says why and what
    was measured. Only the ground-truth entries of the sampled rows are read, so a memory-mapped matrix
    stays on disk. Scores are higher = more similar, as the metric takes them.

    Args:
        scores: the (images, ground-truth captions + 5 x images) matrix, an array or a memory map.
        captions_per_image: number of ground-truth captions of each image.
        max_rows: the most query rows to sample.

    Raises:
        ValueError: ``scores`` does not have the attacked image-to-text shape of ``captions_per_image``.

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
    official = image_to_text_layout(captions_per_image, attacked=True, order="official")
    dataset = image_to_text_layout(captions_per_image, attacked=True, order="dataset")
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


def detect_layout(shape, captions_per_image, file_name: str = "", scores=None) -> LayoutChoice:
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

    Raises:
        ValueError: the shape fits no standard layout, or fits several galleries that the file name does not
            tell apart, or the file name contradicts the shape.

    Example:
        >>> captions = [5, 6, 5]
        >>> choice = detect_layout((3, 16), captions)
        >>> choice.attack, choice.direction, choice.order, choice.note
        ('clean', 'image_to_text', 'official', 'clean image-to-text gallery (shape (3, 16))')
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
    """
    shape = tuple(int(n) for n in shape)
    _require_captions(captions_per_image)
    matches = matching_galleries(shape, captions_per_image)
    if not matches:
        raise ValueError(f"shape {shape} fits no RoCOCO layout ({_expected_shapes(captions_per_image)}); "
                         "check the matrix or use a custom layout")
    named = _named_galleries(file_name)
    if len(named) > 1:
        raise ValueError(f"the file name {Path(file_name).name!r} names {' and '.join(named)}: name one gallery in "
                         "it, or choose the attack")
    attack, direction = matches[0]
    if attack == CLEAN:
        direction = _clean_direction(shape, captions_per_image)
        if named and named[0] != CLEAN:
            attacked = gallery_shape(named[0], attack_direction(named[0]), captions_per_image)
            raise ValueError(f"the file name names the attack {named[0]}, but shape {shape} is that of the clean "
                             f"{direction} gallery (a {named[0]} gallery is {attacked}): check the file, or choose "
                             "the attack clean")
        return LayoutChoice(CLEAN, direction, "official",
                            f"clean {direction.replace('_', '-')} gallery (shape {shape})")
    attacks = [a for a, _ in matches]
    if not named:
        raise ValueError(f"shape {shape} fits an attacked {direction} gallery of {', '.join(attacks)}: choose the "
                         "attack, or name it in the file name")
    if named[0] not in attacks:
        said = ("says clean" if named[0] == CLEAN
                else f"names the attack {named[0]}, scored {attack_direction(named[0])},")
        raise ValueError(f"the file name {said} but shape {shape} is that of an attacked {direction} gallery: "
                         "check the file, or choose the attack")
    note = f"{named[0]} {direction.replace('_', '-')} gallery (shape {shape}; attack named in the file name)"
    if direction == TEXT_TO_IMAGE:
        return LayoutChoice(named[0], direction, "official", note)
    return _order_from_scores(named[0], note, captions_per_image, scores)


def choose_layout(shape, captions_per_image, file_name: str = "", attack: str = "", direction: str = "",
                  order: str = "", scores=None) -> LayoutChoice:
    """Complete and check the layout a user gave for a score matrix of ``shape``; blanks are detected.

    ``attack`` ``"custom"`` takes the references and adversarial items from elsewhere, so the metric checks
    them against the shape. A standard layout must have exactly the gallery's shape. A blank ``order`` of an
    attacked image-to-text gallery is read from ``scores`` (see :func:`detect_layout`), or left ``""``; a given
    one is used as given, and the note says whether the ``scores``, when given, agree.

    Example:
        >>> choice = choose_layout((3, 31), [5, 6, 5], attack="danger", order="dataset")
        >>> choice.direction, choice.note
        ('image_to_text', 'danger image-to-text gallery in the dataset order, as chosen')
        >>> choose_layout((3, 31), [5, 6, 5], attack="danger").order
        ''
        >>> choose_layout((3, 16), [5, 6, 5], attack="danger")
        Traceback (most recent call last):
        ...
        ValueError: danger/image_to_text expects a (3, 31) matrix, got (3, 16), which fits clean/image_to_text
    """
    attack, direction, order = (str(value or "").strip() for value in (attack, direction, order))
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
        detected = detect_layout(shape, captions_per_image, file_name, None if order else scores)
        if direction in ("", detected.direction) and order in ("", detected.order):
            return detected
        attack = detected.attack
    _check_choice("attack", attack, (CLEAN,) + ATTACKS + (CUSTOM,))
    _require_captions(captions_per_image)
    if not direction:
        direction = attack_direction(attack) if attack != CLEAN else _clean_direction(shape, captions_per_image)
    expected = gallery_shape(attack, direction, captions_per_image)
    if shape != expected:
        fits = ", ".join(f"{a}/{d}" for a, d in matching_galleries(shape, captions_per_image)) or "no RoCOCO layout"
        raise ValueError(f"{attack}/{direction} expects a {expected} matrix, got {shape}, which fits {fits}")
    if attack == CLEAN or direction == TEXT_TO_IMAGE:
        order = order or "official"  # a clean or text-to-image gallery is the same in both orders
    if not order:
        return _order_from_scores(attack, f"{attack} image-to-text gallery, as chosen", captions_per_image, scores)
    note = f"{attack} {direction.replace('_', '-')} gallery in the {order} order, as chosen"
    if attack == CLEAN or direction == TEXT_TO_IMAGE or scores is None:
        return LayoutChoice(attack, direction, order, note)
    decision = decide_order(scores() if callable(scores) else scores, captions_per_image)
    if decision.order and decision.order != order:
        return LayoutChoice(attack, direction, order, f"{note}; but {decision.note}: check the order", decision)
    return LayoutChoice(attack, direction, order, f"{note}; {decision.note}", decision)


def _clean_direction(shape, captions_per_image) -> str:
    """The direction of a clean gallery of ``shape``: its shape tells, unless every image has one caption."""
    fits = [direction for attack, direction in matching_galleries(shape, captions_per_image) if attack == CLEAN]
    if len(fits) > 1:
        raise ValueError(f"shape {shape} fits both the clean image_to_text and the clean text_to_image gallery "
                         "(one caption per image): choose the direction")
    if not fits:
        expected = {d: gallery_shape(CLEAN, d, captions_per_image) for d in DIRECTIONS}
        raise ValueError(f"a clean gallery is {expected[IMAGE_TO_TEXT]} (image_to_text) or {expected[TEXT_TO_IMAGE]} "
                         f"(text_to_image), got {shape}")
    return fits[0]


def _order_from_scores(attack, note, captions_per_image, scores) -> LayoutChoice:
    """The choice for an attacked image-to-text gallery whose order nobody gave: from the scores, or blank."""
    if scores is None:
        return LayoutChoice(attack, IMAGE_TO_TEXT, "",
                            f"{note}; the order cannot be read from the shape: choose it, {_ORDER_HELP}")
    decision = decide_order(scores() if callable(scores) else scores, captions_per_image)
    if decision.order:
        return LayoutChoice(attack, IMAGE_TO_TEXT, decision.order, f"{note}; {decision.note}", decision)
    return LayoutChoice(attack, IMAGE_TO_TEXT, "", f"{note}; {decision.note}: choose the order, {_ORDER_HELP}",
                        decision)


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


def _named_galleries(file_name: str) -> list[str]:
    """``clean`` and the attacks that ``file_name`` names as whole words (``-`` counts as ``_``), in its order."""
    name = Path(file_name).name.lower().replace("-", "_")
    found = {}
    for gallery in (CLEAN,) + ATTACKS:
        match = re.search(rf"(?<![a-z0-9]){gallery}(?![a-z0-9])", name)
        if match:
            found[gallery] = match.start()
    return sorted(found, key=found.get)


def _expected_shapes(captions_per_image) -> str:
    shapes = {}
    for attack, direction in ((CLEAN, "image_to_text"), ("rand_voca", "image_to_text"),
                              (CLEAN, "text_to_image"), ("mix_seed1", "text_to_image")):
        label = f"{direction} {'clean' if attack == CLEAN else 'attacked'}"
        shapes[label] = gallery_shape(attack, direction, captions_per_image)
    return "expected " + ", ".join(f"{shape} for {label}" for label, shape in shapes.items())


def _members(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Map each array of the file to its (dtype name, shape), from headers only."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            with open(path, "rb") as handle:
                return {"": _npy_header(handle)}
        if suffix == ".npz":
            with zipfile.ZipFile(path) as archive:
                members = {}
                for name in archive.namelist():
                    with archive.open(name) as handle:
                        members[name.removesuffix(".npy")] = _npy_header(handle)
                return members
        if suffix == ".safetensors":
            return {name: (_safetensors_dtype(spec["dtype"]), tuple(spec["shape"]))
                    for name, (spec, _) in _safetensors_header(path).items()}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, KeyError, TypeError) as error:
        raise ValueError(f"{path.name}: not a readable {suffix} file ({error})") from None
    raise ValueError(f"{path.name}: unsupported file type {suffix!r}; expected one of {', '.join(SCORE_SUFFIXES)}")


def _npy_header(handle) -> tuple[str, tuple[int, ...]]:
    version = np.lib.format.read_magic(handle)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(handle)
    return ("object" if dtype.hasobject else dtype.name), tuple(int(n) for n in shape)


def _safetensors_header(path: Path) -> dict[str, tuple[dict, int]]:
    """Map each tensor to (its header entry, the byte offset of its data in the file)."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise ValueError("the file is shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(_MAX_SAFETENSORS_HEADER, size - 8):
            raise ValueError(f"header length {length} does not fit the file")
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    start, out = 8 + length, {}
    for name, spec in header.items():
        begin, end = (int(v) for v in spec["data_offsets"])
        dtype = np.dtype(_safetensors_dtype(spec["dtype"], numpy=True))
        if not 0 <= begin <= end <= size - start or end - begin != math.prod(spec["shape"]) * dtype.itemsize:
            raise ValueError(f"tensor {name!r} has data offsets that do not fit its shape or the file")
        out[name] = (spec, start + begin)
    return out


def _safetensors_dtype(code: str, numpy: bool = False) -> str:
    if code not in _SAFETENSORS_DTYPES:
        raise ValueError(f"unsupported safetensors dtype {code}")
    if numpy:
        return _SAFETENSORS_DTYPES[code]
    return "bfloat16" if code == "BF16" else np.dtype(_SAFETENSORS_DTYPES[code]).name


def _score_key(path: Path, members: dict, key: str | None) -> str:
    if path.suffix.lower() == ".npy":
        return ""
    if key is not None:
        if key not in members:
            raise ValueError(f"{path.name}: has no array {key!r}; it holds {', '.join(members) or 'none'}")
        return key
    for name in SCORE_KEYS:
        if name in members:
            return name
    candidates = [name for name in members if name not in LAYOUT_KEYS]
    if len(candidates) != 1:
        listed = ", ".join(members) or "none"
        raise ValueError(f"{path.name}: holds several arrays ({listed}); name the scores array `scores` or choose one"
                         if candidates else f"{path.name}: holds no scores array (arrays: {listed})")
    return candidates[0]


def _check_array_bytes(path: Path, key: str, dtype: str, shape, limit: int) -> None:
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    size = math.prod(shape) * itemsize
    if size > limit:
        name = f"array {key!r}" if key else "the array"
        raise ValueError(f"{path.name}: {name} is {_human(size)} uncompressed, over the limit of {_human(limit)}")


def _read_member(path: Path, key: str | None) -> np.ndarray:
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="r", allow_pickle=False)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return archive[key]
        spec, offset = _safetensors_header(path)[key]
        raw = np.memmap(path, dtype=_safetensors_dtype(spec["dtype"], numpy=True), mode="r", offset=offset,
                        shape=tuple(spec["shape"]))
        if spec["dtype"] == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path.name}: cannot read {key or 'the array'} ({error})") from None


def _read_side_file(path, name: str, limit: int):
    path = Path(path)
    check_size(path, limit)
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"{path.name}: not valid JSON ({error})") from None
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path.name}: `{name}` must be a non-empty JSON list")
        return values
    if suffix == ".npy":
        dtype, shape = _members(path)[""]
        _check_array_bytes(path, "", dtype, shape, limit)
        return _check_layout_array(path, name, np.array(_read_member(path, None)))
    raise ValueError(f"{path.name}: `{name}` must be a .json or .npy file")


def _check_layout_array(path: Path, name: str, values: np.ndarray) -> np.ndarray:
    kinds, dims = ("iu", (1, 2)) if name == "references" else ("iub", (1,))
    if values.dtype.kind not in kinds or values.ndim not in dims or values.size == 0:
        expected = "ints, one row per query" if name == "references" else "a boolean mask or ints"
        raise ValueError(f"{path.name}: `{name}` must be {expected}; got {values.dtype} of shape {values.shape}")
    return values


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bytes(size: int) -> str:
    return f"{size} bytes" + (f" ({_human(size)})" if size >= 1024 else "")


def _human(size: float) -> str:
    if size < 1024:
        return f"{size:.0f} bytes"
    for unit in ("KB", "MB", "GB"):
        size /= 1024
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}"
