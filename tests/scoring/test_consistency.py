"""rococo_eval.scoring.consistency: the clean numbers of one model's files agree exactly; other files are named with
their numbers; float16 rounding and re-rankers as the module says."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from helpers.one_model import one_model_scores
from rococo_eval.layout import gallery_layout
from rococo_eval.results import GalleryResult
from rococo_eval.scoring.consistency import disagreements, has_fill_block
from rococo_eval.scoring.plan import (GalleryFacts, PlanPolicy, ScoreRequest, disagreements_of, plan_score_files,
                                      score_planned)


def typed(numbers: dict) -> dict:
    """Each gallery's numbers as the result the consistency check reads."""
    return {key: GalleryResult(metrics) for key, metrics in numbers.items()}

CAPTIONS = [5] * 19 + [6]  # 20 images, 101 captions
GALLERIES = [("clean", "image_to_text", "official"), ("rand_voca", "image_to_text", "official"),
             ("danger", "image_to_text", "dataset"), ("clean", "text_to_image", "official"),
             ("mix_seed1", "text_to_image", "official"), ("patch_seed10", "text_to_image", "official")]


def saved_galleries(folder, seeds=None, dtypes=None, rounding=None):
    """Every gallery of ``GALLERIES`` as one model's .npy file (the model of ``seeds[attack]``, default 0), named for
    its layout; ``rounding`` rounds the scores (ties)."""
    requests = []
    for attack, direction, order in GALLERIES:
        layout = gallery_layout(attack, direction, CAPTIONS, order)
        scores = one_model_scores(layout, CAPTIONS, attack, (seeds or {}).get(attack, 0),
                                  (dtypes or {}).get(attack, np.float32))
        if rounding is not None:
            scores = np.round(scores, rounding)
        path = folder / f"m_{attack}_{direction}.npy"
        np.save(path, scores)
        requests.append(ScoreRequest(path, path.name, attack, direction, order))
    return requests


def scored(requests, ties="pessimistic"):
    from rococo_eval.scoring.plan import ScoringOptions

    plans = plan_score_files(requests, GalleryFacts(CAPTIONS))
    return plans, score_planned(plans, ScoringOptions(ties))


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("rounding", [None, 0])
def test_one_models_files_agree_exactly_whatever_the_ties(tmp_path, ties, rounding):
    plans, results = scored(saved_galleries(tmp_path, rounding=rounding), ties)
    assert disagreements_of(plans, results) == []
    clean = results["clean/image_to_text"].metrics["recall@1"]
    assert results["danger/image_to_text"].metrics["clean_recall@1"] == clean  # the check compares these
    if rounding == 0:  # heavy ties: the two policies give other numbers, each the same in every gallery
        other = scored(saved_galleries(tmp_path, rounding=0), "optimistic" if ties == "pessimistic" else "pessimistic")
        assert other[1]["clean/image_to_text"].metrics["recall@1"] != clean


def test_files_of_another_model_are_named_with_their_numbers(tmp_path, caplog):
    plans, results = scored(saved_galleries(tmp_path, seeds={"rand_voca": 1, "mix_seed1": 2}))
    with caplog.at_level(logging.WARNING, logger="rococo_eval.scoring.plan"):
        found = disagreements_of(plans, results)
    assert [disagreement.direction for disagreement in found] == ["image_to_text", "text_to_image"]
    image_to_text = found[0]
    clean = results["clean/image_to_text"].metrics["recall@1"]
    other = results["rand_voca/image_to_text"].metrics["clean_recall@1"]
    assert clean != other and image_to_text.cutoffs[0] == 1
    message = image_to_text.message
    assert message.startswith("image-to-text: the clean R@1 differs between files: ")
    assert (f"{clean:.2f} ({round(clean * 20 / 100)} of 20 queries) from m_clean_image_to_text.npy (the clean "
            "gallery), m_danger_image_to_text.npy (the clean part of danger)") in message
    assert f"{other:.2f} ({round(other * 20 / 100)} of 20 queries) from m_rand_voca_image_to_text.npy" in message
    assert "m_mix_seed1_text_to_image.npy (the clean part of mix_seed1)" in found[1].message
    assert "saved as" not in message  # one dtype: nothing about rounding
    assert message in caplog.text  # warned


def test_without_a_clean_file_the_attacked_galleries_are_compared(tmp_path):
    requests = [request for request in saved_galleries(tmp_path, seeds={"patch_seed10": 3})
                if request.attack != "clean"]
    plans, results = scored(requests)
    [found] = disagreements_of(plans, results)
    assert found.direction == "text_to_image" and "the clean gallery" not in found.message


def test_float16_rounding_agrees_within_one_dtype_and_is_named_across_dtypes(tmp_path):
    """The evidence for the rule: one model's scores, close together (cosine-like), saved as float16 tie and reorder,
    so the same files saved as float32 give other clean numbers; saved alike, they agree exactly."""
    def close_scores(attack, direction, order):
        layout = gallery_layout(attack, direction, CAPTIONS, order)
        return 0.2 + 0.0002 * one_model_scores(layout, CAPTIONS, attack)

    numbers = {}
    for dtype in (np.float32, np.float16):
        requests = []
        for attack, direction, order in GALLERIES:
            path = tmp_path / dtype.__name__ / f"{attack}_{direction}.npy"
            path.parent.mkdir(exist_ok=True)
            np.save(path, close_scores(attack, direction, order).astype(dtype))
            requests.append(ScoreRequest(path, path.name, attack, direction, order))
        plans, results = scored(requests)
        assert disagreements_of(plans, results) == [], dtype  # one dtype: exact
        numbers[dtype] = {key: result.metrics for key, result in results.items()}
    mixed = {**numbers[np.float32], "rand_voca/image_to_text": numbers[np.float16]["rand_voca/image_to_text"]}
    assert mixed["rand_voca/image_to_text"]["clean_recall@1"] != mixed["clean/image_to_text"]["recall@1"]
    dtypes = {key: "float32" for key in mixed} | {"rand_voca/image_to_text": "float16"}
    [found] = disagreements(typed(mixed), {key: key.replace("/", "_") + ".npy" for key in mixed}, dtypes=dtypes)
    assert found.mixed_dtypes == {"float32": ["clean_image_to_text.npy", "danger_image_to_text.npy"],
                                  "float16": ["rand_voca_image_to_text.npy"]}
    assert ("The files were saved as float32 (clean_image_to_text.npy, danger_image_to_text.npy) and float16 "
            "(rand_voca_image_to_text.npy): rounding to float16 ties and reorders close scores") in found.message


def test_a_rerankers_galleries_are_not_compared(tmp_path):
    """A re-ranker re-scores each query's top candidates; in an attacked gallery adversarial items take some of those
    places, so its clean part differs from the clean gallery's by right: compact files and full matrices with a
    fill block are not compared."""
    candidates, fill = 3, -1000.0
    names = {"compact": [], "full": []}
    for attack in ("clean", "mix_seed1"):
        layout = gallery_layout(attack, "text_to_image", CAPTIONS)
        scores = one_model_scores(layout, CAPTIONS, attack)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :candidates]
        top_scores = np.take_along_axis(scores, top, axis=1) + 1.0  # the re-ranker's own scores of its candidates
        np.savez(tmp_path / f"blip_{attack}_text_to_image.npz", top_columns=top, top_scores=top_scores,
                 fill=np.float32(fill), num_gallery=layout.num_gallery)
        full = np.full_like(scores, fill)
        np.put_along_axis(full, top, top_scores, axis=1)
        np.save(tmp_path / f"full_{attack}_text_to_image.npy", full)
        names["compact"].append(f"blip_{attack}_text_to_image.npz")
        names["full"].append(f"full_{attack}_text_to_image.npy")
    for kind, files in names.items():
        plans = plan_score_files([ScoreRequest(tmp_path / name, name) for name in files], GalleryFacts(CAPTIONS))
        results = score_planned(plans)
        assert all(result.reranked for result in results.values()), kind
        assert disagreements_of(plans, results) == [], kind
    metrics = {key: result.metrics for key, result in results.items()}  # the full matrices, compared all the same
    assert metrics["mix_seed1/text_to_image"]["clean_recall@1"] != metrics["clean/text_to_image"]["recall@1"]
    assert disagreements(typed(metrics)) != []


def test_a_fill_block_is_one_lowest_score_shared_by_a_tenth_of_every_row():
    scores = np.random.default_rng(0).standard_normal((20, 100)).astype(np.float16)
    assert not has_fill_block(scores)
    scores[:, 20:] = -100
    assert has_fill_block(scores)
    scores[19, 20:] = -99  # another fill in one row: not one re-ranker's block
    assert not has_fill_block(scores)
    tied = np.round(np.random.default_rng(1).standard_normal((20, 100)))  # ties, but the lowest is rare
    assert not has_fill_block(tied)


def test_galleries_without_numbers_and_bounded_numbers_are_left_out():
    """(A seed mean is a summary row, never a gallery's result: the check reads results only.)"""
    rows = {"clean/image_to_text": {"recall@1": 50.0},
            "danger/image_to_text": {"clean_recall@1": 51.0, "clean_recall@1_bounds": (51.0, 53.0)},
            "rand_voca/image_to_text": {"clean_recall@1": float("nan")},
            "mix_seed1/text_to_image": {"clean_recall@1": 30.0}}
    assert disagreements(typed(rows)) == []
    assert disagreements(typed({**rows, "danger/image_to_text": {"clean_recall@1": 51.0}})) != []  # bounds: apart


def test_a_custom_layout_is_not_compared(tmp_path):
    """A custom layout named like a gallery (its key ``rand_voca/image_to_text``) has its own references: its clean
    numbers say nothing of the standard galleries'."""
    requests = [request for request in saved_galleries(tmp_path) if request.attack == "clean"]
    np.savez(tmp_path / "rand_voca.npz", scores=np.eye(20, 30, dtype=np.float32), references=np.arange(20),
             adversarial=np.arange(30) >= 25)
    requests.append(ScoreRequest(tmp_path / "rand_voca.npz", "rand_voca.npz", "custom", "image_to_text"))
    plans = plan_score_files(requests, GalleryFacts(CAPTIONS), PlanPolicy(custom=True))
    results = score_planned(plans)
    assert results["rand_voca/image_to_text"].metrics["clean_recall@1"] == 100.0
    assert results["clean/image_to_text"].metrics["recall@1"] < 100.0
    assert disagreements_of(plans, results) == []


def test_the_numbers_of_a_disagreement_are_shown_as_every_table_shows_them(monkeypatch):
    """Issue 39, item 7: every percentage shown has DECIMALS decimals; the message of files that disagree (in the
    report, the Space's message and on stderr) wrote its own two, so a change of the rule missed it."""
    import rococo_eval.results as results

    monkeypatch.setattr(results, "DECIMALS", 3)
    found = disagreements(typed({"clean/image_to_text": {"recall@1": 80.0, "num_queries": 30},
                                 "danger/image_to_text": {"clean_recall@1": 90.0, "recall@1": 60.0,
                                                          "num_queries": 30}}))
    assert "80.000 (24 of 30 queries) from clean/image_to_text" in found[0].message
