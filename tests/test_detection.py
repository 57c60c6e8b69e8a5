"""rococo_eval.detection: the gallery a score matrix belongs to, from its shape and file name; a layout given in
part, completed and checked; the order of an attacked image-to-text gallery, decided from the scores or not at all."""

import math

import numpy as np
import pytest

from rococo_eval.catalog import DIRECTIONS, IMAGE_ATTACKS, TEXT_ATTACKS
from rococo_eval.layout import image_to_text_layout, matching_galleries
from rococo_eval.detection import (
    ORDER_CONTRADICTION_LEVEL,
    ORDER_MIN_QUERIES,
    ORDER_MIN_SHARE,
    ORDER_SAMPLE_ROWS,
    LayoutChoice,
    OrderDecision,
    choose_layout,
    decide_order,
    detect_layout,
    sign_test,
)
from rococo_eval.io.scorefiles import read_header, read_scores
from helpers.sparse_files import sparse_npy

TINY = [5, 6, 5]  # 3 images, 16 captions: clean i2t (3, 16), attacked i2t (3, 31), clean t2i (16, 3), attacked (16, 6)


@pytest.mark.parametrize("shape, file_name, expected", [
    ((3, 16), "", ("clean", "image_to_text", "official")),
    ((16, 3), "blip_clean.npy", ("clean", "text_to_image", "official")),
    ((16, 3), "dangerous_model.npy", ("clean", "text_to_image", "official")),  # "dangerous" is not "danger"
    ((3, 31), "clip_rand_voca.npy", ("rand_voca", "image_to_text", "")),  # the order is not in the shape
    ((3, 31), "BLIP-Same-Concept.npz", ("same_concept", "image_to_text", "")),
    ((16, 6), "vse_mix_seed1.npy", ("mix_seed1", "text_to_image", "official")),
    ((16, 6), "vse_mix_seed10.safetensors", ("mix_seed10", "text_to_image", "official")),
    ((16, 6), "mix_seed100_vse.npy", ("mix_seed100", "text_to_image", "official")),
    ((16, 6), "patch-seed10.npy", ("patch_seed10", "text_to_image", "official")),
])
def test_detect_layout(shape, file_name, expected):
    choice = detect_layout(shape, TINY, file_name)
    assert (choice.attack, choice.direction, choice.order) == expected
    assert str(shape) in choice.note


@pytest.mark.parametrize("shape, file_name, problem", [
    ((3, 31), "scores.npy", "fits an attacked image_to_text gallery of same_concept, diff_concept, rand_voca, danger"),
    ((3, 31), "endangered.npy", "fits an attacked image_to_text gallery"),
    ((3, 31), "danger_vs_rand_voca.npy", "the file name 'danger_vs_rand_voca.npy' names danger and rand_voca"),
    ((16, 6), "mix_seed1000.npy", "fits an attacked text_to_image gallery of mix_seed1, mix_seed10, mix_seed100"),
    ((3, 30), "rand_voca.npy", r"shape \(3, 30\) fits no RoCOCO layout \(expected \(3, 16\) for image_to_text clean"),
    ((16, 6), "danger.npy", r"the file name names the attack danger, scored image_to_text, but shape \(16, 6\) is "
                            "that of an attacked text_to_image gallery"),
    ((16, 6), "clean_t2i.npy", r"the file name says clean but shape \(16, 6\) is that of an attacked text_to_image"),
])
def test_detect_layout_refuses(shape, file_name, problem):
    with pytest.raises(ValueError, match=problem):
        detect_layout(shape, TINY, file_name)


@pytest.mark.parametrize("shape, file_name, problem", [
    # a clean gallery's shape under an attack's name: the old code scored it as clean, ignoring the name
    ((16, 3), "clip_mix_seed1.npy", r"the file name names the attack mix_seed1, but shape \(16, 3\) is that of the "
                                    r"clean text_to_image gallery \(a mix_seed1 gallery is \(16, 6\)\)"),
    ((3, 16), "rand_voca.npy", r"names the attack rand_voca, but shape \(3, 16\) is that of the clean image_to_text "
                               r"gallery \(a rand_voca gallery is \(3, 31\)\)"),
    ((16, 3), "whatever_rand_voca.npy", "names the attack rand_voca, but .* clean text_to_image gallery"),
    ((3, 16), "vse_patch-seed100.npz", "names the attack patch_seed100, but .* clean image_to_text gallery"),
    # two names, one of which fits the shape: the old code took the one that fits
    ((3, 31), "rand_voca_vs_mix_seed1.npy", "names rand_voca and mix_seed1: name one gallery in it"),
    ((3, 31), "clean_and_danger.npy", "names clean and danger"),
    ((16, 6), "patch_seed10_not_clean.npy", "names patch_seed10 and clean"),
])
def test_detect_layout_refuses_a_name_that_contradicts_the_shape(shape, file_name, problem):
    with pytest.raises(ValueError, match=problem):
        detect_layout(shape, TINY, file_name)
    with pytest.raises(ValueError, match=problem):
        choose_layout(shape, TINY, file_name)


def test_a_name_that_contradicts_the_shape_gives_way_to_a_chosen_attack():
    assert choose_layout((16, 3), TINY, "clip_mix_seed1.npy", attack="clean").direction == "text_to_image"
    assert choose_layout((3, 31), TINY, "rand_voca_vs_mix_seed1.npy", attack="rand_voca", order="dataset").order == \
        "dataset"


def test_one_caption_per_image_makes_both_clean_galleries_square():
    """The only shapes two standard galleries share across directions: clean, with one caption per image."""
    captions = [1, 1, 1, 1]
    assert [d for _, d in matching_galleries((4, 4), captions)] == list(DIRECTIONS)
    for call in (lambda: detect_layout((4, 4), captions), lambda: choose_layout((4, 4), captions, attack="clean")):
        with pytest.raises(ValueError, match=r"shape \(4, 4\) fits both the clean image_to_text and the clean "
                                             r"text_to_image gallery \(one caption per image\): choose the direction"):
            call()
    assert choose_layout((4, 4), captions, attack="clean", direction="text_to_image").direction == "text_to_image"
    assert detect_layout((4, 8), captions, "mix_seed1.npy").direction == "text_to_image"  # attacked: apart
    assert detect_layout((4, 24), captions, "danger.npy").direction == "image_to_text"


@pytest.mark.parametrize("shape, file_name", [
    ((16, 3), "clip_clean_image_to_text_official_order.npy"),  # the clean image-to-text matrix, transposed
    ((16, 3), "clip-i2t.npy"),
    ((3, 16), "clip_clean_text_to_image.npy"),
    ((16, 6), "clip_mix_seed1_image_to_text.npy"),
])
def test_a_direction_the_file_name_states_and_the_shape_contradicts_is_refused(shape, file_name):
    """A transposed matrix is not scored as the other direction: the file said which it is."""
    for call in (lambda: detect_layout(shape, TINY, file_name), lambda: choose_layout(shape, TINY, file_name),
                 lambda: choose_layout(shape, TINY, file_name, attack="clean" if "clean" in file_name else "")):
        with pytest.raises(ValueError, match=r"(says \w+, but shape|expects a)"):
            call()


def test_a_stated_direction_decides_between_the_square_clean_galleries():
    captions = [1, 1, 1, 1]
    assert detect_layout((4, 4), captions, "clean_text_to_image.npy").direction == "text_to_image"
    assert choose_layout((4, 4), captions, "model-i2t.npy", attack="clean").direction == "image_to_text"


def test_the_command_refuses_a_transposed_file_in_one_line(tmp_path, capsys, annotations_dir):
    """The clean image-to-text matrix of RoCOCO, transposed (25,010 x 5,000) and named as image-to-text: refused
    in one line, not scored as text-to-image."""
    from rococo_eval.cli import main

    path = sparse_npy(tmp_path / "clip_clean_image_to_text.npy", (25010, 5000))
    status = main(["score", str(path), "--annotations-dir", str(annotations_dir), "--out", str(tmp_path / "out"),
                   "--quiet"])
    err = capsys.readouterr().err
    assert status == 1 and "the file name says image_to_text, but shape (25010, 5000) is that of the clean " \
                           "text_to_image gallery" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "report.json").exists()


def test_detect_layout_without_captions():
    with pytest.raises(ValueError, match=r"need the RoCOCO caption counts.*\$ROCOCO_ANNOTATIONS_DIR.*custom layout"):
        detect_layout((5000, 25010), None)


def test_choose_layout():
    assert choose_layout((16, 3), TINY, "x.npy", attack="clean", order="dataset").order == "dataset"  # the same
    assert choose_layout((3, 31), TINY, "rand_voca.npy", order="dataset") == LayoutChoice(
        "rand_voca", "image_to_text", "dataset", "rand_voca image-to-text gallery in the dataset order (shape (3, 31); "
        "attack named in the file name, direction read from the shape, order given)")
    assert choose_layout((16, 3), TINY, attack="clean").direction == "text_to_image"
    assert choose_layout((9, 9), None, attack="custom", direction="image_to_text").order == "custom"
    assert choose_layout((16, 6), TINY, "mix_seed1.npy", direction="text_to_image").attack == "mix_seed1"


@pytest.mark.parametrize("kwargs, problem", [
    ({"attack": "rand-voca"}, "`attack` must be one of clean, same_concept, .*, custom; got 'rand-voca'"),
    ({"attack": "clean", "direction": "up"}, "`direction` must be one of image_to_text, text_to_image; got 'up'"),
    ({"attack": "danger", "order": "random"}, "`order` must be one of official, dataset; got 'random'"),
    ({"attack": "mix_seed1"}, r"mix_seed1/text_to_image expects a \(16, 6\) matrix, got \(3, 31\), which fits "
                              "same_concept/image_to_text, diff_concept/image_to_text"),
    ({"attack": "danger", "direction": "text_to_image"}, "danger/text_to_image expects|scored image_to_text"),
])
def test_choose_layout_refuses(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        choose_layout((3, 31), TINY, "x.npy", **kwargs)


def test_real_shapes_from_headers(tmp_path, captions_per_image):
    """The four RoCOCO shapes, read from the headers of 250-500 MB sparse files (no data is written or read)."""
    cases = {(5000, 25010): ("clean", "image_to_text"), (5000, 50010): ("danger", "image_to_text"),
             (25010, 5000): ("clean", "text_to_image"), (25010, 10000): ("patch_seed100", "text_to_image")}
    for shape, (attack, direction) in cases.items():
        path = sparse_npy(tmp_path / f"blip_{attack}.npy", shape)
        info = read_header(path)
        assert info.shape == shape
        choice = detect_layout(info.shape, captions_per_image, path.name)
        assert (choice.attack, choice.direction) == (attack, direction)
        path.unlink()
    assert all(detect_layout((5000, 50010), captions_per_image, f"m_{a}.npy").attack == a for a in TEXT_ATTACKS)
    assert all(detect_layout((25010, 10000), captions_per_image, f"{a}.npy").attack == a for a in IMAGE_ATTACKS)
    with pytest.raises(ValueError, match=r"fits no RoCOCO layout \(expected \(5000, 25010\) for image_to_text clean, "
                                         r"\(5000, 50010\) for image_to_text attacked, \(25010, 5000\)"):
        detect_layout((5000, 25000), captions_per_image)


# The order of an attacked image-to-text gallery, read from the scores (decide_order).

MANY = [5] * 150 + [6] * 5 + [5] * 145  # 300 images: enough sampled queries to decide


def model_scores(captions, order, seed=0, signal=3.0, dtype=np.float32, adversarial_per_image=5):
    """A model with signal, in ``order``: ground truth +signal, the image's own adversarial captions +0.8 signal."""
    layout = image_to_text_layout(captions, order=order, adversarial_per_image=adversarial_per_image)
    scores = np.random.default_rng(seed).standard_normal((layout.num_queries, layout.num_gallery))
    adversarial = np.flatnonzero(layout.adversarial).reshape(len(captions), adversarial_per_image)
    for query, references in enumerate(layout.references):
        scores[query, list(references)] += signal
        scores[query, adversarial[query]] += 0.8 * signal
    return scores.astype(dtype)


def test_model_scores_put_each_images_adversarial_captions_where_the_order_does():
    official, dataset = (image_to_text_layout(TINY, order=order) for order in ("official", "dataset"))
    assert np.flatnonzero(official.adversarial)[5:10].tolist() == [16, 17, 18, 19, 20]  # image 1's, after its 6
    assert np.flatnonzero(dataset.adversarial)[5:10].tolist() == [21, 22, 23, 24, 25]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("order", ["official", "dataset"])
def test_clear_scores_decide_their_order(order, dtype, tmp_path):
    for seed in range(3):
        scores = model_scores(MANY, order, seed, dtype=dtype)
        decision = decide_order(scores, MANY)
        assert decision.order == order and decision.sampled == 300
        assert getattr(decision, order) >= 0.9 * (decision.official + decision.dataset) >= 0.9 * 299
    np.save(tmp_path / "m_rand_voca.npy", scores)
    mapped = read_scores(tmp_path / "m_rand_voca.npy")
    assert isinstance(mapped, np.memmap) and decide_order(mapped, MANY) == decision
    choice = choose_layout(scores.shape, MANY, "m_rand_voca.npy", scores=mapped)
    assert (choice.attack, choice.order, choice.order_decision) == ("rand_voca", order, decision)
    assert f"the scores decide the {order} order (of 300 sampled queries," in choice.note
    given_attack = choose_layout(scores.shape, MANY, "x.npy", attack="danger", scores=lambda: mapped)
    assert (given_attack.attack, given_attack.order) == ("danger", order)


def test_scores_without_signal_decide_nothing():
    layout = image_to_text_layout(MANY, order="official")  # the shape is the same in both orders
    shape = (layout.num_queries, layout.num_gallery)
    rng = np.random.default_rng(7)
    blind = np.broadcast_to(rng.standard_normal(shape[1]), shape)  # image-blind: each caption one score
    cases = {"constant": np.zeros(shape, np.float16), "blind": blind,
             "nan": np.full(shape, np.nan, np.float32),
             **{f"random{seed}": np.random.default_rng(seed).standard_normal(shape) for seed in range(5)}}
    for name, scores in cases.items():
        decision = decide_order(scores, MANY)
        assert decision.order == "", (name, decision)
        assert decision.official <= 0.7 * 299 and decision.dataset <= 0.7 * 299, (name, decision)
    assert decide_order(cases["constant"], MANY) == OrderDecision("", 0, 0, 300)
    choice = choose_layout(shape, MANY, "m_rand_voca.npy", scores=cases["random0"])
    assert choice.order == "" and choice.order_decision.order == ""
    assert "the scores do not decide the order (of 300 sampled queries," in choice.note
    assert "deciding takes at least 50 such queries, 90% of them one way): choose the order, official" in choice.note


def test_few_queries_never_decide():
    """3 images give 1 informative query, however clear the scores: image 0 has the same ground truth in both
    orders, and image 1's two sets share position 10, its best in the dataset order (a tie)."""
    decision = decide_order(model_scores(TINY, "dataset", signal=50.0), TINY)
    assert decision == OrderDecision("", 0, 1, 3)


def test_decide_order_samples_a_bounded_number_of_rows():
    scores = model_scores(MANY, "official", signal=6.0)
    assert decide_order(scores, MANY, max_rows=60) == OrderDecision("official", 59, 0, 60)
    assert decide_order(scores, MANY, max_rows=40).order == ""  # 39 informative queries: too few


@pytest.mark.parametrize("kwargs, problem", [
    ({"scores": np.zeros((3, 16))}, r"`scores` must be the \(3, 31\) matrix of an attacked image-to-text gallery, "
                                    r"got shape \(3, 16\)"),
    ({"scores": np.zeros(31)}, r"got shape \(31,\)"),
    ({"scores": np.zeros((3, 31)), "max_rows": 0}, "`max_rows` must be a positive int, got 0"),
])
def test_decide_order_refuses(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        decide_order(captions_per_image=TINY, **kwargs)


def test_the_order_is_never_assumed():
    """No order and no scores: the order stays blank. Galleries that are the same in both orders never read
    the scores."""
    assert choose_layout((3, 31), TINY, "x.npy", attack="danger").order == ""
    assert detect_layout((3, 31), TINY, "clip_rand_voca.npy").order == ""
    assert "the order cannot be read from the shape: choose it, official (each image's captions" in \
        choose_layout((3, 31), TINY, "clip_rand_voca.npy").note
    assert choose_layout((3, 31), TINY, "clip_rand_voca.npy", order="official").order == "official"

    def unread():
        raise AssertionError("the scores were read although nothing needed them")

    assert choose_layout((3, 16), TINY, "clip.npy", scores=unread).order == "official"
    assert choose_layout((16, 3), TINY, "clip.npy", attack="clean", scores=unread).order == "official"
    assert choose_layout((16, 6), TINY, "mix_seed1.npy", scores=unread).order == "official"


def test_a_given_order_is_used_and_checked_against_the_scores():
    scores = model_scores(MANY, "dataset")
    shape = scores.shape
    agreed = choose_layout(shape, MANY, "m_rand_voca.npy", order="dataset", scores=scores)
    assert agreed.order == "dataset" and agreed.order_decision.order == "dataset"
    assert agreed.note.startswith("rand_voca image-to-text gallery in the dataset order (shape (300, 3005); attack "
                                  "named in the file name, direction read from the shape, order read from the "
                                  "scores); the scores decide the dataset order (of 300 sampled queries")
    disputed = choose_layout(shape, MANY, "m_rand_voca.npy", order="official", scores=scores)
    assert disputed.order == "official"  # as given
    assert "in the official order (shape (300, 3005); attack named in the file name, direction read from the shape, " \
        "order given); but the scores decide the dataset order (" in disputed.note
    assert disputed.note.endswith("): check the order")


def test_real_shape_refuses_without_reading_the_matrix(tmp_path, captions_per_image):
    """A 500 MB RoCOCO-size file of zeros (a hole): the decision reads a few pages and refuses."""
    path = sparse_npy(tmp_path / "m_danger.npy", (5000, 50010))
    choice = choose_layout((5000, 50010), captions_per_image, path.name, scores=read_scores(path))
    assert (choice.attack, choice.order) == ("danger", "")
    assert choice.order_decision == OrderDecision("", 0, 0, 512)


# Another image-text set: 1 to 3 captions per image, 2 adversarial captions per image.

OTHER = [1, 3, 2, 3]
OTHER_MANY = [1, 2, 3] * 50  # 150 images


def test_another_set_is_detected_with_its_own_shapes():
    """(4, 17) is OTHER's attacked image-to-text gallery with 2 adversarial captions per image."""
    choice = detect_layout((4, 17), OTHER, "m_danger.npy", adversarial_per_image=2)
    assert (choice.attack, choice.direction, choice.order) == ("danger", "image_to_text", "")
    assert "choose it, official (each image's captions, then its 2 altered ones) or dataset" in choice.note
    assert detect_layout((9, 8), OTHER, "m_mix_seed1.npy", adversarial_per_image=2).direction == "text_to_image"
    chosen = choose_layout((4, 17), OTHER, attack="rand_voca", order="dataset", adversarial_per_image=2)
    assert (chosen.direction, chosen.order) == ("image_to_text", "dataset")
    with pytest.raises(ValueError, match=r"shape \(4, 17\) fits no RoCOCO layout \(expected \(4, 9\) for "
                                         r"image_to_text clean, \(4, 29\) for image_to_text attacked"):
        detect_layout((4, 17), OTHER, "m_danger.npy")  # RoCOCO's 5 adversarial captions per image
    with pytest.raises(ValueError, match=r"danger/image_to_text expects a \(4, 13\) matrix, got \(4, 17\)"):
        choose_layout((4, 17), OTHER, attack="danger", order="official", adversarial_per_image=1)


@pytest.mark.parametrize("order", ["official", "dataset"])
def test_another_sets_scores_decide_their_order(order):
    scores = model_scores(OTHER_MANY, order, adversarial_per_image=2)
    assert scores.shape == (150, 300 + 2 * 150)
    decision = decide_order(scores, OTHER_MANY, adversarial_per_image=2)
    assert decision.order == order and decision.sampled == 150
    choice = detect_layout(scores.shape, OTHER_MANY, "m_same_concept.npy", scores, adversarial_per_image=2)
    assert (choice.attack, choice.order, choice.order_decision) == ("same_concept", order, decision)
    with pytest.raises(ValueError, match=r"`scores` must be the \(150, 1050\) matrix of an attacked image-to-text"):
        decide_order(scores, OTHER_MANY)


# Issue 39: a stated order that the scores are significantly against (a one-sided sign test), decided or not.

def test_the_sign_test_is_the_exact_binomial_tail():
    assert sign_test(0, 20) == 1.0 and sign_test(20, 20) == 2.0 ** -20 and sign_test(5, 0) == 1.0
    assert sign_test(3, 4) == 5 / 16  # 4 + 1 of the 16 sequences have 3 or 4 heads
    assert abs(sign_test(45, 50) - 2.1049e-9) < 1e-13  # the module docstring's chance of a decision by coin flips
    assert sign_test(452, 511) < 1e-75  # issue 39's reproduction


def test_a_decided_order_always_contradicts_the_other():
    """Deciding (50 informative queries, 90% one way) is stricter than refusing: any decided order's other order is
    refused by the one rule, at every number of informative queries a sample gives."""
    for informative in range(ORDER_MIN_QUERIES, 2 * ORDER_SAMPLE_ROWS):
        fewest = math.ceil(ORDER_MIN_SHARE * informative)
        assert sign_test(fewest, informative) < ORDER_CONTRADICTION_LEVEL, informative


@pytest.mark.parametrize("official, dataset, contradicted", [
    (61, 18, "dataset"),  # p = 6.3e-7: below the level
    (60, 19, ""),  # p = 2.1e-6: not
    (18, 61, "official"),
    (19, 60, ""),
    (40, 39, ""),
])
def test_a_stated_order_is_refused_when_significantly_contradicted(official, dataset, contradicted):
    from helpers.order_votes import plant_votes
    from helpers.space_app import DECIDING_CAPTIONS

    layout = image_to_text_layout(DECIDING_CAPTIONS, order="official")
    scores = plant_votes(np.zeros((layout.num_queries, layout.num_gallery), np.float32), DECIDING_CAPTIONS,
                         official, dataset)
    decision = decide_order(scores, DECIDING_CAPTIONS)
    assert decision.order == "" and decision.contradicted == contradicted  # 77% at most: nothing is decided
    for stated in ("official", "dataset"):
        choice = choose_layout(scores.shape, DECIDING_CAPTIONS, "m_rand_voca.npy", order=stated, scores=scores)
        assert choice.order == stated and choice.order_decision == decision
        if stated == contradicted:
            assert choice.note.endswith(f"; the scores are against the {stated} order (one-sided sign test: p = "
                                        f"{decision.p_value:.2g}, below the 1e-06 level): check the order")
            assert "; but the scores do not decide the order (of 80 sampled queries" in choice.note
        else:
            assert "; the scores do not decide the order (of 80 sampled queries" in choice.note
            assert "check the order" not in choice.note and ("are against the" in choice.note) == bool(contradicted)
    unstated = choose_layout(scores.shape, DECIDING_CAPTIONS, "m_rand_voca.npy", scores=scores)
    assert unstated.order == "" and ("are against the" in unstated.note) == bool(contradicted)
