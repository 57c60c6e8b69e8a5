"""NLTK's WordNet reader on Debian's WordNet 3.0 files (:class:`DebianWordNet`), which ship no ``lexnames`` file.

It imports NLTK, so :func:`rococo_eval.attacks.lexicon.wordnet` imports it only once NLTK is known to be installed
(``pip install 'rococo-eval[attacks]'``) and the files are verified.
"""

from __future__ import annotations

import io
from typing import Sequence

from nltk.corpus.reader.wordnet import WordNetCorpusReader


class DebianWordNet(WordNetCorpusReader):
    """WordNet 3.0 read from the folder ``root`` (no multilingual data), its ``lexnames`` file written from
    ``lexnames``: WordNet 3.0's lexicographer file names in their order
    (:data:`rococo_eval.attacks.lexicon.LEXNAMES`), which Debian's ``wordnet-base`` leaves out.

    Example:
        >>> from rococo_eval.attacks.lexicon import wordnet
        >>> isinstance(wordnet(), DebianWordNet), wordnet().synsets("dog", "n")[0].lexname()
        (True, 'noun.animal')
    """

    def __init__(self, root: str, lexnames: Sequence[str]):
        category = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
        self._lexnames_text = "".join(f"{number:02d}\t{name}\t{category[name.split('.')[0]]}\n"
                                      for number, name in enumerate(lexnames))
        super().__init__(root, None)  # reads lexnames through open

    def open(self, file):
        if file == "lexnames":
            return io.StringIO(self._lexnames_text)
        return super().open(file)

    def map_wn(self, version="wordnet"):
        return None  # the mapping to other WordNet versions serves only the multilingual data
