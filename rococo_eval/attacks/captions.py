"""RoCOCO's caption attacks for any captions: one word replaced by a word of the same concept, of a different
concept, of the random vocabulary, or by a dangerous word.

How a caption is attacked (all four strategies share the first two steps, as RoCOCO's files mostly do):

1. **Candidates**: the nouns of the caption that WordNet knows (its content verbs when it has no noun), from
   :func:`rococo_eval.attacks.lexicon.candidate_words`; every occurrence of a word is replaced.
2. **Source word**: the candidate with the lowest Embedding-Influence score
   (:mod:`rococo_eval.attacks.influence`): removing it moves the caption's embedding least (scores within 1e-5 of
   the lowest count as tied, and the earliest word wins: float noise between batch sizes changes nothing).
3. **Replacement** (:func:`replacement_pool`; drawn with a generator seeded by ``seed``, the strategy and the
   caption's text, so the result depends on nothing else: not the batch size, not the other captions):

   - ``same_concept``: a common word (wordfreq Zipf >= 3) with the source's tag (``NN``/``NNS``/``VBG`` ...) and
     WordNet category (lexicographer file) that shares a hypernym with the source's sense at most two levels
     above it (relaxed a level at a time until 5 words qualify), and is neither a synonym, a hypernym nor a
     hyponym of it (man -> lady, boy);
   - ``diff_concept``: a common visual word with the source's tag from another WordNet category (man -> wheel);
   - ``rand_voca``: a word of wordfreq's 20,000 most frequent with a noun tag (man -> war);
   - ``danger``: by the source's category, as the official file does (:data:`DANGER_WORDS`): people and groups
     -> "criminal", places and natural objects -> "minefield", verbs -> "committing crime", everything else ->
     "weapon" (the official file spells it "commiting crime").

4. **Never a ground-truth caption**: an adversarial caption whose tokens equal its source's or those of another
   ground-truth caption of the same image is not kept; the next replacement (then the next source word) is
   tried, and the number of such cases is counted (``CaptionAttacks.ground_truth_collisions``) and logged.

The adversarial caption keeps the source's casing and punctuation: the replaced tokens are swapped in place
(capitalised when the source word was), so ``find_replacements(source, adversarial)`` returns exactly
``CaptionAttack.replacements`` (RoCOCO's files lower-case and re-tokenise instead).

Example:
    >>> captions = ["A man riding a horse on the beach.", "A horse and its rider."]
    >>> result = attack_captions(captions, [0, 0])
    >>> attack = result["danger"][0]
    >>> attack.caption
    'A criminal riding a horse on the beach.'
    >>> attack.replacements
    (Replacement(original='man', replacement='criminal', position=1),)
    >>> [word for word, _, _ in attack.candidates]
    ['man', 'horse', 'beach']
"""

from __future__ import annotations

import functools
import logging
import re
import zlib
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np

from rococo_eval.attacks import lexicon
from rococo_eval.attacks.influence import DEFAULT_VARIANT, influence_scores, load_text_encoder
from rococo_eval.processes import ONE
from rococo_eval.attacks.replacements import find_replacements, tokens
from rococo_eval.catalog import TEXT_ATTACKS, select_names

logger = logging.getLogger(__name__)

TEXT_STRATEGIES = TEXT_ATTACKS  # one strategy per RoCOCO text attack, named as the attack
DEFAULT_TEXT_ENCODER = "sentence:all-MiniLM-L6-v2"
#: danger's word per WordNet category of the source word (the majority in the official danger file, where the
#: categories disagree the paper's description); any other noun category gets :data:`DANGER_DEFAULT`.
DANGER_WORDS = {"noun.person": "criminal", "noun.group": "criminal", "noun.body": "criminal",
                "noun.location": "minefield", "noun.object": "minefield"}
DANGER_DEFAULT = "weapon"
DANGER_VERB = "committing crime"
MIN_ZIPF = 3.0
VOCABULARY_SIZE = 50_000
RANDOM_VOCABULARY_SIZE = 20_000
MIN_POOL = 5
SCORE_TOLERANCE = 1e-5
SAME_CONCEPT_TOP = 40
DIFFERENT_CONCEPT_TOP = 400
#: diff_concept's categories: things with a shape one can point at in a photo.
DIFFERENT_CONCEPT_LEXNAMES = frozenset({"noun.animal", "noun.artifact", "noun.food", "noun.object", "noun.plant",
                                        "noun.substance"})
MAX_DRAWS = 200
_WORD = re.compile(r"\w+(?:[-'’]\w+)*(?<!'s)|'\w+")


@dataclass(frozen=True)
class CaptionAttack:
    """An adversarial caption, what it replaced, and the evidence of the choice.

    Attributes:
        caption: the adversarial caption.
        replacements: ``find_replacements(source, caption)`` (:class:`rococo_eval.attacks.replacements.Replacement`).
        candidates: ``((word, position, influence score), ...)`` for every candidate word of the source.
    """

    caption: str
    replacements: tuple
    candidates: tuple


@dataclass(frozen=True)
class Skipped:
    """A caption no attack was made from, and why (``"empty caption"``, ``"no candidate word"``, ...)."""

    reason: str


class CaptionAttacks(dict):
    """``{strategy: [CaptionAttack | Skipped, ...]}``, one entry per input caption, with counts.

    Attributes:
        ground_truth_collisions: per strategy, how many generated captions equalled their source or another
            ground-truth caption of the same image and were replaced by the next choice.
    """

    def __init__(self, results: dict, ground_truth_collisions: dict):
        super().__init__(results)
        self.ground_truth_collisions = ground_truth_collisions


@dataclass(frozen=True)
class _Word:
    word: str
    tag: str
    lemma: str
    concept: lexicon.Concept
    zipf: float


def attack_captions(captions: Sequence[str], image_of: Sequence[int], strategies=TEXT_STRATEGIES, *,
                    encoder: Union[str, object] = DEFAULT_TEXT_ENCODER, variant: str = DEFAULT_VARIANT,
                    seed: int = 0, cache_dir=None, batch_size: int = 256, device: Optional[str] = None,
                    progress: bool = False, processes=ONE) -> CaptionAttacks:
    """Make one adversarial caption per caption and strategy.

    Args:
        captions: the ground-truth captions.
        image_of: for each caption, its image (any hashable id): captions of one image are never produced.
        strategies: some of :data:`TEXT_STRATEGIES`.
        encoder: the Embedding-Influence text encoder, a name for
            :func:`rococo_eval.attacks.influence.load_text_encoder` or a loaded one.
        variant: the Embedding-Influence variant (:data:`rococo_eval.attacks.influence.VARIANTS`).
        seed: the seed of the replacement draws.
        cache_dir: a folder where the embeddings are cached (resumable); None keeps them in memory.
        processes: the :class:`~rococo_eval.processes.Processes` of a launch of several: each encodes its share of
            the texts (``cache_dir`` must be a folder they all see); every process gets the same attacks.
        batch_size: texts per encoder call.
        device: the encoder's torch device (None: CUDA when present).
        progress: show a progress bar while embedding.

    Returns:
        :class:`CaptionAttacks`: ``{strategy: [CaptionAttack or Skipped per caption]}``.

    Raises:
        ValueError: an unknown strategy, or ``image_of`` of another length than ``captions``.

    Example:
        >>> attack_captions(["A dog."], [0], ["dog_swap"])
        Traceback (most recent call last):
        ...
        ValueError: `strategies` must be among ('same_concept', 'diff_concept', 'rand_voca', 'danger'), got 'dog_swap'
        >>> attack_captions(["", "red and blue"], [0, 1], ["danger"])["danger"]
        [Skipped(reason='empty caption'), Skipped(reason='no candidate word')]
    """
    strategies = select_names(strategies, TEXT_STRATEGIES)
    if len(image_of) != len(captions):
        raise ValueError(f"`image_of` must have one entry per caption ({len(captions)}), got {len(image_of)}")
    words = [tokens(caption) for caption in captions]
    candidates = [lexicon.candidate_words(caption) if split else [] for caption, split in zip(captions, words)]
    ground_truth: dict = {}
    for image, split in zip(image_of, words):
        ground_truth.setdefault(image, set()).add(tuple(split))
    todo = [i for i, found in enumerate(candidates) if found]
    scores = [[] for _ in captions]
    if todo:
        if isinstance(encoder, str):
            encoder = load_text_encoder(encoder, device=device, batch_size=batch_size)
        found = influence_scores([words[i] for i in todo], [[c.positions for c in candidates[i]] for i in todo],
                                 encoder, variant, cache_dir=cache_dir, batch_size=batch_size, progress=progress,
                                 processes=processes)
        for i, values in zip(todo, found):
            scores[i] = values
    results = {strategy: [] for strategy in strategies}
    collisions = {strategy: 0 for strategy in strategies}
    for i, caption in enumerate(captions):
        if not words[i]:
            skipped = Skipped("empty caption")
        elif not candidates[i]:
            skipped = Skipped("no candidate word")
        else:
            skipped = None
        evidence = tuple((c.word, c.position, score) for c, score in zip(candidates[i], scores[i]))
        order = _by_influence(scores[i])
        for strategy in strategies:
            if skipped is not None:
                results[strategy].append(skipped)
                continue
            made, collided = _attack_one(caption, [candidates[i][k] for k in order], strategy, seed,
                                         ground_truth[image_of[i]])
            collisions[strategy] += collided
            results[strategy].append(CaptionAttack(made[0], made[1], evidence) if made else
                                     Skipped("every replacement equals a ground-truth caption"))
    for strategy, count in collisions.items():
        if count:
            logger.info("%s: %d generated captions equalled a ground-truth caption of their image and were "
                        "replaced by the next choice", strategy, count)
    return CaptionAttacks(results, collisions)


def _by_influence(scores: Sequence[float]) -> list:
    """Candidate indices, lowest influence first; scores within :data:`SCORE_TOLERANCE` of the lowest count as
    tied and go in caption order, so float noise (a different batch size pads differently) changes nothing."""
    if not scores:
        return []
    lowest = min(scores)
    tied = [k for k, score in enumerate(scores) if score <= lowest + SCORE_TOLERANCE]
    return tied + sorted((k for k in range(len(scores)) if k not in tied), key=lambda k: (scores[k], k))


def replacement_pool(candidate: lexicon.Candidate, strategy: str) -> tuple:
    """The words ``strategy`` may put in place of ``candidate`` (see the module docstring), in a fixed order.

    Example:
        >>> man = lexicon.candidate_words("a man")[0]
        >>> pool = replacement_pool(man, "same_concept")
        >>> "woman" in pool, "man" in pool, "gentleman" in pool, "person" in pool
        (True, False, False, False)
        >>> replacement_pool(man, "danger")
        ('criminal',)
    """
    select_names([strategy], TEXT_STRATEGIES)
    if strategy == "danger":
        if candidate.tag in lexicon.VERB_TAGS:
            return (DANGER_VERB,)
        return (DANGER_WORDS.get(candidate.lexname, DANGER_DEFAULT),)
    if strategy == "rand_voca":
        return _random_vocabulary()
    if strategy == "diff_concept":
        return _different_concept(candidate.tag, candidate.lexname)
    return _same_concept(candidate.tag, candidate.concept)


def _attack_one(caption: str, ordered: list, strategy: str, seed: int, ground_truth: set):
    collided = 0
    key = " ".join(tokens(caption))
    for candidate in ordered:
        pool = replacement_pool(candidate, strategy)
        excluded = {candidate.word, candidate.lemma} | candidate.concept.synonyms
        rng = np.random.default_rng([seed, TEXT_STRATEGIES.index(strategy), zlib.crc32(key.encode()),
                                     zlib.crc32(candidate.word.encode())])
        tried = set()
        for _ in range(min(MAX_DRAWS, len(pool))):
            word = pool[int(rng.integers(len(pool)))] if len(pool) > 1 else pool[0]
            if word in tried or word in excluded:
                tried.add(word)
                if len(pool) == 1:
                    break
                continue
            tried.add(word)
            adversarial = _replace(caption, candidate.positions, word)
            if tuple(tokens(adversarial)) in ground_truth:
                collided += 1
                continue
            return (adversarial, tuple(find_replacements(caption, adversarial))), collided
    return None, collided


def _replace(caption: str, positions: Sequence[int], word: str) -> str:
    """``caption`` with its tokens at ``positions`` (as :func:`tokens` counts them) replaced by ``word``."""
    text = caption if len(caption.lower()) == len(caption) else caption.lower()
    spans = [match.span() for match in _WORD.finditer(text.lower())]
    pieces, last = [], 0
    for position in sorted(positions):
        start, stop = spans[position]
        original = text[start:stop]
        pieces += [text[last:start], word[:1].upper() + word[1:] if original[:1].isupper() else word]
        last = stop
    return "".join(pieces) + text[last:]


@functools.cache
def _vocabulary() -> tuple:
    entries = []
    for word in lexicon.frequent_words(VOCABULARY_SIZE):
        if len(word) < 3 or not word.isalpha():
            continue
        tag = lexicon.lexicon_tag(word)
        if tag not in lexicon.NOUN_TAGS + lexicon.VERB_TAGS:
            continue
        zipf = lexicon.zipf_frequency(word)
        base = lexicon.lemma(word, tag)
        if zipf < MIN_ZIPF or base is None:
            continue
        pos = "n" if tag in lexicon.NOUN_TAGS else "v"
        sense = lexicon.concept(base, pos)
        # only words whose most frequent sense is the one used ("playback" the device is rarely meant)
        if sense is not None and lexicon.wordnet().synsets(base, pos)[0].name() == sense.synset:
            entries.append(_Word(word, tag, base, sense, zipf))
    return tuple(sorted(entries, key=lambda entry: (-entry.zipf, entry.word)))


@functools.cache
def _same_concept(tag: str, source: lexicon.Concept) -> tuple:
    peers = [entry for entry in _vocabulary() if entry.tag == tag and entry.concept.lexname == source.lexname
             and entry.concept.synset != source.synset and source.synset not in entry.concept.path
             and entry.concept.synset not in source.path and entry.lemma not in source.synonyms]
    shared = [_shared_depth(source.path, entry.concept.path) for entry in peers]
    depth = len(source.path) - 3
    while depth > 0:
        pool = [entry.word for entry, d in zip(peers, shared) if d >= depth]
        if len(pool) >= MIN_POOL:
            return tuple(pool[:SAME_CONCEPT_TOP])
        depth -= 1
    return tuple(entry.word for entry in peers[:SAME_CONCEPT_TOP])


@functools.cache
def _different_concept(tag: str, lexname: str) -> tuple:
    allowed = DIFFERENT_CONCEPT_LEXNAMES if tag in lexicon.NOUN_TAGS else {
        name for name in lexicon.LEXNAMES if name.startswith("verb.")}
    pool = [entry.word for entry in _vocabulary() if entry.tag == tag and entry.concept.lexname in allowed
            and entry.concept.lexname != lexname]
    return tuple(pool[:DIFFERENT_CONCEPT_TOP])


@functools.cache
def _random_vocabulary() -> tuple:
    return tuple(sorted({word for word in lexicon.frequent_words(RANDOM_VOCABULARY_SIZE)
                         if len(word) >= 3 and word.isalpha() and lexicon.lexicon_tag(word) in lexicon.NOUN_TAGS}))


def _shared_depth(first: tuple, second: tuple) -> int:
    depth = -1
    for a, b in zip(first, second):
        if a != b:
            break
        depth += 1
    return depth
