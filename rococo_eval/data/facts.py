"""What an image-text set says of its galleries, as one value: :class:`GalleryFacts`, made where a source is opened
(:meth:`GalleryFacts.of`) and read by everything after it (the planner, the failure analysis, the report, the
Space). Without annotations the facts are :data:`NO_SOURCE`, whose answers hold without a source: RoCOCO's attacks
by name, custom layouts only, no captions to quote, no images to show.

Example:
    >>> from rococo_eval.data.source import RococoSource
    >>> facts = GalleryFacts.of(RococoSource())
    >>> len(facts.captions_per_image), facts.adversarial_per_image, facts.text_attacks[:2], facts.is_rococo
    (5000, 5, ('same_concept', 'diff_concept'), True)
    >>> facts.has_annotations, facts.has_images, NO_SOURCE.has_annotations, NO_SOURCE.served
    (True, False, False, 'RoCOCO')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from rococo_eval.catalog import ATTACKS, TEXT_ATTACKS
from rococo_eval.layout import ADVERSARIAL_PER_IMAGE

if TYPE_CHECKING:
    from rococo_eval.data.source import Source

ROCOCO = "RoCOCO"  # what a Space that serves RoCOCO (or has no annotations) calls what it serves


@dataclass(frozen=True)
class GalleryFacts:
    """What an image-text set says of the galleries its score files hold, and the set itself when it is at hand.

    Attributes:
        captions_per_image: the set's ground-truth captions of each image (RoCOCO's, or a generated benchmark's), as
            a tuple; None when no annotations are at hand (:data:`NO_SOURCE`): then only custom layouts can be
            planned.
        adversarial_per_image: its adversarial captions per image in a text attack: the source's, or RoCOCO's 5
            without a source or for a source without text attacks (then no gallery has adversarial captions).
        attacks: the attacks a file may name: the source's own (a generated benchmark's image attacks may have other
            seeds than RoCOCO's), or RoCOCO's without a source.
        source: the :class:`~rococo_eval.data.source.Source` the facts were read from, for the readers that quote
            its captions or show its images (:attr:`has_annotations`, :attr:`has_images`); None for facts given by
            hand (a test's caption counts) and for :data:`NO_SOURCE`.

    Example:
        >>> GalleryFacts([5, 6]).captions_per_image, GalleryFacts.of(None) == NO_SOURCE
        ((5, 6), True)
    """

    captions_per_image: Optional[tuple[int, ...]]
    adversarial_per_image: int = ADVERSARIAL_PER_IMAGE
    attacks: tuple[str, ...] = ATTACKS
    source: Optional[Source] = field(default=None, repr=False)  # compared (by identity): equal facts answer alike

    def __post_init__(self):
        if self.captions_per_image is not None:
            object.__setattr__(self, "captions_per_image", tuple(self.captions_per_image))
        object.__setattr__(self, "attacks", tuple(self.attacks))

    @classmethod
    def of(cls, source: Source | None, captions_per_image: Sequence[int] | None = None) -> GalleryFacts:
        """The facts of ``source`` (a :class:`~rococo_eval.data.source.Source`), with its caption counts replaced by
        ``captions_per_image`` when given; without a source, the caption counts alone, or :data:`NO_SOURCE` when
        they are not given either. The one place an optional source becomes facts."""
        if source is None:
            return NO_SOURCE if captions_per_image is None else cls(captions_per_image)
        attacks = tuple(source.text_attacks) + tuple(source.image_attacks)
        per_image = source.adversarial_per_image if source.text_attacks else ADVERSARIAL_PER_IMAGE
        return cls(source.captions_per_image if captions_per_image is None else captions_per_image, per_image,
                   attacks, source)

    @property
    def has_annotations(self) -> bool:
        """Whether the set itself is at hand (:attr:`source`): its captions to quote and its attacks to explore."""
        return self.source is not None

    @property
    def has_images(self) -> bool:
        """Whether the set's images are at hand (its source has an ``images_dir``), to show them or to check an
        embeddings file's fingerprints against them."""
        return self.has_annotations and self.source.images_dir is not None

    @property
    def is_rococo(self) -> bool:
        """Whether the galleries are RoCOCO's (the leaderboard's): a source says; facts without one are taken to be."""
        return not self.has_annotations or self.source.is_rococo

    @property
    def served(self) -> str:
        """The set's name as a page calls it: RoCOCO, or a generated benchmark's name (its model-card dataset's)."""
        return ROCOCO if self.is_rococo else self.source.card_dataset[1]

    @property
    def card_dataset(self) -> tuple[str, str] | None:
        """``(type, name)`` of the dataset under which a model card lists results on the set; None without a source
        (:func:`rococo_eval.reporting.report.model_card_metadata` then names RoCOCO)."""
        return self.source.card_dataset if self.has_annotations else None

    @property
    def text_attacks(self) -> tuple[str, ...]:
        """The text attacks among :attr:`attacks` (a file of one of them needs its order), in their order."""
        return tuple(attack for attack in self.attacks if attack in TEXT_ATTACKS)

    @property
    def num_images(self) -> int:
        """The set's test images (0 without annotations)."""
        return len(self.captions_per_image or ())


NO_SOURCE = GalleryFacts(None)  # no annotations at hand: RoCOCO's attacks by name, custom layouts only
