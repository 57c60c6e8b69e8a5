"""The caption-attack engine on real official captions, real WordNet and real MiniLM weights."""

import numpy as np
import pytest

from rococo_eval.attacks import lexicon
from rococo_eval.attacks.captions import (DANGER_DEFAULT, DANGER_VERB, DANGER_WORDS, TEXT_STRATEGIES, CaptionAttack,
                                         Skipped, attack_captions, replacement_pool)
from rococo_eval.attacks.replacements import find_replacements, tokens
from rococo_eval.attacks.influence import load_text_encoder
from rococo_eval.data.source import RococoSource


@pytest.fixture(scope="module")
def encoder():
    return load_text_encoder("sentence:all-MiniLM-L6-v2", device="cpu")


@pytest.fixture(scope="module")
def official(annotations_dir):
    """The ground-truth captions of the first 4 official test images, with their image numbers."""
    source = RococoSource(annotations_dir)
    counts = source.captions_per_image[:4]
    captions = source.ground_truth_captions()[:sum(counts)]
    return captions, [image for image, count in enumerate(counts) for _ in range(count)]


@pytest.fixture(scope="module")
def attacked(official, encoder):
    return attack_captions(*official, encoder=encoder, seed=3)


@pytest.mark.slow
def test_attacks_of_official_captions_keep_every_rule(official, attacked):
    captions, image_of = official
    assert list(attacked) == list(TEXT_STRATEGIES)
    danger_words = set(DANGER_WORDS.values()) | {DANGER_DEFAULT, DANGER_VERB}
    for strategy, results in attacked.items():
        assert len(results) == len(captions)
        for caption, image, result in zip(captions, image_of, results):
            assert isinstance(result, CaptionAttack), (strategy, caption, result)
            assert list(result.replacements) == find_replacements(caption, result.caption)
            siblings = {tuple(tokens(c)) for c, i in zip(captions, image_of) if i == image}
            assert tuple(tokens(result.caption)) not in siblings
            words = tokens(caption)
            candidates = lexicon.candidate_words(caption)
            lowest = min(score for _, _, score in result.candidates)
            source = next(c for c, (_, _, score) in zip(candidates, result.candidates) if score <= lowest + 1e-5)
            assert [(w, p) for w, p, _ in result.candidates] == [(c.word, c.position) for c in candidates]
            assert {change.position for change in result.replacements} == set(source.positions)
            assert all(change.original == words[change.position] for change in result.replacements)
            new_words = {change.replacement for change in result.replacements}
            assert len(new_words) == 1
            if strategy == "danger":
                assert new_words <= danger_words
            else:
                assert new_words <= set(replacement_pool(source, strategy))


@pytest.mark.slow
def test_one_source_word_serves_all_four_strategies(attacked):
    positions = [[result.replacements[0].position for result in attacked[strategy]] for strategy in TEXT_STRATEGIES]
    assert all(row == positions[0] for row in positions)


@pytest.mark.slow
def test_same_and_different_concepts_follow_wordnet(attacked):
    for same, different, in zip(attacked["same_concept"], attacked["diff_concept"]):
        source = same.replacements[0]
        tag = lexicon.tag(tokens(same.caption))[source.position]
        original = lexicon.concept(lexicon.lemma(source.original, tag) or source.original, "n")
        replaced = lexicon.concept(lexicon.lemma(source.replacement, tag), "n")
        other = lexicon.concept(lexicon.lemma(different.replacements[0].replacement, tag), "n")
        assert replaced.lexname == original.lexname and replaced.synset != original.synset
        assert source.replacement not in original.synonyms
        assert other.lexname != original.lexname


@pytest.mark.slow
def test_deterministic_for_a_seed_and_independent_of_batch_size_and_neighbours(official, attacked, encoder):
    captions, image_of = official
    first_image = image_of.count(0)
    again = attack_captions(captions[:first_image], image_of[:first_image], encoder=encoder, seed=3, batch_size=1)
    for strategy in TEXT_STRATEGIES:     # the same choices; the scores agree to float noise (padding differs)
        assert [(r.caption, r.replacements) for r in again[strategy]] \
            == [(r.caption, r.replacements) for r in attacked[strategy][:first_image]]
        for mine, theirs in zip(again[strategy], attacked[strategy]):
            assert [c[:2] for c in mine.candidates] == [c[:2] for c in theirs.candidates]
            np.testing.assert_allclose([c[2] for c in mine.candidates], [c[2] for c in theirs.candidates], atol=1e-5)
    other_seed = attack_captions(captions, image_of, ["rand_voca"], encoder=encoder, seed=4)
    assert [r.caption for r in other_seed["rand_voca"]] != [r.caption for r in attacked["rand_voca"]]
    assert [r.replacements[0].position for r in other_seed["rand_voca"]] \
        == [r.replacements[0].position for r in attacked["rand_voca"]]     # the seed draws words, not sources


@pytest.mark.parametrize("strategy", ["same_concept", "danger"])
def test_a_caption_equal_to_another_ground_truth_caption_is_never_made(encoder, strategy):
    caption = "A man riding a horse on the beach."
    first = attack_captions([caption], [0], [strategy], encoder=encoder)
    assert first.ground_truth_collisions == {strategy: 0}
    would_be = first[strategy][0].caption
    result = attack_captions([caption, would_be.lower().rstrip(".")], [0, 0], [strategy], encoder=encoder)
    made = result[strategy][0]
    assert result.ground_truth_collisions == {strategy: 1}
    assert tokens(made.caption) != tokens(would_be) and tokens(made.caption) != tokens(caption)
    assert list(made.replacements) == find_replacements(caption, made.caption)
    if strategy == "danger":    # one danger word per category: the next source word is taken
        assert made.replacements[0].position != first[strategy][0].replacements[0].position


def test_casing_and_punctuation_are_kept(encoder):
    result = attack_captions(["Dogs! Two DOGS chase the Cat, don't they?"], [0], ["danger"], encoder=encoder)
    made = result["danger"][0]
    assert made.caption.endswith(", don't they?") and made.caption[0].isupper()
    assert list(made.replacements) == find_replacements("Dogs! Two DOGS chase the Cat, don't they?", made.caption)


def test_skips_say_why(encoder):
    result = attack_captions(["", "  ...  ", "red and blue", "A red bus."], [0, 1, 2, 3], encoder=encoder)
    for strategy in TEXT_STRATEGIES:
        assert result[strategy][:3] == [Skipped("empty caption"), Skipped("empty caption"),
                                        Skipped("no candidate word")]
        assert isinstance(result[strategy][3], CaptionAttack)


def test_pools_are_common_words_of_the_right_kind():
    man, dogs = lexicon.candidate_words("a man with two dogs")
    same = replacement_pool(man, "same_concept")
    assert {"woman", "boy", "girl"} <= set(same) and not {"man", "person", "gentleman", "adult"} & set(same)
    assert all(lexicon.zipf_frequency(word) >= 3 for word in same)
    assert all(word.endswith("s") for word in replacement_pool(dogs, "same_concept"))     # NNS stays plural
    different = replacement_pool(man, "diff_concept")
    assert not {lexicon.concept(lexicon.lemma(w, "NN"), "n").lexname for w in different} & {"noun.person"}
    assert len(replacement_pool(man, "rand_voca")) > 5000
    assert replacement_pool(dogs, "danger") == ("weapon",)


@pytest.mark.parametrize("kwargs, message", [
    (dict(strategies=["same_concept", "mix"]), r"`strategies` must be among .*got 'mix'"),
    (dict(strategies=[]), r"`strategies` must name at least one"),
    (dict(image_of=[0, 1]), r"`image_of` must have one entry per caption \(1\), got 2"),
    (dict(variant="removal-dot"), r"`variant` must be one of"),
])
def test_bad_arguments_are_refused(encoder, kwargs, message):
    arguments = dict(captions=["A man."], image_of=[0], encoder=encoder) | kwargs
    with pytest.raises(ValueError, match=message):
        attack_captions(**arguments)
