"""rococo_eval.reporting.report: the summary rows and tables of a run, seed means and intervals, the JSON, Markdown and
chart files, and the reference results with their sources."""

import json
import math
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rococo_eval.reporting import report
from rococo_eval.layout import gallery_layout
from rococo_eval.catalog import gallery_key
from rococo_eval.io.atomic import write_json
from rococo_eval.reporting.report import (REFERENCE_RESULTS, analysis_markdown, format_rows, legend, plot_recall,
                                          summary_rows, to_markdown, to_text_table)
from rococo_recall import rococo_recall

CAPTIONS = [5, 6, 5, 5, 5, 6, 5, 5, 5, 5, 5, 5]


def _scores(layout, seed, strength=2.0):
    """Random scores where each query likes one of its own items, and sometimes an adversarial one more."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((layout.num_queries, layout.num_gallery)).astype(np.float32)
    for query, refs in enumerate(layout.references):
        scores[query, refs[0]] += strength
    return scores


def _result(attack, direction, seed, **kwargs):
    layout = gallery_layout(attack, direction, CAPTIONS, "official")
    return rococo_recall(_scores(layout, seed), **layout.metric_inputs(), **kwargs)


def test_summary_rows_order_and_contents():
    results = {
        gallery_key("my_model", "custom"): {"recall@1": 1.0, "clean_recall@1": 2.0},
        gallery_key("danger", "image_to_text"): _result("danger", "image_to_text", 1, per_query=True),
        gallery_key("clean", "text_to_image"): _result("clean", "text_to_image", 2),
        gallery_key("rand_voca", "image_to_text"): _result("rand_voca", "image_to_text", 3),
        gallery_key("clean", "image_to_text"): _result("clean", "image_to_text", 3),
        gallery_key("patch_seed10", "text_to_image"): _result("patch_seed10", "text_to_image", 4),
    }
    rows = summary_rows(results)
    assert [(row["attack"], row["direction"]) for row in rows] == [
        ("clean", "image_to_text"), ("rand_voca", "image_to_text"), ("danger", "image_to_text"),
        ("clean", "text_to_image"), ("patch_seed10", "text_to_image"), ("my_model", "custom")]
    danger = rows[2]
    assert "rank" not in danger and "top1_adversarial" not in danger  # per-query arrays stay out
    expected = {k: v for k, v in results["danger/image_to_text"].items() if not isinstance(v, np.ndarray)}
    assert {k: v for k, v in danger.items() if k not in ("attack", "direction")} == expected
    assert all(type(v) in (str, int, float) for row in rows for v in row.values())


def test_clean_recall_of_an_attack_is_the_clean_gallerys_recall():
    """The attacked gallery holds the clean one: its clean_recall@1 equals the clean gallery's R@1."""
    attacked = gallery_layout("same_concept", "image_to_text", CAPTIONS, "official")
    clean = gallery_layout("clean", "image_to_text", CAPTIONS)
    scores = _scores(attacked, 7, strength=1.0)
    clean_scores = scores[:, ~attacked.adversarial]
    results = {gallery_key("clean", "image_to_text"): rococo_recall(clean_scores, **clean.metric_inputs()),
               gallery_key("same_concept", "image_to_text"): rococo_recall(scores, **attacked.metric_inputs())}
    clean_row, attacked_row = summary_rows(results)
    assert attacked_row["clean_recall@1"] == clean_row["recall@1"] == clean_row["clean_recall@1"]
    assert attacked_row["recall@1"] <= attacked_row["clean_recall@1"]


@pytest.mark.parametrize("seeds", [(1, 10, 100), (1, 100), (7, 8, 70, 100), (3, 4)])  # RoCOCO's, a benchmark's
def test_seed_means(seeds):
    results = {gallery_key(f"mix_seed{s}", "text_to_image"): _result(f"mix_seed{s}", "text_to_image", s)
               for s in sorted(seeds, reverse=True)}  # listed in any order, reported by seed
    results[gallery_key("patch_seed1", "text_to_image")] = _result("patch_seed1", "text_to_image", 5)
    rows = summary_rows(results)
    assert [row["attack"] for row in rows] == [f"mix_seed{s}" for s in seeds] + ["mix", "patch_seed1"]
    mean = rows[len(seeds)]
    assert mean["seeds"] == seeds and mean["direction"] == "text_to_image"
    for name in ("recall@1", "recall@10", "clean_r_mean", "false_rate"):
        values = [results[f"mix_seed{s}/text_to_image"][name] for s in seeds]
        assert mean[name] == pytest.approx(np.mean(values))
        if len(seeds) >= 3:
            assert mean[f"{name}_range"] == (min(values), max(values))
        else:
            assert f"{name}_range" not in mean
    assert mean["num_queries"] == sum(CAPTIONS)


def test_intervals_are_carried_and_shown():
    results = {gallery_key("diff_concept", "image_to_text"): _result("diff_concept", "image_to_text", 0, bootstrap=50)}
    row = summary_rows(results)[0]
    low, high = row["recall@1_ci"]
    assert low <= row["recall@1"] <= high
    headers, cells = format_rows([row])
    assert cells[0][headers.index("R@1")] == f"{row['recall@1']:.2f} [{low:.2f}, {high:.2f}]"
    assert "95% bootstrap confidence interval" in to_markdown([row])
    assert "95% bootstrap confidence interval" not in to_markdown([{"attack": "x", "recall@1": 1.0}])


def test_tables():
    rows = [{"attack": "clean", "direction": "image_to_text", "recall@1": 50.0, "clean_recall@1": 50.0,
             "recall@5": 70.0, "recall@10": 80.0, "r_mean": 66.666, "false_rate": 0.0,
             "attack_success_rate": float("nan"), "num_queries": 5000, "num_gallery": 25010},
            {"attack": "mix", "direction": "text_to_image", "seeds": (1, 10, 100), "recall@1": 20.0,
             "recall@1_range": (19.0, 21.5)}]
    headers, cells = format_rows(rows)
    assert headers == ["attack", "direction", "clean R@1", "R@1", "R@5", "R@10", "r_mean", "false rate",
                       "attack success", "queries", "gallery"]
    # issue 39: one spelling of the direction, n/a where a clean gallery has nothing to measure (not 0.00)
    assert cells[0] == ["clean", "image-to-text", "50.00", "50.00", "70.00", "80.00", "66.67", "n/a", "n/a",
                        "5000", "25010"]
    assert cells[1][:4] == ["mix (mean of seeds 1, 10, 100)", "text-to-image", "", "20.00 (19.00–21.50)"]
    markdown = to_markdown(rows).splitlines()
    assert markdown[0] == "| " + " | ".join(headers) + " |"
    assert markdown[1] == "|---|---|" + "---:|" * 9
    assert "lowest and highest over the seeds" in markdown[-1]
    text = to_text_table(rows).splitlines()
    assert len({len(line) for line in text[:2]}) == 1  # the header and the rule line up
    assert text[2].startswith("clean  ") and text[2].endswith("25010")
    # issue 39: one legend under both, naming what the numbers are, each column shown and each interval kind
    assert markdown[markdown.index("") + 1:] == text[text.index("") + 1:] == legend(rows).splitlines()
    assert legend(rows).splitlines() == [
        "- Numbers are percentages (0 to 100), with 2 decimals, but the counts (queries, gallery).",
        "- n/a: not defined (a clean gallery has no adversarial item: no false rate, no attack success).",
        "- clean R@K: R@K of the gallery without its adversarial items (the clean gallery's R@K)",
        "- R@K: share of the queries with a correct item among the K top-scored items of the gallery",
        "- r_mean: the mean of the R@K shown (R@1, R@5 and R@10 by default)",
        "- false rate: share of the queries whose top-1 item is adversarial",
        "- attack success: share of the queries right at rank 1 without the adversarial items that are wrong with them",
        "- queries: how many queries (a count)",
        "- gallery: how many gallery items (a count)",
        "- (a–b): lowest and highest over the seeds"]


def test_every_percentage_has_two_decimals_and_a_clean_gallery_none_of_the_attack_numbers():
    """Issue 39: the reference rows' clean false rate (0.0 in the data) shows as n/a, as the Space's results do; a
    rate of 25 shows as 25.00 beside 26.53, in the failure analysis's tables too."""
    headers, cells = format_rows(REFERENCE_RESULTS)
    clean = cells[[row["attack"] for row in REFERENCE_RESULTS].index("clean")]
    assert clean[headers.index("false rate")] == "n/a" and clean[headers.index("direction")] == "image-to-text"
    assert REFERENCE_RESULTS[0]["false_rate"] == 0.0  # the data stay as they are
    by_word = {"replaced": [{"word": "dog", "images": 49, "successes": 13, "success_rate": 100 * 13 / 49},
                            {"word": "cat", "images": 20, "successes": 5, "success_rate": 25.0}],
               "replacement": [], "clean_correct": 69, "flipped": 18, "other_image_wins": 0}
    markdown = analysis_markdown({"galleries": {}, "by_word": {"danger": by_word}, "image_attacks": [
        {"group": "mix", "galleries": "mix_seed1", "clean_correct": 0, "flipped": 0, "success_rate": float("nan"),
         "own_image_wins": 0}]}, min_count=20)
    assert "| dog | 49 | 13 | 26.53 |" in markdown and "| cat | 20 | 5 | 25.00 |" in markdown
    assert "| mix | mix_seed1 | 0 | 0 | n/a | 0 |" in markdown


def test_the_legend_does_not_call_the_counts_percentages():
    """Issue 39, item 7: report.md's table has the counts (queries, gallery, adversarial), whole numbers, under a
    legend whose first line said that the numbers are percentages with 2 decimals."""
    rows = [{"attack": "danger", "direction": "image_to_text", "recall@1": 40.0, "num_queries": 30, "num_gallery": 302,
             "num_adversarial": 150}]
    headers, [cells] = format_rows(rows)
    assert cells[headers.index("queries"):] == ["30", "302", "150"]
    assert legend(rows).splitlines()[0] == ("- Numbers are percentages (0 to 100), with 2 decimals, but the counts "
                                            "(queries, gallery, adversarial).")


def test_write_json(tmp_path):
    result = _result("danger", "image_to_text", 0, per_query=True)
    result["attack_success_rate"] = float("nan")
    document = {"results": {"danger/image_to_text": result}, "path": tmp_path, "inf": -math.inf}
    path = write_json(document, tmp_path / "r.json")
    data = json.loads(path.read_text())
    saved = data["results"]["danger/image_to_text"]
    assert saved["attack_success_rate"] is None and data["inf"] is None and data["path"] == str(tmp_path)
    assert saved["rank"] == result["rank"].tolist() and saved["recall@1"] == result["recall@1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_write_json_is_atomic(tmp_path):
    path = write_json({"a": 1}, tmp_path / "r.json")
    with pytest.raises(TypeError):
        write_json({"a": object()}, path)
    assert json.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_plot_recall(tmp_path):
    rows = summary_rows({gallery_key(f"mix_seed{s}", "text_to_image"): _result(f"mix_seed{s}", "text_to_image", s,
                                                                                bootstrap=20) for s in (1, 10, 100)})
    rows.append({"attack": "clean", "direction": "image_to_text", "recall@1": 50.0, "clean_recall@1": 50.0})
    path = plot_recall(rows, tmp_path / "chart.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_recall([], tmp_path / "empty.png").stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart.png", "empty.png"]


def test_plot_recall_from_threads(tmp_path):
    """The Space draws charts for concurrent requests: no pyplot state is shared between them."""
    rows = [{"attack": f"a{i}", "direction": "image_to_text", "recall@1": float(i), "clean_recall@1": 50.0}
            for i in range(6)]
    errors = []

    def draw(i):
        try:
            plot_recall(rows[:i + 1], tmp_path / f"{i}.png")
        except Exception as error:  # noqa: BLE001 - collected for the assertion below
            errors.append(error)

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(list(tmp_path.glob("*.png"))) == 6


def test_reference_results_have_sources():
    for row in REFERENCE_RESULTS:
        assert row["source"] and row["model"] and row["direction"] in ("image_to_text", "text_to_image")
        assert 0 <= row["recall@1"] <= 100
    headers, cells = format_rows(REFERENCE_RESULTS)
    assert headers[:3] == ["model", "attack", "direction"] and headers[-1] == "source"
    assert len(cells) == len(REFERENCE_RESULTS)


def test_reference_results_match_the_official_log():
    log = Path(os.environ.get("ROCOCO_ANNOTATIONS_DIR", "../shared/rococo-data/annotations")).parent / "clip" / \
        "ViT-B_32log.txt"
    if not log.is_file():
        pytest.skip(f"the official CLIP log is not at {log}")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    clip = [row for row in REFERENCE_RESULTS if row["model"] == "CLIP ViT-B/32"]
    for row in clip:
        number = int(row["source"].split("line ")[1].split()[0].rstrip(";"))
        logged = lines[number - 1]
        prefix = "txt" if row["direction"] == "image_to_text" else "img"
        for k in (1, 5, 10):
            assert row[f"recall@{k}"] == logged[f"{prefix}_r{k}"]
        assert (row["r_mean"], row["false_rate"]) == (logged[f"{prefix}_r_mean"], logged["false_rate"])
    assert report.REFERENCE_RESULTS[0]["attack"] == "clean"


def test_report_files_get_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        path = write_json({"clean/image_to_text": {"recall@1": 50.0}}, tmp_path / "report.json")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644
    assert not list(tmp_path.glob(".*.part"))


def test_analysis_markdown_and_word_chart(tmp_path):
    table = {"replaced": [{"word": "kite", "images": 3, "successes": 3, "success_rate": 100.0},
                          {"word": "man", "images": 40, "successes": 10, "success_rate": 25.0}],
             "replacement": [{"word": "weapon", "images": 50, "successes": 5, "success_rate": 10.0}],
             "clean_correct": 60, "flipped": 12, "other_image_wins": 2}
    analysis = {"galleries": {"mix_seed1/text_to_image": {"attack": "mix_seed1", "direction": "text_to_image",
                                                          "clean_correct": 5, "flipped": 0, "flipped_queries": []}},
                "by_word": {"danger": table}, "image_attacks": []}
    markdown = report.analysis_markdown(analysis, min_count=20)
    assert "### mix_seed1 (text-to-image): 0 of 5 queries flipped" in markdown
    assert "### danger: attack success by word (at least 20 images; 2 of 12 flips won by another image's caption)" \
        in markdown
    assert "| man | 40 | 10 | 25.00 |" in markdown and "kite" not in markdown  # 3 images: under the minimum
    assert "| weapon | 50 | 5 | 10.00 |" in markdown and "Image attacks" not in markdown
    one = report.plot_word_rates(analysis, tmp_path / "one.png", min_count=20)
    two = report.plot_word_rates({"by_word": {"danger": table, "rand_voca": table}}, tmp_path / "two.png")
    with Image.open(one) as first, Image.open(two) as second:
        assert second.size[0] > first.size[0] and first.size[1] == second.size[1]


def test_model_card_leaves_out_bounded_numbers_and_names_rococo():
    """A number that a compact file's ties decide is not put in a model card; the rest are, under RoCOCO."""
    import yaml

    from rococo_eval.reporting.report import model_card_metadata

    rows = [{"attack": "clean", "direction": "image_to_text", "recall@1": 80.0},
            {"attack": "rand_voca", "direction": "image_to_text", "recall@1": 50.0, "recall@1_bounds": (50.0, 51.0),
             "false_rate": 30.0}]
    card = yaml.safe_load(model_card_metadata(rows, "m").strip("-\n"))
    results = card["model-index"][0]["results"]
    metrics = [(result["dataset"]["config"], metric["type"]) for result in results for metric in result["metrics"]]
    assert sorted(metrics) == [("clean", "recall@1"), ("rand_voca", "false_rate")]
    assert {result["dataset"]["type"] for result in results} == {"rococo"}
