"""RoCOCO's altered images: the official ``mix_images.py`` in NumPy and PIL, without torch.

Each of the 5,000 test images gets one altered copy, made from the image and a *partner* test image:

- ``mix``: every pixel is ``lam * image + (1 - lam) * partner`` (lam = 0.9);
- ``patch``: one box of the image is replaced by the same box of the partner (CutMix).

Who is mixed with whom, and where the box lies, comes from PyTorch's and NumPy's random streams in the
official script. ``tools/make_mix_tables.py`` replays them once; the published tables
(``rococo_eval/data/mix_tables.npz``) are read here, so results do not depend on a random generator
agreeing across library versions. For another image set, :func:`make_mix_table` draws a table of the same
structure from a documented NumPy procedure (what :mod:`rococo_eval.data.benchmark` stores with a generated benchmark).

The pixel arithmetic follows the official pipeline step for step: PIL bicubic resize to 384 x 384,
``ToTensor`` (``uint8 / 255`` in float32), the float32 mix, and ``torchvision.utils.save_image``'s
``uint8(clamp(value * 255 + 0.5, 0, 255))``, saved as JPEG with PIL's defaults (quality 75).
"""

import functools
import io
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Optional, Union

import numpy as np
from PIL import Image

from rococo_eval.catalog import IMAGE_ATTACK_METHODS, SEEDS

logger = logging.getLogger(__name__)

IMAGE_SIZE = 384  # the official script resizes every image to 384 x 384
BATCH_SIZE = 64  # the official DataLoader's batch: partners are drawn within a batch
LAM = 0.9  # the official mixing weight of the image itself
_TABLE_FILE = "mix_tables.npz"


@dataclass(frozen=True)
class MixTable:
    """The partners (and patch boxes) of a set's images for one method and seed: the official ones of the 5,000
    RoCOCO test images (:func:`load_mix_table`), or those :func:`make_mix_table` draws for another set.

    Images are test-split positions 0..4999 (0..N-1), in annotation file order. Arrays are read-only int64.

    Attributes:
        method: ``"mix"`` or ``"patch"``.
        seed: 1, 10 or 100.
        order: ``(5000,)`` test indices in the order the official DataLoader yielded them;
            batch ``b`` is ``order[64 * b : 64 * b + 64]`` (78 batches of 64, one of 8).
        partner: ``(5000,)``; ``partner[k]`` is the test index whose pixels go into the altered copy of
            image ``k``. It is ``k`` itself for about one image per batch (the resized original).
        box: ``(5000, 4)`` ``(row0, row1, col0, col1)`` for ``patch``: the region
            ``[row0:row1, col0:col1]`` of the 384 x 384 image taken from the partner (one box per batch,
            at most 120 x 120, smaller where clipped at the border, for lam 0.9); ``None`` for ``mix``.
    """

    method: str
    seed: int
    order: np.ndarray
    partner: np.ndarray
    box: Optional[np.ndarray]


@functools.lru_cache(maxsize=1)
def _tables():
    with resources.files("rococo_eval").joinpath("data", _TABLE_FILE).open("rb") as handle:
        with np.load(handle, allow_pickle=False) as npz:
            tables = {key: npz[key] for key in npz.files}
    logger.debug("loaded %s (torch %s replay)", _TABLE_FILE, tables["torch_version"])
    return tables


def _read_only(array):
    array = array.astype(np.int64)
    array.flags.writeable = False
    return array


def load_mix_table(method: str, seed: int) -> MixTable:
    """Load the published partner (and box) table of ``method`` for ``seed``.

    Args:
        method: ``"mix"`` or ``"patch"``.
        seed: one of the paper's seeds, 1, 10 or 100.

    Raises:
        ValueError: if ``method`` or ``seed`` is not one of those.

    Example:
        >>> table = load_mix_table("patch", 1)
        >>> table.partner.shape, table.box.shape
        ((5000,), (5000, 4))
        >>> batch = table.order[:64]
        >>> bool(np.array_equal(np.sort(table.partner[batch]), np.sort(batch)))
        True
        >>> load_mix_table("mix", 1).box is None
        True
    """
    if method not in IMAGE_ATTACK_METHODS:
        raise ValueError(f"`method` has to be one of {IMAGE_ATTACK_METHODS}, got {method!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed not in SEEDS:
        raise ValueError(f"`seed` has to be one of {SEEDS}, got {seed!r}")
    tables = _tables()
    prefix = f"{method}_seed{int(seed)}_"
    box = tables.get(prefix + "box")
    return MixTable(
        method=method,
        seed=int(seed),
        order=_read_only(tables[prefix + "order"]),
        partner=_read_only(tables[prefix + "partner"]),
        box=None if box is None else _read_only(box),
    )


def make_mix_table(method: str, seed: int, num_images: int) -> MixTable:
    """Draw the partners (and patch boxes) of ``num_images`` images, structured as the official script draws them.

    The procedure, on NumPy's legacy ``RandomState`` (whose streams NumPy keeps fixed across versions):

    1. partners: ``rng = RandomState([seed, 1])``; ``order = rng.permutation(num_images)`` (the shuffled
       loader), cut into batches of :data:`BATCH_SIZE`; per batch ``perm = rng.permutation(len(batch))`` and
       ``partner[batch] = batch[perm]`` (an image can be its own partner, as in the official script);
    2. boxes (``patch``): ``boxes = RandomState(seed)`` (as the official ``np.random.seed(seed)``), per batch
       a row centre then a column centre ``boxes.randint(384)``, and the official ``rand_bbox``: side
       ``cut = int(384 * sqrt(1 - LAM))``, ``[centre - cut // 2, centre + cut // 2)`` clipped to the image. For
       the same seed and number of batches the boxes are the official ones, batch by batch.

    Args:
        method: ``"mix"`` or ``"patch"``.
        seed: a non-negative int.
        num_images: the number of images, at least 1.

    Example:
        >>> table = make_mix_table("patch", 1, 70)
        >>> table.partner.shape, table.box.shape, sorted(table.partner[table.order[:64]]) == sorted(table.order[:64])
        ((70,), (70, 4), True)
        >>> bool((make_mix_table("mix", 1, 70).partner == table.partner).all())  # same seed, same partners
        True
    """
    if method not in IMAGE_ATTACK_METHODS:
        raise ValueError(f"`method` has to be one of {IMAGE_ATTACK_METHODS}, got {method!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"`seed` has to be a non-negative int, got {seed!r}")
    if not isinstance(num_images, (int, np.integer)) or isinstance(num_images, bool) or num_images < 1:
        raise ValueError(f"`num_images` has to be a positive int, got {num_images!r}")
    partners = np.random.RandomState([int(seed), 1])
    boxes = np.random.RandomState(int(seed))
    order = partners.permutation(int(num_images))
    partner = np.empty(num_images, dtype=np.int64)
    box = np.empty((num_images, 4), dtype=np.int64)
    cut = int(IMAGE_SIZE * np.sqrt(1.0 - LAM))
    for start in range(0, num_images, BATCH_SIZE):
        batch = order[start:start + BATCH_SIZE]
        partner[batch] = batch[partners.permutation(len(batch))]
        if method == "patch":
            centre_row, centre_col = boxes.randint(IMAGE_SIZE), boxes.randint(IMAGE_SIZE)
            box[batch] = np.clip([centre_row - cut // 2, centre_row + cut // 2,
                                  centre_col - cut // 2, centre_col + cut // 2], 0, IMAGE_SIZE)
    return MixTable(method=method, seed=int(seed), order=_read_only(order), partner=_read_only(partner),
                    box=_read_only(box) if method == "patch" else None)


def preprocess(image: Image.Image) -> np.ndarray:
    """Resize an image the way the official script reads it: RGB, 384 x 384 bicubic, values in [0, 1].

    Same as torchvision's ``Resize((384, 384), BICUBIC)`` on a PIL image followed by ``ToTensor``, in
    height x width x channel layout.

    Args:
        image: any PIL image; it is converted to RGB first.

    Returns:
        float32 array of shape ``(384, 384, 3)``.

    Example:
        >>> pixels = preprocess(Image.new("L", (640, 480), 255))
        >>> pixels.shape, pixels.dtype, float(pixels.max())
        ((384, 384, 3), dtype('float32'), 1.0)
    """
    return resize(image) / np.float32(255)


def resize(image: Image.Image) -> np.ndarray:
    """The image as the official script resizes it, before ``ToTensor``: RGB, 384 x 384 bicubic, uint8.

    :func:`preprocess` is this divided by 255; an image that takes part in several alterations is resized
    once and the result passed to :func:`alter_pixels` (as the image and as a partner). An RGB image is
    resized as it is, other modes are converted to RGB first.

    Example:
        >>> pixels = resize(Image.new("RGB", (640, 480), (1, 2, 3)))
        >>> pixels.shape, pixels.dtype, pixels[0, 0].tolist()
        ((384, 384, 3), dtype('uint8'), [1, 2, 3])
    """
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.asarray(rgb.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC))


def _pixels(value, name):
    if isinstance(value, Image.Image):
        return preprocess(value)
    if not (isinstance(value, np.ndarray) and value.dtype in (np.float32, np.uint8)):
        raise ValueError(f"`{name}` has to be a PIL image, a float32 or a uint8 array, got {type(value).__name__}")
    if value.shape != (IMAGE_SIZE, IMAGE_SIZE, 3):
        raise ValueError(f"`{name}` has to have shape (384, 384, 3), got {value.shape}")
    return value / np.float32(255) if value.dtype == np.uint8 else value


def alter_pixels(
    original: Union[Image.Image, np.ndarray],
    partner: Union[Image.Image, np.ndarray],
    method: str,
    box=None,
    lam: float = LAM,
) -> np.ndarray:
    """The altered image in float32, before saving: the official mix or patch of two preprocessed images.

    ``mix`` computes ``lam * original + (1 - lam) * partner`` in float32, exactly as torch does with a
    Python float ``lam`` (each factor rounded to float32, then two float32 products and one sum).
    ``patch`` copies ``partner[row0:row1, col0:col1]`` into a copy of ``original``; ``lam`` is not used,
    as the box already encodes it.

    Args:
        original: the image being altered: a PIL image, the float32 output of :func:`preprocess` or the uint8
            output of :func:`resize`.
        partner: the image mixed in, same kinds.
        method: ``"mix"`` or ``"patch"``.
        box: ``(row0, row1, col0, col1)``, required for ``patch`` (a row of :attr:`MixTable.box`),
            not allowed for ``mix``.
        lam: weight of ``original`` for ``mix``, in [0, 1].

    Returns:
        float32 array of shape ``(384, 384, 3)``.

    Raises:
        ValueError: for an unknown ``method``, a missing or misplaced ``box``, ``lam`` outside [0, 1], or
            pixels of the wrong type or shape.

    Example:
        >>> white = np.ones((384, 384, 3), dtype=np.float32)
        >>> black = np.zeros((384, 384, 3), dtype=np.float32)
        >>> float(alter_pixels(white, black, "mix")[0, 0, 0])
        0.8999999761581421
        >>> patched = alter_pixels(white, black, "patch", box=(0, 60, 10, 130))
        >>> float(patched[:60, 10:130].max()), float(patched[60:].min())
        (0.0, 1.0)
    """
    _check_method_and_lam(method, lam)
    x = _pixels(original, "original")
    x_partner = _pixels(partner, "partner")
    rows, columns = _box_slices(method, box)
    if method == "mix":
        return np.float32(lam) * x + np.float32(1 - lam) * x_partner
    return _patched(x, x_partner, rows, columns)


def _patched(x: np.ndarray, x_partner: np.ndarray, rows: slice, columns: slice) -> np.ndarray:
    """A copy of ``x`` with the partner's box in it (pixels of either kind, float32 or uint8)."""
    altered = x.copy()
    altered[rows, columns] = x_partner[rows, columns]
    return altered


def _check_method_and_lam(method: str, lam: float) -> None:
    """:func:`alter_pixels`'s first checks (then the pixels', then the box's)."""
    if method not in IMAGE_ATTACK_METHODS:
        raise ValueError(f"`method` has to be one of {IMAGE_ATTACK_METHODS}, got {method!r}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"`lam` has to be in [0, 1], got {lam!r}")


def _box_slices(method: str, box) -> tuple:
    """The patch box as ``(rows, columns)`` slices (whole slices for ``mix``), after checking it."""
    if method == "mix":
        if box is not None:
            raise ValueError("`box` is only used by method 'patch'; pass None for 'mix'")
        return slice(None), slice(None)
    if box is None or len(box) != 4:
        raise ValueError(f"`box` has to be (row0, row1, col0, col1) for method 'patch', got {box!r}")
    row0, row1, col0, col1 = (int(v) for v in box)
    if not (0 <= row0 <= row1 <= IMAGE_SIZE and 0 <= col0 <= col1 <= IMAGE_SIZE):
        raise ValueError(f"`box` has to lie within 0..{IMAGE_SIZE} with row0 <= row1, col0 <= col1, got {box!r}")
    return slice(row0, row1), slice(col0, col1)


def to_uint8(pixels: np.ndarray) -> np.ndarray:
    """Convert float pixels to uint8 as ``torchvision.utils.save_image`` does.

    ``save_image`` computes ``tensor.mul(255).add_(0.5).clamp_(0, 255).to(torch.uint8)``: float32 steps,
    then truncation.

    Example:
        >>> to_uint8(np.array([0.0, 0.5, 0.998, 1.2, -0.1], dtype=np.float32)).tolist()
        [0, 128, 254, 255, 0]
    """
    scaled = np.asarray(pixels, dtype=np.float32) * np.float32(255) + np.float32(0.5)
    return np.clip(scaled, 0, 255).astype(np.uint8)


def alter_image(
    original: Union[Image.Image, np.ndarray],
    partner: Union[Image.Image, np.ndarray],
    method: str,
    box=None,
    lam: float = LAM,
) -> Image.Image:
    """The altered image as the official script saves it: 384 x 384 RGB, before JPEG encoding.

    Arguments and errors are those of :func:`alter_pixels`; the result is :func:`to_uint8` of it.
    Save it with :func:`encode_jpeg` (or ``image.save(path)`` with a ``.jpg`` name) to get the official file.

    Example:
        >>> red = Image.new("RGB", (500, 375), (200, 0, 0))
        >>> blue = Image.new("RGB", (640, 480), (0, 0, 100))
        >>> alter_image(red, blue, "mix").getpixel((0, 0))
        (180, 0, 10)
        >>> table = load_mix_table("patch", 10)
        >>> row0, row1, col0, col1 = table.box[0]
        >>> patched = alter_image(red, blue, "patch", box=table.box[0])
        >>> patched.getpixel((int(col0), int(row0))), patched.size
        ((0, 0, 100), (384, 384))
    """
    x, x_partner = (resize(value) if isinstance(value, Image.Image) else value for value in (original, partner))
    if not all(isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
               for value in (x, x_partner)):  # float32 pixels, or a wrong input that alter_pixels names
        return Image.fromarray(to_uint8(alter_pixels(x, x_partner, method, box=box, lam=lam)))
    # uint8 pixels: the same arithmetic, without its float32 passes. A patch of v / 255 saves as v again (every v in
    # 0..255), and a mix saves as the table of the float32 mix of each of the 256 x 256 value pairs.
    _check_method_and_lam(method, lam)
    rows, columns = _box_slices(method, box)
    if method == "patch":
        return Image.fromarray(_patched(x, x_partner, rows, columns))
    pairs = x.astype(np.intp)
    pairs <<= 8
    pairs |= x_partner
    weights = float(np.float32(lam)), float(np.float32(1 - lam))  # alter_pixels's two float32 factors, of any lam
    return Image.fromarray(np.take(_saved_mix(*weights), pairs))


@functools.lru_cache(maxsize=8)
def _saved_mix(weight: float, partner_weight: float) -> np.ndarray:
    """``to_uint8`` of the float32 mix of original value ``a`` and partner value ``b``, at ``256 * a + b``."""
    values = np.arange(256, dtype=np.float32) / np.float32(255)
    mixed = np.float32(weight) * values[:, None] + np.float32(partner_weight) * values[None, :]
    table = to_uint8(mixed).reshape(-1)
    table.flags.writeable = False
    return table


def encode_jpeg(image: Image.Image) -> bytes:
    """JPEG bytes with PIL's defaults (quality 75, 4:2:0), as ``save_image`` writes a ``.jpg`` file.

    Example:
        >>> data = encode_jpeg(Image.new("RGB", (384, 384), (10, 20, 30)))
        >>> data[:2] == b"\\xff\\xd8", data == encode_jpeg(Image.new("RGB", (384, 384), (10, 20, 30)))
        (True, True)
    """
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    return buffer.getvalue()
