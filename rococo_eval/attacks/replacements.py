"""Which words an adversarial caption replaced, found by comparing it with its ground-truth caption.

RoCOCO's text attacks replace one word of a ground-truth caption (every occurrence of it, each possibly by a
different word; danger's replacement can be two words, "commiting crime", or an inserted "dangerous"). The
attack files do not record the words, and three of them lower-case and re-tokenise the caption ("who's" ->
"who 's", a final period dropped, the odd spelling fixed), so captions are compared on lower-cased tokens and
every differing span is reported.

Example:
    >>> find_replacements("A man riding on the back of a motorcycle.", "a man riding on the murderer of a motorcycle")
    [Replacement(original='back', replacement='murderer', position=5)]
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import NamedTuple

_TOKEN = re.compile(r"\w+(?:[-'’]\w+)*(?<!'s)|'\w+")


class Replacement(NamedTuple):
    """A span of the ground-truth caption's tokens (``original``, from token ``position``) and what replaced it.

    ``original`` is ``""`` for an insertion and ``replacement`` is ``""`` for a deletion.
    """

    original: str
    replacement: str
    position: int


def tokens(caption: str) -> list[str]:
    """Lower-cased word tokens of a caption: punctuation dropped, a possessive "'s" split off.

    Example:
        >>> tokens("Three Zebra's eating grass-fed hay, don't they .")
        ['three', 'zebra', "'s", 'eating', 'grass-fed', 'hay', "don't", 'they']
    """
    return _TOKEN.findall(caption.lower())


def find_replacements(original: str, adversarial: str) -> list[Replacement]:
    """Return every span of ``original`` that differs in ``adversarial``, on lower-cased tokens.

    Example:
        >>> find_replacements("A man next to a man.", "a kiddie next to a nerds")
        [Replacement(original='man', replacement='kiddie', position=1), Replacement(original='man', replacement='nerds', position=5)]
        >>> find_replacements("Man on a bike.", "Man on a bike .")
        []
    """
    before, after = tokens(original), tokens(adversarial)
    matcher = SequenceMatcher(a=before, b=after, autojunk=False)
    return [Replacement(" ".join(before[i1:i2]), " ".join(after[j1:j2]), i1)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def apply_replacements(original: str, replacements) -> list[str]:
    """The tokens of ``original`` with ``replacements`` applied: the adversarial caption's tokens.

    Example:
        >>> caption = "A man riding a horse."
        >>> apply_replacements(caption, find_replacements(caption, "a lady riding a horse"))
        ['a', 'lady', 'riding', 'a', 'horse']
    """
    words = tokens(original)
    for change in sorted(replacements, key=lambda r: r.position, reverse=True):
        span = len(change.original.split())
        words[change.position:change.position + span] = change.replacement.split()
    return words


def highlight(caption: str, word: str, mark: str = "**") -> str:
    """Wrap the first whole-word, case-insensitive occurrence of ``word`` in ``caption`` with ``mark``.

    Example:
        >>> highlight("a man riding on the murderer of a motorcycle", "murderer")
        'a man riding on the **murderer** of a motorcycle'
    """
    if not word:
        return caption
    match = re.search(r"(?<![\w'-])" + r"\W+".join(map(re.escape, word.split())) + r"(?![\w'-])", caption, re.IGNORECASE)
    if match is None:
        return caption
    return f"{caption[:match.start()]}{mark}{match.group(0)}{mark}{caption[match.end():]}"
