"""rococo_eval.catalog: the grammar of attack, direction and gallery names, and errors that name the argument."""

import numpy as np
import pytest

from rococo_eval.catalog import (ATTACKS, CLEAN, DIRECTIONS, IMAGE_ATTACK_METHODS, IMAGE_ATTACKS, IMAGE_TO_TEXT, SEEDS,
                                 TEXT_ATTACKS, TEXT_TO_IMAGE, attack_direction, check_direction, galleries,
                                 gallery_direction, gallery_key, image_attack_name, is_image_attack, parse_image_attack)


def test_rococos_attacks_are_its_text_attacks_then_its_image_attacks():
    assert TEXT_ATTACKS == ("same_concept", "diff_concept", "rand_voca", "danger")
    assert IMAGE_ATTACKS == ("mix_seed1", "mix_seed10", "mix_seed100", "patch_seed1", "patch_seed10", "patch_seed100")
    assert IMAGE_ATTACKS == tuple(image_attack_name(method, seed) for method in IMAGE_ATTACK_METHODS for seed in SEEDS)
    assert ATTACKS == TEXT_ATTACKS + IMAGE_ATTACKS and CLEAN not in ATTACKS
    assert [attack_direction(attack) for attack in ATTACKS] == [IMAGE_TO_TEXT] * 4 + [TEXT_TO_IMAGE] * 6


@pytest.mark.parametrize("method", IMAGE_ATTACK_METHODS)
@pytest.mark.parametrize("seed", [0, 1, 7, 10, 100, 2**40, np.int64(3)])
def test_an_image_attack_name_parses_back_to_its_method_and_seed(method, seed):
    name = image_attack_name(method, seed)
    assert name == f"{method}_seed{int(seed)}" and parse_image_attack(name) == (method, int(seed))
    assert is_image_attack(name) and attack_direction(name) == TEXT_TO_IMAGE == gallery_direction(name)


@pytest.mark.parametrize("method, seed", [("mixup", 1), ("Mix", 1), ("mix", -1), ("mix", True), ("patch", 1.0),
                                          ("patch", "1"), ("patch", None)])
def test_image_attack_name_refuses_another_method_or_seed(method, seed):
    with pytest.raises(ValueError) as caught:
        image_attack_name(method, seed)
    assert str(caught.value) == (f"`method` must be one of ('mix', 'patch') and `seed` a non-negative int, "
                                 f"got {method!r} and {seed!r}")


@pytest.mark.parametrize("name", ["mix_seed07", "mix_seed", "mix_seed-1", "Mix_seed1", "mix_seed1 ", "patch_seed1x",
                                  "mixseed1", "mix_seed1_clip", "clean", "rand_voca", "", None, 10])
def test_what_is_not_an_image_attack(name):
    assert parse_image_attack(name) is None and not is_image_attack(name)


@pytest.mark.parametrize("attack", [CLEAN, "randvoca", "mix_seed07", "Danger", ""])
def test_attack_direction_refuses_what_is_no_attack(attack):
    with pytest.raises(ValueError) as caught:
        attack_direction(attack)
    assert str(caught.value) == f"`attack` must be one of {ATTACKS}, got {attack!r}"


def test_a_gallerys_direction_is_the_attacks_own_or_a_clean_one_chosen():
    assert gallery_direction("danger") == check_direction("danger", IMAGE_TO_TEXT) == IMAGE_TO_TEXT
    assert [gallery_direction(CLEAN, direction) for direction in DIRECTIONS] == list(DIRECTIONS)
    assert gallery_direction("patch_seed7", TEXT_TO_IMAGE) == TEXT_TO_IMAGE  # a generated benchmark's seed
    with pytest.raises(ValueError, match=r"^`direction` is required for the clean gallery"):
        gallery_direction(CLEAN)
    with pytest.raises(ValueError, match=r"^`direction` must be one of \('image_to_text', 'text_to_image'\), "
                                         r"got 'i2t'$"):
        gallery_direction(CLEAN, "i2t")
    with pytest.raises(ValueError, match=r"^attack 'rand_voca' is scored image_to_text, not text_to_image$"):
        check_direction("rand_voca", TEXT_TO_IMAGE)


def test_a_run_scores_both_clean_galleries_then_each_attack_in_its_direction():
    assert galleries([]) == [(CLEAN, IMAGE_TO_TEXT), (CLEAN, TEXT_TO_IMAGE)]
    every = galleries(ATTACKS)
    assert every[2:] == [(attack, attack_direction(attack)) for attack in ATTACKS]
    assert len({gallery_key(*gallery) for gallery in every}) == len(every) == 12
    with pytest.raises(ValueError, match="got 'mixup'"):
        galleries(["rand_voca", "mixup"])


def test_gallery_key():
    assert gallery_key("mix_seed10", "text_to_image") == "mix_seed10/text_to_image"
    with pytest.raises(ValueError, match="`attack` and `direction` must be non-empty and free of '/'"):
        gallery_key("a/b", "image_to_text")
    with pytest.raises(ValueError, match="free of '/'"):
        gallery_key("clean", "")
