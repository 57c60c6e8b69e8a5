"""rococo_eval.layout: the gallery layouts of RoCOCO and of other sets in both orders, scored as a brute-force count;
the order required where the two differ; the gallery gathered from its pool; the cut-offs a gallery allows."""

import numpy as np
import pytest

from rococo_eval.catalog import ATTACKS, CLEAN, DIRECTIONS, TEXT_ATTACKS, attack_direction
from rococo_eval.layout import (ORDERS, gallery_layout, gallery_shape, image_to_text_layout, matching_galleries,
                                recall_cutoffs, text_to_image_layout)
from rococo_recall import rococo_recall

TINY = [5, 6, 5]
# Not RoCOCO: 4 images with 1 to 3 captions each (9 in all) and 2 adversarial captions per image (8 in all).
OTHER = [1, 3, 2, 3]
OTHER_ADVERSARIAL = 2


def owners(order):
    """The (image, adversarial) of each gallery position of OTHER's attacked image-to-text gallery, by hand."""
    if order == "official":  # each image's captions, then its 2 adversarial ones
        return [(0, False), (0, True), (0, True), (1, False), (1, False), (1, False), (1, True), (1, True),
                (2, False), (2, False), (2, True), (2, True), (3, False), (3, False), (3, False), (3, True), (3, True)]
    return ([(0, False), (1, False), (1, False), (1, False), (2, False), (2, False), (3, False), (3, False),
             (3, False)] + [(image, True) for image in (0, 0, 1, 1, 2, 2, 3, 3)])


def brute_force_recall(scores, query_image, owner, adversarial, ks):
    """The metric's numbers by sorting each row (scores without ties): a query is right at rank r when the r-th
    item is a clean item of its image; ``query_image`` is each query's image, ``owner`` each item's."""
    counts = {f"{prefix}recall@{k}": 0 for prefix in ("", "clean_") for k in ks}
    false = clean_top1 = attacked = 0
    for image, row in zip(query_image, scores):
        ranking = np.argsort(-row)
        rank = next(r for r, item in enumerate(ranking) if owner[item] == image and not adversarial[item])
        clean = [item for item in ranking if not adversarial[item]]
        clean_rank = next(r for r, item in enumerate(clean) if owner[item] == image)
        for k in ks:
            counts[f"recall@{k}"] += rank < k
            counts[f"clean_recall@{k}"] += clean_rank < k
        false += bool(adversarial[ranking[0]])
        clean_top1 += clean_rank == 0
        attacked += clean_rank == 0 and rank > 0
    n = len(scores)
    out = {name: 100.0 * count / n for name, count in counts.items()}
    out["false_rate"] = 100.0 * false / n
    out["attack_success_rate"] = 100.0 * attacked / clean_top1 if clean_top1 else float("nan")
    return out


@pytest.mark.parametrize("order", ORDERS)
def test_another_set_gets_its_own_image_to_text_layout(order):
    layout = image_to_text_layout(OTHER, order=order, adversarial_per_image=OTHER_ADVERSARIAL)
    expected = owners(order)
    assert (layout.num_queries, layout.num_gallery, layout.num_adversarial) == (4, 17, 8)
    assert layout.adversarial.tolist() == [adversarial for _, adversarial in expected]
    assert layout.references == tuple(tuple(p for p, (image, adv) in enumerate(expected) if image == q and not adv)
                                      for q in range(4))
    if order == "official":
        assert layout.references == ((0,), (3, 4, 5), (8, 9), (12, 13, 14))
        assert layout.gallery_rows.tolist() == [0, 9, 10, 1, 2, 3, 11, 12, 4, 5, 13, 14, 6, 7, 8, 15, 16]
    else:
        assert layout.references == ((0,), (1, 2, 3), (4, 5), (6, 7, 8))
        assert layout.gallery_rows.tolist() == list(range(17))


def test_another_set_gets_its_own_text_to_image_layout_and_shapes():
    layout = text_to_image_layout(OTHER)
    assert layout.references == ((0,), (1,), (1,), (1,), (2,), (2,), (3,), (3,), (3,))
    assert layout.adversarial.tolist() == [False] * 4 + [True] * 4
    shapes = {(attack, direction): gallery_shape(attack, direction, OTHER, adversarial_per_image=OTHER_ADVERSARIAL)
              for attack, direction in ((CLEAN, "image_to_text"), ("danger", "image_to_text"),
                                        (CLEAN, "text_to_image"), ("patch_seed1", "text_to_image"))}
    assert list(shapes.values()) == [(4, 9), (4, 17), (9, 4), (9, 8)]
    for (attack, direction), shape in shapes.items():
        built = gallery_layout(attack, direction, OTHER, "dataset", adversarial_per_image=OTHER_ADVERSARIAL)
        assert (built.num_queries, built.num_gallery) == shape
    matches = matching_galleries((4, 17), OTHER, adversarial_per_image=OTHER_ADVERSARIAL)
    assert matches == [(attack, "image_to_text") for attack in TEXT_ATTACKS]
    assert matching_galleries((4, 17), OTHER) == []  # with RoCOCO's 5 the attacked gallery is (4, 29)
    assert gallery_shape("danger", "image_to_text", OTHER) == (4, 29)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("order", ORDERS)
def test_another_set_scores_as_a_brute_force_count(order, seed):
    rng = np.random.default_rng(seed)
    expected = owners(order)
    owner = np.array([image for image, _ in expected])
    adversarial = np.array([adv for _, adv in expected])
    scores = rng.standard_normal((4, 17))
    scores[owner[None, :] == np.arange(4)[:, None]] += 1.5  # a model with some signal, its own adversarial too
    layout = gallery_layout("rand_voca", "image_to_text", OTHER, order, adversarial_per_image=OTHER_ADVERSARIAL)
    result = rococo_recall(scores, **layout.metric_inputs(), k=(1, 2, 5))
    want = brute_force_recall(scores, range(4), owner, adversarial, (1, 2, 5))
    for key, value in want.items():
        assert result[key] == pytest.approx(value, nan_ok=True), key
    assert (result["num_gallery"], result["num_adversarial"]) == (17, 8)


def test_another_set_text_to_image_scores_as_a_brute_force_count():
    rng = np.random.default_rng(5)
    owner = np.array([0, 1, 2, 3, 0, 1, 2, 3])  # the 4 originals, then their altered copies
    adversarial = np.arange(8) >= 4
    image_of_caption = np.array([0, 1, 1, 1, 2, 2, 3, 3, 3])
    scores = rng.standard_normal((9, 8)) + 1.5 * (owner[None, :] == image_of_caption[:, None])
    layout = gallery_layout("mix_seed10", "text_to_image", OTHER)
    result = rococo_recall(scores, **layout.metric_inputs(), k=(1, 2, 5))
    want = brute_force_recall(scores, image_of_caption, owner, adversarial, (1, 2, 5))
    for key, value in want.items():
        assert result[key] == pytest.approx(value, nan_ok=True), key


def test_the_wrong_order_gives_another_number():
    """Why the order of an attacked image-to-text gallery is never assumed: the same scores, read in the other
    order, are scored against other ground truth."""
    scores = np.random.default_rng(1).standard_normal((4, 17))
    official = gallery_layout("danger", "image_to_text", OTHER, "official", adversarial_per_image=OTHER_ADVERSARIAL)
    scores[np.arange(4), [refs[-1] for refs in official.references]] += 10.0  # right at rank 1, official order
    dataset = gallery_layout("danger", "image_to_text", OTHER, "dataset", adversarial_per_image=OTHER_ADVERSARIAL)
    assert rococo_recall(scores, **official.metric_inputs(), k=1)["recall@1"] == 100.0
    assert rococo_recall(scores, **dataset.metric_inputs(), k=1)["recall@1"] < 100.0


@pytest.mark.parametrize("build", [
    lambda: gallery_layout("rand_voca", "image_to_text", TINY),
    lambda: gallery_layout("danger", "image_to_text", OTHER, adversarial_per_image=OTHER_ADVERSARIAL),
    lambda: image_to_text_layout(TINY),
    lambda: image_to_text_layout(TINY, attacked=True, order=None),
])
def test_the_order_of_an_attacked_image_to_text_gallery_is_required(build):
    """The old default, order="official", silently assumed one order where the two differ."""
    with pytest.raises(ValueError, match=r"`order` is required for an attacked image-to-text gallery, where the two "
                                         r"orders differ: choose official \(each image's captions, then its \d "
                                         r"altered ones\) or dataset \(all ground-truth captions"):
        build()


@pytest.mark.parametrize("attack, direction", [(CLEAN, "image_to_text"), (CLEAN, "text_to_image"),
                                               ("mix_seed1", "text_to_image")])
def test_no_order_is_the_one_order_where_both_coincide(attack, direction):
    layout = gallery_layout(attack, direction, TINY)
    assert layout.order == "official"
    for order in ORDERS:
        other = gallery_layout(attack, direction, TINY, order)
        assert other.references == layout.references
        assert other.adversarial.tolist() == layout.adversarial.tolist()
        assert other.gallery_rows.tolist() == layout.gallery_rows.tolist()


@pytest.mark.parametrize("kwargs, problem", [
    ({"order": "sorted"}, r"`order` must be one of \('official', 'dataset'\), got 'sorted'"),
    ({"order": "official", "adversarial_per_image": 0}, "`adversarial_per_image` must be a positive int, got 0"),
    ({"order": "official", "adversarial_per_image": 2.0}, "`adversarial_per_image` must be a positive int, got 2.0"),
    ({"order": "official", "adversarial_per_image": True}, "`adversarial_per_image` must be a positive int, got True"),
])
def test_image_to_text_layout_refuses(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        image_to_text_layout(TINY, **kwargs)


@pytest.mark.parametrize("captions", [TINY, [1] * 4, [5, 6, 5, 5, 6, 5, 5], [2, 7, 1]])
def test_only_attacked_image_to_text_galleries_depend_on_the_order(captions):
    """The ambiguity the order decision exists for: every other gallery is the same in both orders."""
    for attack in (CLEAN,) + ATTACKS:
        for direction in DIRECTIONS if attack == CLEAN else (attack_direction(attack),):
            official, dataset = (gallery_layout(attack, direction, captions, order) for order in ORDERS)
            same = (official.references == dataset.references
                    and official.adversarial.tolist() == dataset.adversarial.tolist())
            assert (official.num_queries, official.num_gallery) == (dataset.num_queries, dataset.num_gallery)
            assert same == (attack == CLEAN or direction == "text_to_image"), (attack, direction)


def test_cutoffs_follow_the_gallery_size(caplog):
    with caplog.at_level("WARNING", logger="rococo_eval"):  # the command line may have set it higher
        assert recall_cutoffs(10) == (1, 5, 10) and not caplog.records
        assert recall_cutoffs(9, "clean/text_to_image") == (1, 5)
        assert recall_cutoffs(1) == (1,)
    assert "clean/text_to_image has 9 items: Recall@K for K in 1, 5 only" in caplog.text
