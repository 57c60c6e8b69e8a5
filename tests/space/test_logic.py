"""rococo_eval.space.logic: the functions behind the Space's page, called directly (``test_app.py`` goes through the
app's API): the source it starts from, the layouts it builds, what it explores (shown by rococo_eval.space.views)
and evaluates."""

import time

import numpy as np
import pytest

from helpers.http_server import refused_url
from helpers.space_app import CAPTIONS
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.space import logic, views
from rococo_eval.scoring import plan
from rococo_eval.data.benchmark import make_benchmark


def test_space_without_annotations_fails_at_once(tmp_path, real_retry_delays, monkeypatch):
    for name in ("ROCOCO_ANNOTATIONS_DIR", "ROCOCO_IMAGES_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROCOCO_ANNOTATIONS_BASE_URL", refused_url())
    monkeypatch.setenv("ROCOCO_CACHE_DIR", str(tmp_path))
    started = time.monotonic()
    facts, problem = logic.facts_and_problem()
    assert time.monotonic() - started < 20
    assert facts is NO_SOURCE and not facts.has_annotations
    assert "(Connection refused)" in problem and "$ROCOCO_ANNOTATIONS_DIR" in problem
    assert list(tmp_path.iterdir()) == []


def test_standard_layouts_are_built_for_the_attack_itself():
    assert plan._standard_layout("danger", "image_to_text", "dataset", tuple(CAPTIONS)).num_gallery == 302
    with pytest.raises(ValueError, match="attack 'mix_seed1' is scored text_to_image, not image_to_text"):
        plan._standard_layout("mix_seed1", "image_to_text", "official", tuple(CAPTIONS))


def test_explore_the_real_captions(annotations_dir):
    """Image 1533's danger caption 4 is its source caption unchanged: a real quirk, shown as such."""
    from rococo_eval.data.source import RococoSource

    exploration = logic.explore(GalleryFacts.of(RococoSource(annotations_dir)), 1533)
    captions = views.caption_table_html(exploration.ground_truth, exploration.altered)
    danger = [row.split("</td>")[5] for row in captions.split("<tr>")[2:]]
    assert danger[4] == "<td>a close up ofa dog looking out of a window<br><small>same as the ground truth</small>"
    assert "<mark>weapon</mark>" in danger[0] and exploration.images == [] and "ROCOCO_IMAGES_DIR" in exploration.note


def test_the_space_explores_and_evaluates_the_benchmark(benchmark, image_set, tmp_path):
    from rococo_eval.space.logic import evaluate_files, explore, facts_and_problem

    facts, problem = facts_and_problem(benchmark=benchmark)
    assert problem == "" and not facts.is_rococo and facts.has_images
    exploration = explore(facts, 0)
    assert "danger" in exploration.altered and [label for _, label in exploration.images] == [
        "original", "mix_seed1", "mix_seed7", "patch_seed1", "patch_seed7"]
    # the Space's layouts follow the benchmark's adversarial captions per image (4 here, RoCOCO's 5 by default)
    folder = make_benchmark(image_set / "set.json", tmp_path / "five", strategies=["danger"], per_image=5)
    five, _ = facts_and_problem(benchmark=folder)
    assert five.adversarial_per_image == 5 and facts.adversarial_per_image == 4
    layout = facts.source.gallery("danger", order="official")
    scores = np.zeros((layout.num_queries, layout.num_gallery), dtype=np.float32)
    for query, correct in enumerate(layout.references):
        scores[query, list(correct)] = 1.0
    np.save(tmp_path / "bench_danger.npy", scores)
    evaluation = evaluate_files([str(tmp_path / "bench_danger.npy")], [["bench_danger.npy", "", "", "official"]],
                                facts=facts)
    assert evaluation.results["danger/image_to_text"].metrics["recall@1"] == 100.0


def test_the_compare_tab_keeps_the_bounds_of_a_compact_files_numbers():
    from rococo_eval.reporting.report import format_rows
    from rococo_eval.space.logic import compare_rows

    mine = [{"attack": "rand_voca", "direction": "image_to_text", "recall@1": 40.0, "recall@1_bounds": (40.0, 42.0),
             "file": "blip_top256.npz"}]
    rows = compare_rows(mine)
    assert rows[-1]["recall@1_bounds"] == (40.0, 42.0)
    headers, cells = format_rows(rows)
    assert cells[-1][headers.index("R@1")] == "40.00 {40.00 to 42.00}"


def test_a_rerankers_rows_are_marked_for_the_leaderboard(tmp_path):
    """A compact file's galleries are a re-ranker's: their rows carry ``reranked``, which the leaderboard reads (it
    does not compare their clean parts), and the message does not call them disagreeing."""
    from rococo_eval.layout import gallery_layout

    paths = []
    for attack in ("clean", "mix_seed1"):
        layout = gallery_layout(attack, "text_to_image", CAPTIONS)
        scores = np.random.default_rng(len(paths)).standard_normal((layout.num_queries, layout.num_gallery))
        top = np.argsort(-scores, axis=1)[:, :4]
        paths.append(tmp_path / f"blip_{attack}_text_to_image.npz")
        np.savez(paths[-1], top_columns=top, top_scores=np.take_along_axis(scores, top, axis=1).astype(np.float32),
                 fill=np.float32(-100), num_gallery=layout.num_gallery)
    evaluation = logic.evaluate_files([str(path) for path in paths], facts=GalleryFacts(CAPTIONS))
    assert [row.get("reranked") for row in evaluation.rows] == [True, True]
    assert "disagree" not in evaluation.message and "consistency" not in evaluation.meta
    # issue 39: the check that did not run is said, in the message and the report
    warning = ("the clean numbers of blip_clean_text_to_image.npz, blip_mix_seed1_text_to_image.npz were not checked "
               "against the other files of their direction: a re-ranker's scores (compact files, or a fill block), "
               "whose attacked galleries re-rank other candidates than the clean one, so their clean parts may differ "
               "by right")
    assert_warned(evaluation, warning, tmp_path)


def test_the_space_refuses_a_stated_order_that_the_scores_are_significantly_against(tmp_path):
    """Issue 39, through the Space's logic: the order stated in the layout table is refused when 61 of the 79
    informative sampled queries are against it (p = 6.3e-7), taken at 60 (p = 2.1e-6), and the checkbox scores a
    refused order with a warning in the message and the report."""
    from helpers.order_votes import plant_votes
    from helpers.space_app import DECIDING_CAPTIONS
    from rococo_eval.layout import image_to_text_layout

    layout = image_to_text_layout(DECIDING_CAPTIONS, order="official")
    for official, dataset in ((61, 18), (60, 19)):
        np.save(tmp_path / f"m{official}_rand_voca.npy",
                plant_votes(np.zeros((layout.num_queries, layout.num_gallery), np.float32), DECIDING_CAPTIONS,
                            official, dataset))
    refused, accepted = (str(tmp_path / f"m{official}_rand_voca.npy") for official in (61, 60))
    table = [["m61_rand_voca.npy", "rand_voca", "image_to_text", "dataset"]]
    with pytest.raises(plan.PlanError) as raised:
        logic.evaluate_files([refused], table, facts=GalleryFacts(DECIDING_CAPTIONS))
    assert raised.value.problems == [
        "m61_rand_voca.npy: rand_voca image-to-text gallery: the dataset order is given, but the scores are against "
        "the dataset order (one-sided sign test: p = 6.3e-07, below the 1e-06 level): 61 of 80 sampled queries score "
        "their official-order ground truth higher, 18 their dataset-order one. Scored in the dataset order, each "
        "query's ground truth would be other captions than those its scores pick out; choose official from its "
        f"order list under the layout table, or tick “{logic.TRUST_ORDER_LABEL}” to score it in the dataset order all "
        "the same"]
    other = logic.evaluate_files([refused], [table[0][:3] + ["official"]], facts=GalleryFacts(DECIDING_CAPTIONS))
    assert other.meta["files"]["rand_voca/image_to_text"]["order"] == "official" and "Warnings" not in other.message
    taken = logic.evaluate_files([accepted], [["m60_rand_voca.npy", "rand_voca", "image_to_text", "dataset"]],
                                 facts=GalleryFacts(DECIDING_CAPTIONS))
    assert taken.meta["files"]["rand_voca/image_to_text"]["order"] == "dataset" and "warnings" not in taken.meta
    assert "the scores do not decide the order (of 80 sampled queries, 60 score" in taken.message

    trusted = logic.evaluate_files([refused], table, facts=GalleryFacts(DECIDING_CAPTIONS), trust_given_order=True)
    warning = ("m61_rand_voca.npy: scored in the dataset order all the same, as asked, although the scores are "
               "against the dataset order (one-sided sign test: p = 6.3e-07, below the 1e-06 level): 61 of 80 "
               "sampled queries score their official-order ground truth higher, 18 their dataset-order one")
    assert_warned(trusted, warning, tmp_path)


def assert_warned(evaluation, warning, folder):
    """``evaluation`` has the one validity warning ``warning``: in its meta, its message and its report.md."""
    assert evaluation.meta["warnings"] == [warning]
    assert f"Warnings about these numbers (the report records them too):\n- {warning}" in evaluation.message
    logic.write_outputs(evaluation, folder)
    assert f"## Warnings\n\n- {warning}\n" in (folder / "report.md").read_text()


def test_a_files_note_is_the_same_when_detected_and_when_given_back(tmp_path):
    """Issue 39: the layout table's note said "as the file name says" and the evaluation's "as chosen" for the same
    file, whose layout the table only gave back as detected. Each note says where each part came from (the file
    name, the shape, the scores, or given), whichever way the layout arrived."""
    from helpers.space_app import DECIDING_CAPTIONS, clear_scores

    paths = []
    for attack, order, name in (("danger", "dataset", "vit_danger_dataset_order.npy"),
                                ("rand_voca", "official", "vit_rand_voca.npy")):
        paths.append(str(tmp_path / name))
        np.save(paths[-1], clear_scores(attack, order)[1])
    rows = logic.detect_layouts(paths, GalleryFacts(DECIDING_CAPTIONS))
    notes = [row[4] for row in rows]
    assert notes[0].startswith("danger image-to-text gallery in the dataset order (shape (80, 801); attack and order "
                               "named in the file name, direction read from the shape); the scores decide the dataset")
    assert notes[1].startswith("rand_voca image-to-text gallery in the official order (shape (80, 801); attack named "
                               "in the file name, direction read from the shape, order read from the scores); the "
                               "scores decide the official")
    evaluation = logic.evaluate_files(paths, rows, facts=GalleryFacts(DECIDING_CAPTIONS))
    assert [file["note"] for file in evaluation.meta["files"].values()] == notes
    assert all(f"): {note}" in evaluation.message for note in notes)
    attack_only = logic.evaluate_files(paths[1:], [["vit_rand_voca.npy", "rand_voca", "", ""]],
                                       facts=GalleryFacts(DECIDING_CAPTIONS))
    assert attack_only.meta["files"]["rand_voca/image_to_text"]["note"] == notes[1]
