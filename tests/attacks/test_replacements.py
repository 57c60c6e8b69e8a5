"""rococo_eval.attacks.replacements: the words an adversarial caption replaced, found on lower-cased tokens, applied
back to give the adversarial caption's tokens, and highlighted in a caption."""

from hypothesis import given
from hypothesis import strategies as st

from rococo_eval.attacks.replacements import Replacement, apply_replacements, find_replacements, highlight, tokens

WORDS = ["a", "man", "woman", "dog", "riding", "on", "the", "beach", "red", "bus", "dangerous", "crime", "of"]


def test_tokens_are_compared_as_the_attack_files_retokenise_them():
    """Three attack files lower-case and re-tokenise ("who's" -> "who 's", the final period dropped)."""
    assert tokens("Who's riding the Bus?") == tokens("who 's riding the bus") == ["who", "'s", "riding", "the", "bus"]
    assert tokens("A man, a plan.") == ["a", "man", "a", "plan"]
    assert tokens("don't") == ["don't"] and tokens("grass-fed") == ["grass-fed"] and tokens(" . ") == []
    assert find_replacements("Who's riding the bus.", "who 's riding the bus") == []


def test_danger_s_insertions_and_two_word_replacements_are_spans():
    assert find_replacements("a man riding a horse", "a man riding a dangerous horse") == [
        Replacement(original="", replacement="dangerous", position=4)]
    assert find_replacements("a man eating a pizza", "a man commiting crime a pizza") == [
        Replacement(original="eating", replacement="commiting crime", position=2)]
    assert find_replacements("a big red bus", "a bus") == [Replacement(original="big red", replacement="", position=1)]


@given(st.lists(st.sampled_from(WORDS), max_size=12), st.lists(st.sampled_from(WORDS), max_size=12))
def test_applying_the_replacements_found_gives_the_adversarial_tokens(original, adversarial):
    original, adversarial = " ".join(original).capitalize() + ".", " ".join(adversarial)
    changes = find_replacements(original, adversarial)
    assert apply_replacements(original, changes) == tokens(adversarial)
    assert (changes == []) == (tokens(original) == tokens(adversarial))
    assert [change.position for change in changes] == sorted({change.position for change in changes})


def test_replacements_apply_in_any_order():
    caption = "a man next to a man on a bus"
    changes = find_replacements(caption, "a kiddie next to a nerds on a car")
    assert len(changes) == 3
    assert apply_replacements(caption, changes[::-1]) == apply_replacements(caption, changes) == tokens(
        "a kiddie next to a nerds on a car")


def test_highlight_marks_the_first_whole_word_whatever_its_case():
    assert highlight("A Man and a woman", "man") == "A **Man** and a woman"
    assert highlight("a woman and a man", "man") == "a woman and a **man**"  # not inside "woman"
    assert highlight("a man commiting  crime here", "commiting crime", "_") == "a man _commiting  crime_ here"
    assert highlight("the man's hat", "man") == "the man's hat"  # "man's" is another word
    assert highlight("a sea-man and a man", "man") == "a sea-man and a **man**"  # one token, as tokens() splits it
    assert highlight("a dog", "cat") == highlight("a dog", "") == "a dog"
