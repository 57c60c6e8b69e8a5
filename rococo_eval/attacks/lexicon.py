"""The language resources behind RoCOCO-style caption attacks: concepts, parts of speech, lemmas, frequencies.

Everything comes from registry packages, installed by the project's set-up and checked against sha256 sums
pinned here; nothing is fetched at run time:

- **WordNet 3.0** (concepts: lexicographer file names such as ``noun.person``, hypernym paths; lemmas through
  WordNet's own ``morphy`` and exception lists): Debian's ``wordnet-base`` files in ``/usr/share/wordnet``
  (``$ROCOCO_WORDNET_DIR`` names another copy of the same files), read by NLTK's WordNet reader. Debian ships
  no ``lexnames`` file, which the reader wants: its 45 names are fixed by WordNet 3.0 and held here.
- **Part-of-speech tags**: the Brill tagger of the ``pattern`` library as bundled in ``textblob`` (lexicon,
  morphology and context rules ship inside the wheel; no NLTK data download). A caption is tagged on the
  tokens of :func:`rococo_eval.attacks.replacements.tokens`, so positions agree with ``find_replacements``.
- **Word frequencies**: ``wordfreq``'s English list (bundled in its wheel).

Example:
    >>> [(c.word, c.position, c.tag, c.lemma, c.lexname) for c in candidate_words("Two dogs play with a red ball.")]
    [('dogs', 1, 'NNS', 'dog', 'noun.animal'), ('ball', 6, 'NN', 'ball', 'noun.artifact')]
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

WORDNET_DIR = Path("/usr/share/wordnet")
#: sha256 of the WordNet 3.0 files read, as Debian 12's ``wordnet-base`` 1:3.0-37 installs them.
WORDNET_SHA256 = {
    "adj.exc": "8824cc24bbedd797b9702316b27f07cd4c2b76b629539f0a1276f03926758016",
    "adv.exc": "e7291461b629abfe63301bbe1998cee09fd575ed7107abd7ea9763adb05bf0a8",
    "cntlist.rev": "a198580b8f705fa02797bba8b13e5cbe4a9f9f40cb1697e774c7fc6a5865b035",
    "data.adj": "c89120dfc1f046ddff4a631bf9b7e9fa1a36b5e86565a23bf82dbe14f30b88a7",
    "data.adv": "444a63bf3955080ab7524f5079cfc07ff9bc682cb98bdb1db73b0fb9829f1139",
    "data.noun": "fea17d2f9656611334eac790e5d69e47645fa180c4aa481fb4cd9b3520754ca2",
    "data.verb": "adcf43e35b581e8036d8b5a52d63d9cd3d3b4870b2720d3c03c799df44777bc2",
    "index.adj": "c9865d7b4d1f805bdef82ccdcea5282436e23083e6f6f1b33e716327c4eda810",
    "index.adv": "6f5465ed5758fe9c8a2f7ec17b1300f3aa875756c70ff7cba162f7e71bcf88ea",
    "index.noun": "a490d99d93d017bf4822fe2f0ffa51fd73911ce271dc7535fade21f8814b5a04",
    "index.verb": "e2ac24816c3a8289dcb72aaa9cf8db81fdf25ec34d792bfc96ac5b7a20c8b4ae",
    "noun.exc": "2b5d675c380b39ecf595af9fa9d4e7feb1d58c643b0bff08c40ed5bfe41fab7a",
    "verb.exc": "dbbcf9a601b2d77e934e413b91d90e88ec7f933a8b77cfc00602a923b891b42c",
}
#: sha256 of the tagger's and the frequency list's data files, as textblob 0.20.1 and wordfreq 3.1.1 ship them.
PACKAGE_DATA_SHA256 = {
    ("textblob", "en/en-lexicon.txt"): "9545c71faf16e4461d0bff1d9948fe92b2cf94766af118a6c69c37b43363d5d2",
    ("textblob", "en/en-morphology.txt"): "4032100aab324739d0f26fd32d13e2e0f58018066e9b76a0e4cd065bbfc0b248",
    ("textblob", "en/en-context.txt"): "d78dc6807bdaacc8e69e3a3635ce2cee548a243eacce8aacbf1fe65093980131",
    ("textblob", "en/en-entities.txt"): "568873e0ab9a807ad69640e5f0504e733983c424a3665425e07c24c8fa5bb51e",
    ("wordfreq", "data/large_en.msgpack.gz"): "dffae8066b78dce0a6667cf5f58e567054f902674667090a7ac8a8a44628b05c",
}
#: WordNet 3.0's lexicographer files (its ``lexnames`` file, which Debian's package leaves out).
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact", "noun.attribute",
    "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling", "noun.food", "noun.group",
    "noun.location", "noun.motive", "noun.object", "noun.person", "noun.phenomenon", "noun.plant",
    "noun.possession", "noun.process", "noun.quantity", "noun.relation", "noun.shape", "noun.state",
    "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition", "verb.communication",
    "verb.competition", "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather", "adj.ppl",
)
#: The noun categories that name things one can see in a photo: a source word's sense is taken among them
#: first, and same/different-concept replacements are drawn from them.
VISUAL_LEXNAMES = frozenset({"noun.animal", "noun.artifact", "noun.body", "noun.food", "noun.location",
                             "noun.object", "noun.person", "noun.phenomenon", "noun.plant", "noun.substance"})
NOUN_TAGS = ("NN", "NNS")
VERB_TAGS = ("VB", "VBD", "VBG", "VBN", "VBP", "VBZ")
#: Verbs that carry no visual content (auxiliaries, copulas): never candidates.
AUXILIARY_VERBS = frozenset({"be", "have", "do", "get", "go", "seem", "appear", "look", "sit", "stand", "lie"})


class ResourceError(RuntimeError):
    """A language resource is missing or differs from the pinned files."""


@dataclass(frozen=True)
class Concept:
    """A word sense: its WordNet synset name, lexicographer file, hypernym path (root first: the longest, the first
    by synset names among equally long ones) and synonyms."""

    synset: str
    lexname: str
    path: tuple
    synonyms: frozenset


@dataclass(frozen=True)
class Candidate:
    """A word of a caption that an attack may replace.

    Attributes:
        word: the token as :func:`rococo_eval.attacks.replacements.tokens` gives it (lower-cased).
        position: its first token index; ``positions`` holds every occurrence (all are replaced).
        tag: its Penn Treebank tag (``NN``, ``NNS``, ``VBG`` ...).
        lemma: WordNet's lemma of it.
        lexname: WordNet category of its sense (``noun.person`` ...).
        concept: the sense itself.
    """

    word: str
    position: int
    positions: tuple
    tag: str
    lemma: str
    lexname: str
    concept: Concept


def wordnet_dir() -> Path:
    """The folder holding the WordNet 3.0 database files: ``$ROCOCO_WORDNET_DIR``, else Debian's.

    Example:
        >>> (wordnet_dir() / "data.noun").is_file()
        True
    """
    return Path(os.environ.get("ROCOCO_WORDNET_DIR") or WORDNET_DIR)


def verify_resources() -> dict:
    """Check every pinned data file against its sha256 and return ``{file: sha256}``.

    Raises:
        ResourceError: a file is missing (with how to install it) or its sha256 differs.

    Example:
        >>> sorted(verify_resources())[:2]
        ['textblob/en/en-context.txt', 'textblob/en/en-entities.txt']
    """
    checked = {}
    root = wordnet_dir()
    for name, expected in WORDNET_SHA256.items():
        checked[f"wordnet/{name}"] = _check_file(root / name, expected, "install the Debian package "
                                                 "`wordnet-base` (apt-get install wordnet-base) or point "
                                                 "$ROCOCO_WORDNET_DIR at WordNet 3.0's dict folder")
    for (package, relative), expected in PACKAGE_DATA_SHA256.items():
        path = Path(_import(package).__file__).parent / relative
        checked[f"{package}/{relative}"] = _check_file(path, expected, "pip install 'rococo-eval[attacks]'")
    return checked


@functools.cache
def wordnet():
    """NLTK's WordNet reader on the verified WordNet 3.0 files (loaded once per process).

    Example:
        >>> wordnet().synsets("dog", "n")[0].lexname()
        'noun.animal'
    """
    _verified()
    nltk_data = _import("nltk.data")  # NLTK is installed: the reader's module may import it
    from rococo_eval.attacks.wordnet_reader import DebianWordNet

    if str(wordnet_dir()) not in nltk_data.path:
        nltk_data.path.append(str(wordnet_dir()))  # NLTK reads only folders on its data path
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The multilingual functions are not available")
        reader = DebianWordNet(str(wordnet_dir()), LEXNAMES)
    logger.info("WordNet %s read from %s", reader.get_version(), wordnet_dir())
    return reader


def tag(tokens: list[str]) -> list[str]:
    """Penn Treebank tags of pre-split tokens (one per token), by the bundled Brill tagger.

    Example:
        >>> tag(["a", "man", "riding", "a", "horse"])
        ['DT', 'NN', 'VBG', 'DT', 'NN']
    """
    if not tokens:
        return []
    _verified()
    textblob_en = _import("textblob.en")
    tagged = textblob_en.tag(" ".join(tokens), tokenize=False)
    if len(tagged) != len(tokens):
        raise ResourceError(f"the tagger split {tokens!r} into {len(tagged)} tokens")
    return [pos for _, pos in tagged]


def lexicon_tag(word: str):
    """The tagger's most likely tag of ``word`` on its own (its lexicon entry), or ``None`` if unknown.

    Example:
        >>> lexicon_tag("chairs"), lexicon_tag("qwxz")
        ('NNS', None)
    """
    _verified()
    return _import("textblob.en").lexicon.get(word)


def lemma(word: str, tag_: str):
    """WordNet's lemma of ``word`` read as a noun (``NN*`` tags) or a verb (``VB*``), or ``None`` if WordNet
    has no such noun or verb.

    Example:
        >>> lemma("people", "NNS"), lemma("riding", "VBG"), lemma("the", "DT")
        ('people', 'ride', None)
    """
    pos = "n" if tag_ in NOUN_TAGS else "v" if tag_ in VERB_TAGS else None
    if pos is None or not word.replace("-", "").isalpha():
        return None
    return wordnet().morphy(word, pos)


@functools.lru_cache(maxsize=200_000)
def concept(lemma_: str, pos: str):
    """The sense of a noun (``pos="n"``) or verb (``"v"``) lemma: for nouns the most frequent visual sense
    (:data:`VISUAL_LEXNAMES`), else the most frequent sense; ``None`` if WordNet has none.

    Example:
        >>> c = concept("table", "n")
        >>> c.synset, c.lexname, c.path[-3:]
        ('table.n.02', 'noun.artifact', ('furnishing.n.02', 'furniture.n.01', 'table.n.02'))
    """
    synsets = wordnet().synsets(lemma_, pos)
    if not synsets:
        return None
    if pos == "n":
        synsets = [s for s in synsets if s.lexname() in VISUAL_LEXNAMES] or synsets
    sense = synsets[0]
    # the longest hypernym path; among equally long ones (man.n.01: through adult.n.01 and male.n.02) the one with
    # the first synset names, since NLTK lists them in an order that depends on PYTHONHASHSEED
    path = min(sense.hypernym_paths(), key=lambda path: (-len(path), [s.name() for s in path]))
    return Concept(sense.name(), sense.lexname(), tuple(s.name() for s in path),
                   frozenset(name.lower() for name in sense.lemma_names()))


def candidate_words(caption: str) -> list[Candidate]:
    """The nouns of ``caption`` known to WordNet, or its content verbs when it has no noun, one entry per
    distinct word (first position; ``positions`` lists all), in caption order.

    Example:
        >>> [c.word for c in candidate_words("A man holding an umbrella.")]
        ['man', 'umbrella']
        >>> [(c.word, c.tag, c.lexname) for c in candidate_words("Running fast.")]
        [('running', 'VBG', 'verb.motion')]
        >>> [c.word for c in candidate_words("A cat on top of the car.")]      # the tagger says top/JJ
        ['cat', 'top', 'car']
    """
    from rococo_eval.attacks.replacements import tokens as split
    words = split(caption)
    tags = _noun_before_of(words, tag(words))
    nouns, verbs = {}, {}
    for position, (word, word_tag) in enumerate(zip(words, tags)):
        target = nouns if word_tag in NOUN_TAGS else verbs if word_tag in VERB_TAGS else None
        if target is None:
            continue
        if word in target:
            target[word] = target[word] + (position,)
            continue
        base = lemma(word, word_tag)
        if base is None or (target is verbs and base in AUXILIARY_VERBS):
            continue
        sense = concept(base, "n" if target is nouns else "v")
        if sense is not None:
            target[word] = (word_tag, base, sense, position)
    chosen = nouns or verbs
    result = []
    for word, value in chosen.items():
        word_tag, base, sense, *positions = value
        result.append(Candidate(word, positions[0], tuple(positions), word_tag, base, sense.lexname, sense))
    return sorted(result, key=lambda c: c.position)


def _noun_before_of(words: list[str], tags: list[str]) -> list[str]:
    """The tagger reads "on top of", "on the back of" as an adjective or adverb; a word between a determiner
    or preposition and "of" that WordNet knows as a noun is the head of a noun phrase: tag it ``NN``."""
    fixed = list(tags)
    for i in range(1, len(words) - 1):
        if tags[i] in ("JJ", "RB") and words[i + 1] == "of" and tags[i - 1] in ("DT", "IN", "PRP$") \
                and wordnet().synsets(words[i], "n"):
            fixed[i] = "NN"
    return fixed


def zipf_frequency(word: str) -> float:
    """The word's frequency on wordfreq's Zipf scale (log10 per billion words; 0 = unseen).

    Example:
        >>> zipf_frequency("the") > 7 > zipf_frequency("man") > 5
        True
    """
    _verified()
    return _import("wordfreq").zipf_frequency(word, "en", wordlist="large")


def frequent_words(count: int) -> list[str]:
    """The ``count`` most frequent English words of wordfreq's list, most frequent first.

    Example:
        >>> frequent_words(3)
        ['the', 'to', 'and']
    """
    _verified()
    return _import("wordfreq").top_n_list("en", count, wordlist="large")


@functools.cache
def _verified() -> None:
    verify_resources()


def _check_file(path: Path, expected: str, how: str) -> str:
    if not path.is_file():
        raise ResourceError(f"{path} is missing: {how}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise ResourceError(f"{path} has sha256 {digest}, expected {expected}: {how}")
    return digest


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"{name} is needed for caption attacks: pip install 'rococo-eval[attacks]'") from error
