"""``rococo-eval compare`` on reports whose differences are planted: real score matrices, scored by the metric and
written by ``write_report``, whose per-query hits are chosen, so that one pair differs and one does not."""

import json
import math
import re
from fractions import Fraction

import numpy as np
import pytest

from rococo_eval.catalog import gallery_key
from rococo_eval.cli import main
from rococo_eval.layout import gallery_layout
from rococo_eval.reporting.report import write_report
from rococo_eval.results import GalleryResult, build_report
from rococo_recall import rococo_recall

IMAGES = 600
GALLERIES = [("clean", "image_to_text"), ("rand_voca", "image_to_text"), ("mix_seed1", "text_to_image")]


def planted_scores(layout, hit, clean_hit):
    """Scores whose top item is a correct one where ``hit``; an adversarial one above the correct one where only
    ``clean_hit`` (wrong with the adversarial items, right without); another query's item elsewhere."""
    scores = np.zeros((layout.num_queries, layout.num_gallery), dtype=np.float32)
    adversarial = np.flatnonzero(layout.adversarial)
    originals = np.flatnonzero(~layout.adversarial)
    for query, references in enumerate(layout.references):
        correct = int(references[0])
        wrong = next(int(item) for item in originals[query % len(originals):].tolist() + originals.tolist()
                     if item not in set(map(int, references)))
        scores[query, correct] = 0.5
        if hit[query]:
            scores[query, correct] = 1.0
        elif clean_hit[query]:
            scores[query, adversarial[query % len(adversarial)]] = 1.0
        else:
            scores[query, wrong] = 1.0
    return scores


def write_planted_report(folder, model, hits, images=IMAGES):
    """A report of ``model`` whose gallery ``key`` has the per-query ``hits[key] = (hit, clean_hit)``."""
    results = {}
    for attack, direction in GALLERIES:
        key = gallery_key(attack, direction)
        layout = gallery_layout(attack, direction, [1] * images, "dataset" if attack == "rand_voca" else None)
        hit, clean_hit = hits[key]
        outputs = rococo_recall(planted_scores(layout, hit, clean_hit), per_query=True, **layout.metric_inputs())
        results[key] = GalleryResult.of(outputs, layout)
    write_report(build_report(results, {"model": model}), folder)
    return folder


def shifted(hits, gained, lost, rng):
    """``hits`` with ``gained`` misses made hits and ``lost`` hits made misses, at random queries."""
    hits = hits.copy()
    hits[rng.choice(np.flatnonzero(~hits), gained, replace=False)] = True
    hits[rng.choice(np.flatnonzero(hits), lost, replace=False)] = False
    return hits


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """A; B, far below A on every gallery and with a larger drop; C, within a few queries of A."""
    rng = np.random.default_rng(2)
    folder = tmp_path_factory.mktemp("reports")
    clean = np.arange(IMAGES) < 480
    attacked = clean & (np.arange(IMAGES) < 400)
    a = {"clean/image_to_text": (clean, clean), "rand_voca/image_to_text": (attacked, clean),
         "mix_seed1/text_to_image": (attacked, clean)}
    b_clean = shifted(clean, 0, 60, rng)
    b_attacked = b_clean & shifted(attacked, 0, 120, rng)
    b = {"clean/image_to_text": (b_clean, b_clean), "rand_voca/image_to_text": (b_attacked, b_clean),
         "mix_seed1/text_to_image": (b_attacked, b_clean)}
    c_attacked = clean & shifted(attacked, 4, 3, rng)
    c = {"clean/image_to_text": (clean, clean), "rand_voca/image_to_text": (c_attacked, clean),
         "mix_seed1/text_to_image": (c_attacked, clean)}
    return {name: write_planted_report(folder / name, f"model {name}", hits)
            for name, hits in (("a", a), ("b", b), ("c", c))}, {"a": a, "b": b, "c": c}


def exact_mcnemar(only_a, only_b):
    total, fewer = only_a + only_b, min(only_a, only_b)
    return float(min(Fraction(1), Fraction(2 * sum(math.comb(total, j) for j in range(fewer + 1)), 2**total)))


def compared(capsys, *folders):
    assert main(["compare", *map(str, folders)]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {line.split("  ")[0]: re.split(r"\s{2,}", line) for line in lines[2:5]}, lines


def test_a_planted_difference_is_found_with_its_exact_p_value(reports, capsys):
    folders, hits = reports
    rows, lines = compared(capsys, folders["a"], folders["b"])
    summary = {name: json.loads((folders[name] / "report.json").read_text())["results"] for name in "ab"}
    for key, label in (("clean/image_to_text", "clean (image-to-text)"),
                       ("rand_voca/image_to_text", "rand_voca (image-to-text)"),
                       ("mix_seed1/text_to_image", "mix_seed1 (text-to-image)")):
        row = rows[label]
        assert float(row[1]) == pytest.approx(summary["a"][key]["recall@1"], abs=0.005)  # the report's own R@1
        assert float(row[2]) == pytest.approx(summary["b"][key]["recall@1"], abs=0.005)
        hit_a, hit_b = hits["a"][key][0], hits["b"][key][0]
        p_value = exact_mcnemar(int(np.sum(hit_a & ~hit_b)), int(np.sum(~hit_a & hit_b)))
        assert p_value < 1e-10 and row[4] == "< 0.0001" and row[5] == "yes"
    attacked = rows["rand_voca (image-to-text)"]
    assert float(attacked[6]) == pytest.approx(100 * (480 - 400) / IMAGES, abs=0.005)  # A's drop: 80 queries
    assert attacked[10] == "yes" and float(attacked[8].split()[0]) < 0  # B loses more to the attack
    assert rows["clean (image-to-text)"][6:] == []  # a clean gallery has no drop
    assert lines[0].split()[:6] == ["gallery", "A", "R@1", "B", "R@1", "A"]
    assert any("exact McNemar" in line for line in lines) and any("model a" in line for line in lines)


def test_a_difference_of_a_few_queries_is_not_significant(reports, capsys):
    folders, hits = reports
    rows, _ = compared(capsys, folders["a"], folders["c"])
    row = rows["rand_voca (image-to-text)"]
    hit_a, hit_c = hits["a"]["rand_voca/image_to_text"][0], hits["c"]["rand_voca/image_to_text"][0]
    p_value = exact_mcnemar(int(np.sum(hit_a & ~hit_c)), int(np.sum(~hit_a & hit_c)))
    assert p_value > 0.5 and float(row[4]) == pytest.approx(p_value, abs=5e-5) and row[5] == "no"
    low, high = map(float, re.findall(r"-?\d+\.\d+", row[3])[1:])
    assert low < 0 < high and row[10] == "no"
    same = rows["clean (image-to-text)"]  # the same clean hits: no difference, an interval around 0
    assert re.fullmatch(r"0\.00 \[-(\d\.\d\d), \1\]", same[3]) and same[4] == "1.0000" and same[5] == "no"


def test_reports_of_other_query_sets_are_refused_naming_the_gallery(reports, tmp_path, capsys):
    folders, _ = reports
    fewer = np.arange(500) < 400
    other = write_planted_report(tmp_path / "other", "small", {key: (fewer, fewer) for key in
                                                               ("clean/image_to_text", "rand_voca/image_to_text",
                                                                "mix_seed1/text_to_image")}, images=500)
    assert main(["compare", str(folders["a"]), str(other)]) == 1
    error = capsys.readouterr().err
    assert ("REPORT_A and REPORT_B are of different galleries or query sets: clean/image_to_text has 600 queries x "
            "600 gallery items (0 adversarial) in REPORT_A and 500 x 500 (0 adversarial) in REPORT_B") in error


def test_a_report_without_per_query_outcomes_is_refused_by_name(reports, tmp_path, capsys):
    folders, _ = reports
    layout = gallery_layout("clean", "image_to_text", [1] * 4)
    scores = np.eye(4, dtype=np.float32)
    write_report(build_report({"clean/image_to_text": GalleryResult.of(rococo_recall(scores, k=1,
                                                                                     **layout.metric_inputs()))}, {}),
                 tmp_path)
    assert main(["compare", str(folders["a"]), str(tmp_path)]) == 1
    assert f"REPORT_B {str(tmp_path)!r} holds no per-query outcomes (per_query.parquet)" in capsys.readouterr().err
