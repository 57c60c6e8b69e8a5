"""rococo_eval.scoring.plan: score files planned (layouts, orders, refusals) and scored, for the command and the Space."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from rococo_eval.cli import main
from rococo_eval.layout import gallery_layout
from rococo_eval.scoring.plan import (GalleryFacts, PlanError, PlanPolicy, ScoreRequest, ScoringOptions,
                                      detect_file_layout, plan_score_files, report_meta, score_planned)

CAPTIONS = [5, 6, 5, 5]  # 4 images, 21 captions


def _saved(folder, name, attack, direction, order=None, seed=0):
    layout = gallery_layout(attack, direction, CAPTIONS, order)
    scores = np.random.default_rng(seed).standard_normal((layout.num_queries, layout.num_gallery)).astype(np.float32)
    for query, correct in enumerate(layout.references):
        scores[query, list(correct)] += 3.0
    np.save(folder / name, scores)
    return folder / name, layout


@pytest.mark.parametrize("options, message", [
    (dict(ties="random"), "`ties` must be one of pessimistic, optimistic, got 'random'"),
    (dict(bootstrap=-1), "`bootstrap` must be a non-negative int, got -1"),
    (dict(bootstrap=True), "`bootstrap` must be a non-negative int, got True"),
    (dict(bootstrap=1001, max_bootstrap=1000), "`bootstrap` must be an int from 0 to 1000, got 1001"),
])
def test_scoring_options_name_the_argument_and_value(options, message):
    with pytest.raises(ValueError) as raised:
        ScoringOptions(**options)
    assert str(raised.value) == message


def test_a_planned_file_scores_as_the_metric_on_its_layout(tmp_path):
    path, layout = _saved(tmp_path, "rand_voca_image_to_text_official_order.npy", "rand_voca", "image_to_text",
                          "official")
    [planned] = plan_score_files([ScoreRequest(path, "r.npy")], GalleryFacts(CAPTIONS))
    assert (planned.key, planned.choice.order, planned.cutoffs) == ("rand_voca/image_to_text", "official", (1, 5, 10))
    from rococo_recall import rococo_recall

    expected = rococo_recall(np.load(path), **layout.metric_inputs(), ties="optimistic", bootstrap=4, per_query=True)
    result = score_planned([planned], ScoringOptions("optimistic", 4))["rand_voca/image_to_text"]
    assert result.metrics["recall@1"] == expected["recall@1"]
    assert result.metrics["recall@1_ci"] == expected["recall@1_ci"]
    assert np.array_equal(result.per_query["rank"], expected["rank"]) and result.layout is planned.layout
    meta = report_meta([planned], ScoringOptions("optimistic", 4))
    assert meta == {"files": {"rand_voca/image_to_text": {"path": "r.npy", "order": "official",
                                                          "note": planned.choice.note}},
                    "settings": {"ties": "optimistic", "bootstrap": 4}}
    assert "settings" not in report_meta([planned])  # the defaults are not recorded: the command's report as before


def test_every_problem_is_listed_before_any_file_is_scored(tmp_path):
    good, _ = _saved(tmp_path, "clean_text_to_image.npy", "clean", "text_to_image")
    np.save(tmp_path / "odd.npy", np.zeros((3, 3), np.float32))
    again = tmp_path / "again.npy"
    again.write_bytes(good.read_bytes())
    unclear, _ = _saved(tmp_path, "danger.npy", "danger", "image_to_text", "official")
    requests = [ScoreRequest(good), ScoreRequest(tmp_path / "odd.npy", "odd.npy"), ScoreRequest(again, "again.npy"),
                ScoreRequest(unclear, "danger.npy", order="")]
    with pytest.raises(PlanError) as raised:
        plan_score_files(requests, GalleryFacts(CAPTIONS),
                         PlanPolicy(ask_order=lambda choice, request: f"ask for {request.name}'s order"))
    problems = raised.value.problems
    assert problems[0].startswith("odd.npy: shape (3, 3) fits no RoCOCO layout")
    assert problems[1].startswith("danger.npy: ") and problems[1].endswith("; ask for danger.npy's order")
    assert problems[2] == f"again.npy: gallery clean/text_to_image was already given by {good}"
    assert str(raised.value) == "\n".join(problems)


def test_custom_layouts_only_where_allowed(tmp_path):
    np.savez(tmp_path / "mine.npz", scores=np.eye(3, dtype=np.float32), references=np.arange(3))
    request = ScoreRequest(tmp_path / "mine.npz", "mine.npz")
    _, choice = detect_file_layout(request, GalleryFacts(CAPTIONS), custom=True)
    assert choice.attack == "custom"
    [planned] = plan_score_files([request], GalleryFacts(CAPTIONS), PlanPolicy(custom=True))
    assert planned.key == "mine/custom" and not planned.is_standard
    scored = score_planned([planned])["mine/custom"]
    assert scored.metrics["recall@1"] == 100.0 and scored.layout is None and not scored.analysable
    with pytest.raises(PlanError, match="mine.npz: custom layouts have no place in a RoCOCO report"):
        plan_score_files([ScoreRequest(tmp_path / "mine.npz", "mine.npz", attack="custom")], GalleryFacts(CAPTIONS))


def test_a_layout_read_off_the_file_is_a_warning_for_the_command_and_a_note_for_the_space(tmp_path, caplog):
    path, _ = _saved(tmp_path, "clean_text_to_image.npy", "clean", "text_to_image")
    with caplog.at_level(logging.INFO, logger="rococo_eval.scoring.plan"):
        plan_score_files([ScoreRequest(path)], GalleryFacts(CAPTIONS))
        plan_score_files([ScoreRequest(path)], GalleryFacts(CAPTIONS), PlanPolicy(read_off_level=logging.INFO))
        plan_score_files([ScoreRequest(path, attack="clean", direction="text_to_image")], GalleryFacts(CAPTIONS))
    notes = [(record.levelno, record.getMessage()) for record in caplog.records if "gallery" in record.getMessage()]
    assert [level for level, _ in notes] == [logging.WARNING, logging.INFO, logging.INFO]


def test_the_command_names_a_file_once_in_its_errors(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "broken.npy").write_bytes(b"not a numpy file")
    assert main(["score", str(tmp_path / "sub" / "broken.npy"), "--out", str(tmp_path / "out"), "-q"]) == 1
    error = capsys.readouterr().err
    assert f"rococo-eval: error: {tmp_path / 'sub' / 'broken.npy'}: " in error
    assert "broken.npy: broken.npy" not in error


def test_a_stated_order_that_the_scores_contradict_is_refused_with_the_evidence_unless_trusted(tmp_path):
    """Issue 31: an official-order matrix stated to be in the dataset order (in the request, or in its file name) is
    refused, with the counts of sampled queries for each order; trusted, it is scored as stated and its note keeps
    the counts."""
    from helpers.space_app import DECIDING_CAPTIONS, clear_scores

    _, scores = clear_scores("rand_voca", "official")
    stated = {"given": ScoreRequest(tmp_path / "m_rand_voca.npy", "m_rand_voca.npy", order="dataset"),
              "named": ScoreRequest(tmp_path / "m_rand_voca_dataset_order.npy", "m_rand_voca_dataset_order.npy")}
    for how, request in stated.items():
        np.save(request.path, scores)
        with pytest.raises(PlanError) as raised:
            plan_score_files([request], GalleryFacts(DECIDING_CAPTIONS))
        [problem] = raised.value.problems
        assert problem.startswith(f"{request.name}: rand_voca image-to-text gallery: the dataset order is "
                                  f"{'given' if how == 'given' else 'stated in the file name'}, but the scores "
                                  "decide the official order: 79 of 80 sampled queries score their official-order "
                                  "ground truth higher, 0 their dataset-order one."), problem
        assert problem.endswith("give the official order, or pass `trust_given_order=True` to score it in the "
                                "dataset order all the same")
        [planned] = plan_score_files([request], GalleryFacts(DECIDING_CAPTIONS), PlanPolicy(trust_given_order=True))
        assert planned.choice.order == "dataset" and planned.layout.order == "dataset"
        assert "but the scores decide the official order (of 80 sampled queries, 79 score their official-order " \
               "ground truth higher and 0 their dataset-order ground truth)" in planned.choice.note
        assert planned.choice.note.endswith("; scored in the dataset order all the same, as asked")
        assert report_meta([planned])["files"]["rand_voca/image_to_text"]["note"] == planned.choice.note
    [agreeing] = plan_score_files([ScoreRequest(tmp_path / "m_rand_voca.npy", order="official")], GalleryFacts(DECIDING_CAPTIONS))
    assert agreeing.choice.order == "official" and "all the same" not in agreeing.choice.note


def test_a_stated_order_that_the_scores_are_significantly_against_is_refused(tmp_path):
    """Issue 39: below the decision's 90%, 61 of 79 informative queries against the stated order (p = 6.3e-7) are
    refused with the counts and the test; 60 (p = 2.1e-6) are scored as stated; trusted, a refused order is scored
    with a validity warning."""
    from helpers.order_votes import plant_votes
    from helpers.space_app import DECIDING_CAPTIONS
    from rococo_eval.layout import image_to_text_layout
    from rococo_eval.validity import recorded

    layout = image_to_text_layout(DECIDING_CAPTIONS, order="official")
    for official, dataset in ((61, 18), (60, 19)):
        path = tmp_path / f"m{official}_rand_voca.npy"
        np.save(path, plant_votes(np.zeros((layout.num_queries, layout.num_gallery), np.float32), DECIDING_CAPTIONS,
                                  official, dataset))
    refused = ScoreRequest(tmp_path / "m61_rand_voca.npy", "m61_rand_voca.npy", order="dataset")
    with pytest.raises(PlanError) as raised:
        plan_score_files([refused], GalleryFacts(DECIDING_CAPTIONS))
    assert raised.value.problems == [
        "m61_rand_voca.npy: rand_voca image-to-text gallery: the dataset order is given, but the scores are against "
        "the dataset order (one-sided sign test: p = 6.3e-07, below the 1e-06 level): 61 of 80 sampled queries score "
        "their official-order ground truth higher, 18 their dataset-order one. Scored in the dataset order, each "
        "query's ground truth would be other captions than those its scores pick out; give the official order, or "
        "pass `trust_given_order=True` to score it in the dataset order all the same"]
    [other] = plan_score_files([dataclasses.replace(refused, order="official")], GalleryFacts(DECIDING_CAPTIONS))
    assert other.choice.order == "official"
    with recorded() as warnings:
        [accepted] = plan_score_files([ScoreRequest(tmp_path / "m60_rand_voca.npy", order="dataset")],
                                      GalleryFacts(DECIDING_CAPTIONS))
        assert accepted.choice.order == "dataset" and warnings == []
        assert "; the scores do not decide the order (of 80 sampled queries, 60 score their official-order ground " \
               "truth higher and 19 their dataset-order ground truth; deciding takes" in accepted.choice.note
        [trusted] = plan_score_files([refused], GalleryFacts(DECIDING_CAPTIONS), PlanPolicy(trust_given_order=True))
    assert trusted.choice.order == "dataset" and trusted.choice.note.endswith("all the same, as asked")
    assert warnings == ["m61_rand_voca.npy: scored in the dataset order all the same, as asked, although the scores "
                        "are against the dataset order (one-sided sign test: p = 6.3e-07, below the 1e-06 level): 61 "
                        "of 80 sampled queries score their official-order ground truth higher, 18 their dataset-order "
                        "one"]


def test_without_annotations_only_custom_layouts_are_planned(tmp_path):
    """NO_SOURCE (no annotations at hand) has no caption counts: a standard layout is refused, saying why."""
    from rococo_eval.data.facts import NO_SOURCE

    np.save(tmp_path / "m_clean.npy", np.zeros((3, 3), dtype=np.float32))
    with pytest.raises(PlanError, match="standard layouts need the RoCOCO caption counts, .* or use a custom layout"):
        plan_score_files([ScoreRequest(tmp_path / "m_clean.npy")], NO_SOURCE)
