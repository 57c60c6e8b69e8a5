"""The language resources: real WordNet 3.0 (Debian's wordnet-base), textblob's bundled tagger, wordfreq's list,
each checked against its pinned sha256."""

import shutil

import pytest

from rococo_eval.attacks import lexicon
from rococo_eval.attacks.replacements import tokens
from rococo_eval.data.source import RococoSource


def test_every_pinned_file_matches_its_sha256():
    checked = lexicon.verify_resources()
    assert {name.split("/", 1)[1]: digest for name, digest in checked.items() if name.startswith("wordnet/")} \
        == lexicon.WORDNET_SHA256
    assert len(checked) == len(lexicon.WORDNET_SHA256) + len(lexicon.PACKAGE_DATA_SHA256)


def test_a_changed_or_missing_wordnet_file_is_refused(tmp_path, monkeypatch):
    copy = tmp_path / "dict"
    shutil.copytree(lexicon.wordnet_dir(), copy, ignore=shutil.ignore_patterns("bin", "pixmaps", "wnres"))
    monkeypatch.setenv("ROCOCO_WORDNET_DIR", str(copy))
    assert lexicon.verify_resources()["wordnet/data.noun"] == lexicon.WORDNET_SHA256["data.noun"]
    with open(copy / "verb.exc", "a") as handle:
        handle.write("runned run\n")
    with pytest.raises(lexicon.ResourceError, match=r"verb\.exc has sha256 [0-9a-f]{64}, expected dbbcf9a6"):
        lexicon.verify_resources()
    (copy / "verb.exc").unlink()
    with pytest.raises(lexicon.ResourceError, match=r"verb\.exc is missing: install the Debian package `wordnet-base`"):
        lexicon.verify_resources()


@pytest.mark.parametrize("word, pos, synset, lexname", [
    ("man", "n", "man.n.01", "noun.person"),
    ("table", "n", "table.n.02", "noun.artifact"),      # the furniture, not the table of data (table.n.01)
    ("field", "n", "field.n.01", "noun.location"),
    ("pizza", "n", "pizza.n.01", "noun.food"),
    ("ride", "v", "ride.v.01", "verb.motion"),
])
def test_concepts_are_the_visual_senses(word, pos, synset, lexname):
    concept = lexicon.concept(word, pos)
    assert (concept.synset, concept.lexname) == (synset, lexname)
    assert concept.path[0] == ("entity.n.01" if pos == "n" else concept.path[0]) and concept.path[-1] == synset
    assert word in concept.synonyms


def test_lemmas_come_from_wordnet_morphy():
    assert [lexicon.lemma(word, tag) for word, tag in
            [("dogs", "NNS"), ("children", "NNS"), ("geese", "NNS"), ("ran", "VBD"), ("sitting", "VBG")]] \
        == ["dog", "child", "goose", "run", "sit"]
    assert lexicon.lemma("qwxzy", "NN") is None and lexicon.lemma("red", "JJ") is None


def test_tags_one_per_token_including_possessives():
    words = tokens("The man's dog is running across the field.")
    assert words == ["the", "man", "'s", "dog", "is", "running", "across", "the", "field"]
    assert lexicon.tag(words) == ["DT", "NN", "POS", "NN", "VBZ", "VBG", "IN", "DT", "NN"]
    assert lexicon.tag([]) == []


def test_candidates_of_official_captions_sit_at_token_positions(annotations_dir):
    captions = RococoSource(annotations_dir).ground_truth_captions()[:200]
    with_candidates = 0
    for caption in captions:
        words = tokens(caption)
        found = lexicon.candidate_words(caption)
        with_candidates += bool(found)
        assert [c.position for c in found] == sorted(c.position for c in found)
        for candidate in found:
            assert candidate.position == candidate.positions[0]
            assert all(words[p] == candidate.word for p in candidate.positions)
            assert candidate.tag in lexicon.NOUN_TAGS + lexicon.VERB_TAGS
            assert candidate.lexname == candidate.concept.lexname
    assert with_candidates == len(captions)      # every COCO caption names something


def test_verbs_only_when_there_is_no_noun():
    assert [c.tag for c in lexicon.candidate_words("A man is running.")] == ["NN"]
    assert [(c.word, c.lemma) for c in lexicon.candidate_words("Running and jumping.")] \
        == [("running", "run"), ("jumping", "jump")]
    assert lexicon.candidate_words("it is what it is") == []        # "be" is an auxiliary, never a candidate
    assert lexicon.candidate_words("red and blue") == []


def test_frequencies():
    assert lexicon.zipf_frequency("man") > lexicon.zipf_frequency("gentleman") > lexicon.zipf_frequency("qwxzy") == 0
    top = lexicon.frequent_words(1000)
    assert len(top) == 1000 and top[:3] == ["the", "to", "and"] and "people" in top


def test_a_sense_with_two_longest_hypernym_paths_gets_the_same_one_under_any_hash_seed():
    """man.n.01 reaches person.n.01 through adult.n.01 and through male.n.02, both nine synsets long. NLTK lists
    the paths in an order that depends on PYTHONHASHSEED, and same_concept's pool is read off the path: the longest
    path with the first synset names is taken, whatever the hash seed (seeds 0 and 1 gave different paths before)."""
    import os
    import subprocess
    import sys

    from helpers import REPO_ROOT

    script = ("from rococo_eval.attacks import lexicon, captions; "
              "man = lexicon.candidate_words('a man')[0]; "
              "print(lexicon.concept('man', 'n').path, captions.replacement_pool(man, 'same_concept')[:8])")
    seen = set()
    for seed in (0, 1):  # the two seeds that gave different paths
        environment = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(REPO_ROOT)}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                              check=True, timeout=300)
        seen.add(done.stdout.strip())
    assert len(seen) == 1, seen
    assert lexicon.concept("man", "n").path[-3:] == ("person.n.01", "adult.n.01", "man.n.01")
