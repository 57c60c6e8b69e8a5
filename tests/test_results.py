"""The result types: gallery keys, the results of an evaluation, summary rows and the report that build_report makes."""

import json
import pickle
import platform

import numpy as np
import pytest

from rococo_eval.layout import gallery_layout
from rococo_eval.reporting.report import summary_rows, write_report
from rococo_eval.results import (
    GalleryKey,
    GalleryResult,
    GalleryResults,
    Report,
    SummaryRow,
    build_report,
    summary_of,
)
from rococo_eval.version import __version__
from rococo_recall import rococo_recall


def seed_results() -> dict[str, GalleryResult]:
    """Three seeds of ``mix`` and the clean text-to-image gallery, with intervals, as the metric gives them."""
    results = {"clean/text_to_image": GalleryResult({"recall@1": np.float64(30.0), "num_queries": np.int64(4)})}
    for seed, recall in [(1, 19.0), (10, 20.0), (100, 24.0)]:
        results[f"mix_seed{seed}/text_to_image"] = GalleryResult(
            {"clean_recall@1": 30.0, "recall@1": np.float32(recall), "recall@1_ci": np.array([recall - 1, recall + 1]),
             "num_queries": 4, "flag": True})
    return results


def test_a_gallery_key_is_its_text():
    key = GalleryKey("rand_voca", "image_to_text")
    assert key == "rand_voca/image_to_text" and hash(key) == hash("rand_voca/image_to_text")
    assert type(str(key)) is str and str(key) == "rand_voca/image_to_text"
    assert (key.attack, key.direction) == ("rand_voca", "image_to_text")
    assert json.dumps({key: 1}) == '{"rand_voca/image_to_text": 1}'
    again = pickle.loads(pickle.dumps(key))  # processes of a launch exchange results
    assert type(again) is GalleryKey and (again.attack, again.direction) == (key.attack, key.direction)
    assert GalleryKey.parse("mine/custom").attack == "mine" and GalleryKey.parse(key) is key


@pytest.mark.parametrize("text", ["clean", "a/b/c", "/image_to_text", "clean/", 3])
def test_a_gallery_key_that_is_not_attack_slash_direction_is_refused(text):
    with pytest.raises(ValueError, match="attack"):
        GalleryKey.parse(text)


def test_gallery_results_read_text_keys_as_gallery_keys():
    layout = gallery_layout("clean", "image_to_text", [1, 1])
    typed = GalleryResult.of(rococo_recall(np.eye(2, dtype=np.float32), k=1, per_query=True,
                                           **layout.metric_inputs()), layout)
    results = GalleryResults({"clean/image_to_text": typed, "mine/custom": GalleryResult({"recall@1": 50.0})})
    assert [(key.attack, key.direction) for key in results] == [("clean", "image_to_text"), ("mine", "custom")]
    assert results["clean/image_to_text"] is typed and GalleryKey("mine", "custom") in results
    assert results.metrics()["mine/custom"] == {"recall@1": 50.0}
    assert list(results.analysable()) == ["clean/image_to_text"]


def test_the_summary_types_what_summary_rows_writes():
    rows = summary_of(GalleryResults(seed_results()))
    assert rows[-1].to_dict() == {  # the row report.json writes: seeds, then the numbers, each with its range
        "attack": "mix", "direction": "text_to_image", "seeds": (1, 10, 100), "clean_recall@1": 30.0,
        "clean_recall@1_range": (30.0, 30.0), "recall@1": 21.0, "recall@1_range": (19.0, 24.0), "num_queries": 4}
    assert summary_rows({key: result.metrics for key, result in seed_results().items()})[0] == rows[0].to_dict()
    assert [(row.attack, row.is_seed_mean) for row in rows] == [
        ("clean", False), ("mix_seed1", False), ("mix_seed10", False), ("mix_seed100", False), ("mix", True)]
    mean = rows[-1]
    assert mean.seeds == (1, 10, 100) and str(mean.key) == "mix/text_to_image"
    assert mean.values["recall@1"] == 21.0 and mean.values["recall@1_range"] == (19.0, 24.0)
    assert "recall@1_ci" not in mean.values and "flag" not in rows[1].values  # intervals not averaged; no bools
    assert rows[1].values["recall@1_ci"] == (18.0, 20.0) and type(rows[0].values["recall@1"]) is float
    assert SummaryRow.from_dict(mean.to_dict()) == mean and SummaryRow.from_dict(mean) is mean


def test_build_report_puts_the_versions_first_and_to_json_reads_back():
    report = build_report(seed_results(), {"model": "toy", "warnings": ["doubtful"]})
    assert list(report.meta) == ["rococo_eval", "python", "model", "warnings"]
    assert report.meta["rococo_eval"] == __version__ and report.meta["python"] == platform.python_version()
    document = json.loads(report.to_json())
    assert list(document) == ["meta", "results", "summary"] and document["results"]["clean/text_to_image"] == {
        "recall@1": 30.0, "num_queries": 4}
    assert document["summary"][-1]["seeds"] == [1, 10, 100]
    again = Report.from_json(document)
    assert again.to_json() == report.to_json() and again.summary == [SummaryRow.from_dict(row)
                                                                     for row in document["summary"]]


def test_report_json_is_to_json(tmp_path):
    report = build_report(seed_results(), {"model": "toy"})
    write_report(report, tmp_path)
    assert (tmp_path / "report.json").read_text() == report.to_json()
    assert (tmp_path / "report.md").read_text().startswith("# RoCOCO report: toy\n\n| attack |")
